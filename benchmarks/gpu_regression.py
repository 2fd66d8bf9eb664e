"""The speed guard: the few GPU numbers a refactor must not move (run before and after, compare as ratios).

    python benchmarks/gpu_regression.py --out out/            # on a machine with an NVIDIA GPU

Writes ``gpu_regression.jsonl`` to --out, one line per measurement:

1. exact k-NN, 1M x 128 float32 (seeded Gaussian, resident on the GPU), 10k queries, k=10 and k=100,
   next to the GEMM of the same tiles alone;
2. the exact k=64 graph of sift-photos 450k (uint8, resident);
3. NN-Descent on sift-photos 450k, k=64, exactly 6 iterations, graph recall@10 on 2,000 sampled nodes;
4. the SONG-prepared graph (exact 96-NN pruned to degree 32) and the default searcher's queue-size sweep
   on it: recall@10 and queries/s for all 10k queries per call (host queries, resident index).

Timing protocol of ``_common.timed``: one warm-up call, then the median of --repeats calls.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JsonLines, load_sift, timed  # noqa: E402


def _nndescent_build(xs, k, iterations):
    from knngraph import nndescent

    params = nndescent.IndexParams(graph_degree=k, max_iterations=iterations, termination_threshold=0.0)
    return nndescent.build(params, xs, device="cuda", verbose=False).graph


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--label", default="", help="a name for this run (e.g. the commit)")
    ap.add_argument("--parts", default="exact,graph,nndescent,song", help="comma-separated parts to run")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    import cupy as cp

    import knngraph

    log = JsonLines(Path(args.out) / "gpu_regression.jsonl")
    tag = {"label": args.label}

    # 1. exact k-NN against the GEMM alone
    n, nq, d = 1_000_000, 10_000, 128
    rng = cp.random.default_rng(0)
    base = rng.standard_normal((n, d), dtype=cp.float32)
    queries = rng.standard_normal((nq, d), dtype=cp.float32)
    tile = 1 << 17
    for k in ((10, 100) if "exact" in parts else ()):
        t, first, _ = timed(lambda: knngraph.knn(base, queries, k, device="cuda", verbose=False), args.repeats)
        t_gemm, _, _ = timed(lambda: [cp.matmul(queries, base[s:s + tile].T) for s in range(0, n, tile)],
                             args.repeats)
        log.write(part="exact_knn", n=n, nq=nq, d=d, k=k, seconds=t, first_call_s=first, gemm_s=t_gemm, **tag)
    del base, queries
    cp.get_default_memory_pool().free_all_blocks()

    # 2. exact graph, sift-photos 450k
    sift, sq, gt = load_sift(450_000)
    xs = cp.asarray(sift)
    if "graph" in parts:
        t, first, raw = timed(lambda: knngraph.knn_graph(xs, 64, device="cuda", verbose=False), args.repeats)
        log.write(part="exact_graph", n=xs.shape[0], k=64, seconds=t, first_call_s=first, **tag)

    # 3. NN-Descent, 6 iterations
    if "nndescent" in parts:
        _part_nndescent(args, log, tag, xs)
    if "song" in parts:
        _part_song(args, log, tag, xs, sift, sq, gt)


def _part_nndescent(args, log, tag, xs):
    import cupy as cp

    import knngraph
    from knngraph.evaluate import recall_at_k

    t, first, g = timed(lambda: _nndescent_build(xs, 64, 6), max(3, args.repeats // 2))
    sample = np.random.default_rng(0).choice(xs.shape[0], 2000, replace=False)
    true_d, true_i = knngraph.knn(xs, xs[cp.asarray(sample)], 11, device="cuda", verbose=False)
    ti, td = cp.asnumpy(true_i)[:, 1:], cp.asnumpy(true_d)[:, 1:]
    gi = cp.asnumpy(g.indices)[sample, :10]
    gd = cp.asnumpy(g.distances)[sample, :10]
    rec = recall_at_k(gi, ti, 10, distances=gd, true_distances=td)
    log.write(part="nndescent", n=xs.shape[0], k=64, iterations=6, seconds=t, first_call_s=first,
              graph_recall_at_10=rec, **tag)


def _part_song(args, log, tag, xs, sift, sq, gt):
    import cupy as cp

    import knngraph
    from knngraph import song
    from knngraph.evaluate import recall_at_k

    # 4. SONG-prepared graph and the searcher's sweep
    t, first, raw96 = timed(lambda: knngraph.knn_graph(xs, 96, device="cuda", verbose=False), 1)
    t_opt, first_opt, prepared = timed(lambda: knngraph.optimize_graph(raw96, xs, 32, device="cuda", verbose=False),
                                       1)
    log.write(part="song_graph", exact96_s=t, optimize_s=t_opt, optimize_first_call_s=first_opt, **tag)
    index = song.from_graph(knngraph.Graph(cp.asnumpy(prepared.indices), cp.asnumpy(prepared.distances),
                                           prepared.metric), xs, device="cuda")
    sq = np.ascontiguousarray(sq)
    true_d10 = ((sift[gt[:, :10]].astype(np.float32) - sq[:, None, :].astype(np.float32)) ** 2).sum(-1)
    for qs in (16, 24, 32, 48, 64, 96, 128):
        sp = song.SearchParams(queue_size=qs)
        t, first, (dist, ids) = timed(lambda: song.search(index, sq, 10, sp, device="cuda", verbose=False),
                                      args.repeats)
        rec = recall_at_k(ids, gt[:, :10], 10, distances=dist, true_distances=true_d10)
        log.write(part="song_sweep", queue_size=qs, seconds=t, qps=sq.shape[0] / t, recall_at_10=rec, **tag)
    for qs, batch in ((32, 1), (32, 10), (32, 100), (32, 1000)):
        sp = song.SearchParams(queue_size=qs)
        t, _, _ = timed(lambda: song.search(index, sq[:batch], 10, sp, device="cuda", verbose=False),
                        args.repeats * 4)
        log.write(part="song_batch", queue_size=qs, batch=batch, ms_per_call=t * 1e3, **tag)


if __name__ == "__main__":
    main()
