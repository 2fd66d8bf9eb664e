"""Profile the GPU search kernels on sift-photos 450k (registers, occupancy, time per launch).

    python benchmarks/profile_search_kernel.py [--queue 64] [--algo beam]
    ncu --kernel-name regex:beam --launch-skip 3 --launch-count 1 --section LaunchStats --section Occupancy \
        --section WarpStateStats --section SchedulerStats python benchmarks/profile_search_kernel.py

Prints, per algorithm, the compiled kernel's registers per thread, local (spill) bytes and static shared
bytes (from the CuPy function the raw launch uses) and the median time of a 10k-query launch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_sift, sync  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queue", type=int, default=64)
    ap.add_argument("--algo", default="beam,song")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--registers", default="0", help="comma-separated register caps to try (0: default)")
    args = ap.parse_args()
    import cupy as cp

    import knngraph
    from knngraph import _cuda_launch, song

    base, queries, _ = load_sift(450_000)
    cache = Path(os.environ.get("KNNGRAPH_SONG_CACHE", "/tmp/knngraph-song")) / "sift450k-exact96-opt32.knng"
    if cache.exists():
        g = knngraph.Graph.load(cache)
    else:
        raw = knngraph.knn_graph(base, 96, device="cuda", verbose=False)
        g = knngraph.optimize_graph(raw, base, graph_degree=32, device="cuda", verbose=False)
        cache.parent.mkdir(parents=True, exist_ok=True)
        g.save(cache)
    xq = cp.asarray(queries)
    index = song.from_graph(g, cp.asarray(base), device="cuda")
    for algo, regs in [(a, int(r)) for a in args.algo.split(",") for r in args.registers.split(",")]:
        sp = song.SearchParams(queue_size=args.queue, algo=algo, max_registers=regs)
        o = (cp.empty((len(xq), 10), cp.float32), cp.empty((len(xq), 10), cp.int32))
        song.search(index, xq, 10, sp, device="cuda", verbose=False, out=o)
        times = []
        for _ in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            song.search(index, xq, 10, sp, device="cuda", verbose=False, out=o)
            sync()
            times.append(time.perf_counter() - t0)
        print(f"{algo} queue {args.queue} max_registers {regs}: {np.median(times) * 1e3:.3f} ms per 10k queries")
    # the kernels launched through CuPy: registers, spills, shared memory
    for name, fn in _cuda_launch.compiled_functions():
        print(f"{name[:60]}: regs {fn.num_regs}, local {fn.local_size_bytes} B, shared {fn.shared_size_bytes} B, "
              f"max threads/block {fn.max_threads_per_block}")


if __name__ == "__main__":
    main()
