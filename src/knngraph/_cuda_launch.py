"""Launch numba-cuda kernels through CuPy, for a fraction of numba's launch cost.

A numba launch with a dozen CuPy array arguments costs about 0.3 ms on the host (argument typing and
``__cuda_array_interface__`` conversion per array), more than many of our kernels run. The
remedy: compile the numba kernel to PTX once per argument signature, load it with CuPy, and launch it
as a raw kernel. A numba kernel receives each array as its flattened data model
``(meminfo, parent, nitems, itemsize, data, shape..., strides...)`` and each scalar by value, so that is
what :func:`launch` passes.

Kernels are written and tested as ordinary ``@cuda.jit`` functions (the simulator runs them directly);
only the launch path differs. Set ``KNNGRAPH_RAW_LAUNCH=0`` to launch through numba instead.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile

import numpy as np

from ._device import quiet_launches

__all__ = ["launch", "compiled_functions", "PreparedLaunch", "flatten", "raw_launch_enabled", "cached_ptx",
           "ptx_cache_dir"]

#: (entry name, CuPy function) of every kernel compiled here, for profiling (registers, spills)
_COMPILED: list = []


def compiled_functions() -> list:
    """(entry name, CuPy function) of the kernels compiled so far (``num_regs``, ``local_size_bytes``...)."""
    return list(_COMPILED)


def _raw_enabled() -> bool:
    return os.environ.get("KNNGRAPH_RAW_LAUNCH", "1") != "0"


raw_launch_enabled = _raw_enabled


def _arg_type(arg):
    from numba import from_dtype, types

    if hasattr(arg, "__cuda_array_interface__") and hasattr(arg, "dtype"):
        layout = "C" if arg.flags.c_contiguous else "A"
        return types.Array(from_dtype(arg.dtype), arg.ndim, layout)
    if isinstance(arg, (bool, np.bool_)):
        raise TypeError("pass booleans to kernels as integers")
    if isinstance(arg, (int, np.integer)):
        return types.int64
    if isinstance(arg, np.float32):
        return types.float32
    if isinstance(arg, (float, np.floating)):
        return types.float64
    raise TypeError(f"cannot pass {type(arg).__name__} to a raw kernel launch")


def _flatten(arg, out: list) -> None:
    if hasattr(arg, "__cuda_array_interface__") and hasattr(arg, "dtype"):
        out += [np.uint64(0), np.uint64(0), np.int64(arg.size), np.int64(arg.itemsize), np.uint64(arg.data.ptr)]
        out += [np.int64(s) for s in arg.shape]
        out += [np.int64(s) for s in arg.strides]
    elif isinstance(arg, (int, np.integer)):
        out.append(np.int64(arg))
    elif isinstance(arg, np.float32):
        out.append(arg)
    else:
        out.append(np.float64(arg))


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """Digest of knngraph's own source files and the compiler's version: part of every PTX cache key, so
    a changed kernel (or any helper it calls) is never served from an older build."""
    import hashlib

    import numba

    h = hashlib.sha256(numba.__version__.encode())
    try:
        import numba_cuda

        h.update(numba_cuda.__version__.encode())
    except Exception:  # noqa: BLE001
        pass
    root = os.path.dirname(os.path.abspath(__file__))
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return h.hexdigest()


def ptx_cache_dir() -> str | None:
    """Where compiled PTX is kept between processes: ``$KNNGRAPH_CACHE_DIR/ptx`` or
    ``~/.cache/knngraph/ptx``; None when ``KNNGRAPH_CACHE_DIR`` is set to an empty string (no cache)."""
    base = os.environ.get("KNNGRAPH_CACHE_DIR")
    if base == "":
        return None
    if base is None:
        base = os.path.join(os.path.expanduser("~"), ".cache", "knngraph")
    return os.path.join(base, "ptx")


def _closure_key(fn) -> str:
    cells = fn.__closure__ or ()
    vals = []
    for c in cells:
        v = c.cell_contents
        vals.append(repr(v) if isinstance(v, (int, float, bool, str, tuple, type(None))) else getattr(v, "__qualname__",
                                                                                                        repr(type(v))))
    return repr((fn.__module__, fn.__qualname__, vals))


def cached_ptx(kernel_fn, signature, cc, compile_fn) -> str:
    """The PTX of ``kernel_fn`` (a plain Python kernel function) for ``signature`` and compute capability
    ``cc``: read from :func:`ptx_cache_dir` when an identical build (same knngraph source, compiler,
    closure constants, signature and device) was made before, else ``compile_fn()`` and stored
    (atomically; a cache that cannot be written is skipped)."""
    import hashlib

    d = ptx_cache_dir()
    if d is None:
        return compile_fn()
    key = hashlib.sha256(repr((_source_digest(), _closure_key(kernel_fn), repr(signature), cc)).encode()).hexdigest()
    path = os.path.join(d, key[:40] + ".ptx")
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        pass
    ptx = compile_fn()
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(ptx)
        os.replace(tmp, path)
    except OSError:
        pass
    return ptx


@functools.lru_cache(maxsize=None)
def _compiled(kernel, signature, device_id, max_registers=None):
    """(CuPy function, module) for ``kernel`` specialised to ``signature`` on the current device; the
    PTX comes from the disk cache (:func:`cached_ptx`) after the first build.

    ``max_registers`` adds a ``.maxnreg`` directive to the entry (more resident warps per SM for
    latency-bound kernels, at the risk of spills)."""
    import cupy as cp
    from numba import cuda

    cc = cp.cuda.Device(device_id).compute_capability
    ptx = cached_ptx(kernel.py_func, signature, cc,
                     lambda: cuda.compile_ptx_for_current_device(kernel.py_func, signature, device=False)[0])
    entry = re.search(r"\.entry\s+([\w$]+)\s*\(", ptx).group(1)
    if max_registers:
        start = ptx.index(".entry " + entry)
        body = ptx.index("{", ptx.index(")", start))
        ptx = ptx[:body] + f".maxnreg {int(max_registers)}\n" + ptx[body:]
    fd, path = tempfile.mkstemp(suffix=".ptx", prefix="knngraph-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(ptx)
        module = cp.RawModule(path=path)
        fn = module.get_function(entry)
        _COMPILED.append((entry, fn))
    finally:
        os.unlink(path)
    return fn, module


class PreparedLaunch:
    """A raw launch of one kernel specialisation, compiled once from example arguments. Its flattened
    arguments are packed once into one host buffer of 8-byte values (every value a raw launch passes is
    8 bytes: pointers, int64, float64) and the array of pointers into it that ``cuLaunchKernel`` reads.
    A call rewrites only the values that change (:attr:`values` at :meth:`array_slots` when an argument
    is replaced by a C-contiguous array of the same trailing shape) and launches: no per-argument
    conversion, which is most of CuPy's launch cost for a kernel of ~70 flattened values. The driver
    copies the values at the launch, so they may be rewritten for the next one at once. The numba launch
    path (``KNNGRAPH_RAW_LAUNCH=0``) is not available here."""

    def __init__(self, kernel, example_args, max_registers=None, *, device_id=None):
        if device_id is None:
            import cupy as cp

            device_id = cp.cuda.Device().id
        signature = tuple(_arg_type(a) for a in example_args)
        self.fn, self._module = _compiled(kernel, signature, device_id, max_registers)
        self._function = int(self.fn.kernel.ptr if hasattr(self.fn, "kernel") else self.fn.ptr)
        flat = [flatten(a) for a in example_args]
        self._starts = np.cumsum([0] + [len(f) for f in flat]).tolist()
        values = [np.asarray(v) for f in flat for v in f]
        if any(v.itemsize != 8 for v in values):
            raise TypeError("a prepared launch passes 8-byte values only (no float32 scalars)")
        self.values = np.array([v.view(np.uint64) for v in values], np.uint64)
        self.pointers = self.values.ctypes.data + 8 * np.arange(len(values), dtype=np.uint64)
        self._pointers_address = int(self.pointers.ctypes.data)

    def array_slots(self, arg: int) -> tuple:
        """The positions in :attr:`values` of array argument ``arg``'s element count, data pointer and
        first extent."""
        at = self._starts[arg]
        return at + 2, at + 4, at + 5

    def scalar_slots(self, *args: int) -> list:
        """The positions in :attr:`values` of scalar arguments ``args`` (one value each; write a new value
        as its 8-byte pattern, e.g. ``np.float64(x).view(np.uint64)``)."""
        return [self._starts[a] for a in args]

    def __call__(self, blocks: int, threads: int, stream) -> None:
        """Launch with the current :attr:`values` on CuPy ``stream``."""
        from cupy_backends.cuda.api import driver

        driver.launchKernel(self._function, int(blocks), 1, 1, int(threads), 1, 1, 0, stream.ptr,
                            self._pointers_address, 0)


def flatten(arg) -> list:
    """The values a raw launch passes for one argument."""
    out: list = []
    _flatten(arg, out)
    return out


def launch(kernel, blocks: int, threads: int, args, stream=None, max_registers=None) -> None:
    """Launch numba ``kernel`` on ``blocks`` x ``threads`` with ``args`` (CuPy arrays, ints, floats)
    on CuPy ``stream`` (default: the current stream); ``max_registers`` caps registers per thread."""
    if blocks <= 0:
        return
    import cupy as cp

    if not _raw_enabled():
        from numba import cuda

        s = stream if stream is not None else cp.cuda.get_current_stream()
        nb_stream = cuda.external_stream(s.ptr) if s.ptr else cuda.default_stream()
        with quiet_launches():
            kernel[blocks, threads, nb_stream](*args)
        return
    signature = tuple(_arg_type(a) for a in args)
    fn, _ = _compiled(kernel, signature, cp.cuda.Device().id, max_registers)
    flat: list = []
    for a in args:
        _flatten(a, flat)
    fn((int(blocks),), (int(threads),), tuple(flat), stream=stream)
