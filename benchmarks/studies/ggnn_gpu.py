"""GGNN on the GPU: build time split and the recall@10 / QPS curve on sift-photos 450k.

    python benchmarks/studies/ggnn_gpu.py --out out/ [--quick] [--n 450000] [--shards 1] [--degrees 24,40]
        [--refinements 2] [--builds 24/0/2,20/14/0] [--prepared] [--no-fast] [--no-rings]
        [--sorted-queues 64,128] [--sorted-taus 0.5,1.0] [--search-widths 0,1]
        [--dataset minilm --minilm-dir DIR]

Builds a GGNN index per degree and refinement count (default k=24 and k=40, s=32, L=4, tau_b=0.5, r=2)
and reports the time of each build phase (select / merge / symmetric linking / refinement, the paper's
Fig. 6), then GGNN's search (10k queries, k=10, one batch) with both cache layouts: the paper's rings
(cache of 512 ids, and 256 unless --quick) over the query slack tau, and the sorted buffer over tau and
queue sizes (its curve: the points no other point beats in both recall and speed). It writes
``ggnn_gpu.jsonl`` and ``ggnn_gpu.png`` (recall@10 against queries per second), with the library's
default GPU searcher (``song.from_graph`` on the GGNN graph, queue sizes swept; not with --no-fast) and,
when cuVS loads, CAGRA (its own graph and the first GGNN graph) on the same plot; a ``summary`` line per
curve gives its queries/s at recall@10 0.95 and 0.99 and its highest recall. recall@10 is the runner's
(:mod:`benchmarks.runner.quality`: a returned id at the true 10th distance counts: sift-photos' distances
are integers, and 2.4% of its queries have a tie across the 10th place; results of this study before
2026-11-26 also logged ``recall@10 ids``, ids alone, up to 0.003 lower). Every search is the median of
--repeats calls after a warm-up call. Targets (H200): build <= 1.8 s at k=24 for a graph that searches as
well as the GGNN authors' code (1.02M queries/s at recall@10 0.95, 566k at 0.97, at most 0.978); >= 1.5M
QPS at recall@10 0.95; recall@10 0.99 at >= 1M QPS.
``--dataset minilm``: minilm-words (float16, cosine; 5k queries with the exact cosine top-10) from
``--minilm-dir`` (default ``$KNNGRAPH_MINILM_DIR``, else the shared datasets) instead, the same curve;
results named ``NAME_minilm``. The runner's GPU suite measures GGNN's defaults (k=24) on sift-photos 450k
(``python -m benchmarks suite gpu --parts search_graphs``); this study adds the build variants, both cache
layouts and the build's phases.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import qps_at  # noqa: E402
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, sync, time_calls  # noqa: E402
from benchmarks.runner.report import pareto as frontier  # noqa: E402  (the points no other point beats in both)

TAUS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.2]
#: the sorted cache's grid: queue sizes, and the taus swept at each
SORTED_QUEUES = (16, 32, 64, 128, 256, 512)
SORTED_TAUS = (0.3, 0.4, 0.5, 0.7, 1.0, 1.5, 3.0)


def main(device="cuda", n_default=450_000, name="ggnn_gpu"):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=n_default)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--device", default=device)
    ap.add_argument("--dataset", choices=["sift", "minilm"], default="sift")
    ap.add_argument("--minilm-dir", default=os.environ.get("KNNGRAPH_MINILM_DIR", ""),
                    help="minilm-words folder (default $KNNGRAPH_MINILM_DIR, else the shared datasets)")
    ap.add_argument("--degrees", default=None, help="graph degrees to build (default 24,40; --quick: 24)")
    ap.add_argument("--refinements", default="2", help="refinement passes to build each degree with (e.g. 2,0)")
    ap.add_argument("--no-fast", action="store_true", help="leave out the library's default searcher")
    ap.add_argument("--builds", default=None,
                    help="builds as DEGREE/INVERSE_LINKS/REFINEMENTS triples, comma-separated (e.g. 24/0/2,20/14/0; "
                         "inverse links 0: degree // 2), instead of --degrees x --refinements")
    ap.add_argument("--sorted-queues", default=None,
                    help="queue sizes of the sorted-cache sweep (default " + ",".join(map(str, SORTED_QUEUES)) + ")")
    ap.add_argument("--sorted-taus", default=None,
                    help="taus of the sorted-cache sweep (default " + ",".join(map(str, SORTED_TAUS)) + ")")
    ap.add_argument("--search-widths", default="0", help="SearchParams.search_width values of the sorted sweep (0: auto)")
    ap.add_argument("--no-rings", action="store_true", help="leave out the paper's cache (rings)")
    ap.add_argument("--replot", default=None, help="only plot this results file of the script again")
    ap.add_argument("--prepared", action="store_true",
                    help="also GGNN's search (sorted cache) on the library's prepared search graph (song.build's "
                         "defaults: exact 96-NN, optimize_graph to degree 32) through ggnn.from_graph")
    args = ap.parse_args()
    on_gpu = args.device.startswith("cuda")
    if args.replot:
        replot(args.replot, "GPU" if on_gpu else "CPU")
        return
    if on_gpu:
        import cupy as cp

    from knngraph import ggnn

    out = Path(args.out)
    if args.minilm_dir:
        os.environ["KNNGRAPH_MINILM_DIR"] = args.minilm_dir
    nq_spec = 2000 if args.quick else None
    if args.dataset == "minilm":
        name = f"{name}_minilm"
        ds = data.load("minilm-words" + (f":nq={nq_spec}" if nq_spec else ""))
        args.n = ds.n
    else:
        ds = data.load(data.sift_photos(args.n, nq_spec))
    ds.truth(10)  # before the builds (a prefix of sift-photos has its truth computed)
    base, queries, metric = ds.base, ds.queries, ds.metric
    log = JsonLines(out / f"{name}.jsonl")
    nq = ds.nq
    qd = cp.asarray(queries) if on_gpu else queries
    curves = {}

    def one(name, index, sp):
        st = {}
        t = time_calls(lambda: ggnn.search(index, qd, 10, sp, device=args.device, verbose=False), args.repeats)
        ggnn.search(index, qd[:1000], 10, sp, device=args.device, verbose=False, stats=st)
        r = quality.recall(ds, t.result.indices)
        log.write(part=name, tau=sp.tau, cache=sp.cache, cache_size=sp.cache_size, queue_size=sp.queue,
                  search_width=sp.search_width,
                  qps=nq / t.median_s, seconds=t.median_s, first_call_s=t.first_call_s, **{"recall@10": r},
                  distances_per_query=st.get("distances_per_query"),
                  expansions_per_query=st.get("expansions_per_query"))
        return r, nq / t.median_s

    def sweep(name, index, cache):
        curves[name] = [one(name, index, ggnn.SearchParams(tau=tau, cache="rings", cache_size=cache))
                        for tau in (TAUS[::2] if args.quick else TAUS)]

    sorted_queues = [int(v) for v in args.sorted_queues.split(",")] if args.sorted_queues else \
        (SORTED_QUEUES[1::2] if args.quick else SORTED_QUEUES)
    sorted_taus = [float(v) for v in args.sorted_taus.split(",")] if args.sorted_taus else SORTED_TAUS
    widths = [int(v) for v in args.search_widths.split(",")]

    def sweep_sorted(name, index):
        pts = [one(name, index, ggnn.SearchParams(tau=tau, cache="sorted", queue_size=qs, search_width=w))
               for qs in sorted_queues for tau in sorted_taus for w in widths]
        curves[name] = frontier(pts)

    def sweep_fast(name, graph):
        """The library's default GPU searcher (song, algo='beam') on the GGNN graph, queue sizes swept."""
        from knngraph import song

        sidx = song.from_graph(graph, xb, device=args.device, verbose=False)
        curves[name] = []
        # to queue 512: on sift-photos 100k the fast searcher reaches recall@10 0.99 on the GGNN k=24 graph
        # at queue 256 (benchmarks/studies/grnnd_alpha_cpu.py --ggnn, CPU), past the GGNN searcher's reach
        for qs in (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512):
            sp = song.SearchParams(queue_size=qs)
            t = time_calls(lambda: song.search(sidx, qd, 10, sp, device=args.device, verbose=False), args.repeats)
            r = quality.recall(ds, t.result.indices)
            log.write(part=name, queue_size=qs, qps=nq / t.median_s, seconds=t.median_s, first_call_s=t.first_call_s,
                      **{"recall@10": r})
            curves[name].append((r, nq / t.median_s))

    graphs = []
    if args.builds:
        builds = [tuple(int(v) for v in b.split("/")) for b in args.builds.split(",")]
        if any(len(b) != 3 for b in builds) or args.degrees:
            ap.error("--builds takes DEGREE/INVERSE_LINKS/REFINEMENTS triples (e.g. 24/0/2,20/14/0), not with "
                     "--degrees")
    else:
        degrees = [int(g) for g in args.degrees.split(",")] if args.degrees else ([24] if args.quick else [24, 40])
        builds = [(degree, 0, int(r)) for degree in degrees for r in args.refinements.split(",")]
    xb = cp.asarray(base) if on_gpu else base  # device vectors: the build keeps them there
    for degree, inverse_links, refinements in builds:
        params = ggnn.IndexParams(graph_degree=degree, n_shards=args.shards, metric=metric,
                                  refinements=refinements, inverse_links=inverse_links)
        ggnn.build(params, xb[:5000], device=args.device, verbose=False)  # compile the kernels first
        t = time_calls(lambda: ggnn.build(params, xb, device=args.device, verbose=False), 1, warmup=False)
        index, build_s = t.result, t.median_s
        t.result = None
        timings = (index.hierarchy or {}).get("timings", {})
        log.write(part="build", graph_degree=degree, inverse_links=params.k_sym, refinements=refinements, n=args.n,
                  shards=args.shards, seconds=build_s, **timings)
        label = f"k={degree}" + ("" if refinements == 2 else f", r={refinements}") \
            + ("" if not inverse_links else f", {params.k_sym} inverse")
        for cache in (() if args.no_rings else (512,) if args.quick else (256, 512)):
            sweep(f"GGNN rings cache {cache}, {label}", index, cache)
        sweep_sorted(f"GGNN sorted, {label}", index)
        if on_gpu and not args.no_fast:
            sweep_fast(f"fast searcher on GGNN {label}", index.graph)
        graphs.append(index.graph)
        del index
    if args.prepared:
        from knngraph import song

        t = time_calls(lambda: song.build(song.IndexParams(metric=metric), xb, device=args.device, verbose=False), 1,
                       warmup=False)
        prepared, t.result = t.result, None
        log.write(part="build", graph="prepared (song.build)", n=args.n, seconds=t.median_s)
        sweep_sorted("GGNN sorted on the prepared graph", ggnn.from_graph(prepared.graph, xb, device=args.device,
                                                                          verbose=False))
        del prepared
    if on_gpu:  # last: a fault inside cuVS would end the process
        cagra_curves(log, curves, ds, graphs[0], args.repeats)
    for curve, pts in curves.items():
        log.write(part="summary", curve=curve, **{"qps at 0.95": qps_at(pts, 0.95), "qps at 0.99": qps_at(pts, 0.99),
                                                  "max recall@10": max(r for r, _ in pts)})

    plot(out / f"{name}.png", curves, args.n, "GPU" if on_gpu else "CPU",
         "minilm-words (cosine, float16)" if args.dataset == "minilm" else "sift-photos")


def cagra_curves(log, curves, ds, ggnn_graph, repeats):
    """cuVS CAGRA's searcher (itopk swept) on its own graph (nn_descent build, degree 32) and on the first
    GGNN graph (``cagra.from_graph``, the table from host memory); cosine as inner product of normalised
    vectors (:func:`benchmarks.runner.methods.cuvs_array`). Skipped, with a logged reason, when cuVS does
    not load."""
    import cupy as cp

    try:
        from benchmarks.runner.methods import _uint32_graph, cuvs_array, cuvs_modules

        cagra = cuvs_modules()[0]
    except Exception as exc:
        log.write(part="cagra", error=f"cuvs not available ({type(exc).__name__}: {exc})")
        return
    xb, cmetric = cuvs_array(ds.base, ds.metric, (ds.dtype,))
    xq, _ = cuvs_array(ds.queries, ds.metric, (ds.dtype,))
    for name in ("CAGRA on its own graph (nn_descent)", "CAGRA searcher on the first GGNN graph"):
        try:
            sync()
            t0 = time.perf_counter()
            if name.startswith("CAGRA on its own"):
                ci = cagra.build(cagra.IndexParams(metric=cmetric, graph_degree=32, intermediate_graph_degree=64,
                                                   build_algo="nn_descent"), xb)
            else:
                table, _ = _uint32_graph(ggnn_graph.indices)
                ci = cagra.from_graph(cp.asnumpy(table), xb, metric=cmetric)
            sync()
            log.write(part="cagra_graph", graph=name, build_s=time.perf_counter() - t0)
            curves[name] = []
            for itopk in (16, 32, 64, 96, 128, 192, 256):
                sp = cagra.SearchParams(itopk_size=itopk)
                t = time_calls(lambda: cagra.search(sp, ci, xq, 10), repeats)
                r = quality.recall(ds, t.result[1])
                log.write(part=name, itopk_size=itopk, qps=ds.nq / t.median_s, seconds=t.median_s, **{"recall@10": r})
                curves[name].append((r, ds.nq / t.median_s))
            ci = t = None  # the index's device memory goes before the next one's
        except Exception as exc:
            log.write(part="cagra", graph=name, error=f"{type(exc).__name__}: {exc}")


#: the GGNN authors' code (v0.9.1) on an H200, sift-photos 450k, k=24: (recall@10, queries/s)
AUTHORS_SIFT450K = ((0.95, 1.02e6), (0.97, 566e3))


def plot(path, curves, n, where="GPU", dataset="sift-photos"):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        print("matplotlib not available: no plot")
        return
    fig, ax = plt.subplots(figsize=(8, 5.5))
    colors = plt.get_cmap("tab20").colors
    markers = "os^vD<>pXh"
    for j, (name, pts) in enumerate(curves.items()):
        r, q = zip(*sorted(pts))
        ax.plot(r, q, marker=markers[j % len(markers)], ms=4, color=colors[j % len(colors)], label=name)
    if where == "GPU" and dataset == "sift-photos" and n == 450_000:
        r, q = zip(*AUTHORS_SIFT450K)
        ax.plot(r, q, "k*", ms=12, label="GGNN authors' code, k=24, H200")
    recalls = [r for pts in curves.values() for r, _ in pts] or [0.0]
    # the region of the targets when a curve gets there (points below 0.85 are left out then)
    ax.set_xlim(left=(0.85 if max(recalls) > 0.95 else min(recalls)) - 0.005, right=1.0)
    ax.set_yscale("log")
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second")
    ax.set_title(f"{where}, {dataset} {n // 1000}k, k=10 (GGNN, tau sweep)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def replot(jsonl, where="GPU"):
    """The plot of a results file of this script again (``--replot``), next to it as .png: each curve's
    points no other point of it beats (the sorted curves are logged in full)."""
    import json

    curves, n, dataset = {}, 0, "sift-photos"
    for line in Path(jsonl).read_text().splitlines():
        r = json.loads(line)
        if r.get("part") == "build" and r.get("n"):
            n = r["n"]
        if r.get("metric") == "cosine" or "minilm" in Path(jsonl).name:
            dataset = "minilm-words (cosine, float16)"
        if "recall@10" in r and "qps" in r:
            curves.setdefault(r["part"], []).append((r["recall@10"], r["qps"]))
    plot(Path(jsonl).with_suffix(".png"), {k: frontier(v) for k, v in curves.items()}, n, where, dataset)


if __name__ == "__main__":
    main()
