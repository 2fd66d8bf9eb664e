"""GGNN sharded on one GPU (issue 13): shards against the unsharded index, on sift-photos 770k and on a
20M x 96 synthetic set built and searched within a quarter of its size of device memory.

    python benchmarks/ggnn_sharded_gpu.py --out out/ [--parts sift,synthetic-cut,synthetic-whole]
        [--shards 4] [--n-synthetic 20000000] [--cache /root/ggnn_synthetic] [--queries 10000] [--repeats 3]

* ``sift``: the whole sift-photos base (770,533 rows; on the GPU machine carry .dataz770 made by
  ``scripts/prepare_device_data.py --rest770`` in a second call, see there), 10k queries with the exact
  ground truth, built unsharded and in ``--shards`` shards (GGNN defaults, k = 24), each swept over the
  query slack tau.
* ``synthetic-cut``: ``_common.clustered(n + queries, 96, seed 0)`` (low intrinsic dimension; islands, or with
  ``--synthetic overlapping`` overlapping clusters, see ``benchmarks/ggnn_islands_cpu.py``), the last
  ``--queries`` rows held out as queries, their exact top-10 from ``knngraph.knn`` on the GPU (saved under
  ``--cache`` for the next part). Built with ``memory_limit`` = a quarter of the vectors' bytes: the build
  picks the fewest shards whose build fits (``ggnn.shard_build_bytes``), and is searched with the same
  limit, so every call copies the shards in from host memory one after another (the paper's
  out-of-GPU-memory mode, section 5.5).
* ``synthetic-whole``: the same set built unsharded and searched resident (it fits an H100 or H200),
  for the comparison.

The parts may run in separate calls (each builds in minutes at 20M); rows: ``build`` (seconds, shards,
peak bytes of CuPy's pool during the build, the limit), ``search`` (tau, recall@10, QPS: median of
--repeats calls of all queries after a warm-up call), and per index a ``summary`` with QPS at recall@10
0.90 and 0.95 (interpolated over tau). One JSON object per line to ``--out/ggnn_sharded_gpu.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SIFT_ROWS, JsonLines, clustered, gpu_peak_tracker, load_sift, qps_at, sync, timed  # noqa: E402

TAUS = [0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0]
DIM = 96


def _synthetic(args):
    """(base, queries, exact top-10 ids) of the synthetic set; the truth cached under ``--cache``."""
    import knngraph

    x = clustered(args.n_synthetic + args.queries, DIM, seed=0, overlapping=args.synthetic == "overlapping")
    base, queries = x[:args.n_synthetic], np.ascontiguousarray(x[args.n_synthetic:])
    cache = Path(args.cache) / f"truth_{args.synthetic}_{args.n_synthetic}_{args.queries}.npy"
    if cache.exists():
        return base, queries, np.load(cache)
    truth = np.asarray(knngraph.knn(base, queries, 10, device="cuda", verbose=False).indices)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, truth)
    return base, queries, truth


def run(log, name, base, queries, truth, params, args, *, build_limit=None, search_limit=None):
    """Build ``params`` over base (within ``build_limit``), sweep tau with queries (within
    ``search_limit``), log build, search and summary rows."""
    import cupy as cp

    from knngraph import ggnn
    from knngraph.evaluate import recall_at_k

    peak = gpu_peak_tracker()
    ggnn.build(params, base[:5000], device="cuda", verbose=False)  # compile the kernels first
    peak.reset()
    t0 = time.perf_counter()
    index = ggnn.build(params, base, device="cuda", memory_limit=build_limit, verbose=False)
    sync()
    build_s = time.perf_counter() - t0
    timings = (index.hierarchy or {}).get("timings", {})
    log.write(part="build", index=name, n=base.shape[0], dim=base.shape[1], seconds=build_s, shards=index.n_shards,
              shards_requested=params.n_shards, memory_limit=build_limit, vector_bytes=base.nbytes,
              peak_pool_bytes=peak.peak_bytes() - peak.base,
              estimate_bytes=ggnn.shard_build_bytes(-(-base.shape[0] // index.n_shards), base.shape[1], index.params),
              mean_degree=index.graph.info.get("mean_degree"), **timings)
    qd = cp.asarray(queries)
    nq = queries.shape[0]
    points = []
    for tau in TAUS:
        sp = ggnn.SearchParams(tau=tau)
        index.release()  # resident shards are uploaded again by the warm-up call; swapped ones by every call
        sec, first, res = timed(lambda: ggnn.search(index, qd, 10, sp, device="cuda", memory_limit=search_limit,
                                                    verbose=False), args.repeats)
        r = recall_at_k(cp.asnumpy(res.indices), truth, 10)
        points.append((r, nq / sec))
        log.write(part="search", index=name, tau=tau, qps=nq / sec, seconds=sec, first_call_s=first,
                  memory_limit=search_limit, **{"recall@10": r})
    log.write(part="summary", index=name, build_s=build_s, shards=index.n_shards, best_recall=max(points)[0],
              qps_at_0_90=qps_at(points, 0.90), qps_at_0_95=qps_at(points, 0.95))
    index.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--parts", default="sift,synthetic-cut,synthetic-whole")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--n-synthetic", type=int, default=20_000_000)
    ap.add_argument("--synthetic", choices=["islands", "overlapping"], default="islands",
                    help="clusters as separate islands (the recorded 20M run) or overlapping (_common.clustered)")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--cache", default="/root/ggnn_synthetic")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from knngraph import ggnn

    log = JsonLines(Path(args.out) / "ggnn_sharded_gpu.jsonl")
    parts = args.parts.split(",")
    if "sift" in parts:
        base, queries, gt = load_sift(SIFT_ROWS)
        if base.shape[0] != SIFT_ROWS:
            sys.exit(f"sift-photos has {base.shape[0]} rows here, not {SIFT_ROWS}: carry .dataz770")
        queries, gt = queries[:args.queries], gt[:args.queries]
        run(log, "sift770k unsharded", base, queries, gt, ggnn.IndexParams(), args)
        run(log, f"sift770k {args.shards} shards", base, queries, gt, ggnn.IndexParams(n_shards=args.shards), args)
    if "synthetic-cut" in parts or "synthetic-whole" in parts:
        base, queries, truth = _synthetic(args)
        limit = base.nbytes // 4
        tag = f"synthetic ({args.synthetic}) {args.n_synthetic // 1_000_000}M x {DIM}"
        if "synthetic-cut" in parts:
            run(log, f"{tag}, memory_limit = vectors / 4", base, queries, truth, ggnn.IndexParams(), args,
                build_limit=limit, search_limit=limit)
        if "synthetic-whole" in parts:
            run(log, f"{tag}, unsharded", base, queries, truth, ggnn.IndexParams(), args)


if __name__ == "__main__":
    main()
