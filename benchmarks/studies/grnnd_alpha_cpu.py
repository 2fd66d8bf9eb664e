"""GRNND's ``prune_alpha`` on the CPU: does a relaxed RNG test give a graph as cheap to search as the best one?

    python benchmarks/studies/grnnd_alpha_cpu.py --out out/grnnd_alpha_cpu.jsonl [--n 100000] [--queries 2000]
        [--alphas 1.0,1.1,1.2,1.3,1.5] [--degrees 32,48] [--rounds 3x6,2x4] [--threads 2] [--repeats 2]

sift-photos, the first --n base rows (uint8, squared L2), the first --queries queries of the dataset with
its exact ground truth for that base prefix (``gt100-base{n}``, or computed; recall is the runner's,
:mod:`benchmarks.runner.quality`: ties count as correct), k = 10. Timing is the runner's protocol.

Routes, each searched by SONG's CPU search (``song.from_graph``) over queue sizes 16..256
(``build_cpu_s``: the process's CPU seconds of the build, a measure of its work that other load on the
machine does not inflate as it does wall time):
* GRNND (defaults but ``graph_degree``, ``prune_alpha`` and the rounds T1 x T2) for every alpha x degree x
  rounds;
* the best graph: the exact 96-NN graph + ``optimize_graph(graph_degree=32)`` (32 edges per vertex).

For every route: build seconds (after a small warm-up build for the JIT), mean out-degree, and per queue
size recall@10, QPS (median of --repeats timed calls after a warm-up) and distance computations per query
(``stats=`` of ``song.search``: a device-independent proxy for the GPU searcher's cost). A ``summary``
row per route gives the smallest swept queue reaching recall@10 0.99 and its distances per query and QPS,
and the ratio of those distances to the best graph's. One JSON object per line to --out.

``--ggnn 24:2:0.5,40:2:0.5``: also GGNN graphs (graph_degree : refinements : tau_build), searched the same
way: which GGNN build can reach recall@10 0.99 with the fast searcher and at what cost against the best
graph (``--skip-grnnd --skip-best`` for those alone).

``--ablation-alphas 1.1,1.2``: also GRNND with the relaxed test deciding the *redirects* as well (an entry
not occluded by f * d(i, j) < max(d(v, i), d(v, j)) is neither dropped nor offered to the closer member),
the literal reading of "relax Eq. (2)", which the library does not do: it starves the propagation. Built
by this script's own copy of the round (``_propose_relaxed_redirects``) over the library's driver (the
private ``knngraph.grnnd._index`` and ``_common``: the one part of this study that reaches inside).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402

QUEUES = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]


def _relaxed_redirects_impl():
    """The cpu module of knngraph.grnnd with a round whose redirects also follow the relaxed test."""
    import types

    import numba
    from numba import prange

    from knngraph.grnnd import cpu
    from knngraph.grnnd._common import pair_of, pair_order

    dist = cpu._dist

    @numba.njit(parallel=True, fastmath=True)
    def _propose_relaxed_redirects(x, inv, kind, seed, rnd, factor, pool_c, pool_d, cnt, pt, pc, pd, redirects):
        n, cap = pool_c.shape
        f = np.float32(factor)
        for v in prange(n):
            m = cnt[v]
            alive = np.ones(cap, np.bool_)
            red = 0
            if m > 1:
                start, step = pair_order(seed, rnd, v, m)
                for t in range(m * m):
                    i, j = pair_of(start, step, t, m)
                    if i >= j or not alive[i] or not alive[j]:
                        continue
                    ci = pool_c[v, i]
                    cj = pool_c[v, j]
                    if (ci & 1) == 0 and (cj & 1) == 0:
                        continue
                    di = pool_d[v, i]
                    dj = pool_d[v, j]
                    dij = dist(kind, x, inv, ci >> 1, cj >> 1)
                    if f * dij < max(di, dj):
                        if di < dj or (di == dj and ci < cj):
                            close, far = i, j
                        else:
                            close, far = j, i
                        alive[far] = False
                        pt[v, far] = pool_c[v, close] >> 1
                        pc[v, far] = (pool_c[v, far] | 1)
                        pd[v, far] = dij
                        red += 1
            for s in range(m):
                if alive[s]:
                    pt[v, s] = v
                    pc[v, s] = pool_c[v, s] & ~1
                    pd[v, s] = pool_d[v, s]
            for s in range(m, pt.shape[1]):
                pt[v, s] = -1
            redirects[v] = red

    def propose(x, inv, kind, seed, rnd, pool_c, pool_d, cnt, pt, pc, pd, factor=1.0):
        red = np.empty(pool_c.shape[0], np.int64)
        _propose_relaxed_redirects(x, inv, kind, np.int64(seed), np.int64(rnd), np.float32(factor), pool_c,
                                   pool_d, cnt, pt, pc, pd, red)
        return int(red.sum())

    impl = types.SimpleNamespace(**{k: getattr(cpu, k) for k in cpu.__all__})
    impl.propose = propose
    return impl


def build_relaxed_redirects(params, x):
    """A GRNND graph (CPU) whose rounds relax the redirects too (the ablation of the module docs)."""
    from knngraph.graph import Graph
    from knngraph.graphops import cpu as graphops_cpu
    from knngraph.grnnd import _index

    impl = _relaxed_redirects_impl()
    n = x.shape[0]
    xv = np.ascontiguousarray(x, np.float32)
    inv = np.zeros(1, np.float32)
    pools = _index.run_rounds(impl, np, xv, inv, 0, params, n, s=_index._initial_degree(params, n))
    ids, dist = _index._finish(graphops_cpu, np, xv, inv, 0, "sqeuclidean", pools, params.graph_degree,
                               params.prune_alpha)
    return Graph(ids, dist, "sqeuclidean", {"mean_degree": float((ids >= 0).sum()) / n})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/grnnd_alpha_cpu.jsonl")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--alphas", default="1.0,1.1,1.2,1.3,1.5")
    ap.add_argument("--degrees", default="32")
    ap.add_argument("--rounds", default="3x6", help="outer x inner iterations (T1 x T2), comma-separated")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.99)
    ap.add_argument("--ablation-alphas", default="",
                    help="alphas of the ablation with relaxed redirects (module docs); R = first of --degrees")
    ap.add_argument("--skip-grnnd", action="store_true", help="no library GRNND builds (with --ablation-alphas)")
    ap.add_argument("--skip-best", action="store_true", help="do not build the exact 96 + optimize_graph graph")
    ap.add_argument("--ggnn", default="", help="GGNN builds, graph_degree:refinements:tau_build, comma-separated")
    args = ap.parse_args()
    import numba

    import knngraph
    from knngraph import ggnn, grnnd, song

    numba.set_num_threads(args.threads)
    log = JsonLines(args.out)
    ds = data.load(data.sift_photos(args.n, args.queries))
    ds.truth(10)
    base, queries, nq, n = ds.base, ds.queries, ds.nq, ds.n
    small = base[:2000]
    summaries = {}

    def sweep(route, graph, build_s, extra):
        index = song.from_graph(graph, base, device="cpu")
        degree = float((np.asarray(graph.indices) >= 0).sum()) / n
        points = []
        for q in QUEUES:
            sp = song.SearchParams(queue_size=q)
            t = time_calls(lambda: song.search(index, queries, 10, sp, device="cpu", verbose=False), args.repeats)
            sec = t.median_s
            st = {}
            song.search(index, queries, 10, sp, device="cpu", verbose=False, stats=st)  # counted, untimed
            r = quality.recall(ds, t.result.indices)
            pt = {"queue": q, "recall@10": r, "qps": nq / sec, "seconds": sec,
                  "distances_per_query": st.get("distances_per_query"),
                  "expansions_per_query": st.get("expansions_per_query")}
            points.append(pt)
            log.write(part="search", route=route, **extra, **pt, threads=args.threads, n=n, nq=nq)
            if r >= max(args.target, 0.995):
                break
        hit = next((p for p in points if p["recall@10"] >= args.target), None)
        s = {"route": route, **extra, "build_s": build_s, "build_cpu_s": cpu_seconds.get(id(graph)),
             "mean_degree": degree,
             "queue_at_target": hit and hit["queue"], "recall_at_target_queue": hit and hit["recall@10"],
             "distances_at_target": hit and hit["distances_per_query"], "qps_at_target": hit and hit["qps"],
             "best_recall": max(p["recall@10"] for p in points)}
        summaries[route] = s
        return s

    cpu_seconds = {}

    def timed_build(fn, warm):
        warm()  # JIT compilation
        t = time_calls(fn, 1, warmup=False)
        cpu_seconds[id(t.result)] = t.cpu_median_s  # CPU time of this process: robust to other load
        return t.result, t.median_s

    best = None
    if not args.skip_best:
        def best_graph(x):
            raw = knngraph.knn_graph(x, 96, method="exact", device="cpu", verbose=False)
            return knngraph.optimize_graph(raw, x, graph_degree=32, device="cpu", verbose=False)

        g, sec = timed_build(lambda: best_graph(base), lambda: best_graph(small))
        log.write(part="build", route="exact 96 + optimize_graph 32", seconds=sec, threads=args.threads, n=n)
        best = sweep("exact 96 + optimize_graph 32", g, sec, {"method": "exact96+optimize32", "graph_degree": 32})
        log.write(part="summary", **best, threads=args.threads, n=n, nq=nq, target=args.target)
        del g
    degrees = [int(v) for v in args.degrees.split(",") if v]
    for alpha in [float(v) for v in args.ablation_alphas.split(",") if v]:
        p = grnnd.IndexParams(graph_degree=degrees[0], prune_alpha=alpha)
        g, sec = timed_build(lambda: build_relaxed_redirects(p, base), lambda: build_relaxed_redirects(p, small))
        route = f"GRNND R={degrees[0]} alpha={alpha}, redirects relaxed too (ablation)"
        log.write(part="build", route=route, seconds=sec, threads=args.threads, n=n)
        s = sweep(route, g, sec, {"method": "grnnd-relaxed-redirects", "graph_degree": degrees[0],
                                  "prune_alpha": alpha})
        log.write(part="summary", **s, threads=args.threads, n=n, nq=nq, target=args.target)
        del g
    for spec in [v for v in args.ggnn.split(",") if v]:
        k, refinements, tau_b = spec.split(":")
        p = ggnn.IndexParams(graph_degree=int(k), refinements=int(refinements), tau_build=float(tau_b))
        g, sec = timed_build(lambda: ggnn.build(p, base, device="cpu", verbose=False).graph,
                             lambda: ggnn.build(p, small, device="cpu", verbose=False))
        route = f"GGNN k={k} r={refinements} tau_b={tau_b}"
        log.write(part="build", route=route, seconds=sec, threads=args.threads, n=n)
        s = sweep(route, g, sec, {"method": "ggnn", "graph_degree": int(k), "refinements": int(refinements),
                                  "tau_build": float(tau_b)})
        log.write(part="summary", **s, threads=args.threads, n=n, nq=nq, target=args.target)
        del g
    rounds = [tuple(int(t) for t in v.split("x")) for v in args.rounds.split(",") if v]
    for deg, (t1, t2), alpha in [(d, r, a) for d in degrees for r in rounds
                                 for a in [float(v) for v in args.alphas.split(",") if v]]:
        if args.skip_grnnd:
            break
        p = grnnd.IndexParams(graph_degree=deg, prune_alpha=alpha, outer_iterations=t1, inner_iterations=t2)
        g, sec = timed_build(lambda: grnnd.build(p, base, device="cpu", verbose=False).graph,
                             lambda: grnnd.build(p, small, device="cpu", verbose=False))
        route = f"GRNND R={deg} alpha={alpha}" + ("" if (t1, t2) == (3, 6) else f" rounds={t1}x{t2}")
        log.write(part="build", route=route, seconds=sec, threads=args.threads, n=n,
                  info={k: v for k, v in g.info.items()})
        s = sweep(route, g, sec, {"method": "grnnd", "graph_degree": deg, "prune_alpha": alpha,
                                  "outer_iterations": t1, "inner_iterations": t2})
        if best is not None and best["distances_at_target"] and s["distances_at_target"]:
            s["distances_vs_best"] = s["distances_at_target"] / best["distances_at_target"]
            s["qps_vs_best"] = s["qps_at_target"] / best["qps_at_target"]
        log.write(part="summary", **s, threads=args.threads, n=n, nq=nq, target=args.target)
        del g


if __name__ == "__main__":
    main()
