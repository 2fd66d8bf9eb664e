"""A small end-to-end GPU workload for compute-sanitizer (memcheck, racecheck): every kernel family of the
library on tiny inputs, every vector dtype, L2 and cosine.

    compute-sanitizer --tool memcheck python3 scripts/gpu_sanitize.py
    python3 scripts/sanitizer_summary.py LOG...      # fails on any kernel error or hazard

Exact k-NN (both selection strategies, graph and search), NN-Descent (random lists, merge, extend),
graph preparation, SONG search (generic, packed 8-bit and hashed), the fast searcher (every distance mode,
warp and block per query), the list merge. Sizes are small: the
sanitizer runs kernels tens of times slower.
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


def main():
    import cupy as cp

    import knngraph
    from knngraph import nndescent, song

    t0 = time.perf_counter()
    for dtype in ("float32", "float16", "uint8", "int8"):
        for metric in ("sqeuclidean", "cosine"):
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
    cp.cuda.runtime.deviceSynchronize()
    print(f"sanitizer workload done in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
