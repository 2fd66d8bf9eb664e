"""Search-graph preparation on the CPU (numba, nodes in parallel); see :mod:`knngraph.song.prepare`.

One routine serves both passes. For node u it takes a primary candidate list P (ids) and a secondary
list F, and writes at most R ids:

1. drop -1, u itself and repeated ids from P; compute d(u, c) for each; sort by (d, id);
2. diversity (RNG) pruning: walk P in order, keep c unless a kept r occludes it,
   i.e. alpha^2 * d(r, c) < d(u, c) for squared L2 (alpha * d(r, c) < d(u, c) for cosine; for inner
   product, whose "distances" may be negative, alpha is taken as 1); stop at R kept;
3. if ``fill``: top the row up to R with the rejected ids of P (nearest first), then with ids of F
   that are not in the row yet (nearest first).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from .._distances import DIST_IP, DIST_L2SQ, cpu_distance
from ._structs import cpu_dedup_sorted, cpu_sort_pairs

__all__ = ["prune_cpu", "occlusion_factor"]


@numba.njit(cache=True)
def _gather(u, src, base, kind, inv, ids, d, n0):
    """Append the valid ids of row ``src`` (not u, not -1) with their distance to u; returns the count."""
    n = n0
    for t in range(src.shape[0]):
        c = src[t]
        if c < 0 or c == u:
            continue
        ids[n] = c
        d[n] = cpu_distance(kind, base, u, base, c, inv, inv)
        n += 1
    return n


@numba.njit(parallel=True, cache=True)
def _prune(base, inv, kind, factor, primary, primary2, secondary, degree, fill, out_ids, out_d):
    n = primary.shape[0]
    cap = primary.shape[1] + primary2.shape[1] + secondary.shape[1]
    a = np.float32(factor)
    for u in prange(n):
        ids = np.empty(cap, np.int32)
        d = np.empty(cap, np.float32)
        np_ = _gather(u, primary[u], base, kind, inv, ids, d, 0)
        np_ = _gather(u, primary2[u], base, kind, inv, ids, d, np_)
        cpu_sort_pairs(d, ids, 0, np_)
        np_ = cpu_dedup_sorted(d, ids, 0, np_)
        keep = np.zeros(np_, np.bool_)
        nk = 0
        row_ids = out_ids[u]
        row_d = out_d[u]
        for t in range(np_):
            if nk == degree:
                break
            c = ids[t]
            dc = d[t]
            occluded = False
            for r in range(nk):
                if a * cpu_distance(kind, base, row_ids[r], base, c, inv, inv) < dc:
                    occluded = True
                    break
            if not occluded:
                row_ids[nk] = c
                row_d[nk] = dc
                keep[t] = True
                nk += 1
        if fill:
            for t in range(np_):
                if nk == degree:
                    break
                if not keep[t]:
                    row_ids[nk] = ids[t]
                    row_d[nk] = d[t]
                    nk += 1
            if nk < degree:
                ns = _gather(u, secondary[u], base, kind, inv, ids, d, 0)
                cpu_sort_pairs(d, ids, 0, ns)
                for t in range(ns):
                    if nk == degree:
                        break
                    dup = False
                    for r in range(nk):
                        if row_ids[r] == ids[t]:
                            dup = True
                            break
                    if not dup:
                        row_ids[nk] = ids[t]
                        row_d[nk] = d[t]
                        nk += 1
        cpu_sort_pairs(row_d, row_ids, 0, nk)
        for t in range(nk, degree):
            row_ids[t] = -1
            row_d[t] = np.inf


def occlusion_factor(kind: int, alpha: float) -> float:
    """The factor f of the occlusion test f * d(r, c) < d(u, c) on internal distances: alpha^2 for
    squared L2, alpha for cosine, 1 for inner product."""
    if kind == DIST_L2SQ:
        return float(np.float32(alpha * alpha))
    if kind == DIST_IP:
        return 1.0
    return float(np.float32(alpha))


def prune_cpu(base, inv, kind, alpha, primary, primary2, secondary, degree, fill):
    """Run the pruning routine for every node; returns ids int32 and internal distances float32 [n, R]."""
    n = primary.shape[0]
    out_ids = np.empty((n, degree), np.int32)
    out_d = np.empty((n, degree), np.float32)
    _prune(base, inv, kind, occlusion_factor(kind, alpha), primary, primary2, secondary, int(degree), bool(fill), out_ids, out_d)
    return out_ids, out_d
