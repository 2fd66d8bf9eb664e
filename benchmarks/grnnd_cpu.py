"""GRNND on the CPU (numba, vertices in parallel) next to hnswlib and pynndescent, same run, same
threads (issue 14).

    python benchmarks/grnnd_cpu.py --out out/ [--quick] [--threads 2] [--n 100000]

sift-photos 100k (uint8, squared L2), 10k queries (2k with --quick), k=10. Writes ``grnnd_cpu.jsonl`` and
``grnnd_cpu.png``. For each route to a searchable index: its build time, then recall@10 against queries
per second:
* GRNND (defaults), searched as built by SONG's CPU search (``song.from_graph``);
* NN-Descent k=96 + ``optimize_graph`` to degree 32, searched by SONG;
* hnswlib (M=16, ef_construction=200), sweeping ef;
* pynndescent (n_neighbors=30, its own graph search after ``prepare``), sweeping epsilon.
Builds are timed once after a small warm-up build (JIT compilation, reported as ``first_call_s``);
searches as the median of --repeats calls after a warm-up call.
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
from grnnd_gpu import plot  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--skip", default="", help="comma-separated routes to skip: nndescent,hnswlib,pynndescent")
    args = ap.parse_args()
    import numba

    import knngraph
    from knngraph import grnnd, song
    from knngraph.evaluate import recall_at_k

    numba.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))
    out = Path(args.out)
    log = JsonLines(out / "grnnd_cpu.jsonl")
    base, queries, gt = load_sift(args.n)
    if args.quick:
        queries, gt = queries[:2000], gt[:2000]
    gt = gt[:, :10]
    diff = base[gt].astype(np.float32) - queries[:, None, :].astype(np.float32)
    gt_d = (diff * diff).sum(-1)
    nq = queries.shape[0]
    curves, builds = {}, {}

    def record(name, search, params):
        curves[name] = []
        for value in params:
            sec, first, (d, i) = timed(lambda: search(value), args.repeats)
            r = recall_at_k(np.asarray(i).astype(np.int64), gt, 10, distances=d, true_distances=gt_d)
            log.write(part="search", route=name, param=value, qps=nq / sec, seconds=sec, **{"recall@10": r},
                      threads=args.threads)
            curves[name].append((r, nq / sec))
            if r >= 0.995:
                break

    def song_sweep(name, graph):
        index = song.from_graph(graph, base, device="cpu")
        record(name, lambda qs: song.search(index, queries, 10, song.SearchParams(queue_size=qs), device="cpu",
                                            verbose=False),
               [16, 32, 64, 128] if args.quick else [10, 16, 24, 32, 48, 64, 96, 128, 192, 256])

    def build(name, fn, warm):
        warm()  # JIT
        t0 = time.perf_counter()
        result = fn()
        sec = time.perf_counter() - t0
        builds[name] = sec
        log.write(part="build", route=name, seconds=sec, threads=args.threads, n=int(base.shape[0]))
        return result

    small = base[:2000]
    g = build("GRNND (defaults)", lambda: grnnd.build(grnnd.IndexParams(), base, device="cpu", verbose=False).graph,
              lambda: grnnd.build(grnnd.IndexParams(), small, device="cpu", verbose=False))
    log.write(part="grnnd_info", **{k: v for k, v in g.info.items() if k != "redirects"}, redirects=g.info["redirects"])
    song_sweep("GRNND (defaults)", g)
    del g
    if "nndescent" not in skip:
        def nnd(x):
            raw = knngraph.knn_graph(x, 96, method="nndescent", device="cpu", verbose=False)
            return knngraph.optimize_graph(raw, x, graph_degree=32, device="cpu", verbose=False)

        g = build("NN-Descent 96 + optimize_graph", lambda: nnd(base), lambda: nnd(small))
        song_sweep("NN-Descent 96 + optimize_graph", g)
        del g
    if "hnswlib" not in skip:
        try:
            import hnswlib
        except ImportError:
            hnswlib = None
            log.write(part="hnswlib", error="hnswlib not installed (pip install knngraph[bench])")
        if hnswlib is not None:
            def hnsw():
                h = hnswlib.Index(space="l2", dim=base.shape[1])
                h.init_index(max_elements=base.shape[0], M=16, ef_construction=200, random_seed=0)
                h.set_num_threads(args.threads)
                h.add_items(base.astype(np.float32))
                return h

            h = build("hnswlib (M=16, efC=200)", hnsw, lambda: None)
            qf = queries.astype(np.float32)

            def hq(ef):
                h.set_ef(max(ef, 10))
                i, d = h.knn_query(qf, k=10, num_threads=args.threads)
                return d, i

            record("hnswlib (M=16, efC=200)", hq, [10, 16, 32, 64, 128] if args.quick else
                   [10, 16, 24, 32, 48, 64, 96, 128, 192, 256])
            del h
    if "pynndescent" not in skip:
        try:
            import pynndescent
        except ImportError:
            pynndescent = None
            log.write(part="pynndescent", error="pynndescent not installed (pip install knngraph[bench])")
        if pynndescent is not None:
            xf = base.astype(np.float32)

            def pnn(x):
                nn = pynndescent.NNDescent(x, metric="sqeuclidean", n_neighbors=30, random_state=0,
                                           n_jobs=args.threads, verbose=False)
                nn.prepare()
                return nn

            nn = build("pynndescent (n_neighbors=30)", lambda: pnn(xf), lambda: pnn(xf[:2000]))
            qf = queries.astype(np.float32)

            def pq(eps):
                i, d = nn.query(qf, k=10, epsilon=eps)
                return d, i

            record("pynndescent (n_neighbors=30)", pq, [0.0, 0.1, 0.2, 0.3] if args.quick else
                   [0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4])
    summary = {name: {"build_s": builds.get(name),
                      "qps_at_0.95": max([q for r, q in pts if r >= 0.95], default=None),
                      "qps_at_0.99": max([q for r, q in pts if r >= 0.99], default=None)}
               for name, pts in curves.items()}
    log.write(part="summary", routes=summary, threads=args.threads, n=int(base.shape[0]))
    plot(out / "grnnd_cpu.png", curves, builds, f"CPU, sift-photos {args.n // 1000}k, k=10, {args.threads} threads",
         "queries per second")


if __name__ == "__main__":
    main()
