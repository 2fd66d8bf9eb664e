"""The ``knngraph`` command line: ``info``, ``knn``, ``build``, ``prepare``, ``search``, ``eval``, ``demo``.

    knngraph knn base.fbin queries.fbin -k 10 --out ids.ibin --out-distances d.fbin    # exact search
    knngraph build base.u8bin -k 32 --method nndescent --max-iterations 8 --out g.knng  # any graph builder
    knngraph prepare g.knng base.u8bin --graph-degree 32 --out search.knng             # optimize_graph
    knngraph search base.u8bin --save-index sift.song                                  # build a search index
    knngraph search sift.song queries.u8bin -k 10 --queue-size 64 --out ids.ibin       # search a saved one
    knngraph search base.u8bin queries.u8bin -k 10 --graph search.knng --out ids.ibin  # any graph
    knngraph eval ids.ibin gt.ibin -k 10

``build`` and ``search`` take their algorithms from :mod:`knngraph.registry`, and their algorithm options
from the fields of each algorithm's ``IndexParams`` / ``SearchParams`` (``--max-iterations`` is
``IndexParams.max_iterations``); an option that the chosen ``--method`` does not have is an error. Every
subcommand takes ``--json`` to print one JSON object instead of text, for scripts.

Errors
------
Every error is one line on stderr, ``knngraph <command>: error: <message>``, no traceback; with ``--json``
it is also printed on stdout as one JSON object ``{"error": ..., "type": ..., "command": ...,
"exit_status": ...}`` (``type``: the Python exception class behind it). Exit status:

* **2, usage**: what was typed is wrong, and nothing is computed: argparse errors (unknown or missing
  options, values of the wrong type such as ``--sample 0``, ``--memory-limit abc``, NaN or infinite
  floats), an input path that does not exist or is a directory, an output path whose folder does not
  exist, that is a directory or whose extension cannot hold that output (checked before any computation,
  so a long build never ends in a failed write), options that do not go together, files that are valid
  but wrong for their role (float data given as ids, ``--base`` of another size than the graph), and every
  ``ValueError`` / ``TypeError`` from the library (it raises them for argument values, e.g. ``-k`` larger
  than the data);
* **1, failure while running**: an input file that cannot be read as its format (truncated, corrupt, not a
  knngraph file, unreadable), ``MemoryError``, ``RuntimeError`` (e.g. CUDA), other ``OSError`` (e.g. the
  disk filling up while writing) and any other exception.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main", "build_parser"]

_log = logging.getLogger("knngraph.cli")


def _emit(args, payload: dict, text_lines) -> None:
    if getattr(args, "json", False):
        print(json.dumps(payload, default=_jsonable))
    else:
        for line in text_lines:
            print(line)


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    return repr(o)


class _Timer:
    """Wall seconds of a block less the seconds numba spent compiling knngraph's kernels inside it (a first
    run: :func:`knngraph.primitives.compile.compile_seconds`), so that reported timings are those of a
    warm run; ``compiled`` holds the compilation, reported apart (``note``)."""

    def __enter__(self):
        from .primitives.compile import compile_seconds

        self._c0, self._t0 = compile_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        from .primitives.compile import compile_seconds

        self.compiled = compile_seconds() - self._c0
        self.seconds = max(time.perf_counter() - self._t0 - self.compiled, 1e-9)
        return False

    @property
    def note(self) -> str:
        return f" (+ {self.compiled:.1f} s compiling kernels, first run only)" if self.compiled >= 0.05 else ""


# ---------------------------------------------------------------------------------------------- errors


class CommandError(Exception):
    """An error whose exit status was decided where it was raised (see the module docs); ``type_name`` is
    the exception type reported with ``--json``."""

    def __init__(self, message: str, *, status: int, type_name: str = "ValueError", command: str | None = None):
        super().__init__(message)
        self.status = status
        self.type_name = type_name
        self.command = command


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, but its errors go through :func:`_report_error` like every other error."""

    def error(self, message):
        raise CommandError(f"{message} (see {self.prog} --help)", status=2, type_name="ArgumentError",
                           command=self.prog.partition(" ")[2] or None)  # prog: "knngraph build"


def _report_error(exc: BaseException, command: str | None, as_json: bool) -> int:
    """Classify ``exc`` (2: usage, 1: failure while running; see the module docs), print it as one line
    on stderr (and as one JSON object on stdout with ``--json``), and return the exit status."""
    if isinstance(exc, CommandError):
        status, type_name = exc.status, exc.type_name
    elif isinstance(exc, (ValueError, TypeError)):
        status, type_name = 2, type(exc).__name__
    else:
        status, type_name = 1, type(exc).__name__
    message = " ".join(str(exc).split()) or type_name
    if status == 1 and not isinstance(exc, CommandError):
        message = f"{type_name}: {message}" if message != type_name else message
    prog = f"knngraph {command}" if command else "knngraph"
    if as_json:
        print(json.dumps({"error": message, "type": type_name, "command": command, "exit_status": status}))
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


# --------------------------------------------------------------------------------- paths, reading, writing

_GRAPH_EXTENSION = ".knng"
#: what each kind of output may be written to (ids are int32, distances float32)
_OUTPUT_EXTENSIONS = {"graph": (_GRAPH_EXTENSION,), "ids": (".ibin", ".ivecs", ".npy"),
                      "distances": (".fbin", ".fvecs", ".npy")}
_INT32_FORMATS = (".ibin", ".ivecs")
_FLOAT32_FORMATS = (".fbin", ".fvecs")


def _suffix(path) -> str:
    return Path(str(path)).suffix.lower()


def _is_graph_file(path) -> bool:
    return _suffix(path) == _GRAPH_EXTENSION


def _check_output(path, option: str, kinds) -> None:
    """Usage error unless ``path`` can be written as one of ``kinds`` ('graph', 'ids', 'distances' or
    'index'): its folder exists and is writable, it is not a directory, its extension fits."""
    from . import io

    if path is None:
        return
    text = str(path)
    p = Path(text)
    if not text.strip():
        raise CommandError(f"{option}: empty path", status=2)
    if p.is_dir():
        raise CommandError(f"{option} {text}: is a directory; give a file name", status=2,
                           type_name="IsADirectoryError")
    parent = p.parent
    if not parent.is_dir():
        raise CommandError(f"{option} {text}: folder {str(parent)!r} does not exist", status=2,
                           type_name="FileNotFoundError")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CommandError(f"{option} {text}: folder {str(parent)!r} is not writable", status=2,
                           type_name="PermissionError")
    ext = _suffix(text)
    if "index" in kinds:  # a saved index is read back by its not being a vector or graph file
        if ext in io.SUPPORTED_EXTENSIONS or ext == _GRAPH_EXTENSION:
            raise CommandError(f"{option} {text}: {ext} is a vector/graph file extension; name the index file "
                               f"otherwise (e.g. .song) so that it is read back as an index", status=2)
        return
    allowed = tuple(dict.fromkeys(e for kind in kinds for e in _OUTPUT_EXTENSIONS[kind]))
    if ext not in allowed:
        raise CommandError(f"{option} {text}: cannot write {' or '.join(kinds)} to "
                           f"{f'a {ext} file' if ext else 'a file without an extension'}; use {', '.join(allowed)}",
                           status=2)


def _check_input(path, label: str, *, vectors: bool = False, dataset=None) -> None:
    """Usage error unless ``path`` names an existing file (and, for ``vectors``, one with a vector file
    extension; ``dataset`` only for HDF5)."""
    from . import io

    text = str(path)
    p = Path(text)
    if not p.exists():
        raise CommandError(f"{label} {text}: no such file", status=2, type_name="FileNotFoundError")
    if p.is_dir():
        raise CommandError(f"{label} {text}: is a directory, not a file", status=2, type_name="IsADirectoryError")
    if vectors:
        ext = _suffix(text)
        if ext not in io.SUPPORTED_EXTENSIONS:
            raise CommandError(f"{label} {text}: unknown vector file extension {ext or '(none)'!r}; supported: "
                               f"{', '.join(io.SUPPORTED_EXTENSIONS)}", status=2)
        if dataset is not None and ext not in (".hdf5", ".h5"):
            raise CommandError(f"{label} {text}: a dataset name applies to HDF5 files only", status=2)


def _reading(path, read):
    """``read()``, its errors re-raised as failures (exit 1) naming ``path``: the file exists (checked
    before) but cannot be read as what it should be."""
    try:
        return read()
    except CommandError:
        raise
    except Exception as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if str(path) not in message:
            message = f"{path}: {message}"
        raise CommandError(message, status=1, type_name=type(exc).__name__) from exc


def _read_vectors(path, dataset=None, label="BASE", *, default_dataset=None):
    """The vectors of ``path``; for an HDF5 file its ``dataset`` (else ``default_dataset``, else ``train``)."""
    from . import io

    _check_input(path, label, vectors=True, dataset=dataset)
    if dataset is None and default_dataset is not None and io.is_hdf5(path):
        dataset = default_dataset
    return _reading(path, lambda: io.read(path, dataset=dataset) if dataset else io.read(path))


def _file_metric(args, path, option="--metric"):
    """``args.metric`` when given; else the metric an ann-benchmarks file names in its ``distance``
    attribute (logged); else sqeuclidean. A given metric that differs from the file's is logged too."""
    from . import io

    file_metric = None
    if path is not None and io.is_hdf5(path) and Path(str(path)).is_file():
        file_metric = _reading(path, lambda: io.ann_benchmarks_metric(path))
    if args.metric is None:
        if file_metric is not None:
            _log.info("%s: metric %s, from the file's 'distance' attribute", path, file_metric)
        return file_metric or "sqeuclidean"
    if file_metric is not None and file_metric != args.metric:
        _log.warning("%s: the file's 'distance' attribute says %s, but %s %s was given", path, file_metric,
                     option, args.metric)
    return args.metric


def _read_graph(path, label="GRAPH"):
    from .graph import Graph

    _check_input(path, label)
    return _reading(path, lambda: Graph.load(path))


def _write_ids(args, ids, distances) -> None:
    """Write ``ids`` to ``args.out`` and ``distances`` to ``args.out_distances`` (when given)."""
    from . import io

    out = str(args.out)
    io.write(out, np.ascontiguousarray(ids, dtype=np.int32 if _suffix(out) in _INT32_FORMATS else None))
    if getattr(args, "out_distances", None):
        dpath = str(args.out_distances)
        io.write(dpath, np.ascontiguousarray(distances,
                                             dtype=np.float32 if _suffix(dpath) in _FLOAT32_FORMATS else None))


def _write_graph_or_ids(args, g) -> None:
    g = g.to_host()
    if _is_graph_file(args.out):
        g.save(args.out)
    else:
        _write_ids(args, g.indices, g.distances)


def _check_outputs(args, out_kinds) -> None:
    """The output paths of a command, before it reads or computes anything: ``--out`` (one of
    ``out_kinds``), ``--out-distances`` (next to ids output only: a graph file holds its distances; not the
    same file) and ``--save-index``."""
    out, distances = args.out, getattr(args, "out_distances", None)
    _check_output(out, "--out", out_kinds)
    if distances:
        if out is not None and _is_graph_file(out):
            raise CommandError("--out-distances applies to ids output; a .knng graph file holds the distances",
                               status=2)
        _check_output(distances, "--out-distances", ("distances",))
        if out is not None and Path(out).resolve() == Path(distances).resolve():
            raise CommandError(f"--out and --out-distances are the same file ({out})", status=2)
    _check_output(getattr(args, "save_index", None), "--save-index", ("index",))


# ----------------------------------------------------------------------------------- option value types


def _int_at_least(low: int):
    """An argparse type: an integer >= ``low``."""
    what = "a positive integer" if low == 1 else f"an integer >= {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _memory_size(text: str) -> int:
    from ._device import parse_memory

    try:
        value = parse_memory(text)
    except (ValueError, TypeError, ArithmeticError) as exc:  # OverflowError: e.g. 1e400GB
        raise argparse.ArgumentTypeError(str(exc) or f"expected a size such as 8GB, got {text!r}") from None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a size such as 8GB or 512MiB, got {text!r}")
    return value


def _metric_name(text: str) -> str:
    from .metrics import canonical_metric

    try:
        return canonical_metric(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---------------------------------------------------------------------------------------------- info


def _gpu_info() -> list[dict]:
    from ._device import _gpu_probe

    ok, why = _gpu_probe()
    if not ok:
        return [{"usable": False, "reason": why}]
    import cupy

    out = []
    for i in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(i):
            props = cupy.cuda.runtime.getDeviceProperties(i)
            free, total = cupy.cuda.runtime.memGetInfo()
        out.append({"usable": True, "index": i, "name": props["name"].decode(), "memory_total": int(total),
                    "memory_free": int(free), "compute_capability": f"{props['major']}.{props['minor']}",
                    "multiprocessors": int(props["multiProcessorCount"])})
    return out


def cmd_info(args) -> int:
    import numba

    import knngraph

    versions = {"knngraph": knngraph.__version__, "python": platform.python_version(), "numpy": np.__version__,
                "numba": numba.__version__}
    for mod in ("numba_cuda", "cupy", "dask", "h5py", "torch"):
        try:
            versions[mod] = importlib.import_module(mod).__version__
        except Exception:
            versions[mod] = None
    mem = None
    try:
        mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    payload = {"versions": versions, "cpu_count": os.cpu_count(), "numba_threads": numba.get_num_threads(),
               "host_memory": mem, "gpus": _gpu_info()}
    lines = ["knngraph " + versions["knngraph"]]
    lines += [f"  {k:<10} {v or 'not installed'}" for k, v in versions.items() if k != "knngraph"]
    lines.append(f"  cpu: {os.cpu_count()} cores, numba threads {payload['numba_threads']}"
                 + (f", {mem / 2**30:.1f} GiB RAM" if mem else ""))
    for g in payload["gpus"]:
        if g["usable"]:
            lines.append(f"  gpu {g['index']}: {g['name']} (sm {g['compute_capability']}, {g['multiprocessors']} SMs), "
                         f"{g['memory_free'] / 2**30:.1f} of {g['memory_total'] / 2**30:.1f} GiB free")
        else:
            lines.append(f"  gpu: none usable ({g['reason']})")
    _emit(args, payload, lines)
    return 0


# ----------------------------------------------------------------------------------------------- knn


def cmd_knn(args) -> int:
    import knngraph

    _check_outputs(args, ("graph", "ids") if args.queries is None else ("ids",))
    if args.queries is not None:
        _check_input(args.queries, "QUERIES", vectors=True, dataset=args.query_dataset)
    args.metric = _file_metric(args, args.base)
    base = _read_vectors(args.base, args.base_dataset)
    if args.queries is None:
        with _Timer() as t:
            g = knngraph.knn_graph(base, args.k, method="exact", metric=args.metric, device=args.device,
                                   memory_limit=args.memory_limit, verbose=not args.quiet)
        _write_graph_or_ids(args, g)
        payload = {"task": "graph", "n": int(base.shape[0]), "k": args.k, "metric": g.metric, "seconds": t.seconds,
                   "compile_seconds": t.compiled, "device": g.info.get("device"), "out": args.out}
        _emit(args, payload, [f"exact {args.k}-NN graph of {base.shape[0]} vectors in {t.seconds:.2f} s{t.note} "
                              f"({payload['device']}) -> {args.out}"])
        return 0
    queries = _read_vectors(args.queries, args.query_dataset, "QUERIES", default_dataset="test")
    with _Timer() as t:
        d, i = knngraph.knn(base, queries, args.k, metric=args.metric, device=args.device, select=args.select,
                            memory_limit=args.memory_limit, verbose=not args.quiet)
    seconds = t.seconds
    _write_ids(args, np.asarray(i), np.asarray(d))
    payload = {"task": "search", "n": int(base.shape[0]), "n_queries": int(queries.shape[0]), "k": args.k,
               "metric": knngraph.metrics.canonical_metric(args.metric), "seconds": seconds,
               "compile_seconds": t.compiled, "queries_per_second": queries.shape[0] / seconds, "out": args.out}
    _emit(args, payload, [f"exact top-{args.k} of {queries.shape[0]} queries among {base.shape[0]} vectors in "
                          f"{seconds:.2f} s{t.note} ({payload['queries_per_second']:.0f} queries/s) -> {args.out}"])
    return 0


# ---------------------------------------------------------------------------------------------- eval


def _read_ids(path, label, dataset=None):
    """Ids from a vector file: its data must be integers (a float file is most likely distances)."""
    ids = np.asarray(_read_vectors(path, dataset, label=label))
    if ids.dtype.kind not in "iu":
        raise ValueError(f"{label} {path}: holds {ids.dtype} data, but ids must be integers (a distances file "
                         f"given as ids?)")
    return ids


def _read_distances(path, label, ids_shape, ids_label, dataset=None):
    dist = np.asarray(_read_vectors(path, dataset, label=label))
    if dist.dtype.kind not in "iuf":
        raise ValueError(f"{label} {path}: holds {dist.dtype} data, but distances must be numbers")
    if dist.shape != ids_shape:
        raise ValueError(f"{label} {path} has shape {dist.shape} but {ids_label} has shape {ids_shape}")
    return dist


def _read_ids_and_distances(path, distances_path, label, dataset=None, distances_dataset=None):
    """(ids, distances or None, Graph or None) of a result/truth: a graph file, or an ids file plus an
    optional distances file (for HDF5 files: the datasets named)."""
    if _is_graph_file(path):
        g = _read_graph(path, label)
        return g.indices, g.distances, g
    ids = _read_ids(path, label, dataset)
    dist = _read_distances(distances_path, f"--{label.lower()}-distances", ids.shape, f"{label} {path}",
                           distances_dataset) if distances_path else None
    return ids, dist, None


def _check_eval_arguments(args) -> None:
    """The combinations of eval's arguments that make sense, and its input paths (before any reading)."""
    if _is_graph_file(args.result):
        if args.result_distances:
            raise ValueError("--result-distances: a .knng result holds its own distances")
        if args.truth is None and args.base is None:
            raise ValueError("a graph result needs TRUTH (an exact graph or true ids) or --base (the vectors, to "
                             "compute the exact neighbours)")
        if args.truth is not None and args.base is not None:
            raise ValueError("give TRUTH or --base, not both")
    else:
        if args.truth is None:
            raise ValueError(f"an ids result needs TRUTH (true ids, or an exact graph): knngraph eval "
                             f"{args.result} TRUTH (--base applies to a .knng graph result)")
        if args.base is not None:
            raise ValueError("--base applies to a .knng graph result; an ids result needs TRUTH")
    if args.sample is not None and args.base is None:
        raise ValueError("--sample applies with --base (TRUTH is evaluated on all rows)")
    if args.truth is not None and _is_graph_file(args.truth) and args.truth_distances:
        raise ValueError("--truth-distances: a .knng truth holds its own distances")
    if args.truth_dataset is not None and (args.truth is None or _suffix(args.truth) not in (".hdf5", ".h5")):
        raise ValueError("--truth-dataset applies to an HDF5 TRUTH (an ann-benchmarks file)")
    for path, label in ((args.result, "RESULT"), (args.truth, "TRUTH")):
        if path is not None:
            _check_input(path, label, vectors=not _is_graph_file(path))
    for path, label in ((args.result_distances, "--result-distances"), (args.truth_distances, "--truth-distances"),
                        (args.base, "--base")):
        if path is not None:
            _check_input(path, label, vectors=True)


def cmd_eval(args) -> int:
    from . import evaluate

    _check_eval_arguments(args)
    ids, dist, graph = _read_ids_and_distances(args.result, args.result_distances, "RESULT")
    if graph is not None and args.base is not None:
        base = _read_vectors(args.base, label="--base")
        if base.shape[0] != graph.n:
            raise ValueError(f"--base {args.base} has {base.shape[0]} rows but the graph {args.result} has "
                             f"{graph.n} nodes; give the vectors the graph was built on")
        r = evaluate.graph_recall(graph, args.k, base=base, sample=args.sample, device=args.device)
        payload = {"graph_recall": r, "k": args.k, "sample": args.sample}
        _emit(args, payload, [f"graph recall@{args.k} = {r:.4f}" + (f" (sample of {args.sample} nodes)"
                                                                    if args.sample else "")])
        return 0
    from . import io

    truth_distances, distances_dataset = args.truth_distances, None
    if io.is_hdf5(args.truth):  # an ann-benchmarks file: true ids in 'neighbors', distances in 'distances'
        args.truth_dataset = args.truth_dataset or "neighbors"
        if truth_distances is None and dist is not None:
            truth_distances, distances_dataset = args.truth, "distances"
    t_ids, t_dist, t_graph = _read_ids_and_distances(args.truth, truth_distances, "TRUTH", args.truth_dataset,
                                                     distances_dataset)
    if ids.shape[0] != t_ids.shape[0]:
        raise ValueError(f"RESULT {args.result} has {ids.shape[0]} rows but TRUTH {args.truth} has "
                         f"{t_ids.shape[0]}")
    use_dist = dist is not None and t_dist is not None
    if use_dist and graph is not None and t_graph is not None:
        # both carry a metric: compare like with like (euclidean <-> sqeuclidean converts, others refuse)
        t_dist = evaluate._true_distances_in(graph.metric, t_graph.metric, t_dist)
    kw = {"distances": dist, "true_distances": t_dist} if use_dist else {}
    rec = evaluate.recall_at_k(ids, t_ids, args.k, **kw)
    rk = evaluate.r_at_k(ids, t_ids, args.k, **kw)
    key = "graph_recall" if graph is not None else "recall"
    payload = {key: rec, "R_at_k": rk, "k": args.k, "ties_counted": use_dist, "rows": int(ids.shape[0])}
    _emit(args, payload, [f"{'graph ' if graph is not None else ''}recall@{args.k} = {rec:.4f}",
                          f"R@{args.k} = {rk:.4f}",
                          "ties counted (distances given)" if use_dist else "ties not counted (no distances given)"])
    return 0


# ---------------------------------------------------------------------------------------------- demo


def cmd_demo(args) -> int:
    """Build, search, report recall and speed on the bundled sift-photos sample (GPU if there is one).

    Lines are printed as each step ends; timings leave out the compilation of kernels (a first run), which
    is reported on its own line."""
    import knngraph
    from . import _firstrun
    from ._device import resolve_device
    from .datasets import load_sample
    from .evaluate import graph_recall, recall_at_k
    from .primitives.compile import compile_seconds

    say = (lambda line: None) if args.json else (lambda line: print(line, flush=True))
    compiled_before = compile_seconds()
    s = load_sample()
    dev = resolve_device(args.device)
    device = "cuda" if dev.is_cuda else "cpu"
    say(f"knngraph {knngraph.__version__} demo on the bundled sift-photos sample: {s.base.shape[0]} base "
        f"vectors, {s.queries.shape[0]} queries, {s.base.shape[1]}-d uint8, device={device}")
    results = {"device": device, "n": int(s.base.shape[0]), "n_queries": int(s.queries.shape[0])}
    # a first run on the CPU compiles NN-Descent's iteration kernels and the beam searcher in a second
    # process meanwhile (knngraph._firstrun): this one compiles the rest first
    has_nndescent = "nndescent" in knngraph.registry.graph_builders()
    has_song = "song" in knngraph.registry.graph_searchers()
    nndescent_compile, compiled_aside = None, 0.0
    if device == "cpu" and has_nndescent:
        nndescent_compile = _firstrun.start_nndescent_compile(s.base.dtype)

    # first calls (GPU context, threads, kernels) on the batches timed below: a smaller warm-up batch would
    # take the few-query kernels and compile them too, for nothing
    knngraph.knn(s.base, s.queries, 10, device=device, verbose=False)
    with _Timer() as t:
        d, i = knngraph.knn(s.base, s.queries, 10, device=device, verbose=False)
    rec = recall_at_k(np.asarray(i), s.gt_indices, 10, distances=np.asarray(d), true_distances=s.gt_distances)
    results["exact_search"] = {"seconds": t.seconds, "queries_per_second": s.queries.shape[0] / t.seconds,
                               "recall@10": rec}
    say(f"exact search     k=10: recall@10 {rec:.4f}, {s.queries.shape[0] / t.seconds:>10,.0f} queries/s")

    with _Timer() as t:
        exact = knngraph.knn_graph(s.base, 32, device=device, verbose=False)
    results["exact_graph"] = {"seconds": t.seconds, "k": 32}
    say(f"exact graph      k=32: built in {t.seconds:.2f} s")

    if has_song:
        search_graph = knngraph.optimize_graph(exact, s.base, device=device, verbose=False)
    if has_nndescent:
        if nndescent_compile is not None:
            _firstrun.compile_forest(s.base, 32)
        compiled_aside = _firstrun.wait(nndescent_compile)
        with _Timer() as t:
            g = knngraph.knn_graph(s.base, 32, method="nndescent", device=device, verbose=False)
        r10 = graph_recall(g, 10, true_graph=exact)
        results["nndescent_graph"] = {"seconds": t.seconds, "k": 32, "graph_recall@10": r10}
        say(f"NN-Descent graph k=32: built in {t.seconds:.2f} s, graph recall@10 {r10:.4f}")
    if has_song:
        from . import song

        index = song.from_graph(search_graph, s.base, device=device)
        song.search(index, s.queries, 10, device=device, verbose=False)
        with _Timer() as t:
            d, i = song.search(index, s.queries, 10, device=device, verbose=False)
        rec = recall_at_k(np.asarray(i), s.gt_indices, 10, distances=np.asarray(d), true_distances=s.gt_distances)
        results["song_search"] = {"seconds": t.seconds, "queries_per_second": s.queries.shape[0] / t.seconds,
                                  "recall@10": rec}
        say(f"SONG graph search k=10: recall@10 {rec:.4f}, {s.queries.shape[0] / t.seconds:>10,.0f} queries/s")
    results["compile_seconds"] = compile_seconds() - compiled_before
    results["compile_seconds_second_process"] = compiled_aside
    if results["compile_seconds"] >= 0.05:
        aside = f" (+ {compiled_aside:.1f} s in a second process meanwhile)" if compiled_aside else ""
        say(f"(+ {results['compile_seconds']:.1f} s compiling kernels{aside}, first run only: cached on disk now; "
            f"the timings above leave it out)")
    if args.json:
        print(json.dumps(results, default=_jsonable))
    return 0


def warm_up(device="cpu", dtypes=("uint8", "float32")) -> float:
    """Compile (or load from numba's disk cache) the kernels of every algorithm of the registry, for
    vectors of each of ``dtypes``: exact search and graphs, graph builders (their serial and threaded
    builds), graph preparation, graph search. Runs them on the bundled sample; returns the seconds spent
    compiling (0 when everything was cached)."""
    import knngraph
    from . import registry
    from .datasets import load_sample
    from .primitives.compile import SERIAL_BELOW, compile_seconds

    before = compile_seconds()
    s = load_sample()
    for dtype in dtypes:
        base = np.ascontiguousarray(s.base[: SERIAL_BELOW + 1000], dtype=dtype)  # threaded builds
        small = base[:600]                                                       # serial builds
        queries = np.ascontiguousarray(s.queries[:50], dtype=dtype)
        for data in (small, base):
            knngraph.knn(data, queries, 10, device=device, verbose=False)
            for name in registry.graph_builders():
                _log.info("warm-up: %s, %s, %d vectors", name, dtype, data.shape[0])
                g = knngraph.knn_graph(data, 16, method=name, device=device, verbose=False)
            for name in registry.graph_searchers():
                mod = registry.get(name).load()
                search_graph = knngraph.optimize_graph(g, data, 16, device=device, verbose=False)
                mod.search(mod.from_graph(search_graph, data, device=device), queries, 10, device=device,
                           verbose=False)
    return compile_seconds() - before


def cmd_warmup(args) -> int:
    """Compile every kernel ahead of first use (numba keeps them on disk)."""
    from ._device import resolve_device

    dev = resolve_device(args.device)
    device = "cuda" if dev.is_cuda else "cpu"
    dtypes = list(dict.fromkeys(args.dtype or ["uint8", "float32"]))
    t0 = time.perf_counter()
    compiled = warm_up(device, tuple(dtypes))
    seconds = time.perf_counter() - t0
    _emit(args, {"task": "warmup", "device": device, "dtypes": dtypes, "compile_seconds": compiled,
                 "seconds": seconds},
          [f"kernels ready ({device}, {', '.join(dtypes)}): {compiled:.1f} s compiling, {seconds:.1f} s in all"
           + ("" if compiled >= 0.05 else " (all were cached)")])
    return 0


# ------------------------------------------------------------------------- algorithm options from params


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parse_json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"max_iterations\": 6}}' ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _option_type(field: dataclasses.Field):
    default = field.default
    if isinstance(default, bool):
        return _parse_bool
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return _finite_float
    if default is None:
        return _parse_json_dict
    return str


def _params_fields(cls, skip=()):
    return [f for f in dataclasses.fields(cls) if not f.name.startswith("_") and f.name not in skip]


def _add_param_options(parser, prefix: str, classes: dict, skip=()):
    """One ``--field-name`` option per field of the params classes (name -> class of each algorithm), with
    its default left out (the params' own default applies) and the algorithms that take it in its help."""
    owners: dict = {}
    for method, cls in classes.items():
        for f in _params_fields(cls, skip):
            owners.setdefault(f.name, (f, []))[1].append(method)
    for name, (field, methods) in sorted(owners.items()):
        default = field.default if field.default is not dataclasses.MISSING else None
        parser.add_argument("--" + name.replace("_", "-"), dest=prefix + name, type=_option_type(field),
                            default=argparse.SUPPRESS, metavar=name.upper(),
                            help=f"{', '.join(methods)}: {cls_name(classes, methods)}.{name} (default {default!r})")


def cls_name(classes, methods):
    return classes[methods[0]].__qualname__


def _given_params(args, prefix: str, cls, method: str, what: str) -> dict:
    """The ``prefix``-options given on the command line, checked against ``cls``'s fields."""
    fields = {f.name for f in _params_fields(cls)}
    given = {k[len(prefix):]: v for k, v in vars(args).items() if k.startswith(prefix)}
    wrong = sorted(set(given) - fields)
    if wrong:
        opts = ", ".join("--" + w.replace("_", "-") for w in wrong)
        valid = ", ".join("--" + f.replace("_", "-") for f in sorted(fields))
        raise ValueError(f"{opts} {'is' if len(wrong) == 1 else 'are'} not a {what} option of --method {method} "
                         f"(its options: {valid})")
    return given


# --------------------------------------------------------------------------------------------- build


def cmd_build(args) -> int:
    import knngraph

    if getattr(args, "scheduler", None):
        from .distributed._cli import build

        return build(args)

    algorithm = knngraph.registry.get(args.method)
    if not algorithm.builds_graphs:
        raise ValueError(f"unknown graph method {args.method!r}; graph builders: "
                         f"{', '.join(knngraph.registry.graph_builders())}")
    _check_outputs(args, ("graph", "ids"))
    index_params = algorithm.load().IndexParams
    params = _given_params(args, "p_", index_params, args.method, "build")
    _check_input(args.base, "BASE", vectors=True, dataset=args.base_dataset)
    args.metric = _file_metric(args, args.base)
    index_params(graph_degree=args.graph_degree, metric=args.metric, **params)  # bad values: before reading
    base = _read_vectors(args.base, args.base_dataset)
    with _Timer() as t:
        g = knngraph.knn_graph(base, args.graph_degree, method=args.method, metric=args.metric, device=args.device,
                               memory_limit=args.memory_limit, verbose=not args.quiet, **params)
    seconds = t.seconds
    _write_graph_or_ids(args, g)
    info = {key: g.info[key] for key in ("iterations", "sample_size", "update", "init", "out_of_core", "shards",
                                         "merges", "pieces") if key in g.info}
    payload = {"task": "build", "method": args.method, "n": int(base.shape[0]), "k": args.graph_degree,
               "metric": g.metric, "seconds": seconds, "compile_seconds": t.compiled, "device": g.info.get("device"),
               "out": args.out, **info}
    extra = ", ".join(f"{key}={value}" for key, value in info.items())
    _emit(args, payload, [f"{args.method} {args.graph_degree}-NN graph of {base.shape[0]} vectors in {seconds:.2f} s"
                          f"{t.note} "
                          f"({payload['device']}{', ' + extra if extra else ''}) -> {args.out}"])
    return 0


# ------------------------------------------------------------------------------------------- prepare


def cmd_prepare(args) -> int:
    import knngraph

    _check_outputs(args, ("graph",))
    _check_input(args.base, "BASE", vectors=True, dataset=args.base_dataset)
    graph = _read_graph(args.graph)
    base = np.ascontiguousarray(_read_vectors(args.base, args.base_dataset))
    with _Timer() as t:
        g = knngraph.optimize_graph(graph, base, args.graph_degree, alpha=args.alpha, fill=not args.no_fill,
                                    reverse_candidates=args.reverse_candidates, device=args.device,
                                    verbose=not args.quiet).to_host()
    seconds = t.seconds
    g.save(args.out)
    edges = float((g.indices >= 0).sum(1).mean())
    _emit(args, {"task": "prepare", "n": g.n, "graph_degree": g.degree, "edges_per_node": edges, "seconds": seconds,
                 "compile_seconds": t.compiled, "out": args.out},
          [f"prepared search graph: {g.n} nodes, degree {g.degree} ({edges:.1f} edges per node) in "
           f"{seconds:.2f} s{t.note} -> {args.out}"])
    return 0


# -------------------------------------------------------------------------------------------- search


def _index_algorithm(path):
    """The algorithm that wrote the saved index ``path`` (from its header, without loading the index)."""
    import knngraph
    from .graph import read_header

    kind = read_header(path).get("kind")
    algorithm = knngraph.registry.by_file_kind(kind)
    if algorithm is None or not algorithm.searches:
        raise ValueError(f"{path}: holds a knngraph {kind!r}, not a search index (searchers: "
                         f"{', '.join(knngraph.registry.searchers())})")
    return algorithm


def cmd_search(args) -> int:
    import knngraph

    if getattr(args, "scheduler", None):
        from .distributed._cli import search

        return search(args)

    source = str(args.index_or_base)
    if _is_graph_file(source):
        raise ValueError(f"{source}: a graph file; give the vectors and --graph {source} to search it")
    is_index = not _looks_like_vectors(source)
    # what to do and where to write it: all checked before anything is read or built
    searching = args.queries is not None
    if not searching:
        if not args.save_index:
            raise ValueError("nothing to do: give QUERIES to search and/or --save-index to keep the index")
        if args.out or args.out_distances:
            raise ValueError("--out and --out-distances apply when searching QUERIES")
        if any(k.startswith("s_") for k in vars(args)):
            raise ValueError("search options (such as --queue-size) apply when searching QUERIES")
    elif args.k is None or args.out is None:
        raise ValueError("searching QUERIES needs -k and --out")
    _check_outputs(args, ("ids",))
    if searching:
        _check_input(args.queries, "QUERIES", vectors=True, dataset=args.query_dataset)

    build_timer = _Timer().__enter__()
    if is_index:
        if args.graph:
            raise ValueError("--graph applies to a vector file, not to a saved index")
        if any(k.startswith("i_") for k in vars(args)):
            raise ValueError("index options (such as --graph-degree) apply when building from a vector file, not to a "
                             "saved index")
        _check_input(source, "INDEX")
        algorithm = _reading(source, lambda: _index_algorithm(source))
        if args.method is not None and args.method != algorithm.name:
            raise ValueError(f"{source} is a {algorithm.name} index, not a {args.method} one")
        mod = algorithm.load()
        sp = mod.SearchParams(**_given_params(args, "s_", mod.SearchParams, algorithm.name, "search")) \
            if searching else None
        index = _reading(source, lambda: mod.load(source))
        built = False
    else:
        algorithm = knngraph.registry.get(args.method or "song")
        if not algorithm.searches:
            raise ValueError(f"--method {algorithm.name} does not search; searchers: "
                             f"{', '.join(knngraph.registry.searchers())}")
        mod = algorithm.load()
        fields = _given_params(args, "i_", mod.IndexParams, algorithm.name, "index")
        _check_input(source, "BASE", vectors=True, dataset=args.base_dataset)
        if args.metric is None and not args.graph:
            args.metric = _file_metric(args, source)
        mod.IndexParams(metric=args.metric or "sqeuclidean", **fields)  # bad values: before reading
        sp = mod.SearchParams(**_given_params(args, "s_", mod.SearchParams, algorithm.name, "search")) \
            if searching else None
        if args.graph:
            if not algorithm.searches_graphs:
                raise ValueError(f"--graph: --method {algorithm.name} does not search graphs; graph searchers: "
                                 f"{', '.join(knngraph.registry.graph_searchers())}")
            _check_input(args.graph, "--graph")
        base = np.ascontiguousarray(_read_vectors(source, args.base_dataset))
        metric = args.metric
        if args.graph:
            graph = _read_graph(args.graph, "--graph")
            metric = metric or graph.metric
            index = mod.from_graph(graph, base, mod.IndexParams(metric=metric, **fields), device=args.device,
                                   verbose=not args.quiet)
        else:
            index = mod.build(mod.IndexParams(metric=metric or "sqeuclidean", **fields), base, device=args.device,
                              memory_limit=args.memory_limit, verbose=not args.quiet)
        built = True
    build_timer.__exit__(None, None, None)
    build_seconds = build_timer.seconds
    if args.save_index:
        mod.save(args.save_index, index)
    payload = {"task": "search", "method": algorithm.name, "n": index.shape[0], "metric": index.metric,
               "built": built, "build_seconds": build_seconds, "build_compile_seconds": build_timer.compiled,
               "saved_index": args.save_index}
    graph = getattr(index, "graph", None)
    if graph is not None:
        payload["graph_degree"] = graph.degree
    lines = []
    if built:
        lines.append(f"{algorithm.name} index over {index.shape[0]} vectors ready in {build_seconds:.2f} s"
                     f"{build_timer.note}" + (f" -> {args.save_index}" if args.save_index else ""))
    if not searching:
        _emit(args, payload, lines)
        return 0
    queries = np.ascontiguousarray(_read_vectors(args.queries, args.query_dataset, "QUERIES",
                                                 default_dataset="test"))
    stats = {}
    kw = {"stats": stats} if algorithm.searches_graphs else {}
    with _Timer() as t:
        d, i = mod.search(index, queries, args.k, sp, device=args.device, verbose=not args.quiet, **kw)
    seconds = t.seconds
    _write_ids(args, np.asarray(i), np.asarray(d))
    payload.update(n_queries=int(queries.shape[0]), k=args.k, search_params=dataclasses.asdict(sp),
                   search_seconds=seconds, search_compile_seconds=t.compiled,
                   queries_per_second=queries.shape[0] / seconds, out=args.out,
                   distances_per_query=stats.get("distances_per_query"))
    lines.append(f"searched {queries.shape[0]} queries (k={args.k}) in {seconds:.3f} s{t.note} "
                 f"({queries.shape[0] / seconds:,.0f} queries/s) -> {args.out}")
    _emit(args, payload, lines)
    return 0


def _looks_like_vectors(path: str) -> bool:
    from . import io

    return Path(path).suffix.lower() in io.SUPPORTED_EXTENSIONS


# ---------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    import knngraph
    from . import registry

    parser = _ArgumentParser(prog="knngraph", description="k-NN graphs and nearest-neighbour search "
                                     "on NVIDIA GPUs and CPUs")
    parser.add_argument("--version", action="version", version=f"knngraph {knngraph.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, device=True):
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if device:
            p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")

    metrics = "sqeuclidean | euclidean | inner_product | cosine"
    p = sub.add_parser("info", help="versions, devices and memory")
    common(p, device=False)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("knn", help="exact k-NN search (BASE QUERIES) or exact k-NN graph (BASE only)")
    p.add_argument("base", help="vector file: .fvecs .bvecs .fbin .u8bin .i8bin .npy .hdf5 ...")
    p.add_argument("queries", nargs="?", help="query vector file; omit to build the k-NN graph of BASE")
    p.add_argument("-k", type=_positive_int, required=True, help="neighbours per query / node")
    p.add_argument("--metric", default=None, type=_metric_name,
                   help=f"{metrics} (default: an ann-benchmarks file's 'distance' attribute, else sqeuclidean)")
    p.add_argument("--out", required=True, help="output ids (.ibin/.ivecs/.npy), or a graph file (.knng)")
    p.add_argument("--out-distances", help="output distances (.fbin/.fvecs/.npy)")
    p.add_argument("--select", default="auto", choices=("auto", "warp_filter", "quickselect"),
                   help="GPU selection (default auto)")
    p.add_argument("--memory-limit", default=None, type=_memory_size, help="most device memory to use, e.g. 8GB")
    p.add_argument("--base-dataset", help="HDF5 dataset name for BASE (default train)")
    p.add_argument("--query-dataset", help="HDF5 dataset name for QUERIES (default test)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    common(p)
    p.set_defaults(func=cmd_knn)

    builders = {name: registry.get(name).load().IndexParams for name in registry.graph_builders()}
    p = sub.add_parser("build", help="build a k-NN graph (NN-Descent by default) from a vector file")
    p.add_argument("base", help="vector file: .fvecs .bvecs .fbin .u8bin .i8bin .npy .hdf5 ...")
    p.add_argument("-k", "--graph-degree", dest="graph_degree", type=_positive_int, required=True,
                   help="neighbours per node")
    p.add_argument("--method", default="nndescent", choices=tuple(builders),
                   help="graph builder (default nndescent)")
    p.add_argument("--metric", default=None, type=_metric_name,
                   help=f"{metrics} (default: an ann-benchmarks file's 'distance' attribute, else sqeuclidean)")
    p.add_argument("--out", required=True, help="graph file (.knng), or ids (.ibin/.ivecs/.npy)")
    p.add_argument("--out-distances", help="with ids output: distances (.fbin/.fvecs/.npy)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="build on this Dask cluster (tcp://host:8786; "
                   "knngraph.distributed): --out may then be a folder of .knng shards")
    p.add_argument("--memory-limit", default=None, type=_memory_size,
                   help="most working memory, e.g. 8GB (larger data: in parts)")
    p.add_argument("--base-dataset", help="HDF5 dataset name for BASE (default train)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_param_options(p.add_argument_group("builder options (fields of the method's IndexParams)"), "p_",
                       builders, skip=("metric", "graph_degree"))
    common(p)
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("prepare", help="turn a k-NN graph into a search graph (knngraph.optimize_graph)")
    p.add_argument("graph", help="input graph (.knng)")
    p.add_argument("base", help="the vectors the graph was built on")
    p.add_argument("--graph-degree", type=_positive_int, default=32, help="out-degree of the result (default 32)")
    p.add_argument("--alpha", type=_finite_float, default=1.0, help="pruning relaxation >= 1 (default 1)")
    p.add_argument("--no-fill", action="store_true", help="keep only diverse edges")
    p.add_argument("--reverse-candidates", type=_non_negative_int, default=None,
                   help="reverse input edges pruned with each row (default: the input degree; 0: none)")
    p.add_argument("--out", required=True, help="output graph (.knng)")
    p.add_argument("--base-dataset", help="HDF5 dataset name for the base (default train)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    common(p)
    p.set_defaults(func=cmd_prepare)

    searchers = {name: registry.get(name).load() for name in registry.searchers()}
    p = sub.add_parser("search", help="build, save and search a search index (SONG by default)")
    p.add_argument("index_or_base", help="a saved index, or a vector file (.u8bin .fbin .fvecs .npy .hdf5 ...)")
    p.add_argument("queries", nargs="?", help="query vector file (omit to only build/save an index)")
    p.add_argument("-k", type=_positive_int, help="neighbours per query")
    p.add_argument("--method", default=None, choices=tuple(searchers),
                   help="searcher (default song; a saved index's own)")
    p.add_argument("--out", help="output ids (.ibin/.ivecs/.npy)")
    p.add_argument("--out-distances", help="output distances (.fbin/.fvecs/.npy)")
    p.add_argument("--graph", help="search this graph (.knng) instead of building one (vector-file input)")
    p.add_argument("--save-index", help="write the index for later searches")
    p.add_argument("--scheduler", metavar="ADDRESS", help="build and search a sharded index on this Dask "
                   "cluster (tcp://host:8786; knngraph.distributed); INDEX may be a saved sharded-index folder")
    p.add_argument("--metric", default=None, type=_metric_name,
                   help=f"{metrics} (default: the --graph's, else an ann-benchmarks file's 'distance' attribute, "
                        "else sqeuclidean)")
    p.add_argument("--memory-limit", default=None, type=_memory_size,
                   help="most working memory for the build, e.g. 8GB")
    p.add_argument("--base-dataset", help="HDF5 dataset name for the base (default train)")
    p.add_argument("--query-dataset", help="HDF5 dataset name for QUERIES (default test)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_param_options(p.add_argument_group("index options (fields of the method's IndexParams)"), "i_",
                       {name: mod.IndexParams for name, mod in searchers.items()}, skip=("metric",))
    _add_param_options(p.add_argument_group("search options (fields of the method's SearchParams)"), "s_",
                       {name: mod.SearchParams for name, mod in searchers.items()})
    common(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("eval", help="recall of a result against ground truth")
    p.add_argument("result", help="result ids (any vector format) or a graph file (.knng)")
    p.add_argument("truth", nargs="?", help="true ids (any format) or an exact graph (.knng)")
    p.add_argument("-k", type=_positive_int, default=10, help="k of recall@k (default 10)")
    p.add_argument("--result-distances", help="distances of the result (to count ties)")
    p.add_argument("--truth-distances", help="true distances (to count ties)")
    p.add_argument("--truth-dataset", help="HDF5 TRUTH: dataset of the true ids (default neighbors; the "
                   "'distances' dataset counts ties when --result-distances is given)")
    p.add_argument("--base", help="for a graph result without TRUTH: the vectors, to compute exact neighbours")
    p.add_argument("--sample", type=_positive_int, default=None,
                   help="with --base: evaluate a random sample of nodes")
    common(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("warmup", help="compile every kernel now (numba caches them on disk), not on first use")
    p.add_argument("--dtype", action="append", choices=("uint8", "float32"),
                   help="vector dtype to compile for (repeatable; default uint8 and float32)")
    common(p)
    p.set_defaults(func=cmd_warmup)

    p = sub.add_parser("demo", help="build, search and report recall/speed on the bundled sample")
    common(p)
    p.set_defaults(func=cmd_demo)
    return parser


class _StderrHandler(logging.StreamHandler):
    """Log records as ``knngraph: message`` lines on whatever ``sys.stderr`` is when they are emitted."""

    def __init__(self):
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("knngraph: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _show_log(quiet: bool) -> None:
    """The library's diagnostics (logger ``knngraph``: e.g. "compiling kernels, first run only") on stderr,
    INFO and up (WARNING and up with ``--quiet``)."""
    logger = logging.getLogger("knngraph")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    logger.setLevel(logging.WARNING if quiet else logging.INFO)


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0; 1: failure while running; 2: usage error)."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    as_json = "--json" in argv  # until the arguments are parsed
    command = None
    try:
        args = build_parser().parse_args(argv)
        command, as_json = args.command, args.json
        _show_log(quiet=getattr(args, "quiet", False))
        return int(args.func(args) or 0)
    except Exception as exc:
        if isinstance(exc, CommandError) and exc.command:
            command = exc.command
        return _report_error(exc, command, as_json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
