"""Exact k-NN on the GPU against cuBLAS GEMM alone and PyTorch matmul + topk (issue 2).

    python benchmarks/exact_gpu.py --out out/        # on a machine with an NVIDIA GPU

Writes ``exact_gpu.jsonl`` and ``exact_gpu_select.png`` to --out. Parts:
1. 1M x 128 float32 base (seeded Gaussian data, resident on the GPU), 10k queries, k=10 and k=100:
   knngraph.knn (both selection strategies) vs the GEMM of the same distance matrix alone (same tiles)
   vs torch.matmul + torch.topk (same tiles), in the same run.
2. Exact k-NN graph, k=64, sift-photos 450k (uint8): knngraph.knn_graph vs torch GEMM + topk.
3. Both selection strategies across k in {10, 32, 100, 256, 1024} on part 1's data.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JsonLines, gpu_peak_tracker, load_sift, timed  # noqa: E402


def gemm_only(q, x, tile):
    """The GEMM of q x^T, tile by tile, the output discarded (what knn's tiles cost in GEMM alone)."""
    import cupy as cp

    out = None
    for s in range(0, x.shape[0], tile):
        out = cp.matmul(q, x[s:s + tile].T, out=None)
    return out


def torch_knn(q, x, k, tile, graph=False, q_block=None):
    """PyTorch exact k-NN: ||x||^2 - 2 q.x^T per tile, topk per tile, merged across tiles."""
    import torch

    if q_block is not None and q.shape[0] > q_block:
        parts = [_torch_knn_block(q[s:s + q_block], x, k, tile, graph, q_offset=s)
                 for s in range(0, q.shape[0], q_block)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    return _torch_knn_block(q, x, k, tile, graph)


def _torch_knn_block(q, x, k, tile, graph, q_offset=0):
    import torch

    xn = (x * x).sum(1)
    best_d = best_i = None
    for s in range(0, x.shape[0], tile):
        d = xn[s:s + tile][None, :] - 2.0 * (q @ x[s:s + tile].T)
        if graph:
            r = torch.arange(q.shape[0], device=q.device)
            cols = r + q_offset - s
            m = (cols >= 0) & (cols < d.shape[1])
            d[r[m], cols[m]] = float("inf")
        vd, vi = torch.topk(d, min(k, d.shape[1]), dim=1, largest=False)
        vi = vi + s
        if best_d is None:
            best_d, best_i = vd, vi
        else:
            cd = torch.cat([best_d, vd], 1)
            ci = torch.cat([best_i, vi], 1)
            best_d, pos = torch.topk(cd, k, dim=1, largest=False)
            best_i = torch.gather(ci, 1, pos)
    return best_d, best_i


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import cupy as cp

    import knngraph

    out = Path(args.out)
    log = JsonLines(out / "exact_gpu.jsonl")
    peak = gpu_peak_tracker()
    n, nq, d = (200_000, 2_000, 128) if args.quick else (1_000_000, 10_000, 128)
    rng = cp.random.default_rng(0)
    base = rng.standard_normal((n, d), dtype=cp.float32)
    queries = rng.standard_normal((nq, d), dtype=cp.float32)
    try:
        import torch

        tb = torch.from_dlpack(base)
        tq = torch.from_dlpack(queries)
    except Exception as exc:  # pragma: no cover - torch missing
        torch = None
        print("torch unavailable:", exc)

    # --- part 1: knn vs GEMM alone vs torch
    for k in (10, 100):
        stats = {}
        knngraph.knn(base, queries, k, device="cuda", verbose=False)  # warm-up / JIT
        from knngraph._device import default_memory_limit, resolve_device
        from knngraph.bruteforce.cuda import exact_knn

        budget = default_memory_limit(resolve_device("cuda"))
        exact_knn(base, queries, k, "sqeuclidean", memory_limit=budget, stats=stats, verbose=False)
        tile = stats["base_tile"]
        row = {"part": "knn_vs_gemm", "n": n, "nq": nq, "d": d, "k": k, "base_tile": tile,
               "query_block": stats["query_block"]}
        t_gemm, _, _ = timed(lambda: gemm_only(queries, base, tile), args.repeats)
        row["gemm_only_s"] = t_gemm
        for sel in ("warp_filter", "quickselect"):
            peak.reset()
            t, first, res = timed(lambda: knngraph.knn(base, queries, k, device="cuda", select=sel, verbose=False),
                                  args.repeats)
            row[f"knn_{sel}_s"] = t
            row[f"knn_{sel}_first_call_s"] = first
            row[f"knn_{sel}_peak_gpu_bytes"] = peak.peak_bytes()
            row[f"knn_{sel}_over_gemm"] = t / t_gemm
        if torch is not None:
            t_torch, _, (td, ti) = timed(lambda: torch_knn(tq, tb, k, tile), args.repeats)
            row["torch_s"] = t_torch
            row["speedup_vs_torch"] = t_torch / row["knn_warp_filter_s"]
            # same answers? (distances of the k-th neighbour agree)
            dk, ik = knngraph.knn(base, queries, k, device="cuda", verbose=False)
            row["kth_key_max_abs_diff_vs_torch"] = float(
                cp.abs(cp.asarray(td[:, -1]) + (queries * queries).sum(1) - dk[:, -1]).max())
        log.write(**row)

    # --- part 3: selection strategies across k
    for k in (10, 32, 100, 256, 1024):
        row = {"part": "select_sweep", "n": n, "nq": nq, "d": d, "k": k}
        for sel in ("warp_filter", "quickselect"):
            t, _, _ = timed(lambda: knngraph.knn(base, queries, k, device="cuda", select=sel, verbose=False),
                            args.repeats)
            row[f"{sel}_s"] = t
        log.write(**row)

    del base, queries
    cp.get_default_memory_pool().free_all_blocks()

    # --- part 2: exact graph of sift-photos 450k, k=64
    nb = 100_000 if args.quick else 450_000
    try:
        sift, _, _ = load_sift(nb)
    except FileNotFoundError as exc:
        print("sift-photos not available:", exc)
        sift = None
    if sift is not None:
        xs = cp.asarray(sift)
        row = {"part": "exact_graph", "dataset": f"sift-photos-{nb // 1000}k", "n": nb, "k": 64, "dtype": "uint8"}
        for sel in ("warp_filter", "quickselect"):
            peak.reset()
            t, first, g = timed(lambda: _exact_graph(xs, 64, sel), args.repeats)
            row[f"graph_{sel}_s"] = t
            row[f"graph_{sel}_first_call_s"] = first
            row[f"graph_{sel}_peak_gpu_bytes"] = peak.peak_bytes()
        g = knngraph.knn_graph(xs, 64, device="cuda", verbose=False)
        row["gemm"] = g.info.get("gemm")
        row["self_in_graph"] = int((g.indices == cp.arange(nb)[:, None]).sum())
        log.write(**row)
        if torch is not None:
            tx = torch.from_dlpack(xs).float()
            t_torch, _, _ = timed(lambda: torch_knn(tx, tx, 64, 65536, graph=True, q_block=16384), args.repeats)
            log.write(part="exact_graph_torch", dataset=row["dataset"], n=nb, k=64, torch_s=t_torch,
                      speedup_vs_torch=t_torch / row["graph_warp_filter_s"])

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
