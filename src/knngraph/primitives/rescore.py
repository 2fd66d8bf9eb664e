"""Exact distances of chosen neighbour ids, re-sorted: the last step of the exact k-NN.

Ranking a whole base uses GEMM keys (||x||^2 - 2<q, x>, -<q, x>), which lose digits to cancellation; once
a few candidates per query are chosen, their distances are recomputed directly, accumulated in float64,
and each row is re-sorted by (distance, id). Kinds: the internal distance kinds of
:mod:`knngraph.primitives.distances` (the vectors are the caller's, possibly transformed: shifted,
scaled, normalised):

* ``DIST_L2SQ``: sum((q - x)^2);
* ``DIST_IP``: -sum(q x);
* ``DIST_COS``: on unit vectors, sum((q - x)^2) / 2 = 1 - cos, with no cancellation, so identical
  vectors are at distance exactly 0; 1 when either vector is zero (a zero vector has cosine distance 1 to
  everything). The caller normalises the vectors (no inverse norms are taken).

Ids outside [0, len(base)) (-1, the selection's ``ID_NONE``) are no candidate: distance inf, id -1,
last. On the GPU, with the vectors on the device, one kernel does it
all (a warp per query row, ``_rescore_kernel.py``); otherwise the array code below does it with NumPy or
CuPy, gathering rows from wherever the base lives.
"""

from __future__ import annotations

import numpy as np

from .constants import ID_NONE
from .distances import DIST_COS, DIST_IP, DIST_L2SQ

__all__ = ["rescore", "refine_l2"]

_CHUNK_ELEMS = 1 << 24  # gathered elements per chunk (128 MiB of float64)


def _module_of(a) -> str:
    return type(a).__module__.split(".")[0]


def rescore(queries, base, ids, kind: int, xp, *, transform=None):
    """(distances float64, ids int32) of ``ids`` [nq, c] of ``queries`` among ``base`` (ids outside
    [0, len(base)) are none: -1 out), exact
    (float64 sums, kept in float64 so that the caller sees values beyond float32), each row sorted by
    (distance, id).

    ``xp`` (numpy or cupy) is where the result lives; ``base`` may be a host array when ``xp`` is cupy
    (rows are gathered on the host, then uploaded). ``transform(rows)`` maps gathered base rows (and
    the caller has mapped ``queries``) into the space the distances are taken in (float32 out)."""
    nq, c = ids.shape
    n = base.shape[0]
    if nq == 0 or c == 0:
        return xp.empty((nq, c), np.float64), xp.asarray(ids, dtype=np.int32)
    if xp is not np and _module_of(base) == "cupy" and transform is None:
        return _rescore_kernel(xp.asarray(queries), base, xp.asarray(ids), kind, xp)
    d = queries.shape[1]
    out = xp.empty((nq, c), dtype=np.float64)
    rows = max(1, _CHUNK_ELEMS // max(1, c * d))
    base_here = _module_of(base) == xp.__name__.split(".")[0]
    ids = xp.asarray(ids)
    ids = xp.where((ids < 0) | (ids >= n), -1, ids).astype(np.int32)
    for s in range(0, nq, rows):
        e = min(nq, s + rows)
        idx = ids[s:e]
        safe = xp.where(idx < 0, 0, idx)
        if base_here:
            x = base[safe.ravel()]
        else:
            x = xp.asarray(np.asarray(base)[(safe.get() if hasattr(safe, "get") else safe).ravel()])
        if transform is not None:
            x = transform(x)
        x = x.reshape(e - s, c, d).astype(np.float64)
        q = xp.asarray(queries[s:e]).astype(np.float64)[:, None, :]
        if kind == DIST_IP:
            dist = -(x * q).sum(axis=2)
        else:
            diff = x - q
            dist = (diff * diff).sum(axis=2)
            if kind == DIST_COS:
                zero = ((x * x).sum(axis=2) == 0) | ((q * q).sum(axis=2) == 0)
                dist = xp.where(zero, 1.0, dist / 2)
        out[s:e] = xp.where(idx < 0, np.inf, dist)
    return _sort_rows(out, ids, xp)


def _sort_rows(dist, ids, xp):
    """Rows re-sorted by (distance, id); -1 ids (at inf) last."""
    by_id = xp.where(ids < 0, ID_NONE, ids)
    if xp is np:
        order = np.lexsort((by_id, dist), axis=1)
    else:
        order = _lexsort_rows_cupy(dist, by_id, xp)
    return xp.take_along_axis(dist, order, 1), xp.take_along_axis(ids, order, 1)


def _lexsort_rows_cupy(values, ids, xp):
    """Per-row order by (value, id) for CuPy (ids >= 0): one argsort of (order-preserving float32 bits of
    the value, id) packed into uint64 (values equal in float32 count as ties)."""
    u = values.astype(xp.float32).view(xp.uint32).astype(xp.uint64)
    ordered = xp.where(u >> 31, ~u & xp.uint64(0xFFFFFFFF), u | xp.uint64(0x80000000))
    comp = (ordered << 32) | ids.astype(xp.uint32).astype(xp.uint64)
    return xp.argsort(comp, axis=1)


def _rescore_kernel(queries, base, ids, kind, cp):
    from .._cuda_launch import kernel_module, launch

    rescore_rows_kernel = kernel_module(__package__ + "._rescore_kernel").rescore_rows_kernel

    nq, c = ids.shape
    out_d = cp.empty((nq, c), dtype=cp.float64)
    out_i = cp.empty((nq, c), dtype=cp.int32)
    warps = 4
    launch(rescore_rows_kernel, (nq + warps - 1) // warps, 32 * warps,
           (cp.ascontiguousarray(queries), cp.ascontiguousarray(base), cp.ascontiguousarray(ids, dtype=cp.int32),
            out_d, out_i, int(kind)))
    return out_d, out_i


def refine_l2(queries, base, ids, metric: str, xp):
    """Exact L2 distances (squared, or their root for ``metric='euclidean'``) of ``ids`` of ``queries``
    among ``base``, each row re-sorted (see :func:`rescore`)."""
    dist, ids = rescore(queries, base, ids, DIST_L2SQ, xp)
    return (xp.sqrt(dist) if metric == "euclidean" else dist).astype(np.float32), ids
