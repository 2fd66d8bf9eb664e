"""Where does exact k-NN time go on the GPU? Times one tile's pieces in isolation (development tool).

    python benchmarks/studies/profile_select.py --out out/

One 10,000 x 53,687 float32 tile (the tile knn uses for 10k queries x 1M base at 128-d): the GEMM that
makes it, a read-only pass over it (bandwidth reference), and the selection kernels at several unroll
factors (the private ``knngraph.primitives._kselect_kernels``, launched directly); numba launch overhead;
registers per thread. Each piece is timed by the runner's protocol (a warm-up call, then the median of 5
synchronised calls). Writes profile_select.jsonl.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402


def event_time(fn, repeats=5):
    """Median seconds of ``fn()`` by the runner's protocol."""
    return time_calls(fn, repeats).median_s


def regs(kernel):
    r = kernel.get_regs_per_thread()
    return max(r.values()) if isinstance(r, dict) else r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    import cupy as cp
    from numba import cuda, float32

    from knngraph._cuda_launch import launch
    from knngraph.primitives import _kselect_kernels as sk

    log = JsonLines(Path(args.out) / "profile_select.jsonl")
    rows, cols, d = 10_000, 53_687, 128
    rng = cp.random.default_rng(0)
    q = rng.standard_normal((rows, d), dtype=cp.float32)
    x = rng.standard_normal((cols, d), dtype=cp.float32)
    xn = (x * x).sum(1)
    dots = cp.empty((rows, cols), cp.float32)
    tile_bytes = rows * cols * 4
    t = event_time(lambda: cp.matmul(q, x.T, out=dots))
    log.write(part="gemm_out", s=t, tflops=2 * rows * cols * d / t / 1e12)
    t = event_time(lambda: q @ x.T)
    log.write(part="gemm_alloc", s=t, tflops=2 * rows * cols * d / t / 1e12)
    t = event_time(lambda: dots.sum(axis=1))
    log.write(part="cupy_row_sum", s=t, gbps=tile_bytes / t / 1e9)

    for unroll in (1, 4, 8, 16):
        @cuda.jit
        def read_rows(a, out):
            stage = cuda.local.array(unroll, dtype=float32)
            lane = cuda.threadIdx.x % 32
            row = cuda.blockIdx.x * (cuda.blockDim.x // 32) + cuda.threadIdx.x // 32
            if row >= a.shape[0]:
                return
            acc = float32(0)
            n = a.shape[1]
            for s in range(0, n, unroll * 32):
                for u in range(unroll):
                    j = s + u * 32 + lane
                    stage[u] = a[row, j] if j < n else float32(0)
                for u in range(unroll):
                    acc += stage[u]
            out[row * 32 + lane] = acc

        out = cp.empty(rows * 32, cp.float32)
        blocks = (rows + 3) // 4
        t = event_time(lambda: read_rows[blocks, 128](dots, out))
        log.write(part="read_only", unroll=unroll, s=t, gbps=tile_bytes / t / 1e9,
                  regs=regs(read_rows))

    dummy_f = cp.zeros((1, 1), cp.float32)
    dummy_i = cp.zeros((1, 1), cp.int32)
    for k in (10, 100):
        ok = cp.empty((rows, k), cp.float32)
        oi = cp.empty((rows, k), cp.int32)
        for unroll in (4, 8):
            kern = sk.warp_filter_kernel(sk.list_capacity(k), sk.SRC_DOTS, unroll)
            wpb = kern.warps_per_block
            blocks = (rows + wpb - 1) // wpb
            args = (rows, 1, cols, cols, k, dots, xn, np.float32(-2), 0, -1, dummy_f, dummy_i, dummy_f, dummy_i,
                    0, ok, oi)
            if unroll == 8:
                t = event_time(lambda: kern[blocks, wpb * 32](*args))
                log.write(part="warp_filter_numba_launch", k=k, unroll=unroll, s=t, gbps=tile_bytes / t / 1e9,
                          regs=regs(kern), wpb=wpb)
            for cap in (None, 72):
                t = event_time(lambda: launch(kern, blocks, wpb * 32, args, max_registers=cap))
                log.write(part="warp_filter_raw_launch", k=k, unroll=unroll, maxnreg=cap, s=t,
                          gbps=tile_bytes / t / 1e9)
        bufs = [cp.empty((rows, cols), tt) for tt in (cp.float32, cp.int32, cp.float32, cp.int32)]
        ok = cp.empty((rows, k), cp.float32)
        oi = cp.empty((rows, k), cp.int32)
        t = event_time(lambda: sk.quickselect_kernel[(rows + 3) // 4, 128](
            sk.SRC_DOTS, rows, 1, cols, cols, k, dots, xn, np.float32(-2), 0, -1, dummy_f, dummy_i, *bufs, ok, oi))
        log.write(part="quickselect", k=k, s=t, gbps=tile_bytes / t / 1e9,
                  regs=regs(sk.quickselect_kernel))
        bufs = None

    # launch overhead: a numba launch with the selection kernel's 18 arguments, tiny grid
    kern = sk.warp_filter_kernel(64, sk.SRC_DOTS)
    ok = cp.empty((1, 10), cp.float32)
    oi = cp.empty((1, 10), cp.int32)
    small = cp.ascontiguousarray(dots[:1, :32])
    args = (1, 1, 32, 32, 10, small, xn, np.float32(-2), 0, -1, dummy_f, dummy_i, dummy_f, dummy_i, 0, ok, oi)
    for name, go in (("numba", lambda: kern[1, 128](*args)), ("raw", lambda: launch(kern, 1, 128, args))):
        log.write(part=f"{name}_launch_overhead", s=time_calls(lambda: [go() for _ in range(200)], 3).median_s / 200)


if __name__ == "__main__":
    main()
