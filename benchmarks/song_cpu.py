"""SONG on the CPU (numba, queries in parallel) next to hnswlib, same run, same threads (issue 4).

    python benchmarks/song_cpu.py --out out/ [--quick] [--threads 2]

sift-photos 100k (uint8, squared L2), 10k queries, k=10. Writes ``song_cpu.jsonl`` and ``song_cpu.png``.
Curves of recall@10 against queries per second:
* SONG on the exact 96-NN graph prepared by knngraph.optimize_graph to degree 32 (the defaults: rows
  pruned with their reverse k-NN edges), ``fill=True`` and ``fill=False``, sweeping queue_size;
* the earlier preparation (first 64 columns, forward candidates only: ``reverse_candidates=0``);
* SONG on the unprepared graph (first 32 columns of the exact k-NN graph);
* hnswlib (M=16, ef_construction=200), sweeping ef.
Build times are reported separately (the exact graph is the expensive part here; any builder works).
Every search is timed as the median of --repeats calls after a warm-up call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JsonLines, load_sift, timed  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args()
    import numba

    import knngraph
    from knngraph import song
    from knngraph.evaluate import recall_at_k

    numba.set_num_threads(args.threads)
    out = Path(args.out)
    log = JsonLines(out / "song_cpu.jsonl")
    base, queries, gt = load_sift(args.n)
    if args.quick:
        queries, gt = queries[:2000], gt[:2000]
    diff = base[gt[:, :10]].astype(np.float32) - queries[:, None, :].astype(np.float32)
    gt_d = (diff * diff).sum(-1)
    nq = queries.shape[0]

    t0 = time.perf_counter()
    raw = knngraph.knn_graph(base, 96, device="cpu", verbose=False)
    t1 = time.perf_counter()
    graphs = {}
    for fill in (True, False):
        t = time.perf_counter()
        graphs[fill] = knngraph.optimize_graph(raw, base, graph_degree=32, fill=fill, device="cpu", verbose=False)
        log.write(part="build", what=f"optimize_graph fill={fill}", seconds=time.perf_counter() - t,
                  edges_per_node=float((graphs[fill].indices >= 0).sum(1).mean()))
    log.write(part="build", what="exact 96-NN graph", seconds=t1 - t0, threads=args.threads)
    raw64 = knngraph.Graph(np.ascontiguousarray(raw.indices[:, :64]), np.ascontiguousarray(raw.distances[:, :64]))
    before = knngraph.optimize_graph(raw64, base, graph_degree=32, reverse_candidates=0, device="cpu", verbose=False)
    unprepared = knngraph.Graph(np.ascontiguousarray(raw.indices[:, :32]), np.ascontiguousarray(raw.distances[:, :32]))

    curves = {}

    def sweep(name, index, qsizes):
        curves[name] = []
        for qs in qsizes:
            st = {}
            sp = song.SearchParams(queue_size=qs)
            sec, first, (d, i) = timed(lambda: song.search(index, queries, 10, sp, device="cpu", verbose=False),
                                       args.repeats)
            song.search(index, queries[:1000], 10, sp, device="cpu", verbose=False, stats=st)
            r = recall_at_k(i, gt, 10, distances=d, true_distances=gt_d)
            log.write(part=name, queue_size=qs, qps=nq / sec, seconds=sec, first_call_s=first, **{"recall@10": r},
                      distances_per_query=st["distances_per_query"], expansions_per_query=st["expansions_per_query"],
                      threads=args.threads)
            curves[name].append((r, nq / sec))

    qs_list = [10, 16, 24, 32, 48, 64, 96, 128] if not args.quick else [16, 32, 64, 128]
    sweep("SONG prepared (fill)", song.from_graph(graphs[True], base, device="cpu"), qs_list)
    sweep("SONG prepared (no fill)", song.from_graph(graphs[False], base, song.IndexParams(fill=False), device="cpu"),
          [q for q in qs_list if q >= 16] + [192])
    sweep("SONG k-NN 64, forward only (before)", song.from_graph(before, base, song.IndexParams(), device="cpu"),
          [16, 32, 64, 128] if args.quick else [16, 24, 32, 48, 64, 96, 128])
    sweep("SONG unprepared k-NN", song.from_graph(unprepared, base, song.IndexParams(), device="cpu"),
          [16, 32, 64, 128, 256])

    try:
        import hnswlib
    except ImportError:
        log.write(part="hnswlib", error="hnswlib not installed (pip install knngraph[bench])")
        hnswlib = None
    if hnswlib is not None:
        t = time.perf_counter()
        h = hnswlib.Index(space="l2", dim=base.shape[1])
        h.init_index(max_elements=base.shape[0], M=16, ef_construction=200, random_seed=0)
        h.set_num_threads(args.threads)
        h.add_items(base.astype(np.float32))
        log.write(part="build", what="hnswlib M=16 efC=200", seconds=time.perf_counter() - t, threads=args.threads)
        qf = queries.astype(np.float32)
        curves["hnswlib (M=16)"] = []
        for ef in ([10, 16, 24, 32, 48, 64, 96, 128, 192] if not args.quick else [16, 32, 64, 128]):
            h.set_ef(max(ef, 10))

            def q():
                i, d = h.knn_query(qf, k=10, num_threads=args.threads)
                return d, i

            sec, first, (d, i) = timed(q, args.repeats)
            r = recall_at_k(i.astype(np.int64), gt, 10, distances=d, true_distances=gt_d)
            log.write(part="hnswlib", ef=ef, qps=nq / sec, seconds=sec, **{"recall@10": r}, threads=args.threads)
            curves["hnswlib (M=16)"].append((r, nq / sec))
    plot(out / "song_cpu.png", curves, args.threads, args.n)


def plot(path, curves, threads, n):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        print("matplotlib not available: no plot")
        return
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, pts in curves.items():
        r, q = zip(*pts)
        ax.plot(r, q, marker="o", label=name)
    ax.set_yscale("log")
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second")
    ax.set_title(f"CPU, sift-photos {n // 1000}k, k=10, {threads} threads")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
