"""Device choice, array conversion between frameworks, and GPU memory budgets.

Every public entry point goes through :func:`resolve_device` and :func:`as_backend_array`:

* ``device="auto"`` uses the first GPU when CuPy and numba-cuda can both run on it, else the CPU;
  ``"cpu"``, ``"cuda"`` and ``"cuda:N"`` force a choice (asking for a GPU that is not there raises).
* Inputs may be NumPy arrays (memory-mapped ones too), CuPy arrays, PyTorch tensors (CPU or CUDA),
  or anything exposing ``__cuda_array_interface__`` or DLPack. Device arrays are used in place, never
  copied through the host.
* Results come back in the caller's framework (:class:`ArrayKind` remembers which one it was).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import numbers
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

__all__ = ["quiet_launches", "Device", "resolve_device", "gpu_available", "ArrayKind", "array_kind", "as_numpy",
           "as_cupy", "return_as", "default_memory_limit", "parse_memory", "format_bytes", "implementation",
           "device_context", "on_input_device", "kept_across_streams"]


#: a function, returned with its signature by decorators that wrap it (:func:`on_input_device`)
_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Device:
    """Where work runs: ``kind`` is "cpu" or "cuda"; ``index`` is the GPU ordinal (0 for the CPU)."""

    kind: str
    index: int = 0

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"


@functools.lru_cache(maxsize=1)
def _gpu_probe() -> tuple[bool, str]:
    """Whether CuPy and numba-cuda can both use a GPU; the reason when not."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False, "the numba CUDA simulator is enabled (NUMBA_ENABLE_CUDASIM=1)"
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc}); install knngraph[cuda12] or [cuda13]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"CuPy sees no CUDA device ({type(exc).__name__}: {exc})"
    if n < 1:
        return False, "CuPy sees no CUDA device"
    # numba-cuda compiles the kernels; a process whose kernels are all in the disk cache never imports it
    # (``_cuda_launch``), so it is found here, not imported (that costs about half a second); CuPy has
    # already shown that the driver works
    import importlib.util

    if importlib.util.find_spec("numba_cuda") is None:
        try:
            from numba import cuda

            if not cuda.is_available():
                return False, "numba-cuda reports no usable CUDA driver"
        except Exception as exc:
            return False, f"numba-cuda is not usable ({type(exc).__name__}: {exc})"
    return True, ""


@functools.lru_cache(maxsize=1)
def _gpu_count() -> int:
    """GPUs CuPy sees (fixed for the life of the process: CUDA reads CUDA_VISIBLE_DEVICES once)."""
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def gpu_available() -> bool:
    """True when a GPU is usable by knngraph (CuPy and numba-cuda both work)."""
    return _gpu_probe()[0]


#: the CPU, and each GPU by ordinal: the devices :func:`resolve_device` returns, one object each, so a small
#: search does not build a new one per call and keys holding them compare by identity
_CPU = Device("cpu")
_GPUS: dict = {}


def _gpu(index: int) -> Device:
    dev = _GPUS.get(index)
    if dev is None:
        dev = _GPUS.setdefault(index, Device("cuda", int(index)))
    return dev


#: ``device=`` strings already parsed: 'cpu', 'auto' or a GPU ordinal (whether that GPU is there is asked at
#: every call, from the probes' own caches); a bounded number of spellings is kept
_PARSED: dict = {}
_PARSED_MAX = 64


def _parse_device(device):
    """'cpu', 'auto' or the GPU ordinal that ``device`` (a ``device=`` argument) names; TypeError or ValueError
    for anything else."""
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'auto', 'cpu', 'cuda' or 'cuda:0', got {device!r}")
    name = device.strip().lower()
    if name in ("cpu", "auto"):
        return name
    if name == "cuda":
        return 0
    if name.startswith("cuda:"):
        try:
            return int(name[5:])
        except ValueError:
            raise ValueError(f"device {device!r}: expected 'cuda:N' with an integer N") from None
    raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def resolve_device(device="auto", *arrays) -> Device:
    """Turn a ``device=`` argument into a :class:`Device`.

    ``"auto"`` picks the GPU holding the first device array among ``arrays`` if any, else GPU 0 when
    usable, else the CPU.
    """
    if isinstance(device, Device):
        return device
    name = _PARSED.get(device) if type(device) is str else None
    if name is None:
        name = _parse_device(device)
        if type(device) is str and len(_PARSED) < _PARSED_MAX:
            _PARSED[device] = name
    if name == "cpu":
        return _CPU
    if name == "auto":
        if not gpu_available():
            return _CPU
        for a in arrays:
            idx = _cuda_device_of(a)
            if idx is not None:
                return _gpu(idx)
        return _gpu(0)
    ok, why = _gpu_probe()
    if not ok:
        raise RuntimeError(f"device={device!r} was asked for but no GPU is usable: {why}")
    count = _gpu_count()
    if not 0 <= name < count:
        raise ValueError(f"device {device!r}: GPU index out of range, this machine has {count} GPU(s)")
    return _gpu(name)


def implementation(package: str, device: Device):
    """The module of ``package`` that runs on ``device``: ``<package>.cuda`` on a GPU, ``<package>.cpu``
    otherwise. This is the library's one CPU/GPU dispatch idiom: an algorithm (or shared piece) keeps its
    two implementations in a ``cpu`` and a ``cuda`` module exposing the same names, and the public code
    calls ``implementation(__package__, dev).name(...)``. The CUDA module (numba.cuda, CuPy) is imported
    only here, on first GPU use."""
    return importlib.import_module(f"{package}.{'cuda' if device.is_cuda else 'cpu'}")


#: per thread: the GPUs whose context this thread has made current at least once
_BOUND = threading.local()


@contextlib.contextmanager
def _current_gpu(index: int):
    import cupy

    runtime = cupy.cuda.runtime
    previous = runtime.getDevice()
    runtime.setDevice(index)
    try:
        yield
    finally:
        if previous != index:
            runtime.setDevice(previous)


#: the context :func:`device_context` hands out when nothing is to be switched (stateless, so one serves all)
_NO_SWITCH = contextlib.nullcontext()
#: CuPy's ``runtime.getDevice``, bound on the first GPU context (the CPU path never imports CuPy)
_get_device = None


def device_context(device: Device):
    """A context making ``device`` current in the calling thread, for CuPy and for raw driver launches (a
    no-op context on the CPU).

    A thread that never touched a GPU reports device 0 as current without any context bound to it:
    CuPy's ``Device`` skips switching to the device it believes current, and a raw kernel launch in such a
    thread fails with CUDA_ERROR_INVALID_CONTEXT. So the first time a thread works on a GPU, the device
    is set explicitly (which binds its primary context to the thread); afterwards only a switch does. A
    call that finds ``device`` current already (every call of a search after the first, on one GPU) costs
    one ``cudaGetDevice`` and returns a shared no-op context."""
    global _get_device
    if device.kind == "cuda":
        index = device.index
        bound = getattr(_BOUND, "gpus", None)
        if bound is None:
            bound = _BOUND.gpus = set()
        if index not in bound:
            bound.add(index)
            return _current_gpu(index)
        get = _get_device
        if get is None:
            import cupy

            get = _get_device = cupy.cuda.runtime.getDevice
        if get() != index:
            return _current_gpu(index)
    return _NO_SWITCH


#: idle non-blocking CUDA streams by (GPU, role, priorities), lent by :func:`borrowed_streams`
_IDLE_STREAMS: dict = {}
_IDLE_STREAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def borrowed_streams(device_index: int, role: str, priorities: tuple = (0,)):
    """Non-blocking CUDA streams on GPU ``device_index`` (make it current first), one per entry of
    ``priorities``, lent for the ``with`` block: an idle set of this ``role`` if there is one, else a new
    set, which goes back to the idle sets afterwards (work still queued on them stays ordered before the
    next borrower's). Concurrent callers get sets of their own; a process makes as many sets as it ever
    ran at once. CuPy's memory pool keeps the blocks freed on a stream for that stream: streams made per
    call (or per thread, for a service that runs a thread per request) strand their blocks, and the pool
    grows without bound (a GPU soak of 60,000 searches in 4 minutes grew it by 39 GB while the exact
    search made two streams per call)."""
    import cupy

    key = (device_index, role, tuple(priorities))
    with _IDLE_STREAMS_LOCK:
        idle = _IDLE_STREAMS.setdefault(key, [])
        streams = idle.pop() if idle else None
    if streams is None:
        streams = tuple(cupy.cuda.Stream(non_blocking=True, priority=p) for p in priorities)
    try:
        yield streams
    finally:
        with _IDLE_STREAMS_LOCK:
            _IDLE_STREAMS[key].append(streams)


@contextlib.contextmanager
def kept_across_streams():
    """A ``with`` block that makes device arrays a cache keeps for later calls, which may come from any
    stream (threads with streams of their own, the two streams per GPU of a replicated search).

    * Each allocation is a block of the current allocator (CuPy's pool) that goes back to it only once the
      device has finished every kernel queued so far, on any stream (:class:`_KeptBlock`). The pool hands a
      freed block to the next allocation on the stream that made it, with no order against the kernels
      of other streams: a cache entry dropped while another thread's search still had kernels queued that
      read it (the rows of an index changed, a shard swapped out of a memory-limited GGNN search, an index
      released or let go) could be overwritten under that search: on an H200, every row of such a read came
      out wrong (``benchmarks/studies/cached_blocks_gpu.py``). Dropping a kept array waited the 100 ms that
      the queued read still had to wait there, and so did ``cudaFree`` of an array of its own allocation;
      the pool's blocks are kept for later allocations and counted where the pool is (its statistics, the
      GPU memory budgets), where blocks of their own would not be.
    * When the block ends, the current stream has finished making them, so a kernel of another stream
      never reads them half-made. One wait per cached value, when it is made.

    Only for arrays made once and kept: dropping one waits for the device."""
    import cupy

    allocate = cupy.cuda.get_allocator()

    def allocate_kept(nbytes):
        pointer = allocate(nbytes)
        owner = _KeptBlock(pointer)
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(pointer.ptr, nbytes, owner, pointer.device_id), 0)

    with cupy.cuda.using_allocator(allocate_kept):
        yield
    cupy.cuda.get_current_stream().synchronize()


#: blocks of cached arrays whose device could not be synchronised when they were dropped (a stream capture
#: in progress, a CUDA error): a queued kernel may still read them, so they are never given back
_NEVER_GIVEN_BACK: list = []


class _KeptBlock:
    """The owner of one block of a cached array (:func:`kept_across_streams`): when the array's last
    reference goes, the device finishes the work queued so far on every stream, then the block goes back
    to the allocator."""

    __slots__ = ("pointer",)

    def __init__(self, pointer):
        self.pointer = pointer

    def __del__(self):
        try:
            import cupy

            with cupy.cuda.Device(self.pointer.device_id):
                cupy.cuda.runtime.deviceSynchronize()
        except BaseException:  # noqa: BLE001 - a finaliser must not raise; the block is kept instead
            try:
                _NEVER_GIVEN_BACK.append(self.pointer)
            except BaseException:  # noqa: BLE001 - the interpreter is shutting down
                pass


#: a user of CuPy's page-locked pool that held more than this gives the pool's free blocks back to the
#: system when it is done (:func:`let_page_locked_go`); below it, the pool keeps them for later calls
KEEP_PAGE_LOCKED_BYTES = 256 << 20


def page_locked(shape, dtype):
    """An empty page-locked host array (from CuPy's pool), or None where page-locked memory cannot be had
    (the caller copies through pageable memory instead)."""
    try:
        import cupyx

        return cupyx.empty_pinned(shape, dtype)
    except Exception:  # noqa: BLE001 - no page-locked memory (or no cupyx)
        return None


def let_page_locked_go(nbytes: int) -> None:
    """After buffers of ``nbytes`` page-locked bytes in all were let go (no copy reads them any more): give
    CuPy's pool's free blocks back to the system when that was more than :data:`KEEP_PAGE_LOCKED_BYTES`."""
    if nbytes > KEEP_PAGE_LOCKED_BYTES:
        import cupy

        cupy.get_default_pinned_memory_pool().free_all_blocks()


def release_device_memory(device: Device) -> int:
    """Give the blocks CuPy's pools cache on ``device`` back to the driver (after a failed build, so the
    next one finds the memory free); returns the bytes given back."""
    import cupy

    with cupy.cuda.Device(device.index):
        pool = cupy.get_default_memory_pool()
        before = pool.total_bytes()
        pool.free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
        return int(before - pool.total_bytes())


# what the GPU stack raises when device memory runs out: CuPy's allocator, thrust (sorts), cuBLAS (a new
# handle), the driver (numba-cuda, CuPy's driver calls)
_OUT_OF_MEMORY_MARKS = ("cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED", "CUDA_ERROR_OUT_OF_MEMORY",
                        "CUSOLVER_STATUS_ALLOC_FAILED", "CUSPARSE_STATUS_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says a device ran out of memory: ``MemoryError``, CuPy's ``OutOfMemoryError``, or
    an error of thrust, cuBLAS or the CUDA driver whose message carries the out-of-memory status."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc)
    return any(mark in text for mark in _OUT_OF_MEMORY_MARKS)


def on_input_device(*array_names: str, pass_device: bool = False) -> Callable[[_F], _F]:
    """Decorator of public entry points: the call runs with the GPU that holds its input current (device
    in, same device out). The device is ``device=`` resolved against the arguments named ``array_names``
    (an ``index`` stands for its ``dataset``), as :func:`resolve_device` does; so work that allocates
    or launches without naming a device lands on the input's GPU, not on GPU 0. A GPU out of memory
    (CuPy's ``OutOfMemoryError``, or thrust's, cuBLAS's or the driver's out-of-memory status: see
    :func:`is_out_of_memory`) becomes a ``MemoryError`` that says what to do, after the memory the call
    took is given back (:func:`release_device_memory`): a build returns nothing half-built, and the next
    call finds the memory free. Calls with ``devices=`` (several devices) and calls whose arguments do not
    resolve (the function then raises its own error) run as they are. ``pass_device``: the function gets
    the resolved :class:`Device` as its ``device`` argument when every named array is there (for functions
    that resolve ``device`` against the same arrays, so the answer is the same and is not worked out twice
    per call)."""
    import inspect

    def wrap(fn):
        # where each named argument sits when passed by position (looked up per call without binding the
        # whole signature, which cost about 20 microseconds of every small search)
        positional = {p.name: i for i, p in enumerate(inspect.signature(fn).parameters.values())
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)}
        slots = tuple((name == "index", name, positional.get(name)) for name in array_names)
        device_slot = positional.get("device")

        @functools.wraps(fn)
        def on_device(*args, **kwargs):
            if kwargs.get("devices") is not None:
                return fn(*args, **kwargs)
            n_args = len(args)
            arrays = []
            for is_index, name, slot in slots:
                a = kwargs[name] if name in kwargs else args[slot] if slot is not None and slot < n_args else None
                if is_index:
                    a = getattr(a, "dataset", None)
                if a is not None:
                    arrays.append(a)
            device = kwargs["device"] if "device" in kwargs else \
                args[device_slot] if device_slot is not None and device_slot < n_args else "auto"
            try:
                dev = resolve_device(device, *arrays)
            except (TypeError, ValueError, RuntimeError):
                return fn(*args, **kwargs)
            if pass_device and len(arrays) == len(slots):  # (an index without a dataset, a several-device
                # one, resolves its device itself)
                if device_slot is not None and device_slot < n_args:
                    args = args[:device_slot] + (dev,) + args[device_slot + 1:]
                else:
                    kwargs["device"] = dev
            with device_context(dev):
                try:
                    return fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - only a GPU's out-of-memory error is turned
                    # the GPU stack's out-of-memory errors only: a MemoryError of the library's own (a budget
                    # too small for the input, or an inner entry point's already turned one) passes as it is
                    gpu_out_of_memory = type(exc).__name__ == "OutOfMemoryError" or (
                        not isinstance(exc, MemoryError) and is_out_of_memory(exc))
                    if not dev.is_cuda or not gpu_out_of_memory:
                        raise
                    freed = release_device_memory(dev)
                    name = f"{fn.__module__.split('._')[0]}.{fn.__name__}"
                    raise MemoryError(f"{name}: GPU {dev.index} ran out of memory ({exc}); nothing was kept "
                                      f"({format_bytes(freed)} given back to the device). Pass memory_limit= "
                                      "(bytes or '8GB') to cut the work to a budget, or free device memory "
                                      "held elsewhere") from None

        return on_device

    return wrap


# --------------------------------------------------------------------------------------------------
# array kinds


@dataclass(frozen=True)
class ArrayKind:
    """The framework an input came from, so results can be handed back in it."""

    framework: str  # "numpy" | "cupy" | "torch" | "other-cuda"
    on_gpu: bool


#: type -> whether it is PyTorch's (asked per call, like :func:`_is_cupy`)
_TORCH_TYPES: dict = {}


def _is_torch(x) -> bool:
    t = type(x)
    hit = _TORCH_TYPES.get(t)
    if hit is None:
        hit = _TORCH_TYPES[t] = t.__module__.split(".")[0] == "torch"
    return hit


#: type -> whether it is CuPy's (a search call asks several times; the answer per type never changes)
_CUPY_TYPES: dict = {}


def _is_cupy(x) -> bool:
    t = type(x)
    hit = _CUPY_TYPES.get(t)
    if hit is None:
        hit = _CUPY_TYPES[t] = t.__module__.split(".")[0] == "cupy"
    return hit


def _cuda_device_of(x):
    """GPU ordinal of a device array, or None for host arrays."""
    if type(x) is np.ndarray:
        return None
    if _is_cupy(x):
        data = getattr(x, "data", None)  # an ndarray's memory pointer knows its GPU (x.device makes an object)
        return data.device_id if hasattr(data, "device_id") else x.device.id
    if _is_torch(x):
        return x.device.index if x.is_cuda else None
    if hasattr(x, "__cuda_array_interface__"):
        return 0
    if hasattr(x, "__dlpack_device__"):
        dev_type, dev_id = x.__dlpack_device__()
        if dev_type in (2, 13):  # kDLCUDA, kDLCUDAManaged
            return dev_id
    return None


#: the kinds :func:`array_kind` returns (frozen: shared by every call instead of made per call)
_NUMPY_KIND, _CUPY_KIND = ArrayKind("numpy", False), ArrayKind("cupy", True)
_TORCH_KINDS = (ArrayKind("torch", False), ArrayKind("torch", True))
_OTHER_CUDA_KIND = ArrayKind("other-cuda", True)


def array_kind(x) -> ArrayKind:
    if type(x) is np.ndarray:
        return _NUMPY_KIND
    if _is_cupy(x):
        return _CUPY_KIND
    if _is_torch(x):
        return _TORCH_KINDS[bool(x.is_cuda)]
    if isinstance(x, np.ndarray):
        return _NUMPY_KIND
    if _cuda_device_of(x) is not None:
        return _OTHER_CUDA_KIND
    return _NUMPY_KIND


def is_device_array(x) -> bool:
    return _cuda_device_of(x) is not None


def is_on(x, device: Device) -> bool:
    """Whether ``x`` is a device array on GPU ``device`` (False for host arrays and the CPU)."""
    return device.is_cuda and _cuda_device_of(x) == device.index


def as_numpy(x) -> np.ndarray:
    """A host NumPy view (or copy, for device arrays) of ``x``; memory maps stay memory maps."""
    if isinstance(x, np.ndarray):
        return x
    if _is_cupy(x):
        return x.get()
    if _is_torch(x):
        t = x.detach()
        if t.is_cuda:
            t = t.cpu()
        return t.numpy()
    if is_device_array(x):
        return as_cupy(x).get()
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except Exception:
            pass
    return np.asarray(x)


def as_cupy(x, device: Device | None = None):
    """A CuPy array for ``x``: device arrays are used in place; host arrays are copied to the GPU."""
    if _is_cupy(x):  # before the import statement: a search hands its CuPy results back through here
        return x
    import cupy

    if _is_torch(x):
        if x.is_cuda:
            return cupy.from_dlpack(x.detach())
        x = x.detach().numpy()
    elif hasattr(x, "__cuda_array_interface__"):
        return cupy.asarray(x)
    elif _cuda_device_of(x) is not None:
        return cupy.from_dlpack(x)
    if device is not None:
        with cupy.cuda.Device(device.index):
            return cupy.asarray(np.asarray(x))
    return cupy.asarray(np.asarray(x))


def return_as(kind: ArrayKind, arr):
    """Hand ``arr`` (NumPy or CuPy) back in the framework described by ``kind``."""
    if kind.framework == "numpy":
        return as_numpy(arr)
    if kind.framework == "cupy":
        return as_cupy(arr)
    if kind.framework == "torch":
        import torch

        if kind.on_gpu:
            return torch.from_dlpack(as_cupy(arr))
        return torch.from_numpy(np.ascontiguousarray(as_numpy(arr)))
    # any other CUDA array: CuPy implements both protocols, so it is the most useful answer
    return as_cupy(arr)


# --------------------------------------------------------------------------------------------------
# memory budgets

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


#: memory limits above this are refused as typos (a pebibyte)
_MAX_MEMORY = 1 << 50


def sm_count(device_index: int | None = None) -> int:
    """Streaming multiprocessors of GPU ``device_index`` (default: CuPy's current device), read once per
    device: CuPy's ``Device.attributes`` queries every attribute of the device each time."""
    if device_index is not None:
        return _sm_count_of(int(device_index))
    import cupy

    return _sm_count_of(cupy.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _sm_count_of(device_id: int) -> int:
    import cupy

    return int(cupy.cuda.Device(device_id).attributes["MultiProcessorCount"])


def format_bytes(n: int) -> str:
    """``n`` bytes for a message: '512 B', '3.0 KiB', '6.2 MiB', '1.50 GiB' (never '0 MiB' for a few bytes)."""
    n = int(n)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}" if unit in ("GiB", "TiB") else f"{n / size:.1f} {unit}"
    return f"{n} B"


def parse_memory(value) -> int | None:
    """Bytes from ``memory_limit=``: a whole number of bytes (at least 1, finite), a string like
    "8GB" / "512MiB" / "1.5g", or None (automatic). ValueError for anything else, including limits below
    one byte (0.5 is not "no limit") or above a pebibyte."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ValueError(f"memory_limit must be a number of bytes or a string such as '8GB', got {value!r}")
    b = value
    if isinstance(value, str):
        s = value.strip().lower().replace(" ", "")
        num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = s[len(num):]
        try:
            b = float(num) * _UNITS[unit]
        except (ValueError, KeyError):
            raise ValueError(f"memory_limit must be a number of bytes or a string such as '8GB' (units: B, KB, MB, "
                             f"GB, TB and KiB..TiB), got {value!r}") from None
    if not math.isfinite(b) or b < 1 or b > _MAX_MEMORY:
        raise ValueError(f"memory_limit must be between 1 byte and 1 PiB, got {value!r}")
    return int(b)


def default_memory_limit(device: Device) -> int:
    """Free memory of ``device`` minus a margin (10% and at least 256 MiB); host: 1/4 of RAM."""
    if device.is_cuda:
        import cupy

        with cupy.cuda.Device(device.index):
            pool = cupy.get_default_memory_pool()
            free, total = cupy.cuda.runtime.memGetInfo()
            free += pool.free_bytes()  # blocks cached by CuPy's pool are reusable by us
        margin = max(256 << 20, total // 10)
        return max(free - margin, 64 << 20)
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page = os.sysconf("SC_PAGE_SIZE")
        return max((pages * page) // 4, 256 << 20)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 2 << 30


class PeakInUse:
    """Peak device bytes in use through CuPy's memory pool (allocated and not yet freed) while entered,
    above what was in use on entering or at the last :meth:`reset`. A CuPy memory hook on this thread
    counts every allocation and free, so the peak is exact for what this thread allocates through CuPy
    (knngraph's kernels allocate nothing). The pool's size is no such measure: it grows only when no
    cached block fits, so reuse and fragmentation make it read off or under the real peak.

        with PeakInUse() as peak:
            build(...)
        peak.peak  # bytes
    """

    def __init__(self):
        self.peak = self._now = 0
        self._hook = None

    @property
    def in_use(self) -> int:
        """Bytes in use now, above what was in use on entering or at the last :meth:`reset`."""
        return self._now

    def reset(self) -> None:
        self.peak = self._now = 0

    def __enter__(self):
        from cupy.cuda import memory_hook

        tracker = self

        class _Hook(memory_hook.MemoryHook):
            name = f"knngraph_peak_in_use_{id(self)}"  # CuPy keeps one hook per name and thread

            def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
                tracker._now += mem_size
                tracker.peak = max(tracker.peak, tracker._now)

            def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
                tracker._now -= mem_size

        self.reset()
        self._hook = _Hook()
        self._hook.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hook.__exit__(*exc)
        self._hook = None


@contextlib.contextmanager
def quiet_launches():
    """Silence numba-cuda's low-occupancy warning for launches inside the block.

    knngraph sizes its grids on purpose (a few queries give a small grid); the warning would only
    alarm users. Other warnings pass through.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")
        yield
