"""Exact search of small bases on one GPU: knngraph's exact index against cuVS brute force, same process.

    python benchmarks/studies/exact_small_gpu.py --out out/      # on a machine with an NVIDIA GPU (and cuVS)

A small base (a few thousand to ~50k rows) makes the per-call work around the GEMM count: the numeric
plan, the GEMM operand of the base, the launches. Both libraries are timed the way an application uses
them: an index built once (``bruteforce.build`` / cuVS ``brute_force.build``; knngraph's first search
keeps the base's plan and operand with the index, as cuVS's build computes its norms), then repeated
searches of device-resident queries, median of ``--repeats`` calls after a warm-up (each call ends with a
device synchronisation). knngraph is timed twice: as it runs by default (from its second call with the same
shapes a search is replayed as a CUDA graph, ``cuda_graph``) and with ``KNNGRAPH_CUDA_GRAPHS=0`` (every
launch issued from Python, ``knngraph_uncaptured_seconds``). Cases:

* ``minilm-words``: the first ``n`` rows and ``nq`` queries of the real float16 sentence embeddings
  (cosine), from ``$KNNGRAPH_MINILM_DIR`` (``base.npy``, ``query.npy``) or the shared datasets;
* ``clustered``: Gaussian clusters of the same shape (float16, cosine), made on the GPU;
* ``sift-photos``: the first ``n`` SIFT descriptors and ``nq`` queries as float32 (sqeuclidean).

Each line: case, n, nq, d, dtype, metric, k, both medians, their ratio, and the share of knngraph's ids that
cuVS also returned (its brute force ranks by float32/float16 keys, without knngraph's proof).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402


def _minilm(n: int, nq: int):
    folder = os.environ.get("KNNGRAPH_MINILM_DIR")
    if folder:
        base = np.load(Path(folder) / "base.npy", mmap_mode="r")
        queries = np.load(Path(folder) / "query.npy", mmap_mode="r")
    else:
        from knngraph import datasets

        s = datasets.load_minilm_words()
        base, queries = s.base, s.queries
    if base.shape[0] < n or queries.shape[0] < nq:
        raise ValueError(f"minilm-words has {base.shape[0]} rows and {queries.shape[0]} queries; asked for {n}, {nq}")
    return np.ascontiguousarray(base[:n]), np.ascontiguousarray(queries[:nq])


def _cases(sizes, skip):
    import cupy as cp

    for n, nq in sizes:
        if "minilm-words" not in skip:
            try:
                b, q = _minilm(n, nq)
                yield "minilm-words", cp.asarray(b), cp.asarray(q), "cosine"
            except (FileNotFoundError, ValueError) as exc:
                print(f"minilm-words {n}: skipped ({exc})")
        if "clustered" not in skip:
            emb = clustered(n + nq, 384, seed=3, overlapping=True, n_centers=50, on_device=True).astype(cp.float16)
            yield "clustered", emb[:n], emb[n:], "cosine"
        if "sift-photos" not in skip:
            s = data.load(f"sift-photos-450k:n={n},nq={nq}")
            yield "sift-photos", cp.asarray(s.base[:n], dtype=cp.float32), cp.asarray(s.queries, dtype=cp.float32), \
                "sqeuclidean"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--sizes", default="18000:2000,5000:1000,50000:5000",
                    help="comma list of n:nq (base rows : queries)")
    ap.add_argument("--k", default="10", help="comma list of k")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--skip", default="", help="comma list of cases to leave out")
    ap.add_argument("--no-cuvs", action="store_true")
    args = ap.parse_args(argv)

    import cupy as cp

    from knngraph import bruteforce

    cuvs = None
    if not args.no_cuvs:
        from benchmarks.runner import methods

        cuvs = methods.get("cuvs-brute-force")  # the runner's adapter: the same calls as its benchmarks
        reason = cuvs.missing()
        if reason:
            print(f"cuVS: skipped ({reason})")
            cuvs = None
    log = JsonLines(Path(args.out) / "exact_small_gpu.jsonl")
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    sizes = [tuple(int(v) for v in s.split(":")) for s in args.sizes.split(",")]
    for case, base, queries, metric in _cases(sizes, set(filter(None, args.skip.split(",")))):
        index = bruteforce.build(bruteforce.IndexParams(metric=metric), base, device="cuda", verbose=False)
        if cuvs is not None:
            cindex = cuvs.build(None, base, metric)
        for k in (int(v) for v in args.k.split(",")):
            search = lambda: bruteforce.search(index, queries, k, device="cuda", verbose=False)  # noqa: E731
            os.environ["KNNGRAPH_CUDA_GRAPHS"] = "0"  # every launch issued by the host, call after call
            uncaptured = time_calls(search, args.repeats)
            os.environ["KNNGRAPH_CUDA_GRAPHS"] = "1"  # the default: replayed as a CUDA graph from the 2nd call
            ours = time_calls(search, args.repeats)
            stats: dict = {}
            bruteforce.search(index, queries, k, device="cuda", verbose=False, stats=stats)
            row = {"case": case, "gpu": gpu, "n": int(base.shape[0]), "nq": int(queries.shape[0]),
                   "d": int(base.shape[1]), "dtype": str(base.dtype), "metric": metric, "k": k,
                   "knngraph_seconds": ours.median_s, "knngraph_all_s": ours.all_s,
                   "cuda_graph": stats.get("cuda_graph"), "knngraph_uncaptured_seconds": uncaptured.median_s,
                   "candidates": stats.get("candidates"), "gemm": stats.get("gemm"),
                   "exactness_retries": stats.get("exactness_retries")}
            if cuvs is not None:
                theirs = time_calls(lambda: cuvs.search(None, cindex, queries, k), args.repeats)
                ids_ours = cp.asnumpy(ours.result[1])
                ids_theirs = cp.asnumpy(cp.asarray(theirs.result)).astype(np.int64)
                same = np.mean([len(set(a) & set(b)) / k for a, b in zip(ids_ours, ids_theirs)])
                row.update(cuvs_seconds=theirs.median_s, cuvs_all_s=theirs.all_s,
                           knngraph_over_cuvs=ours.median_s / theirs.median_s, cuvs_ids_in_knngraph=float(same))
            log.write(**row)
    print(f"wrote {log.path}")


if __name__ == "__main__":
    main()
