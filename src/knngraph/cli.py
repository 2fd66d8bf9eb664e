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
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main", "build_parser"]


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


def _write_result(path: str, array) -> None:
    from . import io

    io.write(path, np.ascontiguousarray(array))


def cmd_knn(args) -> int:
    import knngraph
    from . import io

    base = io.read(args.base, dataset=args.base_dataset) if args.base_dataset else io.read(args.base)
    t0 = time.perf_counter()
    if args.queries is None:
        g = knngraph.knn_graph(base, args.k, method="exact", metric=args.metric, device=args.device,
                               memory_limit=args.memory_limit, verbose=not args.quiet)
        seconds = time.perf_counter() - t0
        if args.out.endswith(".knng"):
            g.save(args.out)
        else:
            _write_result(args.out, np.asarray(g.to_host().indices))
            if args.out_distances:
                _write_result(args.out_distances, np.asarray(g.to_host().distances))
        payload = {"task": "graph", "n": int(base.shape[0]), "k": args.k, "metric": g.metric, "seconds": seconds,
                   "device": g.info.get("device"), "out": args.out}
        _emit(args, payload, [f"exact {args.k}-NN graph of {base.shape[0]} vectors in {seconds:.2f} s "
                              f"({payload['device']}) -> {args.out}"])
        return 0
    queries = io.read(args.queries, dataset=args.query_dataset) if args.query_dataset else io.read(args.queries)
    d, i = knngraph.knn(base, queries, args.k, metric=args.metric, device=args.device, select=args.select,
                        memory_limit=args.memory_limit, verbose=not args.quiet)
    seconds = time.perf_counter() - t0
    _write_result(args.out, np.asarray(i))
    if args.out_distances:
        _write_result(args.out_distances, np.asarray(d))
    payload = {"task": "search", "n": int(base.shape[0]), "n_queries": int(queries.shape[0]), "k": args.k,
               "metric": knngraph.metrics.canonical_metric(args.metric), "seconds": seconds,
               "queries_per_second": queries.shape[0] / seconds, "out": args.out}
    _emit(args, payload, [f"exact top-{args.k} of {queries.shape[0]} queries among {base.shape[0]} vectors in "
                          f"{seconds:.2f} s ({payload['queries_per_second']:.0f} queries/s) -> {args.out}"])
    return 0


# ---------------------------------------------------------------------------------------------- eval


def _read_ids_and_distances(path, distances_path):
    from . import io
    from .graph import Graph

    if str(path).endswith(".knng"):
        g = Graph.load(path)
        return g.indices, g.distances, g
    ids = np.asarray(io.read(path))
    dist = np.asarray(io.read(distances_path)) if distances_path else None
    return ids, dist, None


def cmd_eval(args) -> int:
    from . import evaluate

    ids, dist, graph = _read_ids_and_distances(args.result, args.result_distances)
    if graph is not None and args.truth is None:
        if not args.base:
            raise SystemExit("knngraph eval: a graph result needs --truth (exact graph or ids) or --base vectors")
        from . import io

        r = evaluate.graph_recall(graph, args.k, base=io.read(args.base), sample=args.sample, device=args.device)
        payload = {"graph_recall": r, "k": args.k, "sample": args.sample}
        _emit(args, payload, [f"graph recall@{args.k} = {r:.4f}" + (f" (sample of {args.sample} nodes)"
                                                                    if args.sample else "")])
        return 0
    t_ids, t_dist, _ = _read_ids_and_distances(args.truth, args.truth_distances)
    if ids.shape[0] != t_ids.shape[0]:
        raise SystemExit(f"knngraph eval: result has {ids.shape[0]} rows, truth has {t_ids.shape[0]}")
    use_dist = dist is not None and t_dist is not None
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
    """Build, search, report recall and speed on the bundled sift-photos sample (GPU if there is one)."""
    import knngraph
    from ._device import resolve_device
    from .datasets import load_sample
    from .evaluate import graph_recall, recall_at_k

    s = load_sample()
    dev = resolve_device(args.device)
    device = "cuda" if dev.is_cuda else "cpu"
    lines = [f"knngraph {knngraph.__version__} demo on the bundled sift-photos sample: {s.base.shape[0]} base "
             f"vectors, {s.queries.shape[0]} queries, {s.base.shape[1]}-d uint8, device={device}"]
    results = {"device": device, "n": int(s.base.shape[0]), "n_queries": int(s.queries.shape[0])}

    # first calls compile kernels; time the second
    knngraph.knn(s.base, s.queries[:8], 10, device=device, verbose=False)
    t0 = time.perf_counter()
    d, i = knngraph.knn(s.base, s.queries, 10, device=device, verbose=False)
    t = time.perf_counter() - t0
    rec = recall_at_k(np.asarray(i), s.gt_indices, 10, distances=np.asarray(d), true_distances=s.gt_distances)
    results["exact_search"] = {"seconds": t, "queries_per_second": s.queries.shape[0] / t, "recall@10": rec}
    lines.append(f"exact search     k=10: recall@10 {rec:.4f}, {s.queries.shape[0] / t:>10,.0f} queries/s")

    t0 = time.perf_counter()
    exact = knngraph.knn_graph(s.base, 32, device=device, verbose=False)
    t = time.perf_counter() - t0
    results["exact_graph"] = {"seconds": t, "k": 32}
    lines.append(f"exact graph      k=32: built in {t:.2f} s")

    if "nndescent" in knngraph.registry.graph_builders():
        knngraph.knn_graph(s.base[:2000], 32, method="nndescent", device=device, verbose=False)
        t0 = time.perf_counter()
        g = knngraph.knn_graph(s.base, 32, method="nndescent", device=device, verbose=False)
        t = time.perf_counter() - t0
        r10 = graph_recall(g, 10, true_graph=exact)
        results["nndescent_graph"] = {"seconds": t, "k": 32, "graph_recall@10": r10}
        lines.append(f"NN-Descent graph k=32: built in {t:.2f} s, graph recall@10 {r10:.4f}")
    if "song" in knngraph.registry.graph_searchers():
        from . import song

        search_graph = knngraph.optimize_graph(exact, s.base, device=device, verbose=False)
        index = song.from_graph(search_graph, s.base, device=device)
        song.search(index, s.queries[:8], 10, device=device, verbose=False)
        t0 = time.perf_counter()
        d, i = song.search(index, s.queries, 10, device=device, verbose=False)
        t = time.perf_counter() - t0
        rec = recall_at_k(np.asarray(i), s.gt_indices, 10, distances=np.asarray(d), true_distances=s.gt_distances)
        results["song_search"] = {"seconds": t, "queries_per_second": s.queries.shape[0] / t, "recall@10": rec}
        lines.append(f"SONG graph search k=10: recall@10 {rec:.4f}, {s.queries.shape[0] / t:>10,.0f} queries/s")
    _emit(args, results, lines)
    return 0


# ------------------------------------------------------------------------- algorithm options from params


def _read_vectors(path, dataset=None):
    from . import io

    return io.read(path, dataset=dataset) if dataset else io.read(path)


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
        return float
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


def _write_graph_or_ids(args, g) -> None:
    from . import io

    g = g.to_host()
    if str(args.out).endswith(".knng"):
        g.save(args.out)
    else:
        io.write(args.out, np.ascontiguousarray(g.indices))
        if args.out_distances:
            io.write(args.out_distances, np.ascontiguousarray(g.distances))


# --------------------------------------------------------------------------------------------- build


def cmd_build(args) -> int:
    import knngraph

    algorithm = knngraph.registry.get(args.method)
    if not algorithm.builds_graphs:
        raise ValueError(f"unknown graph method {args.method!r}; graph builders: "
                         f"{', '.join(knngraph.registry.graph_builders())}")
    params = _given_params(args, "p_", algorithm.load().IndexParams, args.method, "build")
    base = _read_vectors(args.base, args.base_dataset)
    t0 = time.perf_counter()
    g = knngraph.knn_graph(base, args.graph_degree, method=args.method, metric=args.metric, device=args.device,
                           memory_limit=args.memory_limit, verbose=not args.quiet, **params)
    seconds = time.perf_counter() - t0
    _write_graph_or_ids(args, g)
    info = {key: g.info[key] for key in ("iterations", "sample_size", "update", "init", "out_of_core", "shards",
                                         "merges", "pieces") if key in g.info}
    payload = {"task": "build", "method": args.method, "n": int(base.shape[0]), "k": args.graph_degree,
               "metric": g.metric, "seconds": seconds, "device": g.info.get("device"), "out": args.out, **info}
    extra = ", ".join(f"{key}={value}" for key, value in info.items())
    _emit(args, payload, [f"{args.method} {args.graph_degree}-NN graph of {base.shape[0]} vectors in {seconds:.2f} s "
                          f"({payload['device']}{', ' + extra if extra else ''}) -> {args.out}"])
    return 0


# ------------------------------------------------------------------------------------------- prepare


def cmd_prepare(args) -> int:
    import knngraph

    graph = knngraph.Graph.load(args.graph)
    base = np.ascontiguousarray(_read_vectors(args.base, args.base_dataset))
    t0 = time.perf_counter()
    g = knngraph.optimize_graph(graph, base, args.graph_degree, alpha=args.alpha, fill=not args.no_fill,
                                reverse_candidates=args.reverse_candidates, device=args.device,
                                verbose=not args.quiet).to_host()
    seconds = time.perf_counter() - t0
    g.save(args.out)
    edges = float((g.indices >= 0).sum(1).mean())
    _emit(args, {"task": "prepare", "n": g.n, "graph_degree": g.degree, "edges_per_node": edges, "seconds": seconds,
                 "out": args.out},
          [f"prepared search graph: {g.n} nodes, degree {g.degree} ({edges:.1f} edges per node) in "
           f"{seconds:.2f} s -> {args.out}"])
    return 0


# -------------------------------------------------------------------------------------------- search


def _load_any_index(path):
    """(algorithm, index) of a saved index file, whatever algorithm wrote it."""
    import knngraph
    from .graph import read_header

    kind = read_header(path).get("kind")
    algorithm = knngraph.registry.by_file_kind(kind)
    if algorithm is None or not algorithm.searches:
        raise ValueError(f"{path}: holds a knngraph {kind!r}, not a search index (searchers: "
                         f"{', '.join(knngraph.registry.searchers())})")
    return algorithm, algorithm.load().load(path)


def cmd_search(args) -> int:
    import knngraph

    from . import io

    t0 = time.perf_counter()
    source = str(args.index_or_base)
    if source.endswith(".knng"):
        raise ValueError(f"{source}: a graph file; give the vectors and --graph {source} to search it")
    is_index = not _looks_like_vectors(source)
    if is_index:
        algorithm, index = _load_any_index(source)
        if args.method is not None and args.method != algorithm.name:
            raise ValueError(f"{source} is a {algorithm.name} index, not a {args.method} one")
        if args.graph:
            raise ValueError("--graph applies to a vector file, not to a saved index")
        if any(k.startswith("i_") for k in vars(args)):
            raise ValueError("index options (such as --graph-degree) apply when building from a vector file, not to a "
                             "saved index")
        built = False
    else:
        algorithm = knngraph.registry.get(args.method or "song")
        if not algorithm.searches:
            raise ValueError(f"--method {algorithm.name} does not search; searchers: "
                             f"{', '.join(knngraph.registry.searchers())}")
        mod = algorithm.load()
        base = np.ascontiguousarray(_read_vectors(source, args.base_dataset))
        fields = _given_params(args, "i_", mod.IndexParams, algorithm.name, "index")
        metric = args.metric
        if args.graph:
            if not algorithm.searches_graphs:
                raise ValueError(f"--graph: --method {algorithm.name} does not search graphs; graph searchers: "
                                 f"{', '.join(knngraph.registry.graph_searchers())}")
            graph = knngraph.Graph.load(args.graph)
            metric = metric or graph.metric
            index = mod.from_graph(graph, base, mod.IndexParams(metric=metric, **fields), device=args.device,
                                   verbose=not args.quiet)
        else:
            index = mod.build(mod.IndexParams(metric=metric or "sqeuclidean", **fields), base, device=args.device,
                              memory_limit=args.memory_limit, verbose=not args.quiet)
        built = True
    mod = algorithm.load()
    build_seconds = time.perf_counter() - t0
    if args.save_index:
        mod.save(args.save_index, index)
    payload = {"task": "search", "method": algorithm.name, "n": index.shape[0], "metric": index.metric,
               "built": built, "build_seconds": build_seconds, "saved_index": args.save_index}
    graph = getattr(index, "graph", None)
    if graph is not None:
        payload["graph_degree"] = graph.degree
    lines = []
    if built:
        lines.append(f"{algorithm.name} index over {index.shape[0]} vectors ready in {build_seconds:.2f} s"
                     + (f" -> {args.save_index}" if args.save_index else ""))
    if args.queries is None:
        if not args.save_index:
            raise ValueError("nothing to do: give QUERIES to search and/or --save-index to keep the index")
        _emit(args, payload, lines)
        return 0
    if args.k is None or args.out is None:
        raise ValueError("searching needs -k and --out")
    sp = mod.SearchParams(**_given_params(args, "s_", mod.SearchParams, algorithm.name, "search"))
    queries = np.ascontiguousarray(_read_vectors(args.queries, args.query_dataset))
    stats = {}
    kw = {"stats": stats} if algorithm.searches_graphs else {}
    t1 = time.perf_counter()
    d, i = mod.search(index, queries, args.k, sp, device=args.device, verbose=not args.quiet, **kw)
    seconds = time.perf_counter() - t1
    io.write(args.out, np.ascontiguousarray(np.asarray(i)))
    if args.out_distances:
        io.write(args.out_distances, np.ascontiguousarray(np.asarray(d)))
    payload.update(n_queries=int(queries.shape[0]), k=args.k, search_params=dataclasses.asdict(sp),
                   search_seconds=seconds, queries_per_second=queries.shape[0] / seconds, out=args.out,
                   distances_per_query=stats.get("distances_per_query"))
    lines.append(f"searched {queries.shape[0]} queries (k={args.k}) in {seconds:.3f} s "
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

    parser = argparse.ArgumentParser(prog="knngraph", description="k-NN graphs and nearest-neighbour search "
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
    p.add_argument("-k", type=int, required=True, help="neighbours per query / node")
    p.add_argument("--metric", default="sqeuclidean", help=metrics)
    p.add_argument("--out", required=True, help="output ids (.ibin/.ivecs/.npy), or a graph file (.knng)")
    p.add_argument("--out-distances", help="output distances (.fbin/.fvecs/.npy)")
    p.add_argument("--select", default="auto", help="GPU selection: auto | warp_filter | quickselect")
    p.add_argument("--memory-limit", default=None, help="most device memory to use, e.g. 8GB")
    p.add_argument("--base-dataset", help="HDF5 dataset name for BASE (default train)")
    p.add_argument("--query-dataset", help="HDF5 dataset name for QUERIES (default test)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    common(p)
    p.set_defaults(func=cmd_knn)

    builders = {name: registry.get(name).load().IndexParams for name in registry.graph_builders()}
    p = sub.add_parser("build", help="build a k-NN graph (NN-Descent by default) from a vector file")
    p.add_argument("base", help="vector file: .fvecs .bvecs .fbin .u8bin .i8bin .npy .hdf5 ...")
    p.add_argument("-k", "--graph-degree", dest="graph_degree", type=int, required=True,
                   help="neighbours per node")
    p.add_argument("--method", default="nndescent", help=f"graph builder: {' | '.join(builders)} (default nndescent)")
    p.add_argument("--metric", default="sqeuclidean", help=metrics)
    p.add_argument("--out", required=True, help="graph file (.knng), or ids (.ibin/.ivecs/.npy)")
    p.add_argument("--out-distances", help="with ids output: distances (.fbin/.fvecs/.npy)")
    p.add_argument("--memory-limit", default=None, help="most working memory, e.g. 8GB (larger data: in parts)")
    p.add_argument("--base-dataset", help="HDF5 dataset name for BASE (default train)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_param_options(p.add_argument_group("builder options (fields of the method's IndexParams)"), "p_",
                       builders, skip=("metric", "graph_degree"))
    common(p)
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("prepare", help="turn a k-NN graph into a search graph (knngraph.optimize_graph)")
    p.add_argument("graph", help="input graph (.knng)")
    p.add_argument("base", help="the vectors the graph was built on")
    p.add_argument("--graph-degree", type=int, default=32, help="out-degree of the result (default 32)")
    p.add_argument("--alpha", type=float, default=1.0, help="pruning relaxation >= 1 (default 1)")
    p.add_argument("--no-fill", action="store_true", help="keep only diverse edges")
    p.add_argument("--reverse-candidates", type=int, default=None,
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
    p.add_argument("-k", type=int, help="neighbours per query")
    p.add_argument("--method", default=None, help=f"searcher: {' | '.join(searchers)} (default song; a saved "
                   "index's own)")
    p.add_argument("--out", help="output ids (.ibin/.ivecs/.npy)")
    p.add_argument("--out-distances", help="output distances (.fbin/.fvecs/.npy)")
    p.add_argument("--graph", help="search this graph (.knng) instead of building one (vector-file input)")
    p.add_argument("--save-index", help="write the index for later searches")
    p.add_argument("--metric", default=None, help=f"{metrics} (default: the --graph's, else sqeuclidean)")
    p.add_argument("--memory-limit", default=None, help="most working memory for the build, e.g. 8GB")
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
    p.add_argument("-k", type=int, default=10, help="k of recall@k (default 10)")
    p.add_argument("--result-distances", help="distances of the result (to count ties)")
    p.add_argument("--truth-distances", help="true distances (to count ties)")
    p.add_argument("--base", help="for a graph result without TRUTH: the vectors, to compute exact neighbours")
    p.add_argument("--sample", type=int, default=None, help="with --base: evaluate a random sample of nodes")
    common(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("demo", help="build, search and report recall/speed on the bundled sample")
    common(p)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "memory_limit", None) is not None:
            from ._device import parse_memory

            args.memory_limit = parse_memory(args.memory_limit)
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError, MemoryError, RuntimeError) as exc:
        print(f"knngraph {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
