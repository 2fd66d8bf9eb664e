"""``knngraph build``: a k-NN graph by any graph builder of :mod:`knngraph.registry`; ``knngraph prepare``:
a k-NN graph turned into a search graph (:func:`knngraph.optimize_graph`)."""

from __future__ import annotations

import numpy as np

import knngraph

from .common import (METRICS_HELP, Timer, add_common_options, add_param_options, check_input, check_outputs, emit,
                     file_metric, finite_float, given_params, graph_slice, memory_size, metric_name, non_negative_int,
                     positive_int, read_graph, read_vectors, warm_up, warmup_rows, write_graph_or_ids)

__all__ = ["add_commands", "cmd_build", "cmd_prepare"]


def add_commands(subparsers) -> None:
    """Add ``build`` and ``prepare`` to the command line's ``subparsers``."""
    registry = knngraph.registry
    builders = {name: registry.get(name).load().IndexParams for name in registry.graph_builders()}
    p = subparsers.add_parser("build", help="build a k-NN graph (NN-Descent by default) from a vector file")
    p.add_argument("base", help="vector file: .fvecs .bvecs .fbin .u8bin .i8bin .npy .hdf5 ...")
    p.add_argument("-k", "--graph-degree", dest="graph_degree", type=positive_int, required=True,
                   help="neighbours per node")
    p.add_argument("--method", default="nndescent", choices=tuple(builders),
                   help="graph builder (default nndescent)")
    p.add_argument("--metric", default=None, type=metric_name,
                   help=f"{METRICS_HELP} (default: an ann-benchmarks file's 'distance' attribute, else sqeuclidean)")
    p.add_argument("--out", required=True, help="graph file (.knng), or ids (.ibin/.ivecs/.npy)")
    p.add_argument("--out-distances", help="with ids output: distances (.fbin/.fvecs/.npy)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="build on this Dask cluster (tcp://host:8786; "
                   "knngraph.distributed): --out may then be a folder of .knng shards")
    p.add_argument("--memory-limit", default=None, type=memory_size,
                   help="most working memory, e.g. 8GB (larger data: in parts)")
    p.add_argument("--base-dataset", help="HDF5 dataset name for BASE (default train)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_param_options(p.add_argument_group("builder options (fields of the method's IndexParams)"), "p_",
                      builders, skip=("metric", "graph_degree"))
    add_common_options(p)
    p.set_defaults(func=cmd_build)

    p = subparsers.add_parser("prepare", help="turn a k-NN graph into a search graph (knngraph.optimize_graph)")
    p.add_argument("graph", help="input graph (.knng)")
    p.add_argument("base", help="the vectors the graph was built on")
    p.add_argument("--graph-degree", type=positive_int, default=32, help="out-degree of the result (default 32)")
    p.add_argument("--alpha", type=finite_float, default=1.0, help="pruning relaxation >= 1 (default 1)")
    p.add_argument("--no-fill", action="store_true", help="keep only diverse edges")
    p.add_argument("--reverse-candidates", type=non_negative_int, default=None,
                   help="reverse input edges pruned with each row (default: the input degree; 0: none)")
    p.add_argument("--out", required=True, help="output graph (.knng)")
    p.add_argument("--base-dataset", help="HDF5 dataset name for the base (default train)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_common_options(p)
    p.set_defaults(func=cmd_prepare)


def cmd_build(args) -> int:
    """Build the k-NN graph of BASE with ``--method`` (on a Dask cluster with ``--scheduler``)."""
    if getattr(args, "scheduler", None):
        from ..distributed._cli import build

        return build(args)

    algorithm = knngraph.registry.get(args.method)
    if not algorithm.builds_graphs:
        raise ValueError(f"unknown graph method {args.method!r}; graph builders: "
                         f"{', '.join(knngraph.registry.graph_builders())}")
    check_outputs(args, ("graph", "ids"))
    index_params = algorithm.load().IndexParams
    params = given_params(args, "p_", index_params, args.method, "build")
    check_input(args.base, "BASE", vectors=True, dataset=args.base_dataset)
    args.metric = file_metric(args, args.base)
    index_params(graph_degree=args.graph_degree, metric=args.metric, **params)  # bad values: before reading
    base = read_vectors(args.base, args.base_dataset)
    rows = warmup_rows(base.shape[0], args.graph_degree)
    warm = warm_up(lambda: knngraph.knn_graph(base[:rows], min(args.graph_degree, rows - 1), method=args.method,
                                              metric=args.metric, device=args.device, memory_limit=args.memory_limit,
                                              verbose=False, **params))
    with Timer() as t:
        g = knngraph.knn_graph(base, args.graph_degree, method=args.method, metric=args.metric, device=args.device,
                               memory_limit=args.memory_limit, verbose=not args.quiet, **params)
    t.warmed(warm)
    seconds = t.seconds
    write_graph_or_ids(args, g)
    info = {key: g.info[key] for key in ("iterations", "sample_size", "update", "init", "out_of_core", "shards",
                                         "merges", "pieces") if key in g.info}
    payload = {"task": "build", "method": args.method, "n": int(base.shape[0]), "k": args.graph_degree,
               "metric": g.metric, "seconds": seconds, "load_seconds": t.load, "compile_seconds": t.compile_total,
               "device": g.info.get("device"),
               "out": args.out, **info}
    extra = ", ".join(f"{key}={value}" for key, value in info.items())
    emit(args, payload, [f"{args.method} {args.graph_degree}-NN graph of {base.shape[0]} vectors in {seconds:.2f} s"
                         f"{t.note} "
                         f"({payload['device']}{', ' + extra if extra else ''}) -> {args.out}"])
    return 0


def cmd_prepare(args) -> int:
    """Turn the k-NN graph GRAPH of BASE into a search graph (:func:`knngraph.optimize_graph`)."""
    check_outputs(args, ("graph",))
    check_input(args.base, "BASE", vectors=True, dataset=args.base_dataset)
    graph = read_graph(args.graph)
    base = np.ascontiguousarray(read_vectors(args.base, args.base_dataset))

    def prepare(g, x, verbose):
        return knngraph.optimize_graph(g, x, args.graph_degree, alpha=args.alpha, fill=not args.no_fill,
                                       reverse_candidates=args.reverse_candidates, device=args.device, verbose=verbose)

    rows = warmup_rows(base.shape[0], graph.degree)
    # (a graph of another size than BASE: optimize_graph names the mismatch below)
    warm = warm_up((lambda: prepare(graph_slice(graph, rows), base[:rows], False)) if graph.n == base.shape[0]
                   else (lambda: None))
    with Timer() as t:
        g = prepare(graph, base, not args.quiet).to_host()
    t.warmed(warm)
    seconds = t.seconds
    g.save(args.out)
    edges = float((g.indices >= 0).sum(1).mean())
    emit(args, {"task": "prepare", "n": g.n, "graph_degree": g.degree, "edges_per_node": edges, "seconds": seconds,
                "load_seconds": t.load, "compile_seconds": t.compile_total, "out": args.out},
          [f"prepared search graph: {g.n} nodes, degree {g.degree} ({edges:.1f} edges per node) in "
           f"{seconds:.2f} s{t.note} -> {args.out}"])
    return 0
