"""GRNND on the GPU: how fast a search graph is built, and how fast SONG searches it, on sift-photos 450k
(10k queries, k=10), next to the library's other routes to a search graph.

    python benchmarks/studies/grnnd_gpu.py --out out/ [--quick] [--budget-s 420]
    python benchmarks/studies/grnnd_gpu.py --out out/ --alphas 1.0,1.1,1.2 [--alpha-degrees 32,48]
        [--alpha-rounds 3x6,3x4] [--alphas-only | --skip-variants]
    python benchmarks/studies/grnnd_gpu.py --out out/ --dataset minilm [--minilm-dir DIR] ...

Writes ``grnnd_gpu.jsonl`` and ``grnnd_gpu.png`` (recall@10 against QPS, build time per graph) to --out;
with ``--dataset minilm`` (minilm-words, float16, cosine, 5k queries with the exact cosine top-10, from
``--minilm-dir``, default ``$KNNGRAPH_MINILM_DIR``, else the shared datasets) every graph is built and
searched by cosine and the files are ``grnnd_gpu_minilm.*``. The runner's GPU suite measures GRNND's
defaults on sift-photos 450k (``python -m benchmarks suite gpu --parts search_graphs``); this study adds
the variants, the other routes and the phases.
Graphs, each built on the GPU (a warm-up build first: JIT; then the median of --repeats builds):
1. GRNND with the defaults (R=32, S=20, T1=3, T2=6, rho=0.6), searched as built (``from_graph``);
   with ``--optimized`` also GRNND (defaults, 2x4 and 3x4 rounds) + ``optimize_graph`` to degree 32;
1c. with ``--alphas``: GRNND with each ``prune_alpha`` (the relaxed RNG test) at each of --alpha-degrees
   (default 32) and --alpha-rounds (T1 x T2, default 3x6); ``--alphas-only`` leaves out everything else
   but the defaults and the exact route;
2. GRNND variants: fewer rounds (T1 x T2 = 3x4, 2x6, 2x4, 4x4, 1x10), more (3x10), rho in {0.3, 1.0},
   R=48 (the paper's sweeps, sections 4.3-4.4), as the budget allows;
3. NN-Descent k=96 + ``optimize_graph`` to degree 32;
4. the exact 96-NN graph + ``optimize_graph`` (``song.build``'s defaults);
4b. GGNN (``ggnn.build``, k=24, its defaults), its bottom layer searched as any graph;
5. when cuVS loads (``benchmarks/runner/methods.py``'s loader): the GRNND graphs (the defaults and every
   --alphas build) searched by CAGRA's searcher (``cagra.from_graph``; -1 slots repeat the row's first
   neighbour), and CAGRA's own builds (ivf_pq, nn_descent; graph_degree 32 from 64): build time, its
   graph searched with SONG. Cosine goes to CAGRA as the inner product of unit vectors.
Each graph is searched by ``song.search`` (the library's default GPU searcher, ``algo='auto'``; the
GRNND graph also with the SONG kernel, ``algo='song'``) over queue sizes; a ``summary`` line gives per
graph the build time and the fastest measured QPS at recall@10 >= 0.95 and >= 0.99, and states the
target: the fastest build whose QPS at 0.99 is within 10% of the best graph's, <= 0.5 s on an H200.
Timing: the runner's protocol (a warm-up call, then the median of --repeats); recall: the runner's
(:mod:`benchmarks.runner.quality`), for SONG and CAGRA alike.
GRNND's time split is measured by running parts alone (``part=phases``): the initial lists with one
round, all rounds (with the reverse steps), the final pruning.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import qps_at  # noqa: E402
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--dataset", choices=["sift", "minilm"], default="sift")
    ap.add_argument("--minilm-dir", default=os.environ.get("KNNGRAPH_MINILM_DIR", ""),
                    help="minilm-words folder (default $KNNGRAPH_MINILM_DIR, else the shared datasets)")
    ap.add_argument("--quick", action="store_true", help="fewer variants and queue sizes")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=450_000)
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip later parts past this many seconds")
    ap.add_argument("--optimized", action="store_true",
                    help="also GRNND graphs passed through optimize_graph (defaults, 2x4 and 3x4 rounds)")
    ap.add_argument("--optimized-only", action="store_true",
                    help="with --optimized: no other GRNND variants, and of the other routes only the exact one")
    ap.add_argument("--alphas", default="",
                    help="comma-separated prune_alpha values: GRNND built with each (and --alpha-degrees), swept")
    ap.add_argument("--alpha-degrees", default="32", help="graph_degree values of the --alphas builds")
    ap.add_argument("--alpha-rounds", default="3x6", help="outer x inner iterations of the --alphas builds")
    ap.add_argument("--skip-variants", action="store_true",
                    help="leave out part 2 (the round and rho variants), the SONG-kernel sweep and the phases: the "
                         "comparison with the other routes only")
    ap.add_argument("--alphas-only", action="store_true",
                    help="with --alphas: only the defaults, the alpha builds and the exact 96 + optimize_graph route")
    args = ap.parse_args()
    alphas = [float(v) for v in args.alphas.split(",") if v]
    alpha_degrees = [int(v) for v in args.alpha_degrees.split(",") if v]
    alpha_rounds = [tuple(int(t) for t in v.split("x")) for v in args.alpha_rounds.split(",") if v]
    alphas_only = args.alphas_only and bool(alphas)
    t_start = time.perf_counter()
    import cupy as cp

    import knngraph
    from knngraph import grnnd, song

    out = Path(args.out)
    stem = "grnnd_gpu_minilm" if args.dataset == "minilm" else "grnnd_gpu"
    log = JsonLines(out / f"{stem}.jsonl")
    if args.minilm_dir:
        os.environ["KNNGRAPH_MINILM_DIR"] = args.minilm_dir
    if args.dataset == "minilm":
        ds = data.load("minilm-words")
        args.n, data_name = ds.n, "minilm-words (cosine)"
    else:
        ds = data.load(data.sift_photos(args.n))
        data_name = "sift-photos"
    ds.truth(10)
    base, queries, metric = ds.base, ds.queries, ds.metric
    xd = cp.asarray(base)  # resident vectors: build times exclude the upload (reported once below)
    log.write(part="upload", seconds=time_calls(lambda: cp.asarray(base), 1, warmup=False).median_s,
              n=int(base.shape[0]))

    def left():
        return args.budget_s - (time.perf_counter() - t_start)

    qsizes = [16, 24, 32, 48, 64, 96, 128, 192, 256] if not args.quick else [16, 32, 64, 128, 256]
    curves, summary = {}, {}

    def sweep(name, graph, build_s, search=None, **extra):
        index = song.from_graph(graph, base, device="cuda")
        pts = []
        for qs in qsizes:
            sp = song.SearchParams(queue_size=qs, **(search or {}))
            t = time_calls(lambda: song.search(index, queries, 10, sp, device="cuda", verbose=False), args.repeats)
            sec = t.median_s
            r = quality.recall(ds, t.result.indices)
            pts.append((r, queries.shape[0] / sec))
            log.write(part="search", graph=name, queue_size=qs, **{"recall@10": r}, qps=queries.shape[0] / sec)
            if r >= 0.995:
                break
        curves[name] = pts
        ids = graph.indices.get() if hasattr(graph.indices, "get") else graph.indices
        summary[name] = {"build_s": build_s, "edges_per_node": float((ids >= 0).sum(1).mean()),
                         "qps_at_0.95": qps_at(pts, 0.95), "qps_at_0.99": qps_at(pts, 0.99), **extra}

    def build_grnnd(**kw):
        p = grnnd.IndexParams(metric=metric, **kw)
        t = time_calls(lambda: grnnd.build(p, xd, device="cuda", verbose=False), args.repeats)
        sec, first, index = t.median_s, t.first_call_s, t.result
        g = index.graph
        log.write(part="build", graph="grnnd", params=kw, seconds=sec, first_call_s=first,
                  mean_degree=g.info["mean_degree"], redirects=g.info["redirects"],
                  reverse_edges=g.info["reverse_edges"])
        return g, sec

    # ---- 1. GRNND defaults, and where its time goes
    g, sec = build_grnnd()
    sweep("GRNND (defaults)", g, sec)
    if not alphas_only and not args.skip_variants:
        sweep("GRNND (defaults), SONG kernel (algo='song')", g, sec, search={"algo": "song"})
        phases(log, xd, grnnd, args.repeats, metric)
    grnnd_graphs = {"GRNND (defaults)": g}  # searched by CAGRA too (part 5)
    # ---- 1c. the relaxed RNG test: prune_alpha (and graph_degree)
    for deg, (t1, t2), a in [(d, r, a) for d in alpha_degrees for r in alpha_rounds for a in alphas]:
        if left() < 90:
            log.write(part="skipped", what=f"grnnd prune_alpha={a} graph_degree={deg} {t1}x{t2} and later (budget)")
            break
        kw = dict(prune_alpha=a)
        if deg != 32:
            kw["graph_degree"] = deg
        if (t1, t2) != (3, 6):
            kw.update(outer_iterations=t1, inner_iterations=t2)
        g, sec = build_grnnd(**kw)
        name = "GRNND " + ", ".join(f"{k}={v}" for k, v in kw.items())
        sweep(name, g, sec, params=kw)
        grnnd_graphs[name] = g
    # ---- 1b. GRNND + optimize_graph (reverse edges and rank-based pruning densify the sparse RNG rows):
    # the defaults and fewer rounds
    for kw in ([{}, dict(outer_iterations=2, inner_iterations=4), dict(inner_iterations=4)]
               if args.optimized else []):
        if left() < 90:
            log.write(part="skipped", what=f"grnnd {kw} + optimize_graph and later (budget)")
            break
        p = grnnd.IndexParams(metric=metric, **kw)

        def route():
            raw = grnnd.build(p, xd, device="cuda", verbose=False).graph
            return knngraph.optimize_graph(raw, xd, graph_degree=32, device="cuda", verbose=False)

        t = time_calls(route, args.repeats)
        sec, first, gg = t.median_s, t.first_call_s, t.result
        name = "GRNND " + (", ".join(f"{k}={v}" for k, v in kw.items()) or "(defaults)") + " + optimize_graph 32"
        log.write(part="build", graph=name, params=kw, seconds=sec, first_call_s=first)
        sweep(name, gg, sec, params=kw)
        del gg
    # ---- 2. variants
    variants = [dict(inner_iterations=4), dict(outer_iterations=2), dict(outer_iterations=2, inner_iterations=4),
                dict(outer_iterations=4, inner_iterations=4), dict(reverse_ratio=0.3), dict(reverse_ratio=1.0),
                dict(outer_iterations=1, inner_iterations=10), dict(inner_iterations=10), dict(graph_degree=48)]
    if args.quick:
        variants = variants[:3]
    if args.optimized_only or alphas_only or args.skip_variants:
        variants = []
    for kw in variants:
        if left() < 120:
            log.write(part="skipped", what=f"grnnd {kw} and later variants (budget)")
            break
        g, sec = build_grnnd(**kw)
        sweep("GRNND " + ", ".join(f"{k}={v}" for k, v in kw.items()), g, sec, params=kw)
    # ---- 3. NN-Descent k=96 + optimize_graph; 4. exact 96-NN + optimize_graph
    for name, method in (("NN-Descent 96 + optimize_graph", "nndescent"), ("exact 96 + optimize_graph", "exact")):
        if left() < 60 or ((args.optimized_only or alphas_only) and method != "exact"):
            log.write(part="skipped", what=name)
            continue

        def route():
            raw = knngraph.knn_graph(xd, 96, method=method, metric=metric, device="cuda", verbose=False)
            return knngraph.optimize_graph(raw, xd, graph_degree=32, device="cuda", verbose=False)

        t = time_calls(route, max(1, args.repeats - 1))
        sec, first, gg = t.median_s, t.first_call_s, t.result
        log.write(part="build", graph=name, seconds=sec, first_call_s=first)
        sweep(name, gg, sec)
        del gg
    # ---- 4b. GGNN (k=24, its defaults), the bottom layer searched like the others
    if args.optimized_only or alphas_only:
        log.write(part="skipped", what="GGNN k=24 (--optimized-only / --alphas-only)")
    elif left() > 60:
        from knngraph import ggnn

        gp = ggnn.IndexParams(graph_degree=24, metric=metric)
        t = time_calls(lambda: ggnn.build(gp, xd, device="cuda", verbose=False), max(1, args.repeats - 1))
        sec, first, gi = t.median_s, t.first_call_s, t.result
        log.write(part="build", graph="GGNN k=24", seconds=sec, first_call_s=first)
        sweep("GGNN k=24", gi.graph, sec)
        del gi
    else:
        log.write(part="skipped", what="GGNN k=24 (budget)")
    # ---- 5. cuVS: CAGRA's searcher on the GRNND graphs, CAGRA's own builds
    try:
        from benchmarks.runner.methods import _uint32_graph, cuvs_array, cuvs_modules

        cagra = cuvs_modules()[0]
    except Exception as exc:
        cagra = None
        log.write(part="cagra", error=f"cuvs not available ({type(exc).__name__}: {exc})")
    if cagra is not None:  # cosine as the inner product of unit vectors; the dataset's dtype kept
        (xb, cmetric), (xq, _) = cuvs_array(base, metric, (ds.dtype,)), cuvs_array(queries, metric, (ds.dtype,))
    for gname, g in grnnd_graphs.items() if cagra is not None and not alphas_only else ():
        if left() < 60:
            log.write(part="skipped", what=f"CAGRA search on {gname} and later (budget)")
            break
        try:
            table, holes = _uint32_graph(g.indices)  # -1 slots repeat the row's first neighbour
            ci = cagra.from_graph(table, xb, metric=cmetric)
            pts = []
            for itopk in (16, 32, 64, 96, 128, 256):
                sp = cagra.SearchParams(itopk_size=itopk)

                def cq():
                    _, ids = cagra.search(sp, ci, xq, 10)
                    return cp.asarray(ids).get()

                t = time_calls(cq, args.repeats)
                sec, ids = t.median_s, t.result
                r = quality.recall(ds, ids)
                pts.append((r, queries.shape[0] / sec))
                log.write(part="search", graph=gname, searcher="cagra", itopk_size=itopk,
                          **{"recall@10": r}, qps=queries.shape[0] / sec, edges_filled=holes)
            curves[f"{gname}, CAGRA search"] = pts
            summary[gname]["cagra_qps_at_0.95"] = qps_at(pts, 0.95)
            summary[gname]["cagra_qps_at_0.99"] = qps_at(pts, 0.99)
            del ci, table
        except Exception as exc:
            log.write(part="cagra", what=f"from_graph on {gname}", error=f"{type(exc).__name__}: {exc}")
    del g, grnnd_graphs
    if cagra is not None and not alphas_only:
        for algo in ("ivf_pq", "nn_descent"):
            if left() < 60:
                break
            try:
                ip = cagra.IndexParams(metric=cmetric, graph_degree=32, intermediate_graph_degree=64, build_algo=algo)
                t = time_calls(lambda: cagra.build(ip, xb), max(1, args.repeats - 1))
                sec, first, ci = t.median_s, t.first_call_s, t.result
                ids = cp.asarray(ci.graph).astype(cp.int32)
                cg = knngraph.Graph(ids.get(), np.zeros(ids.shape, np.float32), metric)
                log.write(part="build", graph=f"CAGRA {algo}", seconds=sec, first_call_s=first)
                sweep(f"CAGRA {algo} (searched by SONG)", cg, sec)
            except Exception as exc:
                log.write(part="cagra", build_algo=algo, error=f"{type(exc).__name__}: {exc}")
    # ---- summary and target
    best99 = max((s["qps_at_0.99"] or 0.0) for s in summary.values())
    ok = {k: s for k, s in summary.items() if s["qps_at_0.99"] and s["qps_at_0.99"] >= 0.9 * best99}
    fastest = min(ok, key=lambda k: ok[k]["build_s"]) if ok else None
    log.write(part="summary", dataset=args.dataset, graphs=summary, best_qps_at_0_99=best99,
              fastest_build_within_10pct=fastest,
              target_met=bool(fastest and fastest.startswith("GRNND") and ok[fastest]["build_s"] <= 0.5))
    plot(out / f"{stem}.png", curves, {k: v["build_s"] for k, v in summary.items()},
         f"GPU, {data_name} {args.n // 1000}k, k=10 (SONG unless named)", "queries per second")


def phases(log, xd, grnnd, repeats, metric="sqeuclidean"):
    """GRNND's default build split into its phases, each timed alone on the GPU (median of ``repeats``)."""
    import cupy as cp

    from knngraph._device import Device, implementation
    from knngraph.grnnd._index import _finish, _prepare, run_rounds
    from knngraph.primitives.distances import distance_kind

    p = grnnd.IndexParams(metric=metric)
    n = xd.shape[0]
    impl = implementation("knngraph.grnnd", Device("cuda"))
    gops = implementation("knngraph.graphops", Device("cuda"))
    xv, inv, _ = _prepare(xd, p.metric, Device("cuda"))
    kind = distance_kind(p.metric)
    s = min(p.graph_degree, 20)
    init_only = grnnd.IndexParams(outer_iterations=1, inner_iterations=1)
    t = time_calls(lambda: run_rounds(impl, cp, xv, inv, kind, init_only, n, s=s), repeats)
    t_init1 = t.median_s
    t = time_calls(lambda: run_rounds(impl, cp, xv, inv, kind, p, n, s=s), repeats)
    t_all, pools = t.median_s, t.result
    t = time_calls(lambda: _finish(gops, cp, xv, inv, kind, p.metric, pools, p.graph_degree), repeats)
    t_prune = t.median_s
    log.write(part="phases", init_plus_one_round_s=t_init1, rounds_s=t_all, final_prune_s=t_prune,
              rounds=p.outer_iterations * p.inner_iterations)


def plot(path, curves, builds, title, ylabel):
    """Recall@10 against QPS per curve (left) and build seconds per route (right); also used by
    ``grnnd_cpu.py``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        print("matplotlib not available: no plot")
        return
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5))
    for name, pts in curves.items():
        r, q = zip(*pts)
        ax.plot(r, q, marker="o", label=name)
    ax.set_yscale("log")
    ax.set_xlabel("recall@10")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    names = list(builds)
    bx.barh(range(len(names)), [builds[k] for k in names])
    bx.set_yticks(range(len(names)))
    bx.set_yticklabels(names, fontsize=7)
    bx.set_xlabel("build seconds")
    bx.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
