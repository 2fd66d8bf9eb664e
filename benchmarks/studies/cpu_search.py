"""CPU queries against hnswlib, FAISS and pynndescent, same run, same threads.

    python benchmarks/studies/cpu_search.py --out out/ [--threads 2] [--quick]
        [--datasets sift-photos-100k,minilm-words] [--graph-dir DIR]

For each dataset (sift-photos 100k: uint8, squared L2, 10k queries; minilm-words: float16, cosine, 60k x 384,
5k queries), k=10:

* build: knngraph's search graph (NN-Descent 64-NN graph, ``knngraph.optimize_graph`` to degree 40 with
  ``fill=False``: diverse edges only, which reached a given recall with fewer CPU-seconds on minilm-words
  and about the same on sift; ``song.from_graph``) and hnswlib (M=16, ef_construction=200), each timed
  with ``--threads`` threads.
  With ``--graph-dir`` a graph saved there by an earlier run (``{dataset}.npz`` with its build times) is
  reused and its recorded build time reported (``"graph_from_cache": true``).
* curves: recall@10 against queries per second, knngraph ``song.search`` (CPU, ``algo='auto'`` = the
  beam searcher) sweeping ``queue_size`` and hnswlib sweeping ``ef``, **interleaved** (each knngraph
  point is followed by the hnswlib points), each timed by the runner's protocol (a warm-up call, then
  the median of ``--repeats`` calls; results recorded before 2026-11-27 give the best call instead).
  Besides wall-clock QPS every point records QPS per CPU-second of the process (``qps_per_cpu``): on a
  machine shared with other jobs it is the steadier of the two.
* at recall 0.90, 0.95, 0.99 and 0.995: each curve's QPS interpolated (log QPS linear in recall between the two
  bracketing points, :func:`benchmarks._common.qps_at` with ``log=True``) and the ratio knngraph / hnswlib.
* single-query latency on sift-photos 20k (the bundled sample: 1,000 queries, one call per query, one
  thread; the median of 3 timed passes over the queries, after a warm-up pass, over the queries):
  knngraph ``song.search`` (approximate, at the queue_size that reaches recall 0.95), hnswlib (ef
  reaching 0.95), pynndescent ``query`` (epsilon reaching 0.95, when installed), and exact search:
  ``knngraph.knn`` against FAISS ``IndexFlatL2`` and NumPy.

hnswlib, pynndescent and FAISS are the runner's baselines (:mod:`benchmarks.runner.methods`); recall is
the runner's (:mod:`benchmarks.runner.quality`). Writes ``cpu_search.jsonl`` and ``cpu_search.png`` (one
panel per dataset).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import qps_at  # noqa: E402
from benchmarks.runner import data, methods, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402

#: knngraph's search graph: NN-Descent lists of BUILD_K, pruned to at most GRAPH_DEGREE diverse edges (64 and
#: 40 reached recall 0.995 on minilm-words at 1.15x the queries per CPU-second of 48 and 32, and about the
#: same on sift-photos; with optimize_graph's fastmath pruning both build faster than hnswlib M=16)
BUILD_K, GRAPH_DEGREE = 64, 40
#: the recall targets (0.95, 0.99) and the ends of the range covered (0.90, 0.995)
TARGETS = (0.90, 0.95, 0.99, 0.995)


def build_graph(name, base, metric, threads, graph_dir):
    """(Graph, nndescent seconds, optimize seconds, from cache)."""
    import knngraph

    path = Path(graph_dir) / f"{name}.npz" if graph_dir else None
    if path is not None and path.exists():
        z = np.load(path)
        return knngraph.Graph(z["i"], z["d"], metric), float(z["t_raw"]), float(z["t_opt"]), True
    raw = time_calls(lambda: knngraph.knn_graph(base, BUILD_K, method="nndescent", metric=metric, device="cpu",
                                                verbose=False), 1, warmup=False)
    opt = time_calls(lambda: knngraph.optimize_graph(raw.result, base, graph_degree=GRAPH_DEGREE, fill=False,
                                                     device="cpu", verbose=False), 1, warmup=False)
    g = opt.result
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, i=g.indices, d=g.distances, t_raw=raw.median_s, t_opt=opt.median_s)
    return g, raw.median_s, opt.median_s, False


def curves_for(name, args, log):
    from knngraph import song

    ds = data.load(name + (":nq=2000" if args.quick else ""))
    ds.truth(10)
    base, queries, metric, nq = ds.base, ds.queries, ds.metric, ds.nq
    ctx = methods.Context(device="cpu", threads=args.threads)
    g, t_raw, t_opt, cached = build_graph(name, base, metric, args.threads, args.graph_dir)
    t = time_calls(lambda: song.from_graph(g, base, device="cpu", verbose=False), 1, warmup=False)
    index, t_index = t.result, t.median_s
    log.write(part="build", dataset=name, what=f"knngraph nndescent {BUILD_K}-NN + optimize_graph {GRAPH_DEGREE} (fill=False) + from_graph",
              seconds=t_raw + t_opt + t_index, nndescent_s=t_raw, optimize_s=t_opt, from_graph_s=t_index,
              graph_from_cache=cached, threads=args.threads)
    hnsw = methods.get("hnswlib")
    t = time_calls(lambda: hnsw.build(ctx, base, metric, M=16, ef_construction=200), 1, warmup=False)
    h = t.result
    log.write(part="build", dataset=name, what="hnswlib M=16 efC=200", seconds=t.median_s, threads=args.threads)

    qsizes = [10, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256] if not args.quick else [10, 16, 32, 64]
    efs = {10: [10, 16], 12: [24], 16: [32], 24: [48], 32: [64], 48: [96], 64: [128], 96: [160], 128: [192],
           160: [256], 192: [384]}
    ours, theirs = [], []
    for qs in qsizes:
        sp = song.SearchParams(queue_size=qs)
        st = {}
        t = time_calls(lambda: song.search(index, queries, 10, sp, device="cpu", verbose=False, stats=st,
                                           n_threads=args.threads), args.repeats)
        r = quality.recall(ds, t.result.indices)
        log.write(part="knngraph", dataset=name, queue_size=qs, qps=nq / t.median_s, qps_per_cpu=nq / t.cpu_median_s,
                  **{"recall@10": r}, distances_per_query=st["distances_per_query"],
                  expansions_per_query=st["expansions_per_query"], threads=args.threads)
        ours.append((r, nq / t.median_s, nq / t.cpu_median_s))
        for ef in (efs.get(qs, []) if not args.quick else [2 * qs]):
            t = time_calls(lambda: hnsw.search(ctx, h, queries, 10, ef=ef), args.repeats)
            r = quality.recall(ds, t.result)
            log.write(part="hnswlib", dataset=name, ef=ef, qps=nq / t.median_s, qps_per_cpu=nq / t.cpu_median_s,
                      **{"recall@10": r}, threads=args.threads)
            theirs.append((r, nq / t.median_s, nq / t.cpu_median_s))
    for target in TARGETS:
        row = {"part": "at_recall", "dataset": name, "recall": target}
        for key, col in (("qps", 1), ("qps_per_cpu", 2)):
            a = qps_at([(p[0], p[col]) for p in ours], target, log=True)
            b = qps_at([(p[0], p[col]) for p in theirs], target, log=True)
            row[f"knngraph_{key}"] = a
            row[f"hnswlib_{key}"] = b
            row[f"ratio_{key}"] = a / b if a and b else None
        log.write(**row)
    return {"knngraph (song.search, CPU beam)": ours, "hnswlib (M=16, efC=200)": theirs}


def latency(args, log):
    """Single-query time per call on the bundled 20k sample, one thread."""
    import numba

    import knngraph
    from knngraph import song

    ds = data.load("sample")
    base, queries = ds.base, ds.queries
    numba.set_num_threads(1)
    one = methods.Context(device="cpu", threads=1)
    rows = {}

    def per_call(fn):
        """Milliseconds per single-query call: the median of 3 timed passes over the queries."""
        return time_calls(lambda: [fn(queries[j:j + 1]) for j in range(ds.nq)], 3).median_s / ds.nq * 1e3

    raw = knngraph.knn_graph(base, 48, method="nndescent", device="cpu", verbose=False)
    g = knngraph.optimize_graph(raw, base, graph_degree=32, device="cpu", verbose=False)
    index = song.from_graph(g, base, device="cpu", verbose=False)
    for qs in (10, 12, 16, 24, 32):
        sp = song.SearchParams(queue_size=qs)
        r = quality.recall(ds, song.search(index, queries, 10, sp, device="cpu", verbose=False).indices)
        if r >= 0.95:
            break
    rows["knngraph song.search"] = (per_call(lambda q: song.search(index, q, 10, sp, device="cpu", verbose=False)),
                                    f"queue_size={qs}", r)
    for name, params, knob, values in (("hnswlib", {"M": 16, "ef_construction": 200}, "ef", (10, 16, 24, 32, 48, 64)),
                                       ("pynndescent", {"n_neighbors": 30}, "epsilon", (0.0, 0.05, 0.1, 0.2, 0.3))):
        method = methods.get(name)
        if method.missing():
            continue
        idx = method.build(methods.Context(device="cpu", threads=args.threads), base, ds.metric, **params)
        for v in values:
            r = quality.recall(ds, method.search(one, idx, queries, 10, **{knob: v}))
            if r >= 0.95:
                break
        label = {"hnswlib": "hnswlib knn_query", "pynndescent": "pynndescent query"}[name]
        rows[label] = (per_call(lambda q: method.search(one, idx, q, 10, **{knob: v})), f"{knob}={v}", r)
    rows["knngraph.knn (exact)"] = (per_call(lambda q: knngraph.knn(base, q, 10, device="cpu", verbose=False)),
                                    "", 1.0)
    flat = methods.get("faiss-flat")
    if not flat.missing():
        fi = flat.build(one, base, ds.metric)
        rows["FAISS IndexFlatL2 (exact)"] = (per_call(lambda q: flat.search(one, fi, q, 10)), "", 1.0)
    bf = base.astype(np.float32)
    bn = (bf * bf).sum(1)

    def numpy_exact(q):
        dd = bn - 2 * (bf @ q[0].astype(np.float32))
        return np.argpartition(dd, 10)[:10]

    rows["NumPy (GEMV + argpartition)"] = (per_call(numpy_exact), "", None)
    for name, (ms, setting, r) in rows.items():
        log.write(part="latency", method=name, ms_per_query=ms, setting=setting,
                  **({"recall@10": r} if r is not None else {}), data="sift-photos 20k x 128 uint8, k=10")
        print(f"{name:32s} {ms:8.4f} ms  {setting} {'' if r is None else f'recall {r:.3f}'}", flush=True)


def plot(path, panels, threads):
    """One column per dataset; top row wall-clock QPS, bottom row QPS per CPU-second of the process."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(2, len(panels), figsize=(6 * len(panels), 8), squeeze=False)
    for c, (name, curves) in enumerate(panels.items()):
        for row, (col, what) in enumerate(((1, f"queries / s ({threads} threads)"),
                                           (2, "queries / CPU-second (steadier on a shared machine)"))):
            ax = axes[row][c]
            for label, pts in curves.items():
                pts = sorted(pts)
                ax.plot([p[0] for p in pts], [p[col] for p in pts], "o-", label=label)
            for t in TARGETS:
                ax.axvline(t, color="grey", lw=0.5, ls="--")
            ax.set_yscale("log")
            ax.set_xlabel("recall@10")
            ax.set_ylabel(what)
            ax.set_title(name)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def replot(jsonl, png, threads):
    """Redraw the curves of a ``cpu_search.jsonl`` (one run per dataset in the file)."""
    import json

    panels = {}
    for line in open(jsonl):
        r = json.loads(line)
        if r.get("part") not in ("knngraph", "hnswlib"):
            continue
        label = "knngraph (song.search, CPU beam)" if r["part"] == "knngraph" else "hnswlib (M=16, efC=200)"
        panels.setdefault(r["dataset"], {}).setdefault(label, []).append((r["recall@10"], r["qps"], r["qps_per_cpu"]))
    plot(png, panels, threads)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--datasets", default="sift-photos-100k,minilm-words")
    ap.add_argument("--graph-dir", default=None)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--replot", default=None, help="redraw cpu_search.png from this cpu_search.jsonl and exit")
    args = ap.parse_args()
    if args.replot:
        replot(args.replot, Path(args.out) / "cpu_search.png", args.threads)
        return
    import numba

    if methods.get("hnswlib").missing():
        raise SystemExit(f"cpu_search compares against hnswlib: {methods.get('hnswlib').missing()}")
    numba.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = JsonLines(out / "cpu_search.jsonl")
    panels = {}
    for name in [d for d in args.datasets.split(",") if d]:
        panels[name] = curves_for(name, args, log)
        plot(out / "cpu_search.png", panels, args.threads)
    if not args.skip_latency:
        latency(args, log)


if __name__ == "__main__":
    main()
