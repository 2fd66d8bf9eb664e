"""The distance of one pair of vectors inside a kernel, written once for the CPU and the GPU.

Every kernel turns its accumulated sum into a distance with :func:`finish_distance` (or
:func:`finish_query_distance` when it holds its query's inverse norm as a scalar); :func:`cpu_distance` is
the whole pair distance of the CPU kernels. The distance kinds and the host helpers (inverse norms,
reported distances) are in :mod:`knngraph.primitives.distances`, which host code imports without numba;
the warp-parallel GPU versions are in :mod:`knngraph.primitives.warp`.
"""

from __future__ import annotations

import numba
import numpy as np

from .compile import host_and_device
from .distances import DIST_IP, DIST_L2SQ

__all__ = ["finish_distance", "finish_query_distance", "cpu_distance"]


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
