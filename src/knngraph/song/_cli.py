"""``knngraph search`` and ``knngraph prepare``: SONG graph search and search-graph preparation.

    knngraph search base.u8bin --save-index sift.song                  # build an index (k-NN graph + prepare)
    knngraph search sift.song queries.u8bin -k 10 --out ids.ibin       # search a saved index
    knngraph search base.u8bin queries.u8bin -k 10 --queue-size 64 --out ids.ibin --out-distances d.fbin
    knngraph search base.u8bin queries.u8bin -k 10 --graph prepared.knng --out ids.ibin   # any graph
    knngraph prepare graph.knng base.u8bin --degree 32 --out prepared.knng               # optimize_graph

Hooked into ``knngraph.cli`` through :func:`add_parser` (``add_search_parser`` is the same function).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

__all__ = ["add_parser", "add_search_parser", "cmd_search", "cmd_prepare"]


def _read(path, dataset=None):
    from knngraph import io

    return io.read(path, dataset=dataset) if dataset else io.read(path)


def cmd_search(args) -> int:
    import knngraph
    from knngraph import io, song

    from ..cli import _emit

    t0 = time.perf_counter()
    built = False
    if str(args.index_or_base).endswith(".song"):
        index = song.load(args.index_or_base)
        if args.graph:
            raise ValueError("--graph applies to a vector file, not to a saved index")
    else:
        base = np.ascontiguousarray(_read(args.index_or_base, args.base_dataset))
        params = song.IndexParams(metric=args.metric, graph_degree=args.graph_degree,
                                  intermediate_graph_degree=args.intermediate_degree, build_method=args.build_method,
                                  fill=not args.no_fill, hash_bits=args.hash_bits, seed=args.seed)
        graph = None
        if args.graph:
            graph = knngraph.Graph.load(args.graph)
            if not args.metric_given:
                params = dataclasses.replace(params, metric=graph.metric)
        index = song.build(params, base, graph=graph, device=args.device, verbose=not args.quiet)
        built = True
    build_seconds = time.perf_counter() - t0
    if args.save_index:
        song.save(args.save_index, index)
    payload = {"task": "search", "n": index.shape[0], "metric": index.metric, "graph_degree": index.graph.degree,
               "hash_bits": index.params.hash_bits, "built": built, "build_seconds": build_seconds,
               "saved_index": args.save_index}
    lines = []
    if built:
        lines.append(f"SONG index over {index.shape[0]} vectors (graph degree {index.graph.degree}) ready in "
                     f"{build_seconds:.2f} s" + (f" -> {args.save_index}" if args.save_index else ""))
    if args.queries is None:
        if not args.save_index:
            raise ValueError("nothing to do: give QUERIES to search and/or --save-index to keep the index")
        _emit(args, payload, lines)
        return 0
    if args.k is None or args.out is None:
        raise ValueError("searching needs -k and --out")
    queries = np.ascontiguousarray(_read(args.queries, args.query_dataset))
    stats = {}
    t1 = time.perf_counter()
    d, i = index.search(queries, args.k, queue_size=args.queue_size, visited=args.visited,
                        rerank=args.rerank or None, device=args.device, verbose=not args.quiet, stats=stats)
    seconds = time.perf_counter() - t1
    io.write(args.out, np.ascontiguousarray(np.asarray(i)))
    if args.out_distances:
        io.write(args.out_distances, np.ascontiguousarray(np.asarray(d)))
    payload.update(n_queries=int(queries.shape[0]), k=args.k, queue_size=args.queue_size, visited=args.visited,
                   search_seconds=seconds, queries_per_second=queries.shape[0] / seconds, out=args.out,
                   distances_per_query=stats.get("distances_per_query"))
    lines.append(f"searched {queries.shape[0]} queries (k={args.k}, queue_size={args.queue_size}) in "
                 f"{seconds:.3f} s ({queries.shape[0] / seconds:,.0f} queries/s) -> {args.out}")
    _emit(args, payload, lines)
    return 0


def cmd_prepare(args) -> int:
    import knngraph

    from ..cli import _emit

    graph = knngraph.Graph.load(args.graph)
    base = np.ascontiguousarray(_read(args.base, args.base_dataset))
    t0 = time.perf_counter()
    g = knngraph.optimize_graph(graph, base, args.degree, alpha=args.alpha, fill=not args.no_fill,
                                reverse_candidates=args.reverse_candidates, device=args.device,
                                verbose=not args.quiet).to_host()
    seconds = time.perf_counter() - t0
    g.save(args.out)
    edges = float((g.indices >= 0).sum(1).mean())
    _emit(args, {"task": "prepare", "n": g.n, "degree": g.degree, "edges_per_node": edges, "seconds": seconds,
                 "out": args.out},
          [f"prepared search graph: {g.n} nodes, degree {g.degree} ({edges:.1f} edges per node) in "
           f"{seconds:.2f} s -> {args.out}"])
    return 0


def add_parser(subparsers, common) -> None:
    """Add ``search`` and ``prepare`` to the ``knngraph`` command (``common(p)`` adds --json and --device)."""
    import argparse

    class Metric(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            setattr(namespace, self.dest, values)
            namespace.metric_given = True

    p = subparsers.add_parser("search", help="SONG graph search (build, save and search a SONG index)")
    p.add_argument("index_or_base", help="a saved index (.song) or a vector file (.u8bin .fbin .fvecs .npy .hdf5 ...)")
    p.add_argument("queries", nargs="?", help="query vector file (omit to only build/save an index)")
    p.add_argument("-k", type=int, help="neighbours per query")
    p.add_argument("--out", help="output ids (.ibin/.ivecs/.npy)")
    p.add_argument("--out-distances", help="output distances (.fbin/.fvecs/.npy)")
    p.add_argument("--queue-size", type=int, default=64,
                   help="speed/recall knob: larger = higher recall, fewer queries/s (default 64; >= k)")
    p.add_argument("--visited", default="hash", help="visited set: hash (default) | bloom")
    p.add_argument("--rerank", type=int, default=0, help="hashed index: candidates re-ranked exactly (0 = all)")
    p.add_argument("--graph", help="search this graph (.knng) instead of building one (vector-file input)")
    p.add_argument("--save-index", help="write the index (.song) for later searches")
    p.add_argument("--metric", default="sqeuclidean", action=Metric,
                   help="sqeuclidean | euclidean | inner_product | cosine (default: the --graph's, else sqeuclidean)")
    p.add_argument("--graph-degree", type=int, default=32, help="search graph degree (default 32)")
    p.add_argument("--intermediate-degree", type=int, default=96, help="k-NN graph degree before pruning (96)")
    p.add_argument("--build-method", default="exact", help="k-NN graph builder: exact (default) | nndescent")
    p.add_argument("--no-fill", action="store_true", help="keep only diverse edges in prepared rows")
    p.add_argument("--hash-bits", type=int, default=0,
                   help="1-bit codes of this length (64/128/256/512) on the GPU, full vectors on the host")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--base-dataset", help="HDF5 dataset name for the base (default train)")
    p.add_argument("--query-dataset", help="HDF5 dataset name for QUERIES (default test)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(metric_given=False)
    common(p)
    p.set_defaults(func=cmd_search)

    p = subparsers.add_parser("prepare", help="turn a k-NN graph into a search graph (knngraph.optimize_graph)")
    p.add_argument("graph", help="input graph (.knng)")
    p.add_argument("base", help="the vectors the graph was built on")
    p.add_argument("--degree", type=int, default=32, help="out-degree of the result (default 32)")
    p.add_argument("--alpha", type=float, default=1.0, help="pruning relaxation >= 1 (default 1)")
    p.add_argument("--no-fill", action="store_true", help="keep only diverse edges")
    p.add_argument("--reverse-candidates", type=int, default=None,
                   help="reverse input edges pruned with each row (default: the input degree; 0: none)")
    p.add_argument("--out", required=True, help="output graph (.knng)")
    p.add_argument("--base-dataset", help="HDF5 dataset name for the base (default train)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    common(p)
    p.set_defaults(func=cmd_prepare)


add_search_parser = add_parser
