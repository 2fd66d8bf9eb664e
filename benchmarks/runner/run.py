"""The runner: datasets x methods x parameter sweeps, one JSON line per measured point.

A :class:`RunSpec` names a dataset, a task (``search`` or ``graph``), a method, a device and parameter
lists; :meth:`Runner.run` measures every point of the product of the lists and appends one JSON object
per point to the output file (flushed at once, so an interrupted suite keeps what it measured).

Fields of a line (``None`` where they do not apply):

* what: ``suite``, ``tag``, ``task``, ``method``, ``library``, ``device`` ('cpu' / 'cuda'),
  ``device_name`` (CPU model or GPU name), ``threads``, ``input`` ('device' / 'host' on the GPU),
  ``dataset``, ``n``, ``d``, ``nq``, ``dtype``, ``metric``, ``k``, ``build_params``, ``search_params``,
  ``batch_size`` (queries per call; None = all in one call);
* build: ``build_s`` (median of ``build_repeats`` timed builds), ``build_all_s``, ``warmup_s`` and
  ``warmup_rows`` (the untimed first build, on the first ``warmup_rows`` rows: JIT compilation), ``info``;
* search: ``search_s`` (median of ``search_repeats`` timed passes over the queries searched),
  ``search_all_s``, ``first_call_s`` (the warm-up call), ``qps`` (= nq_searched / search_s), ``nq_searched``
  (all queries, or ``batch_size x max_calls`` of them), ``calls`` (calls per pass), ``call_s`` and
  ``call_p90_s`` (median and 90th percentile of the time of one call, over every call of every timed
  pass). With a ``batch_size`` each call is timed on its own, the GPU synchronised before and after it
  (a caller waits for each batch's answer), and the warm-up is the first call alone; without one a pass
  is a single call (``call_s`` = its time);
* quality: ``recall@k``, ``recall@1``, ``R@k`` (search, over the queries searched; an id outside
  [0, n), e.g. CAGRA's "none" value, counts as a miss); ``graph_recall@10``, ``graph_recall@k`` and
  ``graph_recall_sample`` (graph: recall of the rows of a fixed random sample of nodes against their exact
  neighbours, self excluded) -- definitions in :mod:`knngraph.evaluate`, scored by
  :mod:`benchmarks.runner.quality`: ties at the true k-th distance count as correct;
* memory: ``peak_host_bytes`` (process resident-set peak, dataset included) and ``peak_gpu_bytes``
  (CuPy pool + PyTorch allocator peak, resident dataset included), each also per phase
  (``*_build``, ``*_search``);
* provenance: ``status`` ('ok', 'skipped' with a ``note``, or 'error' with the message), ``date``,
  ``command``, ``env`` (CPU, cores, memory, GPU, library versions).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import shlex
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from . import data as data_mod
from . import quality
from .measure import GpuPeak, HostPeak, Timing, environment, json_default, now, sync, time_calls
from .methods import Context, get

__all__ = ["RunSpec", "Runner", "WARMUP_ROWS", "GRAPH_SAMPLE"]

#: rows of the warm-up build (above knngraph's serial/parallel switch, so the timed kernels compile)
WARMUP_ROWS = 20_000
#: nodes whose exact neighbours score a graph
GRAPH_SAMPLE = 1000


@dataclasses.dataclass
class RunSpec:
    """One method on one dataset: the sweep and the protocol.

    Parameters
    ----------
    dataset : str
        Dataset spec (:mod:`benchmarks.runner.data`).
    task : {'search', 'graph'}
    method : str
        A name of :data:`benchmarks.runner.methods.METHODS`.
    device : {'cpu', 'cuda'}
    k : int or None
        Neighbours per query (search, default 10) or per node (graph, default 32).
    build, search, graph : dict of lists, optional
        Parameter lists replacing the method's defaults (``build`` and ``search`` for the search task,
        ``graph`` for the graph task).
    batch_sizes : list, default=[None]
        Queries per search call (None: all at once); each is its own line.
    max_calls : int, optional
        With a batch size: search only the first ``batch_size x max_calls`` queries (bounds the time of
        batch sizes 1, 10, ...; recall is then over those queries, ``nq_searched`` says how many).
    repeats : int, default=3
        Timed search calls per point (median reported).
    build_repeats : int, default=3
        Timed builds per point (median reported).
    build_warmup : {'subset', 'full', 'none'}, default='subset'
        The untimed first build: on the first :data:`WARMUP_ROWS` rows, on all rows, or none.
    input : {'device', 'host'}, default='device'
        On the GPU: hand knngraph / PyTorch the data on the GPU (uploaded once, untimed) or as NumPy arrays
        (the upload is then part of every timed call).
    tag : str, default=''
        Free label carried into the lines (e.g. 'scaling', 'batch').
    log_progress : bool, default=False
        Print progress of long sharded NN-Descent builds every 30 s (to stderr).
    time_limit_s : float, optional
        Graph task: if a timed build runs longer, write a 'timeout' line (seconds elapsed, shard steps done
        when ``log_progress`` counts them) and end the process (exit code 3): a build cannot be interrupted
        otherwise, and a command cut off by its caller's limit would leave no line at all.
    """

    dataset: str
    task: str
    method: str
    device: str = "cpu"
    k: int | None = None
    build: dict | None = None
    search: dict | None = None
    graph: dict | None = None
    batch_sizes: list = dataclasses.field(default_factory=lambda: [None])
    max_calls: int | None = None
    repeats: int = 3
    build_repeats: int = 3
    build_warmup: str = "subset"
    input: str = "device"
    tag: str = ""
    log_progress: bool = False
    time_limit_s: float | None = None


def _grid(params: dict) -> list[dict]:
    keys = list(params)
    return [dict(zip(keys, values)) for values in itertools.product(*(params[k] for k in keys))] or [{}]


class Runner:
    """Runs :class:`RunSpec` s and appends their JSON lines to ``out``.

    Parameters
    ----------
    out : path
        JSON-lines file (appended to).
    threads : int
        CPU threads for every library (numba, faiss, hnswlib, pynndescent).
    suite : str, optional
        Suite name written into every line.
    command : str, optional
        The command line written into every line (default: this process's).
    seed : int, default=0
    log : callable, default=print
        Receives a one-line summary of each JSON line.
    """

    def __init__(self, out, *, threads: int, suite: str | None = None, command: str | None = None, seed: int = 0,
                 log=None):
        self.out = Path(out)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.threads = int(threads)
        self.suite = suite
        self.command = command or "python -m benchmarks " + shlex.join(sys.argv[1:])
        self.seed = seed
        self.log = log or (lambda s: print(s, flush=True))
        self.env = environment()
        self.host_peak = HostPeak()
        self.gpu_peak = GpuPeak()
        self._dataset: tuple[str, data_mod.Dataset] | None = None
        self._device_copy: tuple[str, object, object] | None = None
        self._graph_truth: dict = {}
        self.lines: list[dict] = []
        try:
            import numba

            numba.set_num_threads(min(self.threads, numba.config.NUMBA_NUM_THREADS))
        except Exception:
            pass

    # ---------------------------------------------------------------------------------------- data

    def dataset(self, spec: str) -> data_mod.Dataset:
        """The dataset of ``spec`` (the last one loaded is kept; suites order their runs by dataset)."""
        if self._dataset is None or self._dataset[0] != spec:
            self._dataset = None
            self._device_copy = None
            self._graph_truth = {}
            t0 = time.perf_counter()
            ds = data_mod.load(spec)
            self.log(f"# loaded {spec}: {ds.n} x {ds.d} {ds.dtype}, {ds.nq} queries ({time.perf_counter() - t0:.1f} s)")
            self._dataset = (spec, ds)
        return self._dataset[1]

    def _inputs(self, ds: data_mod.Dataset, device: str, where: str):
        """(base, queries) as a method receives them."""
        if device != "cuda" or where == "host":
            return ds.base, ds.queries
        if self._device_copy is None or self._device_copy[0] != ds.name:
            import cupy

            self._device_copy = (ds.name, cupy.asarray(ds.base), cupy.asarray(ds.queries))
        return self._device_copy[1], self._device_copy[2]

    def graph_truth(self, ds: data_mod.Dataset, k: int, sample: int = GRAPH_SAMPLE) -> quality.GraphTruth:
        """The exact neighbours of a fixed random sample of nodes (:class:`benchmarks.runner.quality.GraphTruth`),
        kept while the dataset is."""
        key = (ds.name, k, sample)
        if key not in self._graph_truth:
            self._graph_truth[key] = quality.GraphTruth(ds.base, ds.metric, k, sample=sample)
        return self._graph_truth[key]

    # -------------------------------------------------------------------------------------- output

    def _base_line(self, spec: RunSpec, method, ds: data_mod.Dataset | None, k: int) -> dict:
        device_name = (self.env.get("gpu") if spec.device == "cuda" else self.env.get("cpu"))
        line = {"suite": self.suite, "tag": spec.tag, "task": spec.task, "method": spec.method,
                "library": getattr(method, "library", None), "device": spec.device, "device_name": device_name,
                "threads": self.threads, "input": spec.input if spec.device == "cuda" else None}
        if ds is not None:
            line.update(ds.describe())
        else:
            line["dataset"] = spec.dataset
        line["k"] = k
        return line

    def write(self, line: dict) -> dict:
        line = {**line, "date": now(), "command": self.command, "env": self.env}
        text = json.dumps(line, default=json_default)
        with open(self.out, "a") as fh:
            fh.write(text + "\n")
        self.lines.append(json.loads(text))
        brief = {key: line.get(key) for key in ("task", "method", "dataset", "n", "status", "build_params",
                                                   "search_params", "batch_size", "build_s", "qps", "call_s", f"recall@{line.get('k')}",
                                                   "graph_recall@10", "note") if line.get(key) is not None}
        self.log(json.dumps(brief, default=json_default))
        return line

    # ----------------------------------------------------------------------------------------- run

    def run(self, spec: RunSpec) -> list[dict]:
        """Measure every point of ``spec``; returns the lines written."""
        start = len(self.lines)
        k = spec.k or (10 if spec.task == "search" else 32)
        try:
            method = get(spec.method)
        except ValueError as exc:
            self.write({**self._base_line(spec, None, None, k), "status": "error", "note": str(exc)})
            return self.lines[start:]
        if spec.task not in method.tasks or spec.device not in method.devices:
            note = f"{spec.method} does not do task {spec.task!r} on {spec.device!r}"
            self.write({**self._base_line(spec, method, None, k), "status": "error", "note": note})
            return self.lines[start:]
        missing = method.missing()
        if missing:
            self.write({**self._base_line(spec, method, None, k), "status": "skipped", "note": missing})
            return self.lines[start:]
        try:
            ds = self.dataset(spec.dataset)
        except (FileNotFoundError, ValueError) as exc:
            self.write({**self._base_line(spec, method, None, k), "status": "skipped",
                        "note": f"dataset not available: {exc}"})
            return self.lines[start:]
        ctx = Context(device=spec.device, threads=self.threads, seed=self.seed)
        if spec.task == "search":
            self._run_search(spec, method, ds, ctx, k)
        else:
            self._run_graph(spec, method, ds, ctx, k)
        return self.lines[start:]

    def _error(self, line: dict, exc: BaseException) -> None:
        traceback.print_exc(file=sys.stderr)
        self.write({**line, "status": "error", "note": f"{type(exc).__name__}: {exc}"})

    def _reset_peaks(self):
        self.host_peak.reset()
        self.gpu_peak.reset()

    def _peaks(self):
        return self.host_peak.peak_bytes(), self.gpu_peak.peak_bytes()

    def _warmup(self, spec: RunSpec, fn, base):
        """Run the untimed first build; (seconds, rows) or (None, None)."""
        if spec.build_warmup == "none":
            return None, None
        rows = base.shape[0] if spec.build_warmup == "full" else min(base.shape[0], WARMUP_ROWS)
        sync()
        t0 = time.perf_counter()
        fn(base[:rows])
        sync()
        return time.perf_counter() - t0, rows

    def _run_search(self, spec: RunSpec, method, ds, ctx, k):
        base, queries = self._inputs(ds, spec.device, spec.input)
        ds.truth(k)  # before the builds: a dataset without ground truth computes it now, outside the timings
        build_grid = _grid(spec.build if spec.build is not None else method.build_sweep)
        search_grid = _grid(spec.search if spec.search is not None else method.search_sweep)
        for bp in build_grid:
            head = {**self._base_line(spec, method, ds, k), "build_params": bp}
            index = None
            try:
                self._reset_peaks()
                build = {"build_s": None, "build_all_s": None, "build_repeats": 0, "warmup_s": None, "warmup_rows": None}
                if method.has_index:
                    warm_s, warm_rows = self._warmup(spec, lambda b: method.build(ctx, b, ds.metric, **bp), base)
                    t = time_calls(lambda: method.build(ctx, base, ds.metric, **bp), spec.build_repeats, warmup=False)
                    index = t.result
                    build.update(build_s=t.median_s, build_all_s=t.all_s, build_repeats=len(t.all_s),
                                 warmup_s=warm_s, warmup_rows=warm_rows)
                else:
                    index = method.build(ctx, base, ds.metric, **bp)
                host_build, gpu_build = self._peaks()
                info = method.index_info(index)
            except Exception as exc:
                self._error(head, exc)
                continue
            for sp in search_grid:
                for batch in spec.batch_sizes:
                    line = {**head, "search_params": sp, "batch_size": batch, **build, "info": info}
                    try:
                        self._reset_peaks()
                        if batch is None:
                            t = time_calls(lambda: method.search(ctx, index, queries, k, **sp), spec.repeats,
                                           warmup=True)
                            m, results, calls = ds.nq, [t.result], {"calls": 1, "call_s": t.median_s,
                                                                    "call_p90_s": _percentile(t.all_s, 90)}
                        else:
                            m, t, results, calls = self._time_batches(
                                lambda s, e: method.search(ctx, index, queries[s:e], k, **sp), ds.nq, int(batch),
                                spec.repeats, spec.max_calls)
                        host_search, gpu_search = self._peaks()
                        ids = np.concatenate([data_mod.host(r)[:, :k] for r in results])
                        results = t.result = None
                        line.update(quality.search_quality(ds, ids, k, first=m))
                        line.update(search_s=t.median_s, search_all_s=t.all_s, search_repeats=len(t.all_s),
                                    first_call_s=t.first_call_s, qps=m / t.median_s, nq_searched=m, **calls,
                                    peak_host_bytes_build=host_build, peak_host_bytes_search=host_search,
                                    peak_gpu_bytes_build=gpu_build, peak_gpu_bytes_search=gpu_search,
                                    peak_host_bytes=_max(host_build, host_search),
                                    peak_gpu_bytes=_max(gpu_build, gpu_search), status="ok")
                        self.write(line)
                    except Exception as exc:
                        self._error(line, exc)
            index = None
            self._free_gpu()

    @staticmethod
    def _time_batches(call, nq: int, batch: int, repeats: int, max_calls: int | None):
        """Search the first ``nq_searched`` queries in calls ``call(start, end)`` of ``batch`` queries,
        each call timed alone between GPU synchronisations: one untimed-in-the-median warm-up call, then
        ``repeats`` passes. Returns (nq_searched, Timing of the passes (a pass = sum of its calls), results
        of the last pass, per-call fields of the line)."""
        if batch < 1:
            raise ValueError(f"batch size must be >= 1, got {batch}")
        m = nq if max_calls is None else min(nq, batch * int(max_calls))
        starts = range(0, m, batch)
        sync()
        t0 = time.perf_counter()
        call(0, min(batch, m))
        sync()
        first = time.perf_counter() - t0
        passes, per_call, results = [], [], []
        for _ in range(max(1, repeats)):
            results = []
            total = 0.0
            for s in starts:
                sync()
                t0 = time.perf_counter()
                results.append(call(s, min(s + batch, m)))
                sync()
                dt = time.perf_counter() - t0
                per_call.append(dt)
                total += dt
            passes.append(total)
        fields = {"calls": len(starts), "call_s": float(np.median(per_call)), "call_p90_s": _percentile(per_call, 90)}
        return m, Timing(float(np.median(passes)), passes, first, None), results, fields

    def _run_graph(self, spec: RunSpec, method, ds, ctx, k):
        base, _ = self._inputs(ds, spec.device, spec.input)
        self.graph_truth(ds, k)  # before the builds: afterwards only the scoring is left
        for gp in _grid(spec.graph if spec.graph is not None else method.graph_sweep):
            line = {**self._base_line(spec, method, ds, k), "build_params": gp}
            try:
                self._free_gpu()
                self._reset_peaks()
                warm_s, warm_rows = self._warmup(spec, lambda b: method.graph(ctx, b, ds.metric, k, **dict(gp)), base)
                progress: dict = {}
                with _progress_log(spec.log_progress, self.log, progress), self._watchdog(spec, line, progress):
                    t = time_calls(lambda: method.graph(ctx, base, ds.metric, k, **dict(gp)), spec.build_repeats,
                                   warmup=False)
                host_peak, gpu_peak = self._peaks()
                ids, info = t.result
                ids = quality.as_ids(method.finish_graph(ids, k), ds.n)
                t.result = None
                self._free_gpu()
                line.update(quality.graph_quality(self.graph_truth(ds, k), ids))
                line.update(build_s=t.median_s, build_all_s=t.all_s, build_repeats=len(t.all_s), warmup_s=warm_s,
                            warmup_rows=warm_rows, info=info, peak_host_bytes=host_peak, peak_gpu_bytes=gpu_peak,
                            status="ok")
                self.write(line)
            except Exception as exc:
                self._error(line, exc)
            self._free_gpu()

    @contextlib.contextmanager
    def _watchdog(self, spec: RunSpec, line: dict, progress: dict):
        """Enforce ``spec.time_limit_s`` on the builds inside (see :class:`RunSpec`)."""
        if not spec.time_limit_s:
            yield
            return
        import os
        import threading

        t0 = time.perf_counter()

        def expire():
            done = progress.get("done")
            note = (f"build did not finish within the time limit of {spec.time_limit_s:.0f} s"
                    + (f": {done} of {progress['total']} {progress['desc']} steps done" if done is not None else ""))
            self.write({**line, "status": "timeout", "note": note, "elapsed_s": time.perf_counter() - t0,
                        "progress": dict(progress)})
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(3)

        timer = threading.Timer(spec.time_limit_s, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _free_gpu(self):
        if "cupy" in sys.modules and self.gpu_peak.available:
            sync()
            sys.modules["cupy"].get_default_memory_pool().free_all_blocks()
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.empty_cache()


def _percentile(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def _max(a, b):
    vals = [v for v in (a, b) if v is not None]
    return max(vals) if vals else None


@contextlib.contextmanager
def _progress_log(enabled: bool, log, state: dict | None = None, every_s: float = 30.0):
    """While active, knngraph's sharded NN-Descent reports shards/merges done every ``every_s`` seconds
    (its own progress bar shows only on a terminal) and keeps the count in ``state`` (``done``, ``total``,
    ``desc``). Instrumentation only: swaps the progress factory that :mod:`knngraph.nndescent._build`
    calls, and restores it."""
    if not enabled:
        yield
        return
    try:
        from knngraph.nndescent import _build
    except ImportError:
        yield
        return
    original = _build.progress
    state = {} if state is None else state

    @contextlib.contextmanager
    def logging_progress(total, desc, disable=False, min_steps=8):
        t0 = time.perf_counter()
        state.update(done=0, total=total, desc=desc)
        last = [t0]

        class Bar:
            def update(self, n=1):
                state["done"] += n
                now_ = time.perf_counter()
                if now_ - last[0] >= every_s:
                    last[0] = now_
                    print(f"# {desc}: {state['done']}/{total} after {now_ - t0:.0f} s", file=sys.stderr, flush=True)

            def set_postfix_str(self, s):
                pass

        yield Bar()
        print(f"# {desc}: {state['done']}/{total} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    _build.progress = logging_progress
    try:
        yield
    finally:
        _build.progress = original
