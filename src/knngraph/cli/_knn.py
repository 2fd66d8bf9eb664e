"""``knngraph knn``: exact k-NN search (BASE QUERIES) or the exact k-NN graph of BASE."""

from __future__ import annotations

import numpy as np

import knngraph

from .common import (METRICS_HELP, Timer, add_common_options, check_input, check_outputs, emit, file_metric,
                     memory_size, metric_name, positive_int, read_vectors, warm_up, warmup_queries, warmup_rows,
                     write_graph_or_ids, write_ids)

__all__ = ["add_commands", "cmd_knn"]


def add_commands(subparsers) -> None:
    """Add ``knn`` to the command line's ``subparsers``."""
    p = subparsers.add_parser("knn", help="exact k-NN search (BASE QUERIES) or exact k-NN graph (BASE only)")
    p.add_argument("base", help="vector file: .fvecs .bvecs .fbin .u8bin .i8bin .npy .hdf5 ...")
    p.add_argument("queries", nargs="?", help="query vector file; omit to build the k-NN graph of BASE")
    p.add_argument("-k", type=positive_int, required=True, help="neighbours per query / node")
    p.add_argument("--metric", default=None, type=metric_name,
                   help=f"{METRICS_HELP} (default: an ann-benchmarks file's 'distance' attribute, else sqeuclidean)")
    p.add_argument("--out", required=True, help="output ids (.ibin/.ivecs/.npy), or a graph file (.knng)")
    p.add_argument("--out-distances", help="output distances (.fbin/.fvecs/.npy)")
    p.add_argument("--select", default="auto", choices=("auto", "warp_filter", "quickselect"),
                   help="GPU selection (default auto)")
    p.add_argument("--memory-limit", default=None, type=memory_size, help="most device memory to use, e.g. 8GB")
    p.add_argument("--base-dataset", help="HDF5 dataset name for BASE (default train)")
    p.add_argument("--query-dataset", help="HDF5 dataset name for QUERIES (default test)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_common_options(p)
    p.set_defaults(func=cmd_knn)


def cmd_knn(args) -> int:
    """Exact search of QUERIES among BASE (:func:`knngraph.knn`), or the exact graph of BASE."""
    check_outputs(args, ("graph", "ids") if args.queries is None else ("ids",))
    if args.queries is not None:
        check_input(args.queries, "QUERIES", vectors=True, dataset=args.query_dataset)
    args.metric = file_metric(args, args.base)
    base = read_vectors(args.base, args.base_dataset)
    if args.queries is None:
        rows = warmup_rows(base.shape[0], args.k)
        warm = warm_up(lambda: knngraph.knn_graph(base[:rows], min(args.k, rows - 1), method="exact",
                                                  metric=args.metric, device=args.device,
                                                  memory_limit=args.memory_limit, verbose=False))
        with Timer() as t:
            g = knngraph.knn_graph(base, args.k, method="exact", metric=args.metric, device=args.device,
                                   memory_limit=args.memory_limit, verbose=not args.quiet)
        t.warmed(warm)
        write_graph_or_ids(args, g)
        payload = {"task": "graph", "n": int(base.shape[0]), "k": args.k, "metric": g.metric, "seconds": t.seconds,
                   "load_seconds": t.load, "compile_seconds": t.compile_total, "device": g.info.get("device"),
                   "out": args.out}
        emit(args, payload, [f"exact {args.k}-NN graph of {base.shape[0]} vectors in {t.seconds:.2f} s{t.note} "
                             f"({payload['device']}) -> {args.out}"])
        return 0
    queries = read_vectors(args.queries, args.query_dataset, "QUERIES", default_dataset="test")
    first = warmup_queries(queries, args.device)
    warm = warm_up(lambda: knngraph.knn(base, first, args.k, metric=args.metric, device=args.device, select=args.select,
                                        memory_limit=args.memory_limit, verbose=False))
    with Timer() as t:
        d, i = knngraph.knn(base, queries, args.k, metric=args.metric, device=args.device, select=args.select,
                            memory_limit=args.memory_limit, verbose=not args.quiet)
    t.warmed(warm)
    seconds = t.seconds
    write_ids(args, np.asarray(i), np.asarray(d))
    payload = {"task": "search", "n": int(base.shape[0]), "n_queries": int(queries.shape[0]), "k": args.k,
               "metric": knngraph.metrics.canonical_metric(args.metric), "seconds": seconds, "load_seconds": t.load,
               "compile_seconds": t.compile_total, "queries_per_second": queries.shape[0] / seconds,
               "warmup_queries": int(first.shape[0]), "out": args.out}
    emit(args, payload, [f"exact top-{args.k} of {queries.shape[0]} queries among {base.shape[0]} vectors in "
                         f"{seconds:.2f} s{t.note} ({payload['queries_per_second']:.0f} queries/s) -> {args.out}"])
    return 0
