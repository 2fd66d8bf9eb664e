"""GGNN on the clustered synthetic set of the sharded benchmark, small enough for the CPU (issue 13).

    python benchmarks/ggnn_islands_cpu.py [--n 100000] [--overlapping] [--out DIR]

``benchmarks/ggnn_sharded_gpu.py``'s 20M x 96 set (``_common.clustered``) has n/2000 Gaussian clusters
whose centres lie about 40 apart while a cluster's points spread about 10: at 20M, 10,000 islands of
2,000 points, and a k-NN graph has no edge between islands. A graph search from a few entry points then
reaches only the islands its entry points lie in, whatever its slack. This builds the same kind of set at
``--n`` rows (n/2000 clusters, at least 100) with NumPy, and prints GGNN's recall@10 (1 and 4 shards,
tau 0.5 / 1.0 / 2.0) against exact search: it stays far below its level on real data, sharded or not,
so the low recall of the 20M run is the data's, not the sharding's. ``--overlapping``: the clusters'
centres drawn in the shared subspace instead (``_common.clustered(..., overlapping=True)``), so that
clusters overlap: the fair set for the sharded benchmark (its ``--synthetic overlapping``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clustered, environment  # noqa: E402


def islands(n, overlapping=False):
    """(base, 2000 queries) of ``_common.clustered`` (96 dimensions), drawn with NumPy."""
    x = clustered(n + 2000, 96, overlapping=overlapping, xp=np)
    return x[:n], x[n:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--overlapping", action="store_true", help="clusters centred in the shared subspace")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    import knngraph
    from knngraph import ggnn
    from knngraph.evaluate import recall_at_k

    base, queries = islands(args.n, overlapping=args.overlapping)
    truth = np.asarray(knngraph.knn(base, queries, 10, device="cpu").indices)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for shards in (1, 4):
        t0 = time.perf_counter()
        index = ggnn.build(ggnn.IndexParams(n_shards=shards), base, device="cpu", verbose=False)
        build_s = time.perf_counter() - t0
        for tau in (0.5, 1.0, 2.0):
            found = ggnn.search(index, queries, 10, ggnn.SearchParams(tau=tau), device="cpu", verbose=False)
            row = {"n": args.n, "clusters": max(100, args.n // 2000), "overlapping": args.overlapping,
                   "shards": shards, "build_s": build_s,
                   "tau": tau, "recall@10": recall_at_k(np.asarray(found.indices), truth, 10), "env": environment()}
            print(json.dumps(row), flush=True)
            with open(out / "ggnn_islands_cpu.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
