"""Exact k-NN on the CPU against NumPy GEMM + argpartition and faiss-cpu flat search (issue 2).

    python benchmarks/exact_cpu.py --out benchmarks/results

sift-photos 100k base (uint8 -> float32), 10k queries, k=10, same run, same machine. Writes
``exact_cpu.jsonl``. faiss is skipped with a note when not installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JsonLines, load_sift, timed  # noqa: E402


def numpy_knn(base_f32, queries_f32, k, block=2048):
    """GEMM per query block + argpartition + sort of the k: the plain NumPy way."""
    norms = np.einsum("ij,ij->i", base_f32, base_f32)
    out = np.empty((len(queries_f32), k), np.int64)
    for s in range(0, len(queries_f32), block):
        q = queries_f32[s:s + block]
        key = norms[None, :] - 2.0 * (q @ base_f32.T)
        part = np.argpartition(key, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(key, part, 1), axis=1, kind="stable")
        out[s:s + block] = np.take_along_axis(part, order, 1)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import knngraph
    from knngraph.evaluate import recall_at_k

    log = JsonLines(Path(args.out) / "exact_cpu.jsonl")
    base, queries, gt = load_sift(args.n)
    k = 10
    row = {"part": "exact_cpu", "dataset": f"sift-photos-{args.n // 1000}k", "n": len(base), "nq": len(queries), "k": k}
    t, first, (d, i) = timed(lambda: knngraph.knn(base, queries, k, device="cpu", verbose=False), args.repeats)
    row.update(knngraph_s=t, knngraph_first_call_s=first,
               knngraph_recall=recall_at_k(i, gt, k) if gt is not None else None)
    bf = base.astype(np.float32)
    qf = queries.astype(np.float32)
    t_np, _, i_np = timed(lambda: numpy_knn(bf, qf, k), args.repeats, warmup=False)
    row.update(numpy_s=t_np, numpy_recall=recall_at_k(i_np, gt, k) if gt is not None else None)
    try:
        import faiss

        index = faiss.IndexFlatL2(bf.shape[1])
        index.add(bf)
        t_f, _, (fd, fi) = timed(lambda: index.search(qf, k), args.repeats)
        row.update(faiss_s=t_f, faiss_version=faiss.__version__,
                   faiss_recall=recall_at_k(fi, gt, k) if gt is not None else None)
    except ImportError:
        row["faiss_s"] = None
        row["faiss_note"] = "faiss-cpu not installed: skipped"
    row["speedup_vs_numpy"] = t_np / t
    if row.get("faiss_s"):
        row["speedup_vs_faiss"] = row["faiss_s"] / t
    log.write(**row)


if __name__ == "__main__":
    main()
