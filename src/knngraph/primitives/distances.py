"""Distances of single pairs of vectors, for graph algorithms (NN-Descent, graph search, pruning), which
compare pairs rather than blocks and so do not use GEMM.

Vectors may be float32, float16, uint8 or int8; arithmetic is float32. Internal distance kinds:

* ``DIST_L2SQ`` (0): ||x - y||^2 (also used for "euclidean"; the root is taken only when reporting);
* ``DIST_IP`` (1): -<x, y>;
* ``DIST_COS`` (2): 1 - <x, y> * inv_norm(x) * inv_norm(y), with inverse norms precomputed by
  :func:`inverse_norms` (0 for zero vectors, which then sit at distance 1 from everything);
* ``DIST_HAMMING`` (3): the Hamming distance of 1-bit codes (uint32 words; SONG, section VII). Not a
  metric and not taken by the functions here: the searchers choose it by the codes' dtype
  (:func:`knngraph.primitives.rows.row_distance`, the GPU's ``MODE_HAMMING``).

Every kernel turns its accumulated sum into a distance with :func:`finish_distance` (written once for the
CPU and the GPU). numba's CPU target has no float16: CPU kernels take :func:`cpu_vectors` of the data.
:func:`report_distances` turns internal values into what the metric reports. The warp-parallel GPU
versions are in :mod:`knngraph.primitives.warp`.
"""

from __future__ import annotations

import numba
import numpy as np

from .compile import host_and_device, writable_view

__all__ = ["DIST_L2SQ", "DIST_IP", "DIST_COS", "DIST_HAMMING", "distance_kind", "inverse_norms",
           "report_distances", "finish_distance", "finish_query_distance", "cpu_distance", "cpu_vectors"]

DIST_L2SQ = 0
DIST_IP = 1
DIST_COS = 2
DIST_HAMMING = 3


def distance_kind(metric: str) -> int:
    """The internal distance kind for a canonical metric name."""
    return {"sqeuclidean": DIST_L2SQ, "euclidean": DIST_L2SQ, "inner_product": DIST_IP, "cosine": DIST_COS}[metric]


def cpu_vectors(x: np.ndarray) -> np.ndarray:
    """The array CPU kernels can read: float16 is widened to float32, a read-only array (a memory map) is
    passed as a writable view (:func:`~knngraph.primitives.compile.writable_view`: one compiled kernel for
    both kinds of input), everything else is returned as is."""
    return x.astype(np.float32) if x.dtype == np.float16 else writable_view(x)


def inverse_norms(x, xp=np):
    """1/||row|| in float32 (0 for zero rows); ``xp`` is numpy or cupy. Only cosine needs them."""
    xf = x.astype(xp.float32)
    nrm = xp.sqrt((xf * xf).sum(axis=1))
    out = xp.zeros_like(nrm)
    nz = nrm > 0
    out[nz] = 1.0 / nrm[nz]
    return out.astype(xp.float32)


def report_distances(values, metric: str, xp=np):
    """Internal distances -> the metric's reported distances: sqrt for euclidean, L2 clamped at 0 and
    cosine to [0, 2] (float32 sums can land a hair outside; t-SNE, DBSCAN and UMAP refuse negative
    distances)."""
    if metric == "euclidean":
        return xp.sqrt(xp.maximum(values, 0)).astype(xp.float32)
    if metric == "sqeuclidean":
        return xp.maximum(values, 0).astype(xp.float32)
    if metric == "cosine":
        return xp.clip(values, 0, 2).astype(xp.float32)
    return values.astype(xp.float32)


@host_and_device
def finish_distance(kind, acc, inv_a, i, inv_b, j):
    """Internal distance from an accumulated sum: the squared difference sum (L2) as is, the dot product
    negated (inner product) or turned into 1 - cos with the inverse norms ``inv_a[i]``, ``inv_b[j]``
    (read only for cosine: the other metrics pass 1-element dummies)."""
    if kind == DIST_L2SQ:
        return acc
    if kind == DIST_IP:
        return -acc
    return np.float32(1.0) - acc * inv_a[i] * inv_b[j]


@host_and_device
def finish_query_distance(kind, acc, inv_x, i, inv_q):
    """:func:`finish_distance` for a search that holds its query's inverse norm ``inv_q`` as a scalar
    (loaded once per query, 0 for the metrics that do not use it) against vector ``i``."""
    if kind == DIST_L2SQ:
        return acc
    if kind == DIST_IP:
        return -acc
    return np.float32(1.0) - acc * inv_x[i] * inv_q


@numba.njit(inline="always", fastmath=True)
def cpu_distance(kind, x, i, y, j, inv_x, inv_y):
    """Distance between x[i] and y[j] (2-D arrays), float32 arithmetic.

    Inlined into its callers at numba's IR level, so it is compiled with *their* flags: its sum vectorises
    only in a caller compiled with ``fastmath`` (every caller in the library is; without it the pruning of
    ``optimize_graph`` ran 2.5x slower)."""
    d = x.shape[1]
    acc = np.float32(0.0)
    if kind == DIST_L2SQ:
        for t in range(d):
            diff = np.float32(x[i, t]) - np.float32(y[j, t])
            acc += diff * diff
        return acc
    for t in range(d):
        acc += np.float32(x[i, t]) * np.float32(y[j, t])
    return finish_distance(kind, acc, inv_x, i, inv_y, j)
