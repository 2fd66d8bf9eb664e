"""Graph operations on the CPU (numba, nodes in parallel): the pruning routine of
:func:`knngraph.graphops.optimize_graph`, the merge of sorted neighbour lists
(:func:`knngraph.graphops.merge_sorted_lists`) and the reverse edges of host graphs
(:func:`knngraph.graphops.reverse_edges`). :mod:`knngraph.graphops.cuda` has the first two.

Pruning: one routine serves both passes of :func:`~knngraph.graphops.optimize_graph`. For node u it takes a primary candidate list P (ids) and a secondary
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

from ..primitives.compile import SERIAL_BELOW, SplitKernel
from ..primitives.lists import dedup_sorted, less, sort_pairs
from ..primitives.pair_distance import cpu_distance

__all__ = ["prune", "merge_sorted_lists", "reverse_edges"]


#: the count _gather starts from when nothing is gathered yet: an int64, not the literal 0, which numba would
#: compile a second _gather for (a function called from a kernel is compiled per argument types)
_ZERO = np.int64(0)


@numba.njit(cache=True, fastmath=True)
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


def _prune(i0, i1, base, inv, kind, factor, primary, primary2, secondary, degree, fill, out_ids, out_d):
    cap = primary.shape[1] + primary2.shape[1] + secondary.shape[1]
    a = np.float32(factor)
    for u in range(i0, i1):
        ids = np.empty(cap, np.int32)
        d = np.empty(cap, np.float32)
        np_ = _gather(u, primary[u], base, kind, inv, ids, d, _ZERO)
        np_ = _gather(u, primary2[u], base, kind, inv, ids, d, np_)
        sort_pairs(d, ids, 0, np_)
        np_ = dedup_sorted(d, ids, 0, np_)
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
                ns = _gather(u, secondary[u], base, kind, inv, ids, d, _ZERO)
                sort_pairs(d, ids, 0, ns)
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
        sort_pairs(row_d, row_ids, 0, nk)
        for t in range(nk, degree):
            row_ids[t] = -1
            row_d[t] = np.inf


# fastmath: for cpu_distance's sums, which take this kernel's flags (optimize_graph on minilm-words,
# 60k x 384: 6.3 s without, 2.5 s with); rows [i0, i1) of a SplitKernel (compiled once, serial: numba's
# parallel build took 4 times as long to compile, per vector type)
_PRUNE = SplitKernel(_prune, fastmath=True)


def prune(base, inv, kind, factor, primary, primary2, secondary, degree, fill):
    """Run the pruning routine for every node (``factor``: the occlusion factor); returns ids int32 and
    internal distances float32 [n, R]."""
    n = primary.shape[0]
    out_ids = np.empty((n, degree), np.int32)
    out_d = np.empty((n, degree), np.float32)
    # threaded at any size, as it always was: a row's pruning reads many vectors
    _PRUNE.run(SERIAL_BELOW, n, base, inv, kind, factor, primary, primary2, secondary, int(degree), bool(fill),
               out_ids, out_d)
    return out_ids, out_d


@numba.njit(cache=True)
def merge_row(ad, ai, bd, bi, out_d, out_i):
    """The first ``len(out_d)`` distinct ids of the (distance, id)-sorted 1-d lists a and b, merged into
    ``out_d`` / ``out_i`` (which must not share memory with a or b); -1 entries are skipped and missing ones
    padded with (inf, -1). The one row merge of :func:`merge_sorted_lists` and of the clustered
    NN-Descent build's fold of piece lists into its running lists (``knngraph.nndescent._merge_host``)."""
    ka = ad.shape[0]
    kb = bd.shape[0]
    k = out_d.shape[0]
    i = 0
    j = 0
    c = 0
    # the comparison and the picks as selects, no branches but the predictable ones (a list running out, a
    # repeated id), and the repeat test without an early exit (it compiles to vector compares): 1M rows
    # of two random 32-entry lists, one thread, 395 ms against 605 ms for the branching loop
    # (``less``'s short-circuit, a scan that stops at the first repeat)
    while c < k and (i < ka or j < kb):
        a_left = i < ka
        b_left = j < kb
        da = np.float32(np.inf)
        va = np.int32(-1)
        db = np.float32(np.inf)
        vb = np.int32(-1)
        if a_left:
            da = ad[i]
            va = ai[i]
        if b_left:
            db = bd[j]
            vb = bi[j]
        # less(da, va, db, vb) without its short-circuit
        take_a = a_left & ((not b_left) | (da < db) | ((da == db) & (va < vb)))
        d = da if take_a else db
        v = va if take_a else vb
        i += take_a
        j += 1 - take_a
        skip = v < 0
        for t in range(c):
            skip |= out_i[t] == v
        if not skip:
            out_d[c] = d
            out_i[c] = v
            c += 1
    for t in range(c, k):
        out_d[t] = np.inf
        out_i[t] = -1


def _merge_lists(i0, i1, ad, ai, bd, bi, out_d, out_i):
    """Per row: :func:`merge_row` of rows a and b into the row of out (k = out width)."""
    for r in range(i0, i1):
        merge_row(ad[r], ai[r], bd[r], bi[r], out_d[r], out_i[r])


_MERGE = SplitKernel(_merge_lists)


def merge_sorted_lists(ad, ai, bd, bi, k):
    """Per row, the first ``k`` distinct ids of the (distance, id)-sorted rows of a and b merged, -1
    entries skipped, missing ones padded with (inf, -1): host arrays in, host arrays out."""
    n = ad.shape[0]
    out_d = np.empty((n, k), np.float32)
    out_i = np.empty((n, k), np.int32)
    _MERGE.run(n, n, np.ascontiguousarray(ad), np.ascontiguousarray(ai), np.ascontiguousarray(bd),
                    np.ascontiguousarray(bi), out_d, out_i)
    return out_d, out_i


@numba.njit(cache=True)
def _bucket_in_edges(ids, dists, starts, src, dist):
    """Every edge u -> t of the rows ``ids`` into target t's bucket ``[starts[t], starts[t + 1])`` of
    ``src`` / ``dist``, in source order."""
    n, r = ids.shape
    at = starts[:-1].copy()
    for u in range(n):
        for j in range(r):
            t = ids[u, j]
            if t >= 0:
                src[at[t]] = u
                dist[at[t]] = dists[u, j]
                at[t] += 1


def _nearest_in_edges(i0, i1, starts, src, dist, rev, rev_d):
    """Per target, the ``rev.shape[1]`` sources of its bucket smallest by (distance, source id), in that
    order, -1 / inf padded (a bounded insertion: buckets arrive in source order, so ties keep it)."""
    degree = rev.shape[1]
    for t in range(i0, i1):
        m = 0
        for e in range(starts[t], starts[t + 1]):
            d = dist[e]
            s = src[e]
            if m == degree:
                if not less(d, s, rev_d[t, m - 1], rev[t, m - 1]):
                    continue
                m -= 1
            p = m
            while p > 0 and less(d, s, rev_d[t, p - 1], rev[t, p - 1]):
                rev[t, p] = rev[t, p - 1]
                rev_d[t, p] = rev_d[t, p - 1]
                p -= 1
            rev[t, p] = s
            rev_d[t, p] = d
            m += 1
        for p in range(m, degree):
            rev[t, p] = -1
            rev_d[t, p] = np.inf


_REVERSE = SplitKernel(_nearest_in_edges)


def reverse_edges(ids, dists, degree: int):
    """:func:`knngraph.graphops.reverse_edges` of host rows ``ids`` (int32, -1 = no edge) and their float32
    ``dists``: for each node up to ``degree`` sources of edges into it, nearest first, ties by source id."""
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    n = ids.shape[0]
    counts = np.bincount(ids[ids >= 0], minlength=n)
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    src = np.empty(int(starts[-1]), np.int32)
    dist = np.empty(int(starts[-1]), np.float32)
    _bucket_in_edges(ids, np.ascontiguousarray(dists, dtype=np.float32), starts, src, dist)
    rev = np.empty((n, degree), np.int32)
    rev_d = np.empty((n, degree), np.float32)
    _REVERSE.run(n, n, starts, src, dist, rev, rev_d)
    return rev, rev_d
