"""The one idiom for helpers written once and compiled for the CPU and the GPU (see the package docs).

* :func:`host_and_device` turns a plain Python function into a ``numba.njit`` dispatcher: CPU code calls
  it, and so may CUDA kernels (numba-cuda compiles a called ``njit`` function as a device function).
* :func:`device_function` is how every CUDA device helper is declared: compiled once per signature and
  inlined by NVVM (LLVM's ``alwaysinline``), not copied into each caller at numba's IR level.
* :func:`cuda_version` gives the same source compiled as a :func:`device_function`, for kernels that
  want the helper forced inline; a kernel module binds it once at import.
* :func:`threaded_and_serial` compiles a ``prange`` CPU kernel twice, with threads and without: a
  threaded call costs a thread wake-up (milliseconds on a busy machine), which dominates small inputs.

First run: every CPU kernel is compiled with ``cache=True`` (both builds of :func:`threaded_and_serial`
too), so numba compiles it once per machine and loads it from disk afterwards (``__pycache__`` next to
the source, or ``$NUMBA_CACHE_DIR``). When numba does compile one of knngraph's kernels (a cache miss),
knngraph says so once per process (:func:`notice`: the ``knngraph`` logger at INFO level when the program
shows logs, as the command line does, else a line on stderr): "compiling CPU kernels (first use on this
machine ...)"; :func:`compile_seconds` adds up the time spent (GPU kernels too), so that reported timings
can leave it out or say they include it.
"""

from __future__ import annotations

import logging
import threading
import time
import types

import numba
import numpy as np
from numba.core import event

__all__ = ["host_and_device", "device_function", "cuda_version", "threaded_and_serial", "SERIAL_BELOW",
           "compile_seconds", "jit_with_lineinfo", "writable_view"]

_log = logging.getLogger("knngraph")

_SAID: set = set()


def notice(message: str) -> None:
    """Say ``message`` once per process where the user sees it: as an INFO record of the ``knngraph``
    logger when the program shows its logs (a handler on it or on the root logger, e.g. the command
    line's), else as a WARNING record, which Python's last-resort handler writes to stderr when no logging
    is configured: a plain script shows no INFO records and would otherwise sit silent through minutes of
    compilation."""
    if message in _SAID:
        return
    _SAID.add(message)
    if _log.handlers or logging.getLogger().handlers:
        _log.info(message)
    else:
        _log.warning("knngraph: %s", message)


class _CompileWatch(event.Listener):
    """Listens to numba's ``numba:compile`` events (fired on cache misses only) of knngraph's functions:
    logs the first one, sums the seconds spent in the outermost ones."""

    def __init__(self):
        self.announced = False
        self.seconds = 0.0
        self._depth = threading.local()

    @staticmethod
    def _ours(ev) -> bool:
        fn = getattr((ev.data or {}).get("dispatcher"), "py_func", None)
        return (getattr(fn, "__module__", None) or "").startswith("knngraph")

    def on_start(self, ev):
        if not self._ours(ev):
            return
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            self._depth.t0 = time.perf_counter()
            if not self.announced:
                self.announced = True
                notice("compiling CPU kernels (first use on this machine; numba keeps them on disk)")
        self._depth.n = depth + 1

    def on_end(self, ev):
        if not self._ours(ev) or getattr(self._depth, "n", 0) == 0:
            return
        self._depth.n -= 1
        if self._depth.n == 0:
            self.seconds += time.perf_counter() - self._depth.t0


_WATCH = _CompileWatch()
event.register("numba:compile", _WATCH)


def compile_seconds() -> float:
    """Seconds this process has spent compiling knngraph's kernels, CPU and GPU (0 when all came from the
    disk caches); the difference over a timed call is the compilation inside it."""
    import sys

    gpu = sys.modules.get("knngraph._cuda_launch")
    return _WATCH.seconds + (gpu.compile_seconds() if gpu is not None else 0.0)

#: rows of work below which :func:`threaded_and_serial` kernels run their serial build
SERIAL_BELOW = 8192


class _ArrayInterface:
    """An ``__array_interface__`` holder that keeps the array it describes alive."""

    def __init__(self, interface: dict, owner):
        self.__array_interface__ = interface
        self.owner = owner


def writable_view(x):
    """``x`` as CPU kernels take it: a read-only NumPy array (a memory-mapped file, ``np.load(...,
    mmap_mode='r')``) as a view of the same memory flagged writable, any other array as it is.

    numba compiles a kernel per argument type and a read-only array is a type of its own, so without this
    every kernel that reads the vectors would be compiled (and cached) twice, once per kind of input. The
    kernels never write their input vectors (a write through the view would fault on a read-only mapping);
    the view is for passing to them only, never handed back to the caller."""
    if not isinstance(x, np.ndarray) or x.flags.writeable:
        return x
    interface = dict(x.__array_interface__)
    interface["data"] = (interface["data"][0], False)
    return np.asarray(_ArrayInterface(interface, x))


_CUDA_VERSIONS: dict = {}


#: numba IR statements (of its own body) up to which a :func:`host_and_device` helper is inlined into CPU
#: callers too (see :func:`_inline_cost_model`)
CPU_INLINE_STATEMENTS = 60


def _inline_cost_model(expr, caller_ir, callee_ir) -> bool:
    """numba's inline cost model of :func:`host_and_device` helpers: inline at numba's IR level into the
    kernels of numba-cuda's compiler (its IR classes live in ``numba.cuda.core``), as ``inline="always"``
    does, so GPU kernels that call a helper directly keep their code (``scripts/kernel_ptx.py``: the same
    PTX); into CPU callers (numba's own compiler, ``numba.core``) only helpers of at most
    :data:`CPU_INLINE_STATEMENTS` statements, larger ones are called (compiled once).

    IR-level inlining copies a helper's IR, nested helpers included, into every call site before typing,
    and into the body of every ``prange`` loop, where numba's parfor passes (copy propagation, gufunc
    creation) grow faster than the body: a profile of GGNN's CPU build found 78 of 110 s in
    ``parfor.get_copies_parfor``. Measured on a 2-core machine (process CPU seconds, one thread): GGNN's
    CPU build and search on 600 rows compiled in 37 s with every helper inlined, 21 s at this threshold
    and 19 s with none, and a build of 5,000 rows then took 5.38 / 5.37 / 5.82 s (the small helpers,
    comparisons, distance finishes and stopping bounds, sit in hot loops where a call costs); NN-Descent,
    graph preparation, SONG's searchers, GRNND and GGNN together compiled in 90 instead of 123 s and ran
    within 5% of the inlined builds (NN-Descent 20k, SONG's walk and GGNN's build the same or up to 5%
    slower, the rest the same)."""
    if not type(caller_ir).__module__.startswith("numba.core."):
        return True
    return sum(len(block.body) for block in callee_ir.blocks.values()) <= CPU_INLINE_STATEMENTS


def host_and_device(fn=None, *, inline: bool = True, cache: bool = False):
    """Decorator: ``numba.njit`` the function and remember its source for :func:`cuda_version`. Use as
    ``@host_and_device`` or ``@host_and_device(inline=False)``. With ``inline`` (the default) its IR is
    inlined into CUDA kernels that call it, and into CPU callers when it is small
    (:func:`_inline_cost_model`); with ``inline=False`` never (``inline="never"``). The function must call
    only other ``host_and_device`` helpers (or numba built-ins)."""

    def wrap(f):
        dispatcher = numba.njit(inline=_inline_cost_model if inline else "never", cache=cache)(f)
        dispatcher.__knngraph_source__ = f
        return dispatcher

    return wrap(fn) if fn is not None else wrap


def device_function(fn):
    """Decorator: ``cuda.jit(device=True, forceinline=True)``, a CUDA device function that numba types and
    lowers once per signature and NVVM inlines into every caller (the simulator's ``cuda.jit`` takes no
    ``forceinline`` and gets a plain device function).

    Not ``inline=True``: that is numba's IR-level inlining (``inline="always"``), which copies the callee's
    untyped IR into every call site, nested helpers included, before typing. The fast searcher's kernels
    spent most of their compile time there (a profile of ``cuda.compile_ptx``: 97 of 112 s in
    ``inline_closurecall.copy_ir``), about a minute per queue capacity and search width on the GPU machine.
    NVVM inlines ``alwaysinline`` functions, so the code stays what it was: ``scripts/kernel_ptx.py`` found
    the same spills and registers within 2 for every kernel but one (SONG's, +8 at the same occupancy)."""
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)


def cuda_version(helper):
    """The CUDA :func:`device_function` of a :func:`host_and_device` helper, compiled from the same Python
    source; cached. Imports numba.cuda: call it from kernel modules only."""
    source = getattr(helper, "__knngraph_source__", None)
    if source is None:
        raise TypeError(f"{helper!r} is not a host_and_device helper")
    if source not in _CUDA_VERSIONS:
        _CUDA_VERSIONS[source] = device_function(source)
    return _CUDA_VERSIONS[source]


def threaded_and_serial(fn, *, fastmath: bool = False):
    """(threaded, serial) ``numba.njit`` builds of one ``prange`` kernel; pick with :func:`pick`."""
    threaded = numba.njit(parallel=True, fastmath=fastmath, cache=True)(fn)
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__,
                              fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_serial"
    twin.__doc__ = fn.__doc__
    serial = numba.njit(parallel=False, fastmath=fastmath, cache=True)(twin)
    return threaded, serial


def pick(builds, rows: int):
    """The threaded build of a :func:`threaded_and_serial` pair for at least ``SERIAL_BELOW`` rows of
    work, else the serial one."""
    return builds[0] if rows >= SERIAL_BELOW else builds[1]


def jit_with_lineinfo() -> None:
    """For profilers and sanitizers: every later ``numba.cuda.jit`` compiles with ``lineinfo=True``, so that
    their reports name source lines (call it before knngraph's kernels are compiled; imports numba.cuda)."""
    from numba import cuda

    jit = cuda.jit
    if getattr(jit, "__knngraph_lineinfo__", False):
        return

    def with_lineinfo(*args, **kwargs):
        kwargs.setdefault("lineinfo", True)
        return jit(*args, **kwargs)

    with_lineinfo.__knngraph_lineinfo__ = True
    cuda.jit = with_lineinfo

