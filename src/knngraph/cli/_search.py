"""``knngraph search``: build, save and search a search index of any searcher of :mod:`knngraph.registry`
(SONG by default), from a vector file, a vector file and a graph (``--graph``), or a saved index."""

from __future__ import annotations

import dataclasses

import numpy as np

import knngraph

from .common import (METRICS_HELP, Timer, add_common_options, add_param_options, check_input, check_outputs, emit,
                     file_extension, file_metric, given_params, graph_slice, is_graph_file, memory_size, metric_name,
                     positive_int, read_graph, read_or_fail, read_vectors, warm_up, warmup_queries, warmup_rows,
                     write_ids)

__all__ = ["add_commands", "cmd_search"]


def add_commands(subparsers) -> None:
    """Add ``search`` to the command line's ``subparsers``."""
    registry = knngraph.registry
    searchers = {name: registry.get(name).load() for name in registry.searchers()}
    p = subparsers.add_parser("search", help="build, save and search a search index (SONG by default)")
    p.add_argument("index_or_base", help="a saved index, or a vector file (.u8bin .fbin .fvecs .npy .hdf5 ...)")
    p.add_argument("queries", nargs="?", help="query vector file (omit to only build/save an index)")
    p.add_argument("-k", type=positive_int, help="neighbours per query")
    p.add_argument("--method", default=None, choices=tuple(searchers),
                   help="searcher (default song; a saved index's own)")
    p.add_argument("--out", help="output ids (.ibin/.ivecs/.npy)")
    p.add_argument("--out-distances", help="output distances (.fbin/.fvecs/.npy)")
    p.add_argument("--graph", help="search this graph (.knng) instead of building one (vector-file input)")
    p.add_argument("--save-index", help="write the index for later searches")
    p.add_argument("--scheduler", metavar="ADDRESS", help="build and search a sharded index on this Dask "
                   "cluster (tcp://host:8786; knngraph.distributed); INDEX may be a saved sharded-index folder")
    p.add_argument("--metric", default=None, type=metric_name,
                   help=f"{METRICS_HELP} (default: the --graph's, else an ann-benchmarks file's 'distance' "
                        "attribute, else sqeuclidean)")
    p.add_argument("--memory-limit", default=None, type=memory_size,
                   help="most working memory for the build, e.g. 8GB")
    p.add_argument("--base-dataset", help="HDF5 dataset name for the base (default train)")
    p.add_argument("--query-dataset", help="HDF5 dataset name for QUERIES (default test)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_param_options(p.add_argument_group("index options (fields of the method's IndexParams)"), "i_",
                      {name: mod.IndexParams for name, mod in searchers.items()}, skip=("metric",))
    add_param_options(p.add_argument_group("search options (fields of the method's SearchParams)"), "s_",
                      {name: mod.SearchParams for name, mod in searchers.items()})
    add_common_options(p)
    p.set_defaults(func=cmd_search)


def _index_algorithm(path):
    """The algorithm that wrote the saved index ``path`` (from its header, without loading the index)."""
    from ..graph import read_header

    kind = read_header(path).get("kind")
    algorithm = knngraph.registry.by_file_kind(kind)
    if algorithm is None or not algorithm.searches:
        raise ValueError(f"{path}: holds a knngraph {kind!r}, not a search index (searchers: "
                         f"{', '.join(knngraph.registry.searchers())})")
    return algorithm


def cmd_search(args) -> int:
    """Build (or load) a search index, save it with ``--save-index``, search QUERIES with it (a sharded index
    on a Dask cluster with ``--scheduler``)."""
    if getattr(args, "scheduler", None):
        from ..distributed._cli import search

        return search(args)

    source = str(args.index_or_base)
    if is_graph_file(source):
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
    check_outputs(args, ("ids",))
    if searching:
        check_input(args.queries, "QUERIES", vectors=True, dataset=args.query_dataset)

    build_timer = Timer().__enter__()
    warm = None
    if is_index:
        if args.graph:
            raise ValueError("--graph applies to a vector file, not to a saved index")
        if any(k.startswith("i_") for k in vars(args)):
            raise ValueError("index options (such as --graph-degree) apply when building from a vector file, not to a "
                             "saved index")
        check_input(source, "INDEX")
        algorithm = read_or_fail(source, lambda: _index_algorithm(source))
        if args.method is not None and args.method != algorithm.name:
            raise ValueError(f"{source} is a {algorithm.name} index, not a {args.method} one")
        mod = algorithm.load()
        sp = mod.SearchParams(**given_params(args, "s_", mod.SearchParams, algorithm.name, "search")) \
            if searching else None
        index = read_or_fail(source, lambda: mod.load(source))
        built = False
    else:
        algorithm = knngraph.registry.get(args.method or "song")
        if not algorithm.searches:
            raise ValueError(f"--method {algorithm.name} does not search; searchers: "
                             f"{', '.join(knngraph.registry.searchers())}")
        mod = algorithm.load()
        fields = given_params(args, "i_", mod.IndexParams, algorithm.name, "index")
        check_input(source, "BASE", vectors=True, dataset=args.base_dataset)
        if args.metric is None and not args.graph:
            args.metric = file_metric(args, source)
        mod.IndexParams(metric=args.metric or "sqeuclidean", **fields)  # bad values: before reading
        sp = mod.SearchParams(**given_params(args, "s_", mod.SearchParams, algorithm.name, "search")) \
            if searching else None
        if args.graph:
            if not algorithm.searches_graphs:
                raise ValueError(f"--graph: --method {algorithm.name} does not search graphs; graph searchers: "
                                 f"{', '.join(knngraph.registry.graph_searchers())}")
            check_input(args.graph, "--graph")
        base = np.ascontiguousarray(read_vectors(source, args.base_dataset))
        metric = args.metric
        graph = read_graph(args.graph, "--graph") if args.graph else None
        metric = metric or (graph.metric if graph is not None else "sqeuclidean")
        params = mod.IndexParams(metric=metric, **fields)
        rows = warmup_rows(base.shape[0], graph.degree if graph is not None else 0)
        build_timer.__exit__(None, None, None)  # reading: not the build's
        if graph is not None:
            warm = warm_up(lambda: mod.from_graph(graph_slice(graph, rows), base[:rows], params, device=args.device,
                                                  verbose=False))
            with Timer() as build_timer:
                index = mod.from_graph(graph, base, params, device=args.device, verbose=not args.quiet)
        else:
            warm = warm_up(lambda: mod.build(params, base[:rows], device=args.device, memory_limit=args.memory_limit,
                                             verbose=False))
            with Timer() as build_timer:
                index = mod.build(params, base, device=args.device, memory_limit=args.memory_limit,
                                  verbose=not args.quiet)
        build_timer.warmed(warm)
        built = True
    if not built:
        build_timer.__exit__(None, None, None)
    build_seconds = build_timer.seconds
    if args.save_index:
        mod.save(args.save_index, index)
    payload = {"task": "search", "method": algorithm.name, "n": index.shape[0], "metric": index.metric,
               "built": built, "build_seconds": build_seconds, "build_load_seconds": build_timer.load,
               "build_compile_seconds": build_timer.compile_total, "saved_index": args.save_index}
    graph = getattr(index, "graph", None)
    if graph is not None:
        payload["graph_degree"] = graph.degree
    lines = []
    if built:
        lines.append(f"{algorithm.name} index over {index.shape[0]} vectors ready in {build_seconds:.2f} s"
                     f"{build_timer.note}" + (f" -> {args.save_index}" if args.save_index else ""))
    if not searching:
        emit(args, payload, lines)
        return 0
    queries = np.ascontiguousarray(read_vectors(args.queries, args.query_dataset, "QUERIES",
                                                default_dataset="test"))
    stats = {}
    kw = {"stats": stats} if algorithm.searches_graphs else {}
    first = warmup_queries(queries, args.device)
    warm = warm_up(lambda: mod.search(index, first, min(args.k, index.shape[0]), sp, device=args.device, verbose=False))
    with Timer() as t:
        d, i = mod.search(index, queries, args.k, sp, device=args.device, verbose=not args.quiet, **kw)
    t.warmed(warm)
    seconds = t.seconds
    write_ids(args, np.asarray(i), np.asarray(d))
    payload.update(n_queries=int(queries.shape[0]), k=args.k, search_params=dataclasses.asdict(sp),
                   search_seconds=seconds, search_load_seconds=t.load, search_compile_seconds=t.compile_total,
                   warmup_queries=int(first.shape[0]),
                   queries_per_second=queries.shape[0] / seconds, out=args.out,
                   distances_per_query=stats.get("distances_per_query"))
    lines.append(f"searched {queries.shape[0]} queries (k={args.k}) in {seconds:.3f} s{t.note} "
                 f"({queries.shape[0] / seconds:,.0f} queries/s) -> {args.out}")
    emit(args, payload, lines)
    return 0


def _looks_like_vectors(path: str) -> bool:
    """Whether ``path`` has a vector file extension (else it is read as a saved index)."""
    from .. import io

    return file_extension(path) in io.SUPPORTED_EXTENSIONS
