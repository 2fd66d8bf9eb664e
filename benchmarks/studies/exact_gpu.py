"""Exact k-NN on the GPU against cuBLAS GEMM alone and PyTorch matmul + topk.

    python benchmarks/studies/exact_gpu.py --out out/        # on a machine with an NVIDIA GPU

Writes ``exact_gpu.jsonl`` and ``exact_gpu_select.png`` to --out. Parts:
1. 1M x 128 float32 base (seeded Gaussian data, resident on the GPU), 10k queries, k=10 and k=100:
   knngraph.knn (both selection strategies) vs the GEMM of the same distance matrix alone (same tiles)
   vs torch.matmul + torch.topk (the runner's ``torch-exact`` baseline), in the same run.
2. Exact k-NN graph, k=64, sift-photos 450k (uint8): knngraph.knn_graph vs torch GEMM + topk.
3. Both selection strategies across k in {10, 32, 100, 256, 1024} on part 1's data.
Timing: the runner's protocol (a warm-up call, then the median of --repeats); peak GPU memory: the
runner's :class:`benchmarks.runner.measure.GpuPeak`. The base tile and the selection of a graph build are
read from the private ``knngraph.bruteforce.cuda.exact_knn``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data, methods  # noqa: E402
from benchmarks.runner.measure import GpuPeak, JsonLines, time_calls  # noqa: E402


def gemm_only(q, x, tile):
    """The GEMM of q x^T, tile by tile, the output discarded (what knn's tiles cost in GEMM alone)."""
    import cupy as cp

    out = None
    for s in range(0, x.shape[0], tile):
        out = cp.matmul(q, x[s:s + tile].T, out=None)
    return out


def _exact_graph(x, k, select):
    """The exact k-NN graph of device-resident ``x`` with a given selection strategy."""
    import cupy as cp

    from knngraph import Graph
    from knngraph._device import default_memory_limit, resolve_device
    from knngraph.bruteforce.cuda import exact_knn

    d, i = exact_knn(x, x, k, "sqeuclidean", graph=True, select=select,
                     memory_limit=default_memory_limit(resolve_device("cuda")), verbose=False)
    return Graph(cp.asarray(i), cp.asarray(d))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import cupy as cp

    import knngraph
    from knngraph._device import default_memory_limit, resolve_device
    from knngraph.bruteforce.cuda import exact_knn

    out = Path(args.out)
    log = JsonLines(out / "exact_gpu.jsonl")
    peak = GpuPeak()
    torch_exact = methods.get("torch-exact")
    ctx = methods.Context(device="cuda")
    if torch_exact.missing():
        print(torch_exact.missing())
        torch_exact = None
    n, nq, d = (200_000, 2_000, 128) if args.quick else (1_000_000, 10_000, 128)
    rng = cp.random.default_rng(0)
    base = rng.standard_normal((n, d), dtype=cp.float32)
    queries = rng.standard_normal((nq, d), dtype=cp.float32)
    torch_index = torch_exact.build(ctx, base, "sqeuclidean") if torch_exact else None

    # --- part 1: knn vs GEMM alone vs torch
    for k in (10, 100):
        stats = {}
        knngraph.knn(base, queries, k, device="cuda", verbose=False)  # warm-up / JIT
        budget = default_memory_limit(resolve_device("cuda"))
        exact_knn(base, queries, k, "sqeuclidean", memory_limit=budget, stats=stats, verbose=False)
        tile = stats["base_tile"]
        row = {"part": "knn_vs_gemm", "n": n, "nq": nq, "d": d, "k": k, "base_tile": tile,
               "query_block": stats["query_block"]}
        t_gemm = time_calls(lambda: gemm_only(queries, base, tile), args.repeats).median_s
        row["gemm_only_s"] = t_gemm
        for sel in ("warp_filter", "quickselect"):
            peak.reset()
            t = time_calls(lambda: knngraph.knn(base, queries, k, device="cuda", select=sel, verbose=False),
                           args.repeats)
            row[f"knn_{sel}_s"] = t.median_s
            row[f"knn_{sel}_first_call_s"] = t.first_call_s
            row[f"knn_{sel}_peak_gpu_bytes"] = peak.peak_bytes()
            row[f"knn_{sel}_over_gemm"] = t.median_s / t_gemm
        if torch_exact is not None:
            t = time_calls(lambda: torch_exact.search(ctx, torch_index, queries, k), args.repeats)
            row["torch_s"] = t.median_s
            row["speedup_vs_torch"] = t.median_s / row["knn_warp_filter_s"]
            # same answers? (the exact distances of the k-th neighbour agree)
            ours = knngraph.knn(base, queries, k, device="cuda", verbose=False).indices
            kth = [data.exact_distances(base, queries, data.host(ids)[:, -1:], "sqeuclidean")[:, 0]
                   for ids in (t.result, ours)]
            row["kth_distance_max_abs_diff_vs_torch"] = float(abs(kth[0] - kth[1]).max())
        log.write(**row)

    # --- part 3: selection strategies across k
    for k in (10, 32, 100, 256, 1024):
        row = {"part": "select_sweep", "n": n, "nq": nq, "d": d, "k": k}
        for sel in ("warp_filter", "quickselect"):
            row[f"{sel}_s"] = time_calls(lambda: knngraph.knn(base, queries, k, device="cuda", select=sel,
                                                              verbose=False), args.repeats).median_s
        log.write(**row)

    base = queries = torch_index = None
    cp.get_default_memory_pool().free_all_blocks()

    # --- part 2: exact graph of sift-photos 450k, k=64
    nb = 100_000 if args.quick else 450_000
    try:
        sift = data.load(data.sift_photos(nb)).base
    except FileNotFoundError as exc:
        print("sift-photos not available:", exc)
        sift = None
    if sift is not None:
        xs = cp.asarray(sift)
        row = {"part": "exact_graph", "dataset": f"sift-photos-{nb // 1000}k", "n": nb, "k": 64, "dtype": "uint8"}
        for sel in ("warp_filter", "quickselect"):
            peak.reset()
            t = time_calls(lambda: _exact_graph(xs, 64, sel), args.repeats)
            row[f"graph_{sel}_s"] = t.median_s
            row[f"graph_{sel}_first_call_s"] = t.first_call_s
            row[f"graph_{sel}_peak_gpu_bytes"] = peak.peak_bytes()
        g = knngraph.knn_graph(xs, 64, device="cuda", verbose=False)
        row["gemm"] = g.info.get("gemm")
        row["self_in_graph"] = int((g.indices == cp.arange(nb)[:, None]).sum())
        log.write(**row)
        if torch_exact is not None:
            t = time_calls(lambda: torch_exact.graph(ctx, xs, "sqeuclidean", 64), args.repeats)
            log.write(part="exact_graph_torch", dataset=row["dataset"], n=nb, k=64, torch_s=t.median_s,
                      speedup_vs_torch=t.median_s / row["graph_warp_filter_s"])

    _plot(log.rows, out / "exact_gpu_select.png")


def _plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        print("no matplotlib, no plot:", exc)
        return
    sweep = [r for r in rows if r["part"] == "select_sweep"]
    if not sweep:
        return
    ks = [r["k"] for r in sweep]
    fig, ax = plt.subplots(figsize=(6, 4))
    for sel in ("warp_filter", "quickselect"):
        ax.plot(ks, [r[f"{sel}_s"] * 1e3 for r in sweep], marker="o", label=sel)
    gemm = [r for r in rows if r["part"] == "knn_vs_gemm"]
    if gemm:
        ax.axhline(gemm[0]["gemm_only_s"] * 1e3, color="gray", ls="--", label="GEMM alone")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("time (ms)")
    r0 = sweep[0]
    ax.set_title(f"exact k-NN, {r0['nq']} queries x {r0['n']} base, d={r0['d']} ({rows[0]['env'].get('gpu')})",
                 fontsize=8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
