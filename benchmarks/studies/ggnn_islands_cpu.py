"""GGNN on the clustered synthetic set of the sharded study, small enough for the CPU.

    python benchmarks/studies/ggnn_islands_cpu.py [--n 100000] [--overlapping] [--out DIR]

``benchmarks/studies/ggnn_sharded_gpu.py``'s 20M x 96 set (``benchmarks._common.clustered``) has n/2000
Gaussian clusters whose centres lie about 40 apart while a cluster's points spread about 10: at 20M,
10,000 islands of 2,000 points, and a k-NN graph has no edge between islands. A graph search from a few
entry points then reaches only the islands its entry points lie in, whatever its slack. This builds the
same kind of set at ``--n`` rows (n/2000 clusters, at least 100) with NumPy, and writes GGNN's recall@10
(1 and 4 shards, tau 0.5 / 1.0 / 2.0) against exact search (the runner's recall,
:mod:`benchmarks.runner.quality`) to ``ggnn_islands_cpu.jsonl``: it stays far below its level on real
data, sharded or not, so the low recall of the 20M run is the data's, not the sharding's.
``--overlapping``: the clusters' centres drawn in the shared subspace instead
(``clustered(..., overlapping=True)``), so that clusters overlap: the fair set for the sharded study (its
``--synthetic overlapping``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402


def islands(n, overlapping=False) -> data.Dataset:
    """``clustered`` (96 dimensions, drawn with NumPy): the first n rows as the base, 2000 more as queries;
    the ground truth computed on first use by ``knngraph.knn``."""
    x = clustered(n + 2000, 96, overlapping=overlapping, xp=np)
    return data.Dataset(f"clustered:n={n},d=96{',overlapping' if overlapping else ''}", x[:n], x[n:], "sqeuclidean",
                        "benchmarks._common.clustered")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--overlapping", action="store_true", help="clusters centred in the shared subspace")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    from knngraph import ggnn

    ds = islands(args.n, overlapping=args.overlapping)
    ds.truth(10)
    log = JsonLines(Path(args.out) / "ggnn_islands_cpu.jsonl")
    for shards in (1, 4):
        t = time_calls(lambda: ggnn.build(ggnn.IndexParams(n_shards=shards), ds.base, device="cpu", verbose=False), 1,
                       warmup=False)
        index, t.result = t.result, None
        for tau in (0.5, 1.0, 2.0):
            found = ggnn.search(index, ds.queries, 10, ggnn.SearchParams(tau=tau), device="cpu", verbose=False)
            log.write(n=args.n, clusters=max(100, args.n // 2000), overlapping=args.overlapping, shards=shards,
                      build_s=t.median_s, tau=tau, **{"recall@10": quality.recall(ds, found.indices)})


if __name__ == "__main__":
    main()
