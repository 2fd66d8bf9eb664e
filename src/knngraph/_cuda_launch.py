"""Launch numba-cuda kernels through CuPy, loaded from a disk cache of compiled images.

**Launch.** A numba launch with a dozen CuPy array arguments costs about 0.3 ms on the host (argument
typing and ``__cuda_array_interface__`` conversion per array), more than many of our kernels run. So every
kernel of the library is launched here instead: compiled by numba once per argument signature, loaded
into the device's context with CuPy and launched as a raw kernel. A numba kernel receives each array as
its flattened data model ``(meminfo, parent, nitems, itemsize, data, shape..., strides...)`` and each
scalar by value, so that is what :func:`launch` passes. Kernels are written and tested as ordinary
``@cuda.jit`` functions (the simulator runs them directly, :func:`launch` hands NumPy arguments to
numba); only the launch path differs. ``KNNGRAPH_RAW_LAUNCH=0`` launches through numba instead.

**First call.** numba compiles a kernel from Python in seconds (the fast searcher's in up to a minute),
and the driver would compile its PTX again into machine code. Both happen once per machine: the machine
code (a cubin, linked by the CUDA linker that numba-cuda uses) is kept in :func:`kernel_cache_dir` and a
new process loads it in milliseconds (:func:`kernels_compiled` counts the builds of this process, which a
warm cache keeps at 0). The key of an entry covers knngraph's source (every file of the package: a changed
helper changes every key), the numba and numba-cuda versions, the kernel's closure constants (the
configuration a kernel factory specialised it for, followed into the device functions it captures), the
argument signature, the register cap and the device's compute capability. Entries are written to a
temporary file and renamed into place, so processes compiling the same kernel at once (Dask workers) each
write a whole entry and readers never see a partial one; an entry whose length or checksum does not match
is compiled again, never loaded; a cache folder that cannot be written is skipped with one log line.

**Without numba.** Computing that key needs the kernel object, so its module, so numba and numba-cuda
(about half a second to import). Host code therefore names its kernels (:func:`kernel_module`,
:class:`LazyKernel`: module, attribute, factory arguments) and each compiled kernel also gets a small
name entry: the key of (kernel name, argument types, register cap, compute capability, the package's
source and versions, the environment variables that change code generation) -> the full key of the
entry it compiled to. A process whose kernels are all in the cache loads them by name and never imports
numba; a miss imports the module and takes the path above.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
import types

import numpy as np

from ._device import quiet_launches

__all__ = ["launch", "compiled_functions", "PreparedLaunch", "flatten", "raw_launch_enabled", "kernel_cache_dir",
           "cached_image", "kernels_compiled", "compile_key", "max_cooperative_blocks", "kernel_module", "LazyKernel"]

_log = logging.getLogger("knngraph")

#: (entry name, CuPy function) of every kernel loaded here, for profiling (registers, spills)
_COMPILED: list = []
#: kernel builds (cache misses) in this process, and the seconds they took
_BUILDS = {"count": 0, "seconds": 0.0}
_LOCK = threading.RLock()
#: bumped when the layout of a cache entry changes
_FORMAT = 1
_MAGIC = b"KNNGRAPH-KERNEL\n"


def compiled_functions() -> list:
    """(entry name, CuPy function) of the kernels loaded so far (``num_regs``, ``local_size_bytes``...)."""
    return list(_COMPILED)


def kernels_compiled() -> int:
    """Kernel images this process compiled (cache misses); 0 in a process whose kernels all came from
    :func:`kernel_cache_dir`."""
    return _BUILDS["count"]


def compile_seconds() -> float:
    """Seconds this process spent compiling GPU kernels (included in
    :func:`knngraph._compiling.compile_seconds`)."""
    return _BUILDS["seconds"]


def _raw_enabled() -> bool:
    return os.environ.get("KNNGRAPH_RAW_LAUNCH", "1") != "0"


raw_launch_enabled = _raw_enabled


def _arg_type(arg):
    from numba import from_dtype, types as nbtypes

    if hasattr(arg, "__cuda_array_interface__") and hasattr(arg, "dtype"):
        layout = "C" if arg.flags.c_contiguous else "A"
        return nbtypes.Array(from_dtype(arg.dtype), arg.ndim, layout)
    if isinstance(arg, (bool, np.bool_)):
        raise TypeError("pass booleans to kernels as integers")
    if isinstance(arg, (int, np.integer)):
        return nbtypes.int64
    if isinstance(arg, np.float32):
        return nbtypes.float32
    if isinstance(arg, (float, np.floating)):
        return nbtypes.float64
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


# --------------------------------------------------------------------------------------------------
# the disk cache


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    """SHA-256 of knngraph's own source files and the compiler's version: part of every cache key, so a
    changed kernel (or any helper it calls) is never served from an older build."""
    from importlib import metadata

    h = hashlib.sha256(str(_FORMAT).encode())
    for package in ("numba", "numba-cuda"):  # read from the installed metadata: importing numba costs ~0.2 s
        try:
            h.update(f"/{package}={metadata.version(package)}".encode())
        except Exception:  # noqa: BLE001 - the simulator's tests run without numba-cuda's package metadata
            pass
    root = os.path.dirname(os.path.abspath(__file__))
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    h.update(os.path.relpath(os.path.join(dirpath, f), root).encode() + fh.read())
    return h.hexdigest()


def kernel_cache_dir() -> str | None:
    """Where compiled kernels are kept between processes: ``$KNNGRAPH_CACHE_DIR/kernels`` or
    ``~/.cache/knngraph/kernels``; None when ``KNNGRAPH_CACHE_DIR`` is set to an empty string (no cache)."""
    base = os.environ.get("KNNGRAPH_CACHE_DIR")
    if base == "":
        return None
    if base is None:
        base = os.path.join(os.path.expanduser("~"), ".cache", "knngraph")
    return os.path.join(base, "kernels")


def _value_key(v, depth: int) -> str:
    """A stable text for a closure constant: its value, or for a function (a numba dispatcher, a
    ``host_and_device`` helper) its own closure key, so that device functions a factory made for one
    configuration key differently from those made for another."""
    if isinstance(v, (bool, int, float, str, bytes, type(None))):
        return repr(v)
    if isinstance(v, np.generic):
        return f"{v.dtype}:{v!r}"
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(_value_key(x, depth) for x in v) + ")"
    if isinstance(v, np.ndarray):
        return f"array:{v.dtype}:{v.shape}:{hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}"
    fn = getattr(v, "__knngraph_source__", None) or getattr(v, "py_func", None)
    if fn is None and isinstance(v, types.FunctionType):
        fn = v
    if fn is not None and isinstance(fn, types.FunctionType):
        return "fn:" + (_closure_key(fn, depth + 1) if depth < 8 else f"{fn.__module__}.{fn.__qualname__}")
    text = repr(v)
    return f"{type(v).__module__}.{type(v).__qualname__}" if " at 0x" in text else text


def _closure_key(fn, depth: int = 0) -> str:
    vals = []
    for c in fn.__closure__ or ():
        try:
            vals.append(_value_key(c.cell_contents, depth))
        except ValueError:  # an empty cell
            vals.append("<empty>")
    return repr((fn.__module__, fn.__qualname__, vals))


def compile_key(kernel_fn, signature, cc, max_registers=None) -> str:
    """The cache key of ``kernel_fn`` (a plain Python kernel function) compiled for ``signature``, compute
    capability ``cc`` and register cap ``max_registers`` (see the module docs)."""
    text = repr((_source_hash(), _closure_key(kernel_fn), repr(tuple(signature)), tuple(cc), max_registers))
    return hashlib.sha256(text.encode()).hexdigest()


_UNWRITABLE_SAID = set()


def _read_entry(path: str):
    """(header, image) of a cache entry, or None when it is missing, truncated or corrupt."""
    try:
        with open(path, "rb") as fh:
            blob = fh.read()
    except OSError:
        return None
    if not blob.startswith(_MAGIC):
        return None
    end = blob.find(b"\n", len(_MAGIC))
    if end < 0:
        return None
    try:
        header = json.loads(blob[len(_MAGIC):end])
        image = blob[end + 1:]
        if len(image) != int(header["size"]) or hashlib.sha256(image).hexdigest() != header["sha256"]:
            return None
        if not isinstance(header.get("entry"), str) or header.get("kind") not in ("cubin", "ptx"):
            return None
    except (ValueError, KeyError, TypeError):
        return None
    return header, image


def _write_atomically(folder: str, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` in ``folder`` (made if missing) as knngraph writes every file
    (:mod:`knngraph.io._atomic`: a temporary file renamed into place, so readers see the old file or the
    whole new one; temporary files of killed writers are removed later). Raises OSError."""
    from .io._atomic import _atomic_write, _finish, _open_new

    def write_into(tmp):
        with _open_new(tmp) as fh:
            fh.write(data)
            _finish(fh)

    os.makedirs(folder, exist_ok=True)
    _atomic_write(path, write_into)


def _write_entry(folder: str, path: str, header: dict, image: bytes) -> None:
    """Write an entry atomically (a temporary file renamed into place); a folder that cannot be written is
    said once per process and skipped."""
    header = dict(header, size=len(image), sha256=hashlib.sha256(image).hexdigest())
    try:
        _write_atomically(folder, path, _MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + image)
    except OSError as exc:
        if folder not in _UNWRITABLE_SAID:
            _UNWRITABLE_SAID.add(folder)
            _log.warning("knngraph: the kernel cache %s cannot be written (%s); compiled GPU kernels are not "
                         "kept for later processes", folder, exc.strerror or exc)


def cached_image(key: str, build) -> tuple[dict, bytes]:
    """(header, image) of the cache entry ``key``: read from :func:`kernel_cache_dir`, else ``build()`` ->
    (entry name, kind 'cubin' or 'ptx', image bytes), stored and returned."""
    folder = kernel_cache_dir()
    path = None if folder is None else os.path.join(folder, key[:48] + ".kernel")
    if path is not None:
        found = _read_entry(path)
        if found is not None:
            return found
    entry, kind, image = build()
    header = {"entry": entry, "kind": kind, "size": len(image), "sha256": hashlib.sha256(image).hexdigest()}
    if path is not None:
        _write_entry(folder, path, header, image)
    return header, image


_ANNOUNCED = set()


def _announce(device_name: str) -> None:
    """Say once per process and device that kernels are being compiled: to the ``knngraph`` logger when
    the program shows logs, else to stderr (a plain script would otherwise wait in silence)."""
    if device_name in _ANNOUNCED:
        return
    _ANNOUNCED.add(device_name)
    from ._compiling import notice

    notice(f"compiling GPU kernels for {device_name} (first use on this machine; kept in "
           f"{kernel_cache_dir() or 'no cache: KNNGRAPH_CACHE_DIR is empty'})")


def _link(ptx: str, cc) -> bytes:
    """The cubin of ``ptx`` for ``cc``, linked by numba-cuda's linker (nvJitLink or the driver's), with
    the device runtime when the PTX calls it (a grid barrier)."""
    from numba.cuda.cudadrv import driver as nbdriver

    linker = nbdriver._Linker(max_registers=None, cc=tuple(cc), lto=False)
    linker.add_ptx(ptx.encode())
    if "cudaCG" in ptx or "cudaGetParameterBuffer" in ptx:
        from numba.cuda.cudadrv.libs import get_cudalib

        linker.add_file_guess_ext(get_cudalib("cudadevrt", static=True))
    obj = linker.complete()
    image = getattr(obj, "code", obj)
    if not isinstance(image, (bytes, bytearray)):
        raise TypeError(f"the linker returned {type(image).__name__}, not a cubin")
    return bytes(image)


def _build(kernel, signature, cc, max_registers):
    """(entry name, kind, image) of ``kernel`` compiled for ``signature`` on compute capability ``cc``."""
    from numba import cuda

    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, device=False, cc=tuple(cc))
    entry = re.search(r"\.entry\s+([\w$]+)\s*\(", ptx).group(1)
    if max_registers:
        start = ptx.index(".entry " + entry)
        body = ptx.index("{", ptx.index(")", start))
        ptx = ptx[:body] + f".maxnreg {int(max_registers)}\n" + ptx[body:]
    try:
        return entry, "cubin", _link(ptx, cc)
    except Exception as exc:  # noqa: BLE001 - no usable linker: the driver compiles the PTX at load
        _log.debug("linking %s to a cubin failed (%s: %s); keeping its PTX", entry, type(exc).__name__, exc)
        return entry, "ptx", ptx.encode()


@functools.lru_cache(maxsize=None)
def _compiled_locked(kernel, signature, device_id, max_registers=None):
    import cupy as cp

    dev = cp.cuda.Device(device_id)
    cc = tuple(int(c) for c in dev.compute_capability)
    key = compile_key(kernel.py_func, signature, cc, max_registers)
    built = []

    def build():
        _announce(f"{cp.cuda.runtime.getDeviceProperties(device_id)['name'].decode()} (sm_{cc[0]}{cc[1]})")
        t0 = time.perf_counter()
        out = _build(kernel, signature, cc, max_registers)
        built.append(time.perf_counter() - t0)
        return out

    header, image = cached_image(key, build)
    if built:
        _BUILDS["count"] += 1
        _BUILDS["seconds"] += built[0]
    return _load(header, image, dev) + (key,)


def _load(header: dict, image: bytes, dev) -> tuple:
    """(CuPy function, module) of a cache entry's image loaded into CuPy device ``dev``'s context."""
    import cupy as cp

    # CuPy loads a module from a file (cubin or PTX by the suffix); its functions are RawKernels
    fd, path = tempfile.mkstemp(suffix="." + header["kind"], prefix="knngraph-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(image)
        with dev:
            module = cp.RawModule(path=path)
            fn = module.get_function(header["entry"])
    finally:
        os.unlink(path)
    _COMPILED.append((header["entry"], fn))
    return fn, module


def _compiled(kernel, signature, device_id, max_registers=None):
    """(CuPy function, module) for ``kernel`` specialised to ``signature`` on GPU ``device_id``, from the
    disk cache after the first build (see the module docs). ``max_registers`` adds a ``.maxnreg``
    directive to the entry (more resident warps per SM for latency-bound kernels, at the risk of spills)."""
    with _LOCK:
        return _compiled_locked(kernel, signature, device_id, max_registers)[:2]


# --------------------------------------------------------------------------------------------------
# kernels named, not imported: a new process loads them without importing numba


class LazyKernel:
    """A kernel of a kernel module named by the module, its attribute and, for a kernel factory, the
    factory's arguments, without importing the module: ``kernel_module('knngraph.x._kernels').name`` is the
    kernel ``name`` of that module and ``...factory(32, 'a')`` the kernel that ``factory(32, 'a')`` returns.
    :func:`launch` finds a kernel named this way in the disk cache by its name, argument types and device
    (:func:`_lazy_function`): a process whose kernels are all cached never imports the kernel modules, and
    so neither numba nor numba-cuda (about half a second of a first call). :meth:`resolve` imports the
    module and returns the numba kernel (a cache miss, the simulator, ``KNNGRAPH_RAW_LAUNCH=0``)."""

    __slots__ = ("module", "name", "args", "_real", "_text", "_made")

    def __init__(self, module: str, name: str, args: tuple | None = None):
        self.module, self.name, self.args, self._real = module, name, args, None
        self._made: dict = {}  # a factory's kernels by their arguments (a call is a dict lookup)
        if args is None:
            self._text = f"{module}.{name}"
        else:
            text = [repr(a) for a in args[0]] + [f"{k}={v!r}" for k, v in args[1]]
            self._text = f"{module}.{name}({', '.join(text)})"

    def __call__(self, *args, **kwargs):
        key = (args, tuple(sorted(kwargs.items()))) if kwargs else (args, ())
        try:
            return self._made[key]
        except (KeyError, TypeError):  # TypeError: an unhashable argument, refused below
            pass
        if self.args is not None:
            raise TypeError(f"{self!r} is a kernel, not a kernel factory")
        for a in list(args) + list(kwargs.values()):
            if not isinstance(a, (bool, int, float, str, type(None), np.generic, LazyKernel)):
                raise TypeError(f"{self.module}.{self.name}: a kernel named lazily takes plain values, "
                                f"got {type(a).__name__}")
        made = self._made[key] = _named(self.module, self.name, key)
        return made

    def resolve(self):
        """The numba kernel (imports its module, calls the factory)."""
        if self._real is None:
            import importlib

            obj = getattr(importlib.import_module(self.module), self.name)
            if self.args is not None:
                args, kwargs = self.args
                real = [a.resolve() if isinstance(a, LazyKernel) else a for a in args]
                obj = obj(*real, **{k: (v.resolve() if isinstance(v, LazyKernel) else v) for k, v in kwargs})
            self._real = obj
        return self._real

    def __repr__(self) -> str:
        return self._text

    def __eq__(self, other):
        return self is other or (isinstance(other, LazyKernel) and self._text == other._text)

    def __hash__(self):
        return hash(self._text)

    def __getitem__(self, launch_config):
        """``kernel[blocks, threads]``: numba's launch syntax, on the resolved kernel (the simulator)."""
        return self.resolve()[launch_config]


#: every kernel named so far, one object per name: a name resolves once and compares by identity
_NAMED: dict = {}


def _named(module: str, name: str, args: tuple | None = None) -> LazyKernel:
    kernel = LazyKernel(module, name, args)
    return _NAMED.setdefault(repr(kernel), kernel)


class KernelModule:
    """A kernel module's kernels as :class:`LazyKernel` objects (see :func:`kernel_module`)."""

    def __init__(self, module: str):
        self._module = module

    def __getattr__(self, name: str) -> LazyKernel:
        if name.startswith("__"):
            raise AttributeError(name)
        kernel = _named(self._module, name)
        setattr(self, name, kernel)  # later lookups find it without calling __getattr__
        return kernel

    def __repr__(self) -> str:
        return f"kernel_module({self._module!r})"


def kernel_module(module: str) -> KernelModule:
    """The kernels of ``module`` (its dotted name), named without importing it: host code launches
    ``kernel_module(...).kernel`` or ``kernel_module(...).factory(args)`` (plain values), and reads the
    module's constants and host-side helpers from a module that does not import numba."""
    return KernelModule(module)


def _arg_text(arg) -> str:
    """The type of one launch argument as text, as :func:`_arg_type` types it (without numba)."""
    if hasattr(arg, "__cuda_array_interface__") and hasattr(arg, "dtype"):
        return f"{arg.dtype.str}/{arg.ndim}/{'C' if arg.flags.c_contiguous else 'A'}"
    if isinstance(arg, (bool, np.bool_)):
        raise TypeError("pass booleans to kernels as integers")
    if isinstance(arg, (int, np.integer)):
        return "i8"
    if isinstance(arg, np.float32):
        return "f4"
    if isinstance(arg, (float, np.floating)):
        return "f8"
    raise TypeError(f"cannot pass {type(arg).__name__} to a raw kernel launch")


def _memo_types(args) -> tuple:
    """What :func:`_arg_text` says of each argument, as a tuple that is quick to make and to hash: a launch
    looks its kernel up with it, so its cost is paid by every launch (the text, with CuPy's
    ``__cuda_array_interface__`` dict and flags object made per array, was 35 microseconds of a
    17-argument launch). CuPy arrays by (dtype, ndim, C-contiguous); anything else by its text."""
    nd = _cupy_array_type()
    return tuple((a.dtype, a.ndim, a._c_contiguous) if type(a) is nd else _arg_text(a) for a in args)


class _NoCuPyArray:
    """Stands for ``cupy.ndarray`` before CuPy is imported (no argument can be one then)."""


def _cupy_array_type():
    """``cupy.ndarray`` once CuPy is imported (the type that the launch paths' fast checks compare with;
    CuPy's own ``_c_contiguous`` attribute is read from it), else a type that no argument has. Read from
    ``sys.modules`` on each call: importing nothing, and never holding a stand-in module's answer."""
    return getattr(sys.modules.get("cupy"), "ndarray", _NoCuPyArray)


#: environment variables that change what a kernel module compiles (read when it is imported)
_CODEGEN_ENV = ("KNNGRAPH_GGNN_MAX_REGISTERS", "KNNGRAPH_BEAM_MAX_REGISTERS", "NUMBA_OPT", "NUMBA_FASTMATH")
_LAZY: dict = {}


def _name_key(kernel: LazyKernel, arg_texts: tuple, cc: tuple, max_registers) -> str:
    env = tuple((name, os.environ.get(name)) for name in _CODEGEN_ENV)
    text = repr((_source_hash(), repr(kernel), arg_texts, tuple(cc), max_registers, env))
    return hashlib.sha256(text.encode()).hexdigest()


def _lazy_function(kernel: LazyKernel, args, device_id: int, max_registers=None):
    """(CuPy function, module) of ``kernel`` for ``args`` on GPU ``device_id``: this process's copy, else
    the cache entry that a name entry (``<name key>.name`` in :func:`kernel_cache_dir`, the full key of the
    entry that this kernel name, these argument types, register cap, compute capability and the
    package's source were compiled to) points at, else resolved, compiled or loaded by its full key
    (:func:`_compiled`) and its name entry written. A name entry that points at a missing or corrupt entry
    is passed over."""
    memo = (kernel, _memo_types(args), device_id, max_registers)
    found = _LAZY.get(memo)  # a dict lookup is atomic; entries are only ever added
    if found is not None:
        return found
    arg_texts = tuple(_arg_text(a) for a in args)
    with _LOCK:
        found = _LAZY.get(memo)
        if found is not None:
            return found
        import cupy as cp

        dev = cp.cuda.Device(device_id)
        cc = tuple(int(c) for c in dev.compute_capability)
        folder = kernel_cache_dir()
        name_path = None
        if folder is not None:
            name_path = os.path.join(folder, _name_key(kernel, arg_texts, cc, max_registers)[:48] + ".name")
            key = _read_name(name_path)
            entry = None if key is None else _read_entry(os.path.join(folder, key[:48] + ".kernel"))
            if entry is not None:
                found = _load(*entry, dev)
        if found is None:
            real = kernel.resolve()
            signature = tuple(_arg_type(a) for a in args)
            fn, module, key = _compiled_locked(real, signature, device_id, _register_cap(real, max_registers))
            found = (fn, module)
            if name_path is not None:
                _write_name(folder, name_path, key)
        _LAZY[memo] = found
        return found


def _read_name(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            blob = fh.read(4096)
    except OSError:
        return None
    key = blob.decode("ascii", "replace").strip()
    return key if re.fullmatch(r"[0-9a-f]{64}", key) else None


def _write_name(folder: str, path: str, key: str) -> None:
    try:
        _write_atomically(folder, path, (key + "\n").encode())
    except OSError:
        pass  # the folder cannot be written: _write_entry said so once


def _function_for(kernel, args, device_id: int, max_registers=None):
    """(CuPy function, module) of ``kernel`` (numba or :class:`LazyKernel`) for ``args``."""
    if isinstance(kernel, LazyKernel):
        return _lazy_function(kernel, args, device_id, max_registers)
    signature = tuple(_arg_type(a) for a in args)
    return _compiled(kernel, signature, device_id, _register_cap(kernel, max_registers))


def _function_pointer(fn) -> int:
    """The driver's handle of a loaded kernel (a CuPy RawKernel's function, or a function itself)."""
    return int(fn.kernel.ptr if hasattr(fn, "kernel") else fn.ptr)


def _register_cap(kernel, max_registers):
    """``max_registers``, else the cap the kernel was declared with (``cuda.jit(max_registers=...)``)."""
    if max_registers:
        return int(max_registers)
    cap = getattr(kernel, "targetoptions", {}).get("max_registers")
    return int(cap) if cap else None


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
        self.device_id = int(device_id)
        self.fn, self._module = _function_for(kernel, example_args, self.device_id, max_registers)
        self._function = _function_pointer(self.fn)
        if any(isinstance(a, np.float32) for a in example_args):
            # a slot is rewritten as 8 bytes (scalar_slots); a float32 parameter is read from 4 of them
            raise TypeError("a prepared launch passes 8-byte values only (no float32 scalars)")
        flat = [_packed_values((a,)) for a in example_args]
        self._starts = np.cumsum([0] + [len(f) for f in flat]).tolist()
        self.values = np.array([v for f in flat for v in f], np.uint64)
        self.pointers = _slot_pointers(self.values)
        self._pointers_address = int(self.pointers.ctypes.data)
        from cupy_backends.cuda.api import driver

        self._launch_kernel = driver.launchKernel  # bound once: an import statement per call is a microsecond

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
        self._launch_kernel(self._function, int(blocks), 1, 1, int(threads), 1, 1, 0, stream.ptr,
                            self._pointers_address, 0)


def flatten(arg) -> list:
    """The values a raw launch passes for one argument."""
    out: list = []
    _flatten(arg, out)
    return out


def _is_host(args) -> bool:
    """Whether a launch's arrays are NumPy arrays: the numba CUDA simulator, in tests."""
    return any(isinstance(a, np.ndarray) for a in args)


def max_cooperative_blocks(kernel, args, threads: int) -> int:
    """The most blocks of ``threads`` threads of ``kernel`` (for these argument types) that are resident
    on the current GPU at once: the grid of a cooperative launch (a grid barrier inside)."""
    import cupy as cp

    dev = cp.cuda.Device()
    fn, _ = _function_for(kernel, args, dev.id)
    per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(_function_pointer(fn), int(threads), 0)
    return max(1, int(per_sm) * int(dev.attributes["MultiProcessorCount"]))


def launch(kernel, blocks: int, threads: int, args, stream=None, max_registers=None, *,
           cooperative: bool = False) -> None:
    """Launch numba ``kernel`` on ``blocks`` x ``threads`` with ``args`` (CuPy arrays, ints, floats)
    on CuPy ``stream`` (default: the current stream); ``max_registers`` caps registers per thread (default:
    the kernel's own cap); ``cooperative``: a cooperative launch (the kernel syncs its grid; ``blocks``
    must not exceed :func:`max_cooperative_blocks`). NumPy arguments (the simulator) and
    ``KNNGRAPH_RAW_LAUNCH=0`` launch through numba."""
    if blocks <= 0:
        return
    if isinstance(kernel, LazyKernel) and (_is_host(args) or not _raw_enabled()):
        kernel = kernel.resolve()
    if _is_host(args):
        kernel[blocks, threads](*args)
        return
    import cupy as cp

    if not _raw_enabled():
        from numba import cuda

        s = stream if stream is not None else cp.cuda.get_current_stream()
        nb_stream = cuda.external_stream(s.ptr) if s.ptr else cuda.default_stream()
        nb_args = tuple(cuda.as_cuda_array(a) if isinstance(a, cp.ndarray) else a for a in args)
        with quiet_launches():
            kernel[blocks, threads, nb_stream](*nb_args)
        return
    fn, _ = _function_for(kernel, args, cp.cuda.Device().id, max_registers)
    if cooperative:
        flat: list = []
        for a in args:
            _flatten(a, flat)
        # a RawKernel passes the flag it was made with to its per-device function, which takes it per launch
        getattr(fn, "kernel", fn)((int(blocks),), (int(threads),), tuple(flat), stream=stream,
                                  enable_cooperative_groups=True)
        return
    _launch_packed(fn, blocks, threads, args, stream)


_U64 = (1 << 64) - 1


def _packed_values(args) -> list:
    """The flattened values of a launch's arguments (:func:`_flatten`'s order) as 64-bit patterns (Python
    ints): arrays as numba's data model, integers as int64, float32 scalars in the low half of their slot,
    other floats as float64. Plain launches (:func:`launch`) and :class:`PreparedLaunch` pack with it."""
    values: list = []
    nd = _cupy_array_type()
    for a in args:
        if type(a) is nd or (hasattr(a, "__cuda_array_interface__") and hasattr(a, "dtype")):
            # (a CuPy array by its type first: asking it for __cuda_array_interface__ builds a dict)
            values += (0, 0, a.size, a.itemsize, a.data.ptr)
            values += a.shape
            values += [s & _U64 for s in a.strides]  # a view's negative stride, as its two's complement
        elif isinstance(a, (int, np.integer)):
            values.append(int(a) & _U64)
        elif isinstance(a, np.float32):
            values.append(int(a.view(np.uint32)))
        else:
            values.append(int(np.float64(a).view(np.uint64)))
    return values


def _slot_pointers(values: np.ndarray) -> np.ndarray:
    """The array of pointers to each 8-byte slot of ``values`` that ``cuLaunchKernel`` reads."""
    return values.ctypes.data + 8 * np.arange(len(values), dtype=np.uint64)


def _launch_packed(fn, blocks: int, threads: int, args, stream) -> None:
    """``cuLaunchKernel`` with the arguments packed into one buffer of 8-byte slots and the array of
    pointers into it: the driver reads each parameter's own size from its slot (4 bytes of a float32 slot,
    little-endian), and copies them at the launch, so the buffers may go when this returns. CuPy's launch
    converted each of ~50-70 NumPy scalars on its own, a tenth of a millisecond per launch: the host time of
    a small search's three launches was a quarter of the search."""
    values = np.array(_packed_values(args), np.uint64)
    pointers = _slot_pointers(values)
    s = stream if stream is not None else _current_stream()
    _driver_launch()(_function_pointer(fn), int(blocks), 1, 1, int(threads), 1, 1, 0, s.ptr,
                     int(pointers.ctypes.data), 0)


def _current_stream():
    import cupy as cp

    return cp.cuda.get_current_stream()


@functools.lru_cache(maxsize=1)
def _driver_launch():
    from cupy_backends.cuda.api import driver

    return driver.launchKernel
