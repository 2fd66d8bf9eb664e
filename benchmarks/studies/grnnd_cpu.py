"""GRNND on the CPU (numba, vertices in parallel) next to hnswlib and pynndescent, same run, same
threads.

    python benchmarks/studies/grnnd_cpu.py --out out/ [--quick] [--threads 2] [--n 100000]

sift-photos 100k (uint8, squared L2), 10k queries (2k with --quick), k=10. Writes ``grnnd_cpu.jsonl`` and
``grnnd_cpu.png``. For each route to a searchable index: its build time, then recall@10 against queries
per second:
* GRNND (defaults), searched as built by SONG's CPU search (``song.from_graph``);
* NN-Descent k=96 + ``optimize_graph`` to degree 32, searched by SONG;
* hnswlib (M=16, ef_construction=200), sweeping ef;
* pynndescent (n_neighbors=30, its own graph search after ``prepare``), sweeping epsilon.
hnswlib and pynndescent are the runner's baselines (:mod:`benchmarks.runner.methods`). Builds are timed
once after a small warm-up build (JIT compilation); searches by the runner's protocol (a warm-up call,
then the median of --repeats); recall is the runner's (:mod:`benchmarks.runner.quality`). The runner's
CPU suite measures GRNND's defaults the same way (``python -m benchmarks suite cpu --parts search_graphs``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data, methods, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402
from benchmarks.studies.grnnd_gpu import plot  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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

    numba.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))
    out = Path(args.out)
    log = JsonLines(out / "grnnd_cpu.jsonl")
    ds = data.load(data.sift_photos(args.n, 2000 if args.quick else None))
    ds.truth(10)
    base, queries, nq = ds.base, ds.queries, ds.nq
    ctx = methods.Context(device="cpu", threads=args.threads)
    curves, builds = {}, {}

    def record(name, search, params):
        """``search(value)`` -> ids, timed over ``params``."""
        curves[name] = []
        for value in params:
            t = time_calls(lambda: search(value), args.repeats)
            r = quality.recall(ds, t.result)
            log.write(part="search", route=name, param=value, qps=nq / t.median_s, seconds=t.median_s,
                      first_call_s=t.first_call_s, **{"recall@10": r}, threads=args.threads)
            curves[name].append((r, nq / t.median_s))
            if r >= 0.995:
                break

    def song_sweep(name, graph):
        index = song.from_graph(graph, base, device="cpu")
        record(name, lambda qs: song.search(index, queries, 10, song.SearchParams(queue_size=qs), device="cpu",
                                            verbose=False).indices,
               [16, 32, 64, 128] if args.quick else [10, 16, 24, 32, 48, 64, 96, 128, 192, 256])

    def build(name, fn, warm):
        warm()  # JIT
        t = time_calls(fn, 1, warmup=False)
        builds[name] = t.median_s
        log.write(part="build", route=name, seconds=t.median_s, cpu_s=t.cpu_median_s, threads=args.threads,
                  n=ds.n)
        return t.result

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
    for name, params, knob, values in (
            ("hnswlib", {"M": 16, "ef_construction": 200}, "ef",
             [10, 16, 32, 64, 128] if args.quick else [10, 16, 24, 32, 48, 64, 96, 128, 192, 256]),
            ("pynndescent", {"n_neighbors": 30}, "epsilon",
             [0.0, 0.1, 0.2, 0.3] if args.quick else [0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4])):
        if name in skip:
            continue
        method = methods.get(name)
        if method.missing():
            log.write(part=name, error=method.missing())
            continue
        route = f"{name} (" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")"
        index = build(route, lambda: method.build(ctx, base, ds.metric, **params),
                      lambda: method.build(ctx, small, ds.metric, **params))
        record(route, lambda v: method.search(ctx, index, queries, 10, **{knob: v}), values)
        index = None  # freed before the next index is built
    summary = {name: {"build_s": builds.get(name),
                      "qps_at_0.95": max([q for r, q in pts if r >= 0.95], default=None),
                      "qps_at_0.99": max([q for r, q in pts if r >= 0.99], default=None)}
               for name, pts in curves.items()}
    log.write(part="summary", routes=summary, threads=args.threads, n=ds.n)
    plot(out / "grnnd_cpu.png", curves, builds, f"CPU, sift-photos {args.n // 1000}k, k=10, {args.threads} threads",
         "queries per second")


if __name__ == "__main__":
    main()
