"""``knngraph build --scheduler ADDRESS`` and ``knngraph search --scheduler ADDRESS``: the same commands
run on an existing Dask cluster through :mod:`knngraph.distributed` (the workers read the vector files
themselves, so every worker must see the paths)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from .. import registry
from ..cli.common import (check_input, check_output, check_outputs, emit, given_params, read_vectors,
                          write_graph_or_ids, write_ids)
from ..graph import Graph
from ._common import connect, n_workers


def _workers(client) -> int:
    return n_workers(client)


def _no_hdf5_dataset(args, *names):
    for name in names:
        if getattr(args, name, None):
            raise ValueError(f"--{name.replace('_', '-')} is not supported with --scheduler (workers read whole "
                             "vector files; use .fbin/.u8bin/.npy/... files)")


def build(args) -> int:
    """``knngraph build BASE -k K --scheduler ADDRESS --out OUT``: OUT a ``.knng`` file, ids
    (.ibin/.ivecs/.npy, with --out-distances), or a folder of ``.knng`` shards (no extension)."""
    from ._graph import knn_graph

    algorithm = registry.get(args.method)
    if not algorithm.builds_graphs:
        raise ValueError(f"unknown graph method {args.method!r}; graph builders: "
                         f"{', '.join(registry.graph_builders())}")
    _no_hdf5_dataset(args, "base_dataset")
    folder = Path(str(args.out)).suffix == ""
    if not folder:
        check_outputs(args, ("graph", "ids"))
    elif args.out_distances:
        raise ValueError("--out-distances applies to ids output; a folder of .knng shards holds the distances")
    index_params = algorithm.load().IndexParams
    fields = given_params(args, "p_", index_params, args.method, "build")
    metric = args.metric or "sqeuclidean"
    params = index_params(graph_degree=args.graph_degree, metric=metric, **fields)
    check_input(args.base, "BASE", vectors=True)
    client = connect(args.scheduler)
    try:
        t0 = time.perf_counter()
        if folder:
            knn_graph([str(args.base)], args.graph_degree, client=client, method=args.method, metric=metric,
                      params=params, out=args.out, device=args.device, memory_limit=args.memory_limit)
        else:
            d, i = knn_graph([str(args.base)], args.graph_degree, client=client, method=args.method,
                             metric=metric, params=params, device=args.device, memory_limit=args.memory_limit)
            d, i = client.compute([d, i], sync=True)
            write_graph_or_ids(args, Graph(i, d, metric, {"method": args.method}))
        seconds = time.perf_counter() - t0
        workers = _workers(client)
    finally:
        client.close()
    payload = {"task": "build", "method": args.method, "k": args.graph_degree, "metric": params.metric,
               "seconds": seconds, "scheduler": args.scheduler, "workers": workers, "out": str(args.out)}
    emit(args, payload, [f"{args.method} {args.graph_degree}-NN graph on {workers} Dask worker(s) in "
                         f"{seconds:.2f} s -> {args.out}"])
    return 0


def search(args) -> int:
    """``knngraph search INDEX_OR_BASE [QUERIES] --scheduler ADDRESS``: INDEX_OR_BASE a saved sharded index
    (a folder) or a vector file (cut into one shard per worker); ``--save-index`` writes a folder."""
    from . import _index as kd

    source = str(args.index_or_base)
    _no_hdf5_dataset(args, "base_dataset", "query_dataset")
    if args.graph:
        raise ValueError("--graph is not supported with --scheduler (shards build their own graphs)")
    searching = args.queries is not None
    if not searching and not args.save_index:
        raise ValueError("nothing to do: give QUERIES to search and/or --save-index to keep the index")
    if searching and (args.k is None or args.out is None):
        raise ValueError("searching QUERIES needs -k and --out")
    if args.out:
        check_output(args.out, "--out", ("ids",))
    if args.out_distances:
        check_output(args.out_distances, "--out-distances", ("distances",))
    is_index = Path(source).is_dir()
    if is_index:
        if any(k.startswith("i_") for k in vars(args)):
            raise ValueError("index options (such as --graph-degree) apply when building from a vector file, not to "
                             "a saved index")
        algorithm = registry.get(kd.read_manifest(source)["algorithm"])
    else:
        algorithm = registry.get(args.method or "song")
        if not algorithm.searches:
            raise ValueError(f"--method {algorithm.name} does not search; searchers: "
                             f"{', '.join(registry.searchers())}")
        check_input(source, "BASE", vectors=True)
    if args.method is not None and args.method != algorithm.name:
        raise ValueError(f"{source} is a {algorithm.name} index, not a {args.method} one")
    mod = algorithm.load()
    sp = mod.SearchParams(**given_params(args, "s_", mod.SearchParams, algorithm.name, "search")) \
        if searching else None
    if not is_index:
        fields = given_params(args, "i_", mod.IndexParams, algorithm.name, "index")
        params = mod.IndexParams(metric=args.metric or "sqeuclidean", **fields)
    client = connect(args.scheduler)
    try:
        t0 = time.perf_counter()
        if is_index:
            index = kd.load(source, client=client, metric=args.metric)
        else:
            index = kd.build(params, [source], client=client, shards=_workers(client), device=args.device,
                             memory_limit=args.memory_limit)
        index.wait()
        build_seconds = time.perf_counter() - t0
        if args.save_index:
            kd.save(args.save_index, index)
        payload = {"task": "search", "method": algorithm.name, "n": index.shape[0], "metric": index.metric,
                   "built": not is_index, "build_seconds": build_seconds, "saved_index": args.save_index,
                   "shards": len(index.shards), "scheduler": args.scheduler}
        lines = [f"{algorithm.name} index of {len(index.shards)} shards over {index.shape[0]} vectors ready in "
                 f"{build_seconds:.2f} s" + (f" -> {args.save_index}" if args.save_index else "")]
        if searching:
            queries = np.ascontiguousarray(read_vectors(args.queries, None, "QUERIES"))
            t1 = time.perf_counter()
            d, i = kd.search(index, queries, args.k, sp, device=args.device, verbose=not args.quiet)
            seconds = time.perf_counter() - t1
            write_ids(args, i, d)
            payload.update(n_queries=int(queries.shape[0]), k=args.k, search_params=dataclasses.asdict(sp),
                           search_seconds=seconds, queries_per_second=queries.shape[0] / seconds, out=args.out)
            lines.append(f"searched {queries.shape[0]} queries (k={args.k}) on {len(index.shards)} shards in "
                         f"{seconds:.3f} s ({queries.shape[0] / seconds:,.0f} queries/s) -> {args.out}")
    finally:
        client.close()
    emit(args, payload, lines)
    return 0
