"""The CUDA kernel of :mod:`knngraph.primitives.rescore`: exact distances of chosen ids, re-sorted."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, float64, int32

from .compile import device_function
from .constants import FULL_MASK, ID_NONE, WARP
from .distances import DIST_COS, DIST_IP

__all__ = ["rescore_rows_kernel"]


@device_function
def _warp_sum64(acc):
    off = 16
    while off > 0:
        acc += cuda.shfl_xor_sync(FULL_MASK, acc, off)
        off //= 2
    return acc


@cuda.jit
def rescore_rows_kernel(queries, base, ids, out_d, out_i, kind):
    """One warp per query row: float64 sums over the row's ids (squared differences; products for inner
    product; on unit vectors squared differences / 2 for cosine, 1 against a zero vector) into the
    float64 ``out_d``, then the row re-sorted by (distance, id) by lane 0 with an insertion sort (the row arrives
    almost sorted by its GEMM keys, so that is about c steps)."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP) + cuda.threadIdx.x // WARP
    if row >= ids.shape[0]:
        return  # whole warps leave together
    c = ids.shape[1]
    d = queries.shape[1]
    qq = float64(0.0)
    if kind == DIST_COS:
        for t in range(lane, d, WARP):
            v = float64(float32(queries[row, t]))
            qq += v * v
        qq = _warp_sum64(qq)
    for j in range(c):
        idx = ids[row, j]
        dist = float64(np.inf)
        if idx >= 0:  # the same for every lane: the warp stays converged for the shuffles
            acc = float64(0.0)
            xx = float64(0.0)
            for t in range(lane, d, WARP):
                qv = float64(float32(queries[row, t]))
                xv = float64(float32(base[idx, t]))
                if kind == DIST_IP:
                    acc += qv * xv
                else:
                    f = qv - xv
                    acc += f * f
                    xx += xv * xv
            acc = _warp_sum64(acc)
            if kind == DIST_IP:
                acc = -acc
            elif kind == DIST_COS:
                xx = _warp_sum64(xx)
                acc = 1.0 if (qq == 0.0 or xx == 0.0) else acc * 0.5
            dist = acc
        if lane == 0:
            out_d[row, j] = dist
            out_i[row, j] = idx
    cuda.syncwarp(FULL_MASK)
    if lane == 0:
        for j in range(1, c):
            dk = out_d[row, j]
            di = out_i[row, j]
            dl = di if di >= 0 else int32(ID_NONE)
            t = j
            while t > 0:
                pk = out_d[row, t - 1]
                pi = out_i[row, t - 1]
                pl = pi if pi >= 0 else int32(ID_NONE)
                if pk < dk or (pk == dk and pl <= dl):
                    break
                out_d[row, t] = pk
                out_i[row, t] = pi
                t -= 1
            out_d[row, t] = dk
            out_i[row, t] = di
