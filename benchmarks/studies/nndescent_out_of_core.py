"""Out-of-core NN-Descent over clusters against the in-memory build: time, partition time, rows built and
graph recall, for the border rule of the cluster assignment (``cluster_overlap``, ``cluster_margin``).

    NUMBA_NUM_THREADS=2 python benchmarks/studies/nndescent_out_of_core.py --n 400000 --out out/
    python benchmarks/studies/nndescent_out_of_core.py --device cuda --n 10000000 --out out/   # on a GPU

Data (``--data``): ``clustered``, ``benchmarks._common.clustered(n, d, overlapping=True)`` (n/2000
Gaussian clusters, at least 100, whose centres lie in the shared 12-dimensional subspace, so neighbouring
clusters overlap and k-means cuts through dense regions; generated with NumPy on the CPU, with CuPy for
``--device cuda``), or ``synth``, the runner's ``synth:n=N`` set (:class:`benchmarks.runner.synthetic.
GaussianMixture`: n/2000 separate islands; the set of the README's out-of-core row). k = 32.

One build per ``--variants`` entry: ``in_memory`` (no memory limit: the reference), ``default`` (the
library's defaults) or comma-separated ``IndexParams`` overrides, each with ``out_of_core='clusters'``
and ``memory_limit`` = ``--memory-fraction`` of the data's bytes, e.g. ``cluster_margin=none`` (every
row in its ``cluster_overlap`` nearest clusters: the rule before the border test),
``cluster_margin=0.1``, ``cluster_overlap=2``. Each line has the build's seconds (and their ratio to the
in-memory build's), the partition's seconds by step (k-means; the assignment pass; the split into
pieces), the pieces' build and merge seconds, the clusters, pieces, neighbourhood radius and border
distance, rows built per row (``copies``) and graph recall@10 and @k (the runner's
:class:`benchmarks.runner.quality.GraphTruth`: ``--sample-nodes`` nodes whose exact neighbours come
from brute force on ``--device``). Every kernel is compiled on a small set first. One JSON line per
build in ``nndescent_out_of_core.jsonl`` under --out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner import quality  # noqa: E402
from benchmarks.runner.cli import parse_overrides  # noqa: E402
from benchmarks.runner.measure import JsonLines  # noqa: E402

DEFAULT_VARIANTS = ("in_memory;cluster_overlap=3,cluster_margin=none;cluster_overlap=2,cluster_margin=none;"
                    "cluster_margin=0.1;cluster_margin=0.15;default;cluster_margin=0.3")
#: the info fields of an out-of-core build that each line keeps
INFO_KEYS = ("clusters", "pieces", "overlap", "margin", "neighbour_radius", "border_distance", "copies", "rows_built",
             "piece_rows_max", "piece_rows_mean", "max_piece_rows", "partition_seconds", "partition_seconds_by_step",
             "partition_load_seconds", "partition_load_wait_seconds", "pieces_build_seconds", "pieces_merge_seconds",
             "pieces_fold_seconds", "pieces_load_seconds", "pieces_load_wait_seconds", "piece_iterations")


def make_data(kind: str, n: int, d: int, seed: int, device: str):
    """The base set (host float32) and a description of it."""
    if kind == "clustered":
        xp = np if device == "cpu" else None  # None: CuPy generates it (another random stream)
        centres = max(100, n // 2000)
        return (clustered(n, d, seed=seed, overlapping=True, xp=xp),
                {"data": "clustered", "centres": centres, "generated_with": "numpy" if xp is np else "cupy"})
    if kind == "synth":
        from benchmarks.runner.synthetic import GaussianMixture

        centres = GaussianMixture.default_clusters(n)
        return GaussianMixture(d, centres, seed=seed).sample(n, stream=0), {"data": "synth", "centres": centres}
    raise ValueError(f"--data must be 'clustered' or 'synth', got {kind!r}")


def build(base, k, overrides, device, memory_limit, truth) -> dict:
    """One build: in memory (``overrides`` None) or out of core over clusters with ``overrides``."""
    from knngraph import nndescent

    if overrides is None:
        params = nndescent.IndexParams(graph_degree=k)
        limit = None
    else:
        params = nndescent.IndexParams(**{"graph_degree": k, "out_of_core": "clusters", **overrides})
        limit = memory_limit
    t0 = time.perf_counter()
    index = nndescent.build(params, base, device=device, memory_limit=limit, verbose=False)
    seconds = time.perf_counter() - t0
    info = index.graph.info
    ids = index.graph.indices
    row = {"seconds": seconds, "recall@10": truth.recall(ids, 10), f"recall@{k}": truth.recall(ids, k),
           "cluster_overlap": params.cluster_overlap, "cluster_margin": params.cluster_margin,
           "out_of_core": info.get("out_of_core")}
    if overrides is None:
        row["iterations"] = info.get("iterations")
    else:
        row.update({key: info[key] for key in INFO_KEYS if key in info})
        row["memory_limit_bytes"] = memory_limit
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--data", default="clustered", choices=("clustered", "synth"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--memory-fraction", type=float, default=0.25,
                    help="memory_limit of the out-of-core builds as a share of the data's bytes")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS,
                    help="';'-separated builds: 'in_memory', 'default' or comma-separated IndexParams overrides")
    ap.add_argument("--seed", type=int, default=0, help="seed of the data")
    ap.add_argument("--sample-nodes", type=int, default=1000)
    ap.add_argument("--out", default="out")
    args = ap.parse_args(argv)

    import knngraph

    k = args.k
    variants = [(spec.strip(), None if spec.strip() == "in_memory" else parse_overrides(spec))
                for spec in args.variants.split(";") if spec.strip()]
    log = JsonLines(Path(args.out) / "nndescent_out_of_core.jsonl")
    # compile every kernel first: an in-memory build and a clustered out-of-core one of a small set
    warm, _ = make_data(args.data, 30_000, args.d, args.seed + 1, args.device)
    knngraph.knn_graph(warm, k, method="nndescent", device=args.device, verbose=False)
    knngraph.knn_graph(warm, k, method="nndescent", device=args.device, verbose=False, out_of_core="clusters",
                       memory_limit=warm.nbytes // 4)
    t0 = time.perf_counter()
    base, described = make_data(args.data, args.n, args.d, args.seed, args.device)
    data_s = time.perf_counter() - t0
    truth = quality.GraphTruth(base, "sqeuclidean", k, sample=args.sample_nodes, device=args.device)
    memory_limit = int(base.nbytes * args.memory_fraction)
    common = {"n": args.n, "d": args.d, "k": k, **described, "device": args.device, "data_seconds": data_s,
              "memory_fraction": args.memory_fraction, "sample_nodes": args.sample_nodes}
    if args.device == "cpu":
        import numba

        common["threads"] = numba.get_num_threads()
    in_memory_s = None
    for name, overrides in variants:
        row = build(base, k, overrides, args.device, memory_limit, truth)
        if overrides is None:
            in_memory_s = row["seconds"]
        elif in_memory_s:
            row["vs_in_memory"] = row["seconds"] / in_memory_s
        log.write(**common, variant=name, **row)


if __name__ == "__main__":
    main()
