"""Compile every kernel ahead of first use: :func:`warmup` (the command ``knngraph warmup``).

A new process answers at once only when the kernels it runs are compiled already. Both kinds are kept on
disk after their first use: numba's CPU kernels in numba's cache (``__pycache__`` next to the sources, or
``$NUMBA_CACHE_DIR``), GPU kernels as machine code in ``~/.cache/knngraph/kernels`` (``$KNNGRAPH_CACHE_DIR``,
:mod:`knngraph._cuda_launch`). :func:`warmup` fills both ahead of time: it runs every family of the library
on small inputs of each vector dtype and metric asked for, so that each kernel variant those reach is
compiled (or found compiled) once:

* ``exact``: :func:`knngraph.knn` (k = 10 and 100, a few queries and a batch) and :func:`knngraph.knn_graph`;
* ``nndescent``: ``knn_graph(method='nndescent')`` at the graph degrees of :data:`GRAPH_DEGREES`;
* ``grnnd``: :func:`knngraph.grnnd.build`;
* ``ggnn``: :func:`knngraph.ggnn.build` (on the CPU without refinement passes, which run the build's
  kernels again) and its search with both caches ('sorted' and 'rings');
* ``song``: graph preparation (:func:`knngraph.optimize_graph` of k-NN graphs of several degrees, SONG's
  default index), :func:`knngraph.song.search` with its defaults (the fast searcher) at the queue sizes of
  :data:`QUEUE_SIZES` and the batch sizes that give every automatic search width (on the CPU also its walk
  over int8 codes, ``cpu_walk='int8'``), and SONG's walk for filtered searches (:data:`FILTER_FRACTIONS`).

GPU kernels are specialised at compile time on the vectors' dtype and a few values (list and queue
capacities from ``k`` and ``queue_size``, the search width, the distance kind; the searchers' on the
vectors' dimension too: ``dims``). CPU kernels are compiled per argument type only, so the CPU runs one
k and queue size, on vectors of :data:`CPU_DIM` dimensions, and small inputs only: a threaded call runs
the same compiled kernel as a serial one, in parts (:func:`~knngraph.primitives.compile.threaded_and_serial`,
:class:`~knngraph.primitives.compile.SplitKernel`), so nothing needs more than
:data:`~knngraph.primitives.compile.SERIAL_BELOW` rows (the searchers still run one query and a batch).
Metrics run one per distance kind ('euclidean' runs the kernels of 'sqeuclidean'). Each family also runs
on a memory-mapped read-only ``.npy`` file: CPU kernels take a read-only array as a writable view of it
(:func:`~knngraph.primitives.cpu_inputs.writable_view`), so this compiles nothing new where they do.

Tasks (a family for a dtype) run in worker processes (``python -m knngraph._warmup worker``), one per
core (at most :data:`MAX_PROCESSES`); a family's first task runs alone, so that its kernels that do not
depend on the dtype are compiled once (numba compiles one function at a time on one core), then its other
tasks may run side by side (:func:`_run_in_processes`). numba's disk
cache is not made for processes that add signatures of one function at the same moment (each rewrites
the function's index, so one signature can be lost or point at the other's code), so the workers take a
file lock around those writes (:func:`lock_numba_cache_writes`); where that lock is not available one
process runs everything.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from .metrics import METRICS

__all__ = ["warmup", "FAMILIES", "DTYPES", "METRICS", "GRAPH_DEGREES", "QUEUE_SIZES", "FILTER_FRACTIONS",
           "MAX_PROCESSES", "can_lock", "lock_numba_cache_writes", "numba_cache_lock_path"]

_log = logging.getLogger("knngraph")

#: the kernel families, in the order their tasks are handed out (the longest first)
FAMILIES = ("ggnn", "nndescent", "song", "grnnd", "exact")
DTYPES = ("float32", "float16", "uint8", "int8")
#: graph degrees (k) of the k-NN graphs built: GPU kernels are specialised on k rounded up to a capacity
#: (NN-Descent's sample size is min(k, 32)), CPU kernels are not
GRAPH_DEGREES = (10, 16, 32, 64)
#: k of the exact searches (list capacities 32 and 128 of the GPU's selection)
SEARCH_KS = (10, 100)
#: queue sizes of the graph searches: the fast searcher compiles one kernel per power-of-two capacity
QUEUE_SIZES = (32, 64, 128)
#: shares of allowed ids of the filtered walks: SONG's queue grows to 2 k / share (capacities 64 to 512)
FILTER_FRACTIONS = (0.5, 0.2, 0.1, 0.04)
#: the most worker processes (each holds a CUDA context on a GPU)
MAX_PROCESSES = 8
#: rows of the CPU's small inputs
SMALL_ROWS = 1200
#: rows of GGNN's CPU inputs: its build makes the same kernel calls (every layer, every step) on 300, 600
#: and 1,200 rows, and its hierarchical queries made it the longest task (a warm run of a task of 1,200
#: rows took 12 s, 7 of them the build with inner products; of 300 rows about 3 s)
GGNN_CPU_ROWS = 300
#: rows of the GPU's inputs (the bundled sample's size)
GPU_ROWS = 20_000
#: dimension of the CPU's inputs (CPU kernels are not specialised on it; smaller runs faster)
CPU_DIM = 32


def warmup(device: str = "auto", dtypes: Sequence[str] = DTYPES, metrics: Sequence[str] = METRICS, *,
           dims: Sequence[int] = (128,), processes: int = 0, verbose: bool = True) -> dict[str, Any]:
    """Compile (or find compiled on disk) every kernel variant the library's defaults and common
    parameters reach, for ``device``, so that later processes start answering at once.

    Parameters
    ----------
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        The GPU's kernels (machine code for its compute capability) or numba's CPU kernels.
    dtypes : sequence of {'float32', 'float16', 'uint8', 'int8'}, default=all four
        Vector dtypes to compile for.
    metrics : sequence of {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default=all four
    dims : sequence of int, default=(128,)
        GPU only: vector dimensions of the graph searchers' kernels (the fast searcher and SONG's walk are
        compiled per dimension; the other kernels are not).
    processes : int, default=0
        Worker processes; 0: one per core, at most :data:`MAX_PROCESSES` and one per task.
    verbose : bool, default=True
        A progress bar (on a terminal) of the tasks done.

    Returns
    -------
    dict
        ``device``, ``dtypes``, ``metrics``, ``dims``, ``tasks`` (family x dtype runs), ``processes``,
        ``seconds`` (wall time), ``compile_seconds`` (summed over the processes: 0 when everything was
        compiled already) and ``kernels_compiled`` (GPU kernels built, not loaded from the cache).

    Raises
    ------
    RuntimeError
        When a task failed (the message names it and its error).

    Examples
    --------
    >>> import knngraph
    >>> knngraph.warmup(device="cpu", dtypes=["uint8"], metrics=["sqeuclidean"], verbose=False)  # doctest: +SKIP
    """
    from ._device import resolve_device
    from ._progress import progress
    from ._validate import check_int

    dtypes = _names(dtypes, DTYPES, "dtypes")
    metrics = _names(metrics, METRICS, "metrics")
    if isinstance(dims, (int, np.integer)) or not hasattr(dims, "__iter__"):
        raise TypeError(f"dims must be a sequence of vector dimensions, got {dims!r}")
    dims = list(dict.fromkeys(check_int(d, "dims", low=1) for d in dims))
    if not dims:
        raise ValueError("dims is empty; give at least one vector dimension")
    processes = check_int(processes, "processes", low=0)
    if not isinstance(verbose, (bool, np.bool_)):
        raise TypeError(f"verbose must be True or False, got {verbose!r}")
    dev = resolve_device(device)
    where = f"cuda:{dev.index}" if dev.is_cuda else "cpu"
    tasks = [{"family": f, "dtype": t, "metrics": _one_per_kind(metrics), "dims": dims, "device": where}
             for t in dtypes for f in FAMILIES]
    tasks = _schedule(tasks)
    n_proc = min(processes or min(os.cpu_count() or 1, MAX_PROCESSES), len(tasks))
    if n_proc > 1 and not can_lock():
        n_proc = 1
    t0 = time.perf_counter()
    with progress(len(tasks), f"warm-up ({where})", disable=not verbose, min_steps=1) as bar:
        results = _run_in_processes(tasks, n_proc, bar) if n_proc > 1 else _run_here(tasks, bar)
    failed = [r for r in results if r.get("error")]
    summary = {"device": where, "dtypes": dtypes, "metrics": metrics, "dims": dims, "tasks": len(tasks),
               "processes": n_proc, "seconds": time.perf_counter() - t0,
               "compile_seconds": sum(r.get("compile_seconds", 0.0) for r in results),
               "kernels_compiled": sum(r.get("kernels_compiled", 0) for r in results)}
    if failed:
        first = failed[0]
        raise RuntimeError(f"warm-up failed in {len(failed)} of {len(tasks)} tasks, first {first['family']} "
                           f"{first['dtype']}: {first['error']}")
    return summary


def _names(values, allowed, name: str) -> list:
    if isinstance(values, str) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of names from {', '.join(allowed)}, got {values!r}")
    out = []
    for v in values:
        v = np.dtype(v).name if name == "dtypes" and not isinstance(v, str) else v
        if v not in allowed:
            raise ValueError(f"{name}: unknown {name[:-1]} {v!r}; choose from {', '.join(allowed)}")
        out.append(v)
    if not out:
        raise ValueError(f"{name} is empty; give at least one of {', '.join(allowed)}")
    return list(dict.fromkeys(out))


def _one_per_kind(metrics: list) -> list:
    """One metric of each internal distance kind among ``metrics``: 'euclidean' runs the kernels of
    'sqeuclidean' (it takes the root of the reported distances only), so one of the two is enough."""
    from .primitives.distances import distance_kind

    first: dict = {}
    for m in metrics:
        first.setdefault(distance_kind(m), m)
    return list(first.values())


def _schedule(tasks: list) -> list:
    """Tasks in the order they are handed out: float32 before float16 (the CPU widens float16 to float32,
    whose kernels it then finds compiled), the longest families first."""
    rank = {t: i for i, t in enumerate(("float32", "uint8", "int8", "float16"))}
    return sorted(tasks, key=lambda t: (rank[t["dtype"]] if t["device"] == "cpu" else 0,
                                        FAMILIES.index(t["family"])))


# --------------------------------------------------------------------------------------------------
# running tasks: here, or in worker processes


def _run_here(tasks, bar) -> list:
    out = []
    for task in tasks:
        out.append(run_task(task))
        bar.update(1)
    return out


#: kernels that several families run for the same vector dtype: GGNN's search with the 'sorted' cache is
#: the fast searcher that SONG's search runs, and SONG's index starts from an NN-Descent graph (two workers
#: running such tasks at once both compiled those kernels, 4-7 s each)
_SHARING = {"ggnn": ("fast searcher",), "song": ("fast searcher", "nn-descent"), "nndescent": ("nn-descent",)}


def _busy(task, finished: set) -> set:
    """What a running task holds: its family until a task of that family has finished (its kernels that do
    not depend on the dtype are compiled then), and its dtype's kernels shared with other families."""
    held = {task["family"]} if task["family"] not in finished else set()
    return held | {(shared, task["dtype"]) for shared in _SHARING.get(task["family"], ())}


def _run_in_processes(tasks, n_proc: int, bar) -> list:
    """Hand ``tasks`` to ``n_proc`` workers, each the next task (in order) that no running task blocks
    (:func:`_busy`): the first task of a family runs alone, so that its kernels that do not depend on the
    dtype are compiled once, not by two workers at once; after it, tasks of that family for other dtypes
    run side by side (GGNN's were the longest chain: run one at a time, they kept one worker busy while
    the other had nothing left). Returns the results in the order the tasks finished."""
    pending = list(tasks)
    results = []
    running: dict = {}  # id of each running task -> what it holds
    finished: set = set()  # families with a finished task
    turn = threading.Condition()
    env = dict(os.environ, NUMBA_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // n_proc)))

    def blocked(task) -> bool:
        mine = _busy(task, finished) | {task["family"]}
        return any(mine & held for held in running.values())

    def next_task():
        with turn:
            while True:
                task = next((t for t in pending if not blocked(t)), None)
                if task is not None or not pending:
                    break
                turn.wait()
            if task is not None:
                pending.remove(task)
                running[id(task)] = _busy(task, finished)
            return task

    def done(task, result):
        with turn:
            results.append(result)
            del running[id(task)]
            finished.add(task["family"])
            bar.update(1)
            turn.notify_all()

    def serve():
        with subprocess.Popen([sys.executable, "-m", "knngraph._warmup", "worker"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True) as worker:
            while (task := next_task()) is not None:
                try:
                    worker.stdin.write(json.dumps(task) + "\n")
                    worker.stdin.flush()
                    line = worker.stdout.readline()
                except OSError:  # the worker is gone
                    line = ""
                done(task, json.loads(line) if line else dict(task, error=f"the worker process ended (exit code "
                                                                            f"{worker.poll()})"))
                if not line:
                    break
            # leaving the block closes the worker's input (it then ends) and waits for it

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(n_proc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results += [dict(t, error="not run (every worker process ended)") for t in pending]
    return results


def can_lock() -> bool:
    """Whether worker processes can serialise their writes to numba's disk cache (POSIX file locks and
    numba's cache file class as this module knows it)."""
    try:
        import fcntl  # noqa: F401
        from numba.core import caching
    except ImportError:
        return False
    return callable(getattr(getattr(caching, "IndexDataCacheFile", None), "save", None))


def numba_cache_lock_path() -> str:
    """The file knngraph's compiling processes lock around their writes to numba's disk cache (one per
    user, in the temporary folder)."""
    user = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"knngraph-numba-cache-{user}.lock")


def lock_numba_cache_writes(lock_path: str | None = None) -> None:
    """Make this process hold an exclusive lock on the file ``lock_path`` (default:
    :func:`numba_cache_lock_path`) while it adds an entry to numba's disk cache (reading the function's
    index, adding the signature, writing index and code): processes compiling different signatures of one
    function at once then never overwrite each other's entries. Needs :func:`can_lock`."""
    import fcntl

    from numba.core import caching

    lock_path = lock_path or numba_cache_lock_path()
    save = caching.IndexDataCacheFile.save
    if getattr(save, "__knngraph_locked__", False):
        return

    def locked_save(self, key, data):
        with open(lock_path, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                return save(self, key, data)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    locked_save.__knngraph_locked__ = True
    caching.IndexDataCacheFile.save = locked_save


def _worker() -> None:
    """A worker process: run each task read from stdin (one JSON line), answer with one JSON line."""
    if can_lock():
        lock_numba_cache_writes()
    for line in sys.stdin:
        if line.strip():
            result = run_task(json.loads(line))
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()


def run_task(task: dict) -> dict:
    """Run one family for one dtype (every metric of the task); returns the task with its ``seconds``
    (wall), ``cpu_seconds`` (this process's), ``compile_seconds``, ``kernels_compiled`` and ``error`` (None,
    or the exception's text)."""
    from ._compiling import compile_seconds

    gpu = sys.modules.get("knngraph._cuda_launch")
    built_before = gpu.kernels_compiled() if gpu is not None else 0
    compiled_before = compile_seconds()
    t0, cpu0 = time.perf_counter(), time.process_time()
    error = None
    try:
        _FAMILY_RUNS[task["family"]](_Inputs(task))
    except Exception as exc:  # noqa: BLE001 - reported to the caller, which raises
        error = f"{type(exc).__name__}: {exc}"
        _log.debug("warm-up task %s failed:\n%s", task, traceback.format_exc())
    gpu = sys.modules.get("knngraph._cuda_launch")
    built = (gpu.kernels_compiled() if gpu is not None else 0) - built_before
    return dict(task, seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - cpu0,
                compile_seconds=compile_seconds() - compiled_before, kernels_compiled=built, error=error)


# --------------------------------------------------------------------------------------------------
# the families


class _Inputs:
    """The vectors and queries of one task: rows of the bundled sample (tiled to each dimension asked for)
    in the task's dtype.

    On the GPU: :data:`GPU_ROWS` rows of every dimension of the task, every metric. On the CPU, whose
    kernels are specialised on argument types only: :data:`SMALL_ROWS` rows (or another number) with every
    metric, and the same rows memory-mapped read-only with one metric."""

    def __init__(self, task: dict):
        from ._device import sm_count

        self.device = task["device"]
        self.dtype = np.dtype(task["dtype"])
        self.metrics = list(task["metrics"])
        self.on_gpu = self.device != "cpu"
        self.dims = list(task["dims"])
        self.sm = sm_count(int(self.device.split(":")[1])) if self.on_gpu else 1
        self._tmp = None

    def vectors(self, n: int, dim: int, rows_from: int = 0) -> np.ndarray:
        from .datasets import load_sample

        s = load_sample()
        pool = np.concatenate([s.base, s.queries])
        rows = pool[np.arange(rows_from, rows_from + n) % pool.shape[0]]
        x = np.tile(rows, (1, -(-dim // rows.shape[1])))[:, :dim]
        if self.dtype == np.int8:
            return (x.astype(np.int16) - 128).astype(np.int8)
        return np.ascontiguousarray(x.astype(self.dtype))

    def _read_only(self, x: np.ndarray) -> np.ndarray:
        """``x`` as a read-only memory map of a ``.npy`` file."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="knngraph-warmup-")
        path = os.path.join(self._tmp.name, f"x{len(os.listdir(self._tmp.name))}.npy")
        np.save(path, x)
        return np.load(path, mmap_mode="r")

    def runs(self, rows: int = SMALL_ROWS):
        """(base, queries, metrics) of each run of the task (see the class docs); ``rows``: of the CPU's
        small inputs."""
        if self.on_gpu:
            for dim in self.dims:
                yield self.vectors(GPU_ROWS, dim), self.vectors(1000, dim, rows_from=GPU_ROWS), self.metrics
            return
        base, queries = self.vectors(rows, CPU_DIM), self.vectors(200, CPU_DIM, rows_from=rows)
        yield base, queries, self.metrics
        yield self._read_only(base), self._read_only(queries), self.metrics[:1]

    def query_batches(self, queries, queue_size: int) -> list:
        """Batches of ``queries`` whose sizes give every automatic search width of the GPU's fast searcher;
        on the CPU one query and a batch (the searchers' serial and threaded paths)."""
        if not self.on_gpu:
            return [queries[:1], queries[:50]]
        from .beam.cuda import search_width

        batches, widths = [], set()
        for nq in (1, 2 * self.sm, 4 * self.sm + 1, 8 * self.sm + 1, 16 * self.sm + 1):
            w = search_width(nq, self.sm, 0, queue_size)
            if w not in widths:
                widths.add(w)
                batches.append(np.resize(queries, (nq, queries.shape[1])))
        return batches

    def some(self, values: tuple) -> tuple:
        """``values`` (k, queue sizes, ...) on the GPU, whose kernels are specialised on them; the first on
        the CPU, whose kernels are not."""
        return values if self.on_gpu else values[:1]


def _exact(inp: _Inputs) -> None:
    from ._api import knn, knn_graph

    for base, queries, metrics in inp.runs():
        for metric in metrics:
            for k in inp.some(SEARCH_KS):
                for nq in (2, 200):  # a few queries take their own path on the CPU
                    knn(base, queries[:nq], k, metric=metric, device=inp.device, verbose=False)
            for k in inp.some(GRAPH_DEGREES):
                knn_graph(base, k, metric=metric, device=inp.device, verbose=False)


def _nndescent(inp: _Inputs) -> None:
    from ._api import knn_graph
    from .nndescent._rptree import LOCAL_ROWS

    # more rows than the random projection forest splits in one piece (its level kernels split larger nodes).
    # The GPU's two-phase schedule (lists of k, then 2k with half the samples: another join kernel) needs
    # iterations left after its short lists, which leave after 4-5 iterations on these rows
    iterations = 12 if inp.on_gpu else 3
    for base, _, metrics in inp.runs(rows=LOCAL_ROWS + 1000):
        for metric in metrics:
            for k in inp.some(GRAPH_DEGREES):
                knn_graph(base, k, method="nndescent", metric=metric, device=inp.device, verbose=False,
                          max_iterations=iterations)


def _grnnd(inp: _Inputs) -> None:
    from . import grnnd

    for base, _, metrics in inp.runs():
        for metric in metrics:
            grnnd.build(grnnd.IndexParams(metric=metric), base, device=inp.device, verbose=False)


def _ggnn(inp: _Inputs) -> None:
    from . import ggnn

    # on the CPU without the refinement passes: they call the build's merge and linking kernels again with
    # arguments of the same types (compiled by then), half of the merges of a build of 300 rows
    extra = {} if inp.on_gpu else {"refinements": 0}
    for base, queries, metrics in inp.runs(rows=GGNN_CPU_ROWS):
        for metric in metrics:
            index = ggnn.build(ggnn.IndexParams(metric=metric, **extra), base, device=inp.device, verbose=False)
            for cache in ("sorted", "rings"):
                params = ggnn.SearchParams(cache=cache)
                for batch in inp.query_batches(queries, params.queue):
                    ggnn.search(index, batch, 10, params, device=inp.device, verbose=False)


def _song(inp: _Inputs) -> None:
    from . import song
    from ._api import knn_graph
    from .graphops import optimize_graph

    for base, queries, metrics in inp.runs():
        for metric in metrics:
            index = song.build(song.IndexParams(metric=metric), base, device=inp.device, verbose=False)
            # preparing k-NN graphs of other degrees than SONG's default 96 (GPU kernels per input degree)
            for degree in inp.some((32, 64)):
                graph = knn_graph(base, degree, metric=metric, device=inp.device, verbose=False)
                optimize_graph(graph, base, 32, device=inp.device, verbose=False)
            for queue in inp.some(QUEUE_SIZES):
                params = song.SearchParams(queue_size=queue)
                for batch in inp.query_batches(queries, queue):
                    song.search(index, batch, 10, params, device=inp.device, verbose=False)
            if inp.device == "cpu" and base.dtype.kind == "f":
                # the CPU walk over int8 codes and its exact re-rank ('auto' takes it from 128 dimensions)
                codes = song.SearchParams(queue_size=QUEUE_SIZES[0], cpu_walk="int8")
                for batch in inp.query_batches(queries, QUEUE_SIZES[0]):
                    song.search(index, batch, 10, codes, device=inp.device, verbose=False)
            walk = song.SearchParams(filtered_path="graph")  # always the graph walk, never the exact search
            for share in inp.some(FILTER_FRACTIONS):
                allowed = np.arange(base.shape[0]) % int(round(1 / share)) == 0
                for batch in inp.query_batches(queries, 64)[:2]:
                    song.search(index, batch, 10, walk, device=inp.device, verbose=False, filter=allowed)


_FAMILY_RUNS = {"exact": _exact, "nndescent": _nndescent, "grnnd": _grnnd, "ggnn": _ggnn, "song": _song}


if __name__ == "__main__":
    if sys.argv[1:] == ["worker"]:
        _worker()
    else:
        sys.exit("usage: python -m knngraph._warmup worker (tasks on stdin; see knngraph.warmup)")
