"""A small end-to-end GPU workload for compute-sanitizer (memcheck, racecheck): every kernel family of the
library on tiny inputs, every vector dtype, L2 and cosine.

    compute-sanitizer --tool memcheck python3 scripts/gpu_sanitize.py [--parts core,builders] [--quick]
        [--lineinfo]
    python3 scripts/sanitizer_summary.py LOG...      # fails on any kernel error or hazard

``core``: exact k-NN (both selection strategies, graph and search), NN-Descent (random lists, merge,
extend), graph preparation, SONG search (generic, packed 8-bit and hashed), the fast searcher (every
distance mode, warp and block per query), the list merge. ``builders``: GGNN (build: brute force,
merges, symmetric linking with the device link placement, refinement; search) and GRNND (the paper's
pruning and the relaxed one), float32 and uint8, L2 and cosine. Sizes are small: the sanitizer runs
kernels tens of times slower. ``exact``: exact searches of device queries on an index (the one pass and
base tiles streamed under a small memory limit; float16 cosine's unit rows, inverse norms and key pass; the
search's check flags, with a query that holds inf; the one pass captured as a CUDA graph and replayed).
``--quick``: float32 and L2 only. ``--lineinfo``: kernels compiled with line information, so a report names
the source line of each access instead of an offset.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402


def data(dtype, n, d, seed):
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        return rng.integers(0, 256, (n, d)).astype(np.uint8)
    if dtype == "int8":
        return rng.integers(-128, 128, (n, d)).astype(np.int8)
    return rng.standard_normal((n, d)).astype(dtype)


def builders(t0, quick=False):
    import cupy as cp

    from knngraph import ggnn, grnnd

    for dtype in ("float32",) if quick else ("float32", "uint8"):
        for metric in ("sqeuclidean",) if quick else ("sqeuclidean", "cosine"):
            x = cp.asarray(data(dtype, 1200, 64, 6))
            gg = ggnn.build(ggnn.IndexParams(graph_degree=16, metric=metric, refinements=1), x, device="cuda",
                            verbose=False)
            for cache in (80, 1100):  # a ring of 38 ids; above 1024 ids the cache is scanned, not hashed
                ggnn.search(gg, x[:40], 10, ggnn.SearchParams(tau=0.5, queue_size=32, cache_size=cache),
                            device="cuda", verbose=False)
            for alpha in (1.0, 1.1):
                grnnd.build(grnnd.IndexParams(graph_degree=16, metric=metric, prune_alpha=alpha,
                                              outer_iterations=2, inner_iterations=2), x, device="cuda",
                            verbose=False)
            print(f"builders {dtype} {metric}: ok ({time.perf_counter() - t0:.0f} s)", flush=True)


def main():
    import argparse

    import cupy as cp

    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="core,builders,exact")
    ap.add_argument("--quick", action="store_true", help="float32 and L2 only")
    ap.add_argument("--lineinfo", action="store_true", help="compile the kernels with line information")
    args = ap.parse_args()
    parts = args.parts.split(",")
    if args.lineinfo:
        from knngraph.primitives.compile import jit_with_lineinfo

        jit_with_lineinfo()
    t0 = time.perf_counter()
    if "builders" in parts:
        builders(t0, args.quick)
    if "core" in parts:
        core(t0, args.quick)
    if "exact" in parts:
        exact_searches(t0, args.quick)
    cp.cuda.runtime.deviceSynchronize()
    print(f"sanitizer workload done in {time.perf_counter() - t0:.0f} s", flush=True)


def core(t0, quick=False):
    import cupy as cp

    import knngraph
    from knngraph import nndescent, song

    for dtype in ("float32",) if quick else ("float32", "float16", "uint8", "int8"):
        for metric in ("sqeuclidean",) if quick else ("sqeuclidean", "cosine"):
            x = cp.asarray(data(dtype, 1500, 64, 1))
            q = cp.asarray(data(dtype, 40, 64, 2))
            for select in ("warp_filter", "quickselect"):
                knngraph.knn(x, q, 10, metric=metric, select=select, device="cuda", verbose=False)
            g = knngraph.knn_graph(x, 16, metric=metric, device="cuda", verbose=False)
            nnd = nndescent.build(nndescent.IndexParams(graph_degree=16, metric=metric, max_iterations=3), x,
                                  device="cuda", verbose=False)
            nndescent.extend(nnd, cp.asarray(data(dtype, 100, 64, 3)), device="cuda", verbose=False)
            prepared = knngraph.optimize_graph(g, x, 12, device="cuda", verbose=False)
            index = song.from_graph(prepared, x, device="cuda")
            for visited in ("hash", "bloom"):
                song.search(index, q, 10, song.SearchParams(queue_size=32, visited=visited, algo="song"),
                            device="cuda", verbose=False)
            # the fast searcher: warp per query and block per query, float queries against 8-bit vectors
            for width in (1, 4):
                song.search(index, q, 10, song.SearchParams(queue_size=32, search_width=width), device="cuda",
                            verbose=False)
            song.search(index, q.astype(cp.float32), 10, song.SearchParams(queue_size=48), device="cuda",
                        verbose=False)
            print(f"{dtype} {metric}: ok ({time.perf_counter() - t0:.0f} s)", flush=True)
    # float16 rows of 384 (minilm-words' shape): the four-halves distance mode, 16 lanes per distance
    x = cp.asarray(data("float16", 1500, 384, 5))
    index = song.from_graph(knngraph.optimize_graph(knngraph.knn_graph(x, 16, metric="cosine", device="cuda",
                                                                       verbose=False), x, 12, device="cuda",
                                                    verbose=False), x, song.IndexParams(metric="cosine"),
                            device="cuda")
    for width in (1, 8):
        song.search(index, x[:40], 10, song.SearchParams(queue_size=24, search_width=width), device="cuda",
                    verbose=False)
    x = cp.asarray(data("float32", 1500, 64, 4))
    hashed = song.from_graph(knngraph.optimize_graph(knngraph.knn_graph(x, 16, device="cuda", verbose=False), x,
                                                     12, device="cuda", verbose=False), x,
                             song.IndexParams(hash_bits=128), device="cuda")
    song.search(hashed, x[:40], 10, song.SearchParams(queue_size=32), device="cuda", verbose=False)
    g1 = knngraph.knn_graph(x[:700], 8, device="cuda", verbose=False)
    g2 = knngraph.knn_graph(x[700:], 8, device="cuda", verbose=False)
    knngraph.merge_graphs(g1, g2, x[:700], x[700:], device="cuda", verbose=False)


def exact_searches(t0, quick=False):
    import cupy as cp

    from knngraph import bruteforce

    for metric in ("sqeuclidean",) if quick else ("sqeuclidean", "euclidean", "inner_product", "cosine"):
        for dtype in ("float32",) if quick else ("float32", "float16"):
            x = cp.asarray(data(dtype, 700, 64, 7))
            q = cp.asarray(data(dtype, 45, 64, 8))
            index = bruteforce.build(bruteforce.IndexParams(metric=metric), x, device="cuda", verbose=False)
            for limit in (None, "1MB"):  # one pass; base tiles streamed
                _, i = bruteforce.search(index, q, 7, memory_limit=limit, verbose=False)
                _, i_host = bruteforce.search(index, cp.asnumpy(q), 7, device="cpu", verbose=False)
                if (cp.asnumpy(i) != i_host).mean() > 0.01:
                    raise SystemExit(f"exact {metric} {dtype}: GPU answers differ from the CPU's")
            for _ in range(2):  # the one pass again: captured as a CUDA graph, then replayed
                stats: dict = {}
                _, i_replay = bruteforce.search(index, q, 7, verbose=False, stats=stats)
            if not stats.get("cuda_graph") or (cp.asnumpy(i_replay) != i_host).mean() > 0.01:
                raise SystemExit(f"exact {metric} {dtype}: the replayed search differs (or was not replayed)")
            q[3, 3] = cp.inf
            try:
                bruteforce.search(index, q, 7, verbose=False)  # (replayed: the flags come through the graph)
            except ValueError as exc:
                if "queries row 3 contains NaN or inf" not in str(exc):
                    raise
            else:
                raise SystemExit("a query holding inf was not refused")
            print(f"exact {metric} {dtype}: ok ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
