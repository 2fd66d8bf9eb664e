"""The CUDA kernel of :mod:`knngraph.primitives.rescore`: exact distances of chosen ids, re-sorted."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, float64, int32

from .compile import device_function
from .constants import FULL_MASK, ID_NONE, WARP
from .distances import DIST_COS, DIST_IP
from .warp import warp_sort32, warp_sum

__all__ = ["rescore_rows_kernel"]


@device_function
def _candidate_distance(queries, base, row, idx, d, kind, qq):
    """The exact distance of base row ``idx`` (a valid id) from query ``row``: float64 sums over the d
    components in order, of squared differences (and, for cosine, the base row's squared norm), or of
    products for inner product."""
    acc = float64(0.0)
    xx = float64(0.0)
    for t in range(d):
        qv = float64(float32(queries[row, t]))
        xv = float64(float32(base[idx, t]))
        if kind == DIST_IP:
            acc += qv * xv
        else:
            f = qv - xv
            acc += f * f
            xx += xv * xv
    if kind == DIST_IP:
        return -acc
    if kind == DIST_COS:
        return 1.0 if (qq == 0.0 or xx == 0.0) else acc * 0.5
    return acc


@cuda.jit
def rescore_rows_kernel(queries, base, ids, out_d, out_i, kind):
    """One warp per query row, one lane per candidate: each lane sums its candidate's distance in float64
    (squared differences; products for inner product; on unit vectors squared differences / 2 for cosine,
    1 against a zero vector), with no shuffles in the sums; then the row is sorted by (distance, id). Up
    to 32 candidates sort in registers (a bitonic network over the lanes); longer rows are written out
    and sorted by lane 0 with an insertion sort (the row arrives almost sorted by its GEMM keys, so that
    is about c steps). An id outside [0, len(base)) (-1, the selection's ID_NONE) is no candidate:
    distance inf, id -1 in ``out_i``, after every candidate.

    (A lane per candidate reads its base row on its own, 32 rows per load instruction; each row's cache
    lines then serve the lane's next loads. The warp-per-candidate form summed each candidate with two
    float64 shuffle trees, one candidate after another: on an H200 its 1000 x 32 x 384 search took most
    of a small exact search's GPU time after the selection.)"""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP) + cuda.threadIdx.x // WARP
    if row >= ids.shape[0]:
        return  # whole warps leave together
    c = ids.shape[1]
    d = queries.shape[1]
    n_base = base.shape[0]
    qq = float64(0.0)
    if kind == DIST_COS:
        for t in range(lane, d, WARP):
            v = float64(float32(queries[row, t]))
            qq += v * v
        qq = warp_sum(qq)
    if c <= WARP:
        # one candidate per lane, sorted by a bitonic network on (distance, id; none last)
        dk = float64(np.inf)
        dl = int32(ID_NONE)
        if lane < c:
            idx = ids[row, lane]
            if idx >= 0 and idx < n_base:
                dk = _candidate_distance(queries, base, row, idx, d, kind, qq)
                dl = idx
        dk, dl = warp_sort32(dk, dl, lane)
        if lane < c:
            out_d[row, lane] = dk
            out_i[row, lane] = dl if dl != ID_NONE else int32(-1)
        return
    for j in range(lane, c, WARP):
        idx = ids[row, j]
        dist = float64(np.inf)
        if idx < 0 or idx >= n_base:
            idx = int32(-1)
        else:
            dist = _candidate_distance(queries, base, row, idx, d, kind, qq)
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
