"""The CUDA kernel of :mod:`knngraph.primitives.rescore`: exact L2 distances of chosen ids, re-sorted."""

from __future__ import annotations

from math import sqrt as math_sqrt

import numpy as np
from numba import cuda, float32, int32

from .constants import ID_NONE
from .distances import DIST_L2SQ
from .warp import warp_distance

__all__ = ["refine_rows_kernel"]


@cuda.jit
def refine_rows_kernel(queries, base, ids, out_d, out_i, euclidean):
    """One warp per query row: exact L2 distances of the row's ids, then the row re-sorted by
    (distance, id) with an insertion sort by lane 0 (the row arrives almost sorted, so it is ~k steps)."""
    lane = cuda.threadIdx.x % 32
    row = cuda.blockIdx.x * (cuda.blockDim.x // 32) + cuda.threadIdx.x // 32
    if row >= ids.shape[0]:
        return  # whole warps leave together
    k = ids.shape[1]
    for j in range(k):
        idx = ids[row, j]
        dist = float32(np.inf)
        if idx >= 0:  # the same for every lane: the warp stays converged for the shuffles
            dist = warp_distance(DIST_L2SQ, queries, row, base, idx, queries, queries, lane)
            if euclidean != 0:
                dist = float32(math_sqrt(dist))
        if lane == 0:
            out_d[row, j] = dist
            out_i[row, j] = idx
    cuda.syncwarp(0xFFFFFFFF)
    if lane == 0:
        for j in range(1, k):
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
