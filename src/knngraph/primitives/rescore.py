"""Exact distances for the selected neighbours (L2 metrics on floating-point data).

Ranking uses ||x||^2 - 2<q, x> (+ ||q||^2), which loses digits to cancellation when q and x are close:
an exact duplicate can come out at 1e-6 instead of 0, and its euclidean distance at 1e-3. Once the k
neighbours are chosen, their distances are recomputed directly as sum((q - x)^2) in float32 (k*d work
per query, small next to the n*d of the scan) and each row is re-sorted by (distance, id).
Integer data never needs this: its dot products are exact.

On the GPU, with the base on the device, one kernel does both steps (a warp per query computes the k
distances, then one lane re-sorts the row, which is already nearly in order; ``_rescore_kernel.py``);
otherwise the array code below does it with NumPy or CuPy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["needs_refine", "refine_l2"]

_CHUNK_ELEMS = 1 << 26  # gathered elements per chunk (256 MiB of float32)


def needs_refine(metric: str, dtype) -> bool:
    return metric in ("sqeuclidean", "euclidean") and np.dtype(dtype).kind == "f"


def refine_l2(queries, base, ids, metric: str, xp):
    """(distances, ids) for ``ids`` [nq, k] (-1 = none) of ``queries`` among ``base``, exact, re-sorted.

    ``xp`` is numpy or cupy; ``base`` may be a host array when ``xp`` is cupy (rows are gathered on the
    host, then uploaded)."""
    nq, k = ids.shape
    d = queries.shape[1]
    if xp is not np and type(base).__module__.split(".")[0] == "cupy":
        return _refine_l2_kernel(xp.asarray(queries), base, ids, metric, xp)
    out = xp.empty((nq, k), dtype=np.float32)
    rows = max(1, _CHUNK_ELEMS // max(1, k * d))
    base_on_device = type(base).__module__.split(".")[0] == xp.__name__.split(".")[0]
    for s in range(0, nq, rows):
        e = min(nq, s + rows)
        idx = ids[s:e]
        safe = xp.where(idx < 0, 0, idx)
        if base_on_device:
            x = base[safe.ravel()]
        else:
            x = xp.asarray(np.asarray(base)[xp.asnumpy(safe).ravel()])
        x = x.reshape(e - s, k, d).astype(np.float32)
        q = xp.asarray(queries[s:e]).astype(np.float32)
        diff = x - q[:, None, :]
        dist = (diff * diff).sum(axis=2)
        out[s:e] = xp.where(idx < 0, xp.float32(np.inf), dist)
    if metric == "euclidean":
        out = xp.sqrt(out)
    # re-sort by (distance, id): sort by id, then stably by distance; ids of -1 sit at inf and stay last
    order = xp.argsort(xp.where(ids < 0, np.iinfo(np.int32).max, ids), axis=1, kind="stable") \
        if xp is np else xp.argsort(xp.where(ids < 0, np.iinfo(np.int32).max, ids), axis=1)
    ids_by_id = xp.take_along_axis(ids, order, 1)
    dist_by_id = xp.take_along_axis(out, order, 1)
    order2 = xp.argsort(dist_by_id, axis=1, kind="stable") if xp is np else _stable_argsort_rows(dist_by_id, xp)
    return xp.take_along_axis(dist_by_id, order2, 1), xp.take_along_axis(ids_by_id, order2, 1)


def _stable_argsort_rows(values, xp):
    """Stable per-row argsort for CuPy: sort (order-preserving distance bits, column) as one uint64."""
    n, k = values.shape
    rank = xp.broadcast_to(xp.arange(k, dtype=np.int64), (n, k))
    u = values.view(xp.uint32).astype(xp.uint64)
    ordered = xp.where(u >> 31, ~u & xp.uint64(0xFFFFFFFF), u | xp.uint64(0x80000000))
    comp = (ordered << 32) | rank.astype(xp.uint64)
    return (xp.sort(comp, axis=1) & xp.uint64(0xFFFFFFFF)).astype(np.int64)


def _refine_l2_kernel(queries, base, ids, metric: str, cp):
    from .._cuda_launch import launch
    from ._rescore_kernel import refine_rows_kernel

    nq, k = ids.shape
    out_d = cp.empty((nq, k), dtype=cp.float32)
    out_i = cp.empty((nq, k), dtype=cp.int32)
    if nq:
        warps = 4
        launch(refine_rows_kernel, (nq + warps - 1) // warps, 32 * warps,
               (cp.ascontiguousarray(queries), cp.ascontiguousarray(base), cp.ascontiguousarray(ids, dtype=cp.int32),
                out_d, out_i, int(metric == "euclidean")))
    return out_d, out_i
