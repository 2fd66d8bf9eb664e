"""Pairwise distance helpers for graph algorithms, written once for the CPU (numba ``njit``) and the GPU
(numba-cuda device functions, one warp per pair).

Graph algorithms (NN-Descent, graph search, pruning) compare single pairs of vectors rather than
blocks, so they use these instead of GEMM. Vectors may be float32, float16, uint8 or int8; arithmetic
is float32. The distance kinds:

* ``DIST_L2SQ`` (0): ||x - y||^2 (also used for "euclidean"; take the sqrt only when reporting);
* ``DIST_IP`` (1): -<x, y>;
* ``DIST_COS`` (2): 1 - <x, y> * inv_norm(x) * inv_norm(y), with inverse norms precomputed by
  :func:`inverse_norms` (0 for zero vectors, which then sit at distance 1 from everything).

numba's CPU target has no float16: CPU kernels take :func:`cpu_vectors` of the data (float16 becomes
float32; the other dtypes pass through untouched). Use :func:`distance_kind` to map a metric name to its kind and :func:`report_distances` to turn internal
values into what the metric reports.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import cuda, float32

__all__ = ["DIST_L2SQ", "DIST_IP", "DIST_COS", "distance_kind", "inverse_norms", "report_distances",
           "cpu_distance", "cpu_vectors", "warp_distance", "warp_sum", "warp_partials4", "FULL_MASK"]

DIST_L2SQ = 0
DIST_IP = 1
DIST_COS = 2
FULL_MASK = 0xFFFFFFFF


def distance_kind(metric: str) -> int:
    """The internal distance kind for a canonical metric name."""
    return {"sqeuclidean": DIST_L2SQ, "euclidean": DIST_L2SQ, "inner_product": DIST_IP, "cosine": DIST_COS}[metric]


def cpu_vectors(x: np.ndarray) -> np.ndarray:
    """The array CPU kernels can read: float16 is widened to float32, everything else is returned as is."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def inverse_norms(x, xp=np):
    """1/||row|| in float32 (0 for zero rows); ``xp`` is numpy or cupy. Only cosine needs them."""
    xf = x.astype(xp.float32)
    nrm = xp.sqrt((xf * xf).sum(axis=1))
    out = xp.zeros_like(nrm)
    nz = nrm > 0
    out[nz] = 1.0 / nrm[nz]
    return out.astype(xp.float32)


def report_distances(values, metric: str, xp=np):
    """Internal distances -> the metric's reported distances (sqrt for euclidean, clamp at 0)."""
    if metric == "euclidean":
        return xp.sqrt(xp.maximum(values, 0)).astype(xp.float32)
    if metric == "sqeuclidean":
        return xp.maximum(values, 0).astype(xp.float32)
    return values.astype(xp.float32)


@numba.njit(inline="always", fastmath=True)
def cpu_distance(kind, x, i, y, j, inv_x, inv_y):
    """Distance between x[i] and y[j] (2-D arrays), float32 arithmetic."""
    d = x.shape[1]
    acc = np.float32(0.0)
    if kind == DIST_L2SQ:
        for t in range(d):
            diff = np.float32(x[i, t]) - np.float32(y[j, t])
            acc += diff * diff
        return acc
    for t in range(d):
        acc += np.float32(x[i, t]) * np.float32(y[j, t])
    if kind == DIST_IP:
        return -acc
    return np.float32(1.0) - acc * inv_x[i] * inv_y[j]


@cuda.jit(device=True, inline=True)
def warp_distance(kind, x, i, y, j, inv_x, inv_y, lane):
    """Distance between x[i] and y[j] computed by a whole warp: lane t sums dims t, t+32, ...; the
    partial sums are combined with a butterfly of shuffles, so every lane returns the result.
    All 32 lanes must call it (full-mask shuffles)."""
    d = x.shape[1]
    acc = float32(0.0)
    if kind == DIST_L2SQ:
        for t in range(lane, d, 32):
            diff = float32(x[i, t]) - float32(y[j, t])
            acc += diff * diff
    else:
        for t in range(lane, d, 32):
            acc += float32(x[i, t]) * float32(y[j, t])
    off = 16
    while off > 0:
        acc += cuda.shfl_xor_sync(FULL_MASK, acc, off)
        off //= 2
    if kind == DIST_L2SQ:
        return acc
    if kind == DIST_IP:
        return -acc
    return float32(1.0) - acc * inv_x[i] * inv_y[j]


@cuda.jit(device=True, inline=True)
def warp_sum(acc):
    """Sum of ``acc`` over the warp by a butterfly of shuffles; every lane gets it (all 32 lanes call)."""
    off = 16
    while off > 0:
        acc += cuda.shfl_xor_sync(FULL_MASK, acc, off)
        off //= 2
    return acc


@cuda.jit(device=True, inline=True)
def warp_partials4(kind, base, v0, v1, v2, v3, q, qrow, dim, lane):
    """Per-lane partial sums (lane t: dims t, t + 32, ...) of four rows of ``base`` against q[qrow, :dim]:
    squared differences (L2) or products. The four rows' loads are in flight together, which is what
    latency-bound callers need (a SONG query's candidates, NN-Descent's random initial lists); finish
    each with :func:`warp_sum`."""
    a0 = float32(0.0)
    a1 = float32(0.0)
    a2 = float32(0.0)
    a3 = float32(0.0)
    for t in range(lane, dim, 32):
        qt = float32(q[qrow, t])
        x0 = float32(base[v0, t])
        x1 = float32(base[v1, t])
        x2 = float32(base[v2, t])
        x3 = float32(base[v3, t])
        if kind == DIST_L2SQ:
            x0 -= qt
            x1 -= qt
            x2 -= qt
            x3 -= qt
            a0 += x0 * x0
            a1 += x1 * x1
            a2 += x2 * x2
            a3 += x3 * x3
        else:
            a0 += x0 * qt
            a1 += x1 * qt
            a2 += x2 * qt
            a3 += x3 * qt
    return a0, a1, a2, a3
