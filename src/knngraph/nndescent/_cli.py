"""``knngraph build``: a k-NN graph from a vector file to a graph file (NN-Descent by default).

    knngraph build base.u8bin -k 32 --out graph.knng                      # NN-Descent, GPU if there is one
    knngraph build base.fbin -k 16 --method exact --out graph.knng
    knngraph build base.u8bin -k 32 --memory-limit 2GB --out graph.knng   # out-of-core when it does not fit
    knngraph eval graph.knng --base base.u8bin --sample 1000              # graph recall@10

Hooked into ``knngraph.cli`` through :func:`add_parser`.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["add_parser", "cmd_build"]


def cmd_build(args) -> int:
    import knngraph
    from knngraph import io

    from .._api import GRAPH_METHODS
    from ..cli import _emit

    base = io.read(args.base, dataset=args.base_dataset) if args.base_dataset else io.read(args.base)
    if args.method not in GRAPH_METHODS:
        raise ValueError(f"unknown graph method {args.method!r}; available: {', '.join(sorted(GRAPH_METHODS))}")
    kw = {"memory_limit": args.memory_limit}
    if args.method == "nndescent":
        kw.update(sample_size=args.sample_size, max_iterations=args.max_iterations,
                  termination_threshold=args.threshold, update=args.update, init=args.init, seed=args.seed,
                  out_of_core=args.out_of_core, cluster_overlap=args.cluster_overlap)
    t0 = time.perf_counter()
    g = knngraph.knn_graph(base, args.k, method=args.method, metric=args.metric, device=args.device,
                           verbose=not args.quiet, **kw)
    seconds = time.perf_counter() - t0
    g = g.to_host()
    if str(args.out).endswith(".knng"):
        g.save(args.out)
    else:
        io.write(args.out, np.ascontiguousarray(g.indices))
        if args.out_distances:
            io.write(args.out_distances, np.ascontiguousarray(g.distances))
    info = {key: g.info[key] for key in ("iterations", "sample_size", "update", "init", "out_of_core", "shards",
                                         "merges", "pieces") if key in g.info}
    payload = {"task": "build", "method": args.method, "n": int(base.shape[0]), "k": args.k, "metric": g.metric,
               "seconds": seconds, "device": g.info.get("device"), "out": args.out, **info}
    extra = ", ".join(f"{key}={value}" for key, value in info.items())
    _emit(args, payload, [f"{args.method} {args.k}-NN graph of {base.shape[0]} vectors in {seconds:.2f} s "
                          f"({payload['device']}{', ' + extra if extra else ''}) -> {args.out}"])
    return 0


def add_parser(subparsers, common) -> None:
    """Add ``build`` to the ``knngraph`` command (``common(p)`` adds --json and --device)."""
    p = subparsers.add_parser("build", help="build a k-NN graph (NN-Descent by default) from a vector file")
    p.add_argument("base", help="vector file: .fvecs .bvecs .fbin .u8bin .i8bin .npy .hdf5 ...")
    p.add_argument("-k", type=int, required=True, help="graph degree (neighbours per node)")
    p.add_argument("--method", default="nndescent", help="graph builder: nndescent (default) or exact")
    p.add_argument("--metric", default="sqeuclidean", help="sqeuclidean | euclidean | inner_product | cosine")
    p.add_argument("--out", required=True, help="graph file (.knng), or ids (.ibin/.ivecs/.npy)")
    p.add_argument("--out-distances", help="with ids output: distances (.fbin/.fvecs/.npy)")
    p.add_argument("--sample-size", type=int, default=0, help="nndescent: samples p per list (0 = auto)")
    p.add_argument("--max-iterations", type=int, default=20, help="nndescent: iteration cap (default 20)")
    p.add_argument("--threshold", type=float, default=0.001,
                   help="nndescent: stop when fewer than this share of list entries changed (default 0.001)")
    p.add_argument("--update", default="auto", help="nndescent: auto | all | selective")
    p.add_argument("--init", default="auto", help="nndescent: auto | random | rp_forest (CPU only) | cluster_windows "
                   "(GPU only); auto: rp_forest on the CPU, random on the GPU")
    p.add_argument("--seed", type=int, default=0, help="nndescent: random seed (default 0)")
    p.add_argument("--memory-limit", default=None, help="most working memory, e.g. 8GB (larger data: in parts)")
    p.add_argument("--out-of-core", default="auto",
                   help="nndescent, data larger than --memory-limit: auto | clusters | shard_pairs (default auto)")
    p.add_argument("--cluster-overlap", type=int, default=3,
                   help="nndescent --out-of-core clusters: nearest clusters each row joins (default 3)")
    p.add_argument("--base-dataset", help="HDF5 dataset name for BASE (default train)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    common(p)
    p.set_defaults(func=cmd_build)
