"""The GPU searchers against cuVS CAGRA on the same graph, GPU and run (issue 12).

    python benchmarks/search_gpu.py --out out/ [--dataset sift|minilm] [--minilm-dir DIR] [--no-cuvs]

Writes ``search_gpu_<dataset>.jsonl`` and ``search_gpu_<dataset>.png`` to --out:
1. the prepared graph (``song.build`` defaults: exact 96-NN, ``optimize_graph`` to degree 32), built on the
   GPU, and its build time;
2. batch 10k (all queries, k=10): recall@10 against queries per second for knngraph's fast searcher
   (``algo='beam'``, the default), SONG's kernel (``algo='song'``) and, when cuVS imports, CAGRA's searcher
   on the same graph (``cagra.from_graph``) and on CAGRA's own graph (``cagra.build``, nn_descent);
   queries and outputs are on the GPU for every method (a call = one search of all queries, synchronised);
   per point: distance computations and expansions per query, bytes of vectors + graph rows read per
   query and the share of the GPU's copy bandwidth that reaches;
3. small batches (1, 10, 100, 1000 queries per call): median time per call at the queue sizes / itopk
   sizes whose batch-10k recall is nearest 0.95 and 0.99; knngraph also with host queries (NumPy in and
   out) and its host time per call (device queries, ``out=``: the call returns before the kernel ends);
4. a ``summary`` line: per curve, the QPS interpolated at recall 0.90, 0.95, 0.99, and knngraph / CAGRA.

cuVS comes from ``../shared/tools/cuvs_wheels.sh`` + ``cuvs_device_install.sh`` (source /root/cuvs-env.sh
first); without it the CAGRA parts are skipped with a note.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JsonLines, load_sift, sync  # noqa: E402

BEAM_QUEUES = [16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256]
SONG_QUEUES = [16, 24, 32, 48, 64, 96, 128, 192, 256]
CAGRA_ITOPK = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
BATCHES = [1, 10, 100, 1000]


def load_minilm(d: Path):
    from knngraph import io

    base = np.load(d / "base.npy")
    queries = np.load(d / "query.npy")
    gt = np.asarray(io.read(d / "gt100-cosine.ibin"))[:, :10]
    gt_d = np.asarray(io.read(d / "gt100-cosine.fbin"))[:, :10]
    return base, queries, gt, gt_d


def copy_bandwidth():
    import cupy as cp

    a = cp.empty(1 << 30, cp.uint8)
    b = cp.empty_like(a)
    times = []
    for _ in range(6):
        sync()
        t0 = time.perf_counter()
        b[...] = a
        sync()
        times.append(time.perf_counter() - t0)
    del a, b
    return 2 * (1 << 30) / float(np.median(times[1:]))


def per_call(fn, calls: int):
    """Median wall seconds of ``fn()`` (synchronised), after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interpolate(points, target):
    """QPS at ``target`` recall on a curve of (recall, qps) points (linear between the neighbours;
    None when the curve never reaches it)."""
    pts = sorted(points)
    for (r0, q0), (r1, q1) in zip(pts, pts[1:]):
        if r0 <= target <= r1:
            return q0 if r1 == r0 else q0 + (q1 - q0) * (target - r0) / (r1 - r0)
    best = [q for r, q in pts if r >= target]
    return max(best) if best else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--dataset", choices=["sift", "minilm"], default="sift")
    ap.add_argument("--minilm-dir", default="/root/minilm")
    ap.add_argument("--no-cuvs", action="store_true")
    ap.add_argument("--algos", default="beam,song", help="knngraph searchers to sweep")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50, help="calls per small-batch point")
    args = ap.parse_args()
    import cupy as cp

    import knngraph
    from knngraph import song
    from knngraph.evaluate import recall_at_k

    out = Path(args.out)
    log = JsonLines(out / f"search_gpu_{args.dataset}.jsonl")
    if args.dataset == "sift":
        base, queries, gt = load_sift(450_000)
        gt = gt[:, :10]
        diff = base[gt].astype(np.float32) - queries[:, None, :].astype(np.float32)
        gt_d = (diff * diff).sum(-1)
        metric, row_bytes = "sqeuclidean", 128
    else:
        base, queries, gt, gt_d = load_minilm(Path(args.minilm_dir))
        metric, row_bytes = "cosine", base.shape[1] * 2
    nq = len(queries)
    bw = copy_bandwidth()
    log.write(part="env", dataset=args.dataset, n=len(base), dim=base.shape[1], dtype=str(base.dtype),
              queries=nq, copy_bandwidth_gbs=bw / 1e9, gpu=cp.cuda.runtime.getDeviceProperties(0)["name"].decode())

    # 1. the prepared graph
    xb = cp.asarray(base)
    xq = cp.asarray(queries)
    sync()
    t0 = time.perf_counter()
    raw = knngraph.knn_graph(xb, 96, metric=metric, device="cuda", verbose=False)
    graph = knngraph.optimize_graph(raw, xb, graph_degree=32, device="cuda", verbose=False)
    sync()
    build_s = time.perf_counter() - t0
    index = song.from_graph(graph, xb, song.IndexParams(metric=metric), device="cuda")
    log.write(part="graph", method="knngraph exact96+optimize32", build_s=build_s)
    degree = graph.degree

    def score(ids, dists):
        return recall_at_k(np.asarray(ids), gt, 10, distances=np.asarray(dists), true_distances=gt_d)

    curves = {}

    # 2. batch 10k, knngraph
    for algo, queues in [(a, q) for a, q in (("beam", BEAM_QUEUES), ("song", SONG_QUEUES))
                         if a in args.algos.split(",")]:
        name = f"knngraph-{algo}"
        curves[name] = []
        for qs in queues:
            sp = song.SearchParams(queue_size=qs, algo=algo)
            o = (cp.empty((nq, 10), cp.float32), cp.empty((nq, 10), cp.int32))
            stats = {}
            song.search(index, xq, 10, sp, device="cuda", verbose=False, stats=stats, out=o)
            secs = per_call(lambda: song.search(index, xq, 10, sp, device="cuda", verbose=False, out=o),
                            args.repeats)
            r = score(o[1].get(), o[0].get())
            qps = nq / secs
            nd, ne = stats["distances_per_query"], stats["expansions_per_query"]
            bytes_q = nd * row_bytes + ne * 4 * degree
            curves[name].append((r, qps, qs))
            log.write(part="batch10k", method=name, queue_size=qs, recall=r, qps=qps, seconds=secs,
                      distances_per_query=nd, expansions_per_query=ne, bytes_per_query=bytes_q,
                      bandwidth_share=bytes_q * qps / bw)

    # 2b. CAGRA
    cagra = None
    if not args.no_cuvs:
        try:
            import libcuvs

            libcuvs.load_library()
            from cuvs.neighbors import cagra
        except Exception as exc:  # noqa: BLE001
            log.write(part="cuvs", skipped=f"cuVS not importable: {type(exc).__name__}: {exc}")
    cagra_indexes = {}
    if cagra is not None:
        # cosine: CAGRA searches normalised vectors by inner product (its cosine path crashed on float16
        # here: an illegal address inside cuVS 26.10); its ids are scored, not its distances
        cmetric = {"sqeuclidean": "sqeuclidean", "cosine": "inner_product"}[metric]
        if metric == "cosine":
            xf = xb.astype(cp.float32)
            xb_c = (xf / cp.maximum(cp.linalg.norm(xf, axis=1, keepdims=True), 1e-30)).astype(xb.dtype)
            qf = xq.astype(cp.float32)
            xq_c = (qf / cp.maximum(cp.linalg.norm(qf, axis=1, keepdims=True), 1e-30)).astype(xq.dtype)
        else:
            xb_c, xq_c = xb, xq
        t0 = time.perf_counter()
        cagra_indexes["cagra-on-knngraph"] = cagra.from_graph(cp.asarray(graph.indices).astype(cp.uint32), xb_c,
                                                              metric=cmetric)
        sync()
        log.write(part="graph", method="cagra.from_graph", build_s=time.perf_counter() - t0)
        t0 = time.perf_counter()
        cagra_indexes["cagra-own-graph"] = cagra.build(
            cagra.IndexParams(metric=cmetric, graph_degree=32, intermediate_graph_degree=64, build_algo="nn_descent"),
            xb_c)
        sync()
        log.write(part="graph", method="cagra.build nn_descent 64->32", build_s=time.perf_counter() - t0)
        for name, cidx in cagra_indexes.items():
            curves[name] = []
            for it in CAGRA_ITOPK:
                sp = cagra.SearchParams(itopk_size=it)
                d_out = cp.empty((nq, 10), cp.float32)
                i_out = cp.empty((nq, 10), cp.uint32)

                def run(sp=sp, cidx=cidx, d_out=d_out, i_out=i_out):
                    return cagra.search(sp, cidx, xq_c, 10, neighbors=i_out, distances=d_out)

                secs = per_call(run, args.repeats)
                ids = i_out.get().astype(np.int64)
                if metric == "sqeuclidean":
                    r = score(ids, np.maximum(d_out.get(), 0))
                else:
                    r = recall_at_k(ids, gt, 10)
                curves[name].append((r, nq / secs, it))
                log.write(part="batch10k", method=name, itopk_size=it, recall=r, qps=nq / secs, seconds=secs)

    # 3. small batches at the settings nearest recall 0.95 and 0.99
    def nearest(curve, target):
        ok = [p for p in curve if p[0] >= target]
        return min(ok, key=lambda p: p[2]) if ok else max(curve)

    hq = queries
    for target in (0.95, 0.99):
        r, _, qs = nearest(curves["knngraph-beam"], target)
        sp = song.SearchParams(queue_size=qs)
        for b in BATCHES:
            qd = xq[:b]
            o = (cp.empty((b, 10), cp.float32), cp.empty((b, 10), cp.int32))
            t_dev = per_call(lambda: song.search(index, qd, 10, sp, device="cuda", verbose=False, out=o), args.calls)
            t_host = per_call(lambda: song.search(index, hq[:b], 10, sp, device="cuda", verbose=False), args.calls)
            host_times = []
            for _ in range(args.calls):
                sync()
                t0 = time.perf_counter()
                song.search(index, qd, 10, sp, device="cuda", verbose=False, out=o)
                host_times.append(time.perf_counter() - t0)
                sync()
            # the recall of this batch size (the search width depends on it): every query, b at a time
            parts = [song.search(index, queries[s0:s0 + b], 10, sp, device="cuda", verbose=False)
                     for s0 in range(0, nq, b)]
            ids = np.concatenate([p[1] for p in parts])
            dists = np.concatenate([p[0] for p in parts])
            stats = {}
            song.search(index, qd, 10, sp, device="cuda", verbose=False, stats=stats)
            log.write(part="small_batch", method="knngraph-beam", target=target, queue_size=qs, recall_10k=r,
                      batch=b, recall_at_batch=score(ids, dists), search_width=stats.get("search_width"),
                      ms_per_call_device_io=t_dev * 1e3, ms_per_call_host_io=t_host * 1e3,
                      host_ms_per_call=statistics.median(host_times) * 1e3)
        for name, cidx in cagra_indexes.items():
            r, _, it = nearest(curves[name], target)
            sp = cagra.SearchParams(itopk_size=it)
            for b in BATCHES:
                qd = xq_c[:b]
                d_out = cp.empty((b, 10), cp.float32)
                i_out = cp.empty((b, 10), cp.uint32)
                t_dev = per_call(lambda: cagra.search(sp, cidx, qd, 10, neighbors=i_out, distances=d_out), args.calls)
                log.write(part="small_batch", method=name, target=target, itopk_size=it, recall_10k=r, batch=b,
                          ms_per_call_device_io=t_dev * 1e3)

    # 4. summary
    summary = {}
    for name, pts in curves.items():
        summary[name] = {str(t): interpolate([(r, q) for r, q, _ in pts], t) for t in (0.90, 0.95, 0.99)}
    ratios = {}
    for other in ("cagra-on-knngraph", "cagra-own-graph"):
        if other in summary:
            ratios[f"beam/{other}"] = {t: (summary["knngraph-beam"][t] / summary[other][t]
                                          if summary["knngraph-beam"][t] and summary[other][t] else None)
                                       for t in summary["knngraph-beam"]}
    log.write(part="summary", qps_at_recall=summary, ratios=ratios)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 5))
        for name, pts in curves.items():
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name)
        ax.set_yscale("log")
        ax.set_xlabel("recall@10")
        ax.set_ylabel("queries per second (batch 10k)")
        ax.set_title(f"{args.dataset}: knngraph vs cuVS CAGRA, same graph and GPU")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"search_gpu_{args.dataset}.png", dpi=120)
    except Exception as exc:  # noqa: BLE001
        print("plot skipped:", exc)


if __name__ == "__main__":
    main()
