"""The ``knngraph`` command line: ``info``, ``knn``, ``eval``, ``demo`` (+ algorithm subcommands).

Every subcommand takes ``--json`` to print one JSON object instead of text, for scripts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]

# algorithm folders that add subcommands: module -> function(subparsers) adding its parsers
_PLUGINS = ("knngraph.nndescent._cli", "knngraph.song._cli")


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
                               select=args.select, memory_limit=args.memory_limit, verbose=not args.quiet)
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

    if "nndescent" in knngraph.GRAPH_METHODS:
        knngraph.knn_graph(s.base[:2000], 32, method="nndescent", device=device, verbose=False)
        t0 = time.perf_counter()
        g = knngraph.knn_graph(s.base, 32, method="nndescent", device=device, verbose=False)
        t = time.perf_counter() - t0
        r10 = graph_recall(g, 10, true_graph=exact)
        results["nndescent_graph"] = {"seconds": t, "k": 32, "graph_recall@10": r10}
        lines.append(f"NN-Descent graph k=32: built in {t:.2f} s, graph recall@10 {r10:.4f}")
    song = getattr(knngraph, "song", None)
    if song is not None and hasattr(knngraph, "optimize_graph"):
        search_graph = knngraph.optimize_graph(exact, s.base, device=device)
        song.search(search_graph, s.base, s.queries[:8], 10, device=device)
        t0 = time.perf_counter()
        d, i = song.search(search_graph, s.base, s.queries, 10, device=device)
        t = time.perf_counter() - t0
        rec = recall_at_k(np.asarray(i), s.gt_indices, 10, distances=np.asarray(d), true_distances=s.gt_distances)
        results["song_search"] = {"seconds": t, "queries_per_second": s.queries.shape[0] / t, "recall@10": rec}
        lines.append(f"SONG graph search k=10: recall@10 {rec:.4f}, {s.queries.shape[0] / t:>10,.0f} queries/s")
    _emit(args, results, lines)
    return 0


# ---------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    import knngraph

    parser = argparse.ArgumentParser(prog="knngraph", description="k-NN graphs and nearest-neighbour search "
                                     "on NVIDIA GPUs and CPUs")
    parser.add_argument("--version", action="version", version=f"knngraph {knngraph.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, device=True):
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if device:
            p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")

    p = sub.add_parser("info", help="versions, devices and memory")
    common(p, device=False)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("knn", help="exact k-NN search (BASE QUERIES) or exact k-NN graph (BASE only)")
    p.add_argument("base", help="vector file: .fvecs .bvecs .fbin .u8bin .i8bin .npy .hdf5 ...")
    p.add_argument("queries", nargs="?", help="query vector file; omit to build the k-NN graph of BASE")
    p.add_argument("-k", type=int, required=True, help="neighbours per query / node")
    p.add_argument("--metric", default="sqeuclidean", help="sqeuclidean | euclidean | inner_product | cosine")
    p.add_argument("--out", required=True, help="output ids (.ibin/.ivecs/.npy), or a graph file (.knng)")
    p.add_argument("--out-distances", help="output distances (.fbin/.fvecs/.npy)")
    p.add_argument("--select", default="auto", help="GPU selection: auto | warp_filter | quickselect")
    p.add_argument("--memory-limit", default=None, help="most device memory to use, e.g. 8GB")
    p.add_argument("--base-dataset", help="HDF5 dataset name for BASE (default train)")
    p.add_argument("--query-dataset", help="HDF5 dataset name for QUERIES (default test)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    common(p)
    p.set_defaults(func=cmd_knn)

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

    for mod_name in _PLUGINS:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        mod.add_parser(sub, common)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "memory_limit", None) is not None:
        from ._device import parse_memory

        args.memory_limit = parse_memory(args.memory_limit)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError, MemoryError, RuntimeError) as exc:
        print(f"knngraph {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
