"""GGNN sharded on one GPU: shards against the unsharded index, on sift-photos 770k and on a 20M x 96
synthetic set built and searched within a quarter of its size of device memory.

    python benchmarks/studies/ggnn_sharded_gpu.py --out out/ [--parts sift,synthetic-cut,synthetic-whole]
        [--shards 4] [--n-synthetic 20000000] [--cache DIR] [--queries 10000] [--repeats 3]

* ``sift``: the whole sift-photos base (770,533 rows; on the GPU machine carry .dataz770 made by
  ``scripts/prepare_device_data.py --rest770`` in a second call, see there), 10k queries with the exact
  ground truth, built unsharded and in ``--shards`` shards (GGNN defaults, k = 24), each swept over the
  query slack tau.
* ``synthetic-cut``: ``benchmarks._common.clustered(n + queries, 96, seed 0)`` (low intrinsic dimension;
  islands, or with ``--synthetic overlapping`` overlapping clusters, see
  ``benchmarks/studies/ggnn_islands_cpu.py``), the last ``--queries`` rows held out as queries, their exact
  top-10 from ``knngraph.knn`` on the GPU (saved under ``--cache``, default ``$KNNGRAPH_GGNN_CACHE`` or the
  temporary folder, for the next part). Built with ``memory_limit`` = a quarter of the vectors' bytes: the build
  picks the fewest shards whose build fits (``ggnn.shard_build_bytes``), and is searched with the same
  limit, so every call copies the shards in from host memory one after another (the paper's
  out-of-GPU-memory mode, section 5.5).
* ``synthetic-whole``: the same set built unsharded and searched resident (it fits an H100 or H200),
  for the comparison.

The parts may run in separate calls (each builds in minutes at 20M); rows: ``build`` (seconds, shards,
peak bytes in use through CuPy during the build, the limit), ``search`` (tau, recall@10 by the runner's
definition, QPS: median of --repeats calls of all queries after a warm-up call), and per index a
``summary`` with QPS at recall@10 0.90 and 0.95 (interpolated over tau). One JSON object per line to
``--out/ggnn_sharded_gpu.jsonl``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered, qps_at  # noqa: E402
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import GpuPeak, JsonLines, time_calls  # noqa: E402

TAUS = [0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0]
DIM = 96


def _synthetic(args) -> data.Dataset:
    """The synthetic set with the exact top-10 of its queries (cached under ``--cache``)."""
    import knngraph

    x = clustered(args.n_synthetic + args.queries, DIM, seed=0, overlapping=args.synthetic == "overlapping")
    base, queries = x[:args.n_synthetic], np.ascontiguousarray(x[args.n_synthetic:])
    cache = Path(args.cache) / f"truth_{args.synthetic}_{args.n_synthetic}_{args.queries}.npy"
    if cache.exists():
        truth = np.load(cache)
    else:
        truth = np.asarray(knngraph.knn(base, queries, 10, device="cuda", verbose=False).indices)
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, truth)
    return data.Dataset(f"clustered:n={args.n_synthetic},d={DIM},{args.synthetic}", base, queries, "sqeuclidean",
                        "benchmarks._common.clustered", truth)


def run(log, name, ds: data.Dataset, params, args, *, build_limit=None, search_limit=None):
    """Build ``params`` over the dataset's base (within ``build_limit``), sweep tau with its queries
    (within ``search_limit``), log build, search and summary rows."""
    import cupy as cp

    from knngraph import ggnn

    base = ds.base
    peak = GpuPeak()
    ggnn.build(params, base[:5000], device="cuda", verbose=False)  # compile the kernels first
    peak.reset()
    t = time_calls(lambda: ggnn.build(params, base, device="cuda", memory_limit=build_limit, verbose=False), 1,
                   warmup=False)
    index, build_s, t.result = t.result, t.median_s, None
    timings = (index.hierarchy or {}).get("timings", {})
    log.write(part="build", index=name, n=base.shape[0], dim=base.shape[1], seconds=build_s, shards=index.n_shards,
              shards_requested=params.n_shards, memory_limit=build_limit, vector_bytes=base.nbytes,
              peak_pool_bytes=peak.peak_bytes(),
              estimate_bytes=ggnn.shard_build_bytes(-(-base.shape[0] // index.n_shards), base.shape[1], index.params),
              mean_degree=index.graph.info.get("mean_degree"), **timings)
    qd = cp.asarray(ds.queries)
    nq = ds.nq
    points = []
    for tau in TAUS:
        sp = ggnn.SearchParams(tau=tau)
        index.release()  # resident shards are uploaded again by the warm-up call; swapped ones by every call
        t = time_calls(lambda: ggnn.search(index, qd, 10, sp, device="cuda", memory_limit=search_limit,
                                           verbose=False), args.repeats)
        r = quality.recall(ds, t.result.indices)
        points.append((r, nq / t.median_s))
        log.write(part="search", index=name, tau=tau, qps=nq / t.median_s, seconds=t.median_s,
                  first_call_s=t.first_call_s, memory_limit=search_limit, **{"recall@10": r})
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
    ap.add_argument("--cache", default=os.environ.get("KNNGRAPH_GGNN_CACHE",
                                                      str(Path(tempfile.gettempdir()) / "knngraph-ggnn")),
                    help="folder of the synthetic set's ground truth (default $KNNGRAPH_GGNN_CACHE, else a "
                         "folder in the temporary directory)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from knngraph import ggnn

    log = JsonLines(Path(args.out) / "ggnn_sharded_gpu.jsonl")
    parts = args.parts.split(",")
    if "sift" in parts:
        try:
            ds = data.load(data.sift_photos(data.SIFT_ROWS, args.queries))
        except FileNotFoundError as exc:
            sys.exit(f"{exc} (on the GPU machine: carry .dataz770, see scripts/prepare_device_data.py --rest770)")
        ds.truth(10)
        run(log, "sift770k unsharded", ds, ggnn.IndexParams(), args)
        run(log, f"sift770k {args.shards} shards", ds, ggnn.IndexParams(n_shards=args.shards), args)
    if "synthetic-cut" in parts or "synthetic-whole" in parts:
        ds = _synthetic(args)
        limit = ds.base.nbytes // 4
        tag = f"synthetic ({args.synthetic}) {args.n_synthetic // 1_000_000}M x {DIM}"
        if "synthetic-cut" in parts:
            run(log, f"{tag}, memory_limit = vectors / 4", ds, ggnn.IndexParams(), args, build_limit=limit,
                search_limit=limit)
        if "synthetic-whole" in parts:
            run(log, f"{tag}, unsharded", ds, ggnn.IndexParams(), args)


if __name__ == "__main__":
    main()
