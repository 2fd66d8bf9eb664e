"""The one idiom for helpers written once and compiled for the CPU and the GPU (see the package docs).

* :func:`host_and_device` turns a plain Python function into a ``numba.njit`` dispatcher: CPU code calls
  it, and so may CUDA kernels (numba-cuda compiles a called ``njit`` function as a device function).
* :func:`device_function` is how every CUDA device helper is declared: compiled once per signature and
  inlined by NVVM (LLVM's ``alwaysinline``), not copied into each caller at numba's IR level.
* :func:`cuda_version` gives the same source compiled as a :func:`device_function`, for kernels that
  want the helper forced inline; a kernel module binds it once at import.
* :func:`threaded_and_serial` gives a ``prange`` CPU kernel a threaded and a serial form: a threaded
  call costs a thread wake-up (milliseconds on a busy machine), which dominates small inputs. Both are
  one compiled kernel where the kernel's form allows (its loop split into parts that Python threads run
  at once), else numba's threaded build and a serial twin; :class:`SplitKernel` is the explicit form, a
  kernel written over an item range [lo, hi).

First run: every CPU kernel is compiled with ``cache=True``, so numba compiles it once per machine and
loads it from disk afterwards (``__pycache__`` next to the source, or ``$NUMBA_CACHE_DIR``). When numba
does compile one of knngraph's kernels (a cache miss), knngraph says so once per process
(:func:`knngraph._compiling.notice`: the ``knngraph`` logger at INFO level when the program shows logs, as
the command line does, else a line on stderr): "compiling CPU kernels (first use on this machine ...)";
:func:`knngraph._compiling.compile_seconds` adds up the time spent (GPU kernels too), so that reported
timings can leave it out or say they include it.
"""

from __future__ import annotations

import threading
import time
import types

import numba
from numba.core import event

from .. import _compiling

__all__ = ["host_and_device", "device_function", "cuda_version", "threaded_and_serial", "SplitKernel",
           "SERIAL_BELOW", "jit_with_lineinfo"]


class _CompileWatch(event.Listener):
    """Listens to numba's ``numba:compile`` events (fired on cache misses only) of knngraph's functions:
    logs the first one, sums the seconds spent in the outermost ones."""

    def __init__(self):
        self.announced = False
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
                _compiling.notice("compiling CPU kernels (first use on this machine; numba keeps them on disk)")
        self._depth.n = depth + 1

    def on_end(self, ev):
        if not self._ours(ev) or getattr(self._depth, "n", 0) == 0:
            return
        self._depth.n -= 1
        if self._depth.n == 0:
            _compiling.add_cpu_compile_seconds(time.perf_counter() - self._depth.t0)


_WATCH = _CompileWatch()
event.register("numba:compile", _WATCH)


#: rows of work below which :func:`threaded_and_serial` kernels run their serial build
SERIAL_BELOW = 8192


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
    """(threaded, serial) builds of one ``prange`` kernel; pick with :func:`pick`.

    A kernel of the form ``[docstring] [statements that bind local names] for v in prange(N): body``
    (the loop its last statement, no value returned) is compiled once, serial and ``nogil``, as a kernel
    of parts (:func:`_parts_kernel`: part p of P does the p-th of P equal ranges of ``range(N)``, as
    numba's static schedule hands them out); the threaded callable runs :data:`PARTS_PER_THREAD` parts
    per thread of ``numba.get_num_threads()`` on that many threads at once (the calling thread and a pool
    of Python threads, each taking the next part when done: the kernel releases the GIL), the serial one
    runs one part, the whole range, in the calling thread. Every other kernel gets numba's threaded build
    (``parallel=True``) and a serial twin. Why: numba's parallel build of a kernel costs 4-5 times its
    serial build to compile (see :class:`SplitKernel`), and both were compiled per argument type."""
    parts = _parts_kernel(fn)
    if parts is not None:
        dispatcher = numba.njit(nogil=True, fastmath=fastmath, cache=True)(parts)
        return _Parts(dispatcher, threaded=True), _Parts(dispatcher, threaded=False)
    threaded = numba.njit(parallel=True, fastmath=fastmath, cache=True)(fn)
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__,
                              fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_serial"
    twin.__doc__ = fn.__doc__
    serial = numba.njit(parallel=False, fastmath=fastmath, cache=True)(twin)
    return threaded, serial


_PART_NAMES = ("_part_", "_parts_", "_n_")


def _parts_kernel(fn):
    """``fn`` rewritten as a kernel of parts, ``fn_parts(_part_, _parts_, *args)``, whose ``prange(N)``
    loop does ``range(N * _part_ // _parts_, N * (_part_ + 1) // _parts_)``; None when ``fn`` is not of
    the form :func:`threaded_and_serial` splits (its source unavailable, a closure, statements before the
    loop that do more than bind local names, anything after it, another ``prange``). The statements
    before the loop run in every part: binding local names only, they are the same in each."""
    import ast
    import inspect
    import textwrap

    if fn.__closure__ or fn.__defaults__:
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn)
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef) or fdef.decorator_list or fdef.args.vararg or fdef.args.kwarg:
        return None
    body = list(fdef.body)
    head = body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else []
    if not body[len(head):]:
        return None
    *pre, loop = body[len(head):]

    def binds_names(target):
        return isinstance(target, ast.Name) or (isinstance(target, ast.Tuple)
                                                and all(isinstance(e, ast.Name) for e in target.elts))

    if not (isinstance(loop, ast.For) and not loop.orelse and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "prange"
            and len(loop.iter.args) == 1 and not loop.iter.keywords):
        return None
    if not all(isinstance(st, ast.Assign) and all(binds_names(t) for t in st.targets) for st in pre):
        return None
    names = [node.id for node in ast.walk(fdef) if isinstance(node, ast.Name)]
    if names.count("prange") != 1 or any(n in names for n in _PART_NAMES):
        return None
    if any(isinstance(node, (ast.Return, ast.Yield, ast.Global, ast.Nonlocal)) for node in ast.walk(fdef)):
        return None
    count = ast.Assign(targets=[ast.Name("_n_", ast.Store())], value=loop.iter.args[0])
    loop.iter = ast.parse("range(_n_ * _part_ // _parts_, _n_ * (_part_ + 1) // _parts_)", mode="eval").body
    fdef.body = head + pre + [count, loop]
    fdef.args.args[0:0] = [ast.arg("_part_"), ast.arg("_parts_")]
    fdef.name = fn.__name__ + "_parts"
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, first - 1)
    namespace: dict = {}
    exec(compile(tree, path, "exec"), fn.__globals__, namespace)  # noqa: S102 - the kernel's own source
    parts = namespace[fdef.name]
    parts.__qualname__ = fn.__qualname__ + "_parts"
    parts.__module__ = fn.__module__
    parts.__doc__ = fn.__doc__
    return parts


#: parts per thread of a threaded :func:`threaded_and_serial` call, which threads take one at a time as they
#: finish the last: uneven items (the searchers' workers, whose queries differ in cost, had numba's chunk
#: size 1) are shared out as they run
PARTS_PER_THREAD = 4


class _Parts:
    """A :func:`threaded_and_serial` kernel of parts, threaded (:data:`PARTS_PER_THREAD` parts per thread of
    ``numba.get_num_threads()``, taken in turn by that many threads) or serial (one part, the whole range,
    in the calling thread); attribute access falls through to the numba dispatcher."""

    def __init__(self, dispatcher, *, threaded: bool):
        self.dispatcher = dispatcher
        self.threaded = threaded

    def __getattr__(self, name):
        return getattr(self.__dict__["dispatcher"], name)

    def __call__(self, *args):
        threads = max(1, numba.get_num_threads()) if self.threaded else 1
        if threads == 1:
            self.dispatcher(0, 1, *args)
            return
        parts = threads * PARTS_PER_THREAD
        kernel = self.dispatcher
        _run_in_turn(lambda p: kernel(p, parts, *args), parts, threads)


def pick(builds, rows: int):
    """The threaded build of a :func:`threaded_and_serial` pair for at least ``SERIAL_BELOW`` rows of
    work, else the serial one."""
    return builds[0] if rows >= SERIAL_BELOW else builds[1]


class SplitKernel:
    """A CPU kernel over a range of items, compiled once (serial, ``nogil``) and run threaded by splitting
    the range: the kernel is written as ``fn(lo, hi, *args)`` doing items [lo, hi) (the body of what
    would be a ``prange`` loop), and :meth:`run` calls it on the whole range below ``SERIAL_BELOW`` rows
    of work, else on :data:`PARTS_PER_THREAD` equal parts per thread of ``numba.get_num_threads()``,
    which that many threads (the calling thread and a pool of Python threads; the kernel releases the
    GIL) take in turn: items of uneven cost (GGNN's queries, graph searches) are shared out as they run.

    Why not ``parallel=True``: numba's parfor lowering builds the loop body into a gufunc whose LLVM code
    is optimised and emitted again in each library that links it (the gufunc, its wrapper, the outer
    function), so a threaded build cost 4-5 times its serial twin to compile (NN-Descent's local join:
    6.1 against 1.15 CPU seconds; graph pruning 5.2 against 1.3) and :func:`threaded_and_serial` compiled
    both. One serial build per argument type serves both sizes here. Items must be independent (each
    writes only its own outputs) and a part's return value, if any, is combined by ``combine`` (a
    function of the list of parts' values, in item order).

    Attribute access falls through to the numba dispatcher (``signatures``, ``py_func``, its cache)."""

    def __init__(self, fn, *, fastmath: bool = False, combine=None):
        self.dispatcher = numba.njit(nogil=True, fastmath=fastmath, cache=True)(fn)
        self.combine = combine
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __getattr__(self, name):
        return getattr(self.__dict__["dispatcher"], name)

    def run(self, rows: int, items: int, *args):
        """The kernel on items [0, ``items``), split over threads when ``rows`` (of work) is at least
        ``SERIAL_BELOW``; returns ``combine`` of the parts' values (or the one part's value)."""
        items = int(items)
        threads = min(max(1, numba.get_num_threads()), items) if rows >= SERIAL_BELOW else 1
        if threads <= 1:
            out = [self.dispatcher(0, items, *args)]
            return self.combine(out) if self.combine is not None else out[0]
        parts = min(items, threads * PARTS_PER_THREAD)
        bounds = [items * i // parts for i in range(parts + 1)]
        out = [None] * parts
        kernel = self.dispatcher

        def part(p):
            out[p] = kernel(bounds[p], bounds[p + 1], *args)

        _run_in_turn(part, parts, threads)
        return self.combine(out) if self.combine is not None else out[0]


def _run_in_turn(part, parts: int, threads: int) -> None:
    """``part(p)`` for every p in range(``parts``), on ``threads`` threads at once (the calling thread and
    the pool's), each taking the next part as it finishes one (the kernels release the GIL)."""
    turn = iter(range(parts))  # next() on it is atomic under the GIL

    def runner():
        for p in turn:
            part(p)

    futures = [_thread_pool().submit(runner) for _ in range(threads - 1)]
    try:
        runner()
    finally:
        for f in futures:
            f.result()


_POOL: list = []
_POOL_LOCK = threading.Lock()


def _thread_pool():
    """The threads that run :class:`SplitKernel` parts (as many as numba's most threads, less the caller's)."""
    if not _POOL:
        with _POOL_LOCK:
            if not _POOL:
                from concurrent.futures import ThreadPoolExecutor

                _POOL.append(ThreadPoolExecutor(max(1, numba.config.NUMBA_NUM_THREADS - 1),
                                                thread_name_prefix="knngraph-cpu"))
    return _POOL[0]


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

