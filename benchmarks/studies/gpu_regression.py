"""The speed guard: the few GPU numbers a refactor must not move (run before and after, compare as ratios).

    python benchmarks/studies/gpu_regression.py --out out/            # on a machine with an NVIDIA GPU

Writes ``gpu_regression.jsonl`` to --out, one line per measurement:

1. exact k-NN, 1M x 128 float32 (seeded Gaussian, resident on the GPU), 10k queries, k=10 and k=100,
   next to the GEMM of the same tiles alone;
2. the exact k=64 graph of sift-photos 450k (uint8, resident);
3. NN-Descent on sift-photos 450k, k=64, exactly 6 iterations, graph recall@10 on 2,000 sampled nodes;
4. the SONG-prepared graph (exact 96-NN pruned to degree 32) and the default searcher's queue-size sweep
   on it: recall@10 and queries/s for all 10k queries per call (host queries, resident index).

Timing: the runner's protocol (:func:`benchmarks.runner.measure.time_calls`: one warm-up call, then the
median of --repeats calls); recall: the runner's (:mod:`benchmarks.runner.quality`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402


def _nndescent_build(xs, k, iterations):
    from knngraph import nndescent

    # lists of k entries (k >= 32 here): the same work as the older trees this guard is compared with, whose
    # automatic lists were max(32, k) long (they are 2k long now: see nndescent.IndexParams)
    params = nndescent.IndexParams(graph_degree=k, intermediate_graph_degree=k, max_iterations=iterations,
                                   termination_threshold=0.0)
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
        t = time_calls(lambda: knngraph.knn(base, queries, k, device="cuda", verbose=False), args.repeats)
        t_gemm = time_calls(lambda: [cp.matmul(queries, base[s:s + tile].T) for s in range(0, n, tile)], args.repeats)
        log.write(part="exact_knn", n=n, nq=nq, d=d, k=k, seconds=t.median_s, first_call_s=t.first_call_s,
                  gemm_s=t_gemm.median_s, **tag)
    base = queries = t = t_gemm = None
    cp.get_default_memory_pool().free_all_blocks()

    # 2. exact graph, sift-photos 450k
    ds = data.load("sift-photos-450k")
    xs = cp.asarray(ds.base)
    if "graph" in parts:
        t = time_calls(lambda: knngraph.knn_graph(xs, 64, device="cuda", verbose=False), args.repeats)
        log.write(part="exact_graph", n=xs.shape[0], k=64, seconds=t.median_s, first_call_s=t.first_call_s, **tag)

    # 3. NN-Descent, 6 iterations
    if "nndescent" in parts:
        _part_nndescent(args, log, tag, xs)
    if "song" in parts:
        _part_song(args, log, tag, xs, ds)


def _part_nndescent(args, log, tag, xs):
    t = time_calls(lambda: _nndescent_build(xs, 64, 6), max(3, args.repeats // 2))
    truth = quality.GraphTruth(xs, "sqeuclidean", 10, sample=2000, device="cuda")
    log.write(part="nndescent", n=xs.shape[0], k=64, iterations=6, seconds=t.median_s, first_call_s=t.first_call_s,
              graph_recall_at_10=truth.recall(t.result.indices), **tag)


def _part_song(args, log, tag, xs, ds):
    import cupy as cp

    import knngraph
    from knngraph import song

    # 4. SONG-prepared graph and the searcher's sweep
    t = time_calls(lambda: knngraph.knn_graph(xs, 96, device="cuda", verbose=False), 1)
    raw96 = t.result
    t_opt = time_calls(lambda: knngraph.optimize_graph(raw96, xs, 32, device="cuda", verbose=False), 1)
    prepared = t_opt.result
    log.write(part="song_graph", exact96_s=t.median_s, optimize_s=t_opt.median_s,
              optimize_first_call_s=t_opt.first_call_s, **tag)
    index = song.from_graph(knngraph.Graph(cp.asnumpy(prepared.indices), cp.asnumpy(prepared.distances),
                                           prepared.metric), xs, device="cuda")
    sq = ds.queries
    for qs in (16, 24, 32, 48, 64, 96, 128):
        sp = song.SearchParams(queue_size=qs)
        t = time_calls(lambda: song.search(index, sq, 10, sp, device="cuda", verbose=False), args.repeats)
        log.write(part="song_sweep", queue_size=qs, seconds=t.median_s, qps=ds.nq / t.median_s,
                  recall_at_10=quality.recall(ds, t.result.indices), **tag)
    for qs, batch in ((32, 1), (32, 10), (32, 100), (32, 1000)):
        sp = song.SearchParams(queue_size=qs)
        t = time_calls(lambda: song.search(index, sq[:batch], 10, sp, device="cuda", verbose=False), args.repeats * 4)
        log.write(part="song_batch", queue_size=qs, batch=batch, ms_per_call=t.median_s * 1e3, **tag)


if __name__ == "__main__":
    main()
