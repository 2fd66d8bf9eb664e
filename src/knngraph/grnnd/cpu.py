"""GRNND rounds on the CPU (numba, vertices in parallel). :mod:`knngraph.grnnd.cuda` has the same functions.

Every round is three steps over fixed-size arrays (section 3.5: no allocation that grows with the data
inside the rounds, pools of capacity R):

1. :func:`propose` (Alg. 4): each vertex tests the pairs of its read pool in a random order and writes one
   proposal per pool slot into its own R slots of the proposal arrays: (close, far) for a redirected
   entry, (itself, entry) for a survivor. No vertex writes into another's pool, so the result does not
   depend on thread timing.
2. :func:`group`: a counting sort of the proposals by target vertex.
3. :func:`merge`: each vertex's new (write) pool is the R nearest distinct ids among the proposals aimed
   at it (see :mod:`knngraph.grnnd._common` for the duplicate rule).

:func:`reverse` writes the proposals of the reverse-edge step (section 3.6); :func:`row_proposals` those of
the initial random lists and of rows given by the caller (``extend``).
"""

from __future__ import annotations

import numba
import numpy as np

from ..primitives.compile import SERIAL_BELOW, SplitKernel
from ..primitives.pair_distance import cpu_distance
from ..primitives.random import progression
from ._common import pair_of, pair_order, reverse_count

__all__ = ["random_rows", "row_proposals", "propose", "reverse", "group", "merge"]



@numba.njit(fastmath=True, inline="never", cache=True)
def _dist(kind, x, inv, a, b):
    """d(x[a], x[b]) computed in one canonical order (a < b), so every copy of a pair's distance is the
    same float."""
    if a > b:
        a, b = b, a
    return cpu_distance(kind, x, a, x, b, inv, inv)


def _random_rows(i0, i1, n, s, seed, lo, out):
    for r in range(i0, i1):
        v = lo + r
        start, step = progression(seed, v, n - 1)
        for t in range(s):
            c = (start + t * step) % (n - 1)
            out[r, t] = c + 1 if c >= v else c


def random_rows(n, s, seed, lo, out):
    """out[r, :s] = ``s`` distinct random ids other than lo + r (rows lo..n-1)."""
    _RANDOM_ROWS.run(SERIAL_BELOW, out.shape[0], n, s, np.int64(seed), lo, out)


def _row_proposals(i0, i1, x, inv, kind, rows, lo, pt, pc, pd):
    for r in range(i0, i1):
        v = lo + r
        for t in range(rows.shape[1]):
            c = rows[r, t]
            if c < 0 or c == v:
                pt[r, t] = -1
                continue
            pt[r, t] = v
            pc[r, t] = 2 * c + 1
            pd[r, t] = _dist(kind, x, inv, v, np.int64(c))  # int64 ids, as _propose passes (one compiled _dist)


def row_proposals(x, inv, kind, rows, lo, pt, pc, pd):
    """Proposals (row lo + r, rows[r, t], new) with their distances, written to pt/pc/pd[r, t]; -1 ids
    and the row's own id propose nothing."""
    _ROW_PROPOSALS.run(SERIAL_BELOW, rows.shape[0], x, inv, kind, rows, lo, pt, pc, pd)


def _propose(i0, i1, x, inv, kind, seed, rnd, factor, pool_c, pool_d, cnt, pt, pc, pd, redirects):
    cap = pool_c.shape[1]
    f = np.float32(factor)
    relaxed = pt.shape[1] > cap
    for v in range(i0, i1):
        m = cnt[v]
        alive = np.ones(cap, np.bool_)
        red = 0
        if relaxed:
            for s in range(cap, pt.shape[1]):
                pt[v, s] = -1
        if m > 1:
            start, step = pair_order(seed, rnd, v, m)
            for t in range(m * m):
                i, j = pair_of(start, step, t, m)
                if i >= j or not alive[i] or not alive[j]:
                    continue
                ci = pool_c[v, i]
                cj = pool_c[v, j]
                if (ci & 1) == 0 and (cj & 1) == 0:
                    continue  # both survived last round's tests against each other: same outcome
                di = pool_d[v, i]
                dj = pool_d[v, j]
                dij = _dist(kind, x, inv, ci >> 1, cj >> 1)
                # Eq. (2): the pair occludes its farther member; it is redirected to the closer one
                if dij < max(di, dj):
                    if di < dj or (di == dj and ci < cj):
                        close, far = i, j
                    else:
                        close, far = j, i
                    # v drops it only when the relaxed test holds too (f * dij in float32, as on the GPU;
                    # f = 1: always); otherwise v keeps it and offers it to the closer one as well (once)
                    if f * dij < max(di, dj):
                        alive[far] = False
                        pt[v, far] = pool_c[v, close] >> 1
                        pc[v, far] = (pool_c[v, far] | 1)
                        pd[v, far] = dij
                        red += 1
                    elif pt[v, cap + far] < 0:
                        pt[v, cap + far] = pool_c[v, close] >> 1
                        pc[v, cap + far] = (pool_c[v, far] | 1)
                        pd[v, cap + far] = dij
                        red += 1
        for s in range(m):
            if alive[s]:
                pt[v, s] = v
                pc[v, s] = pool_c[v, s] & ~1  # a survivor: old from now on
                pd[v, s] = pool_d[v, s]
        for s in range(m, cap):
            pt[v, s] = -1
        redirects[v] = red


def propose(x, inv, kind, seed, rnd, pool_c, pool_d, cnt, pt, pc, pd, factor=1.0):
    """Step 1 of a round (Alg. 4) for every vertex; returns the number of redirected entries.

    ``factor`` (the occlusion factor of ``prune_alpha``, >= 1): a pair occluding its farther member by
    Eq. (2) redirects it to the closer one as the paper does, and v drops it from its pool only when
    also f * d(n_i, n_j) < max(d(v, n_i), d(v, n_j)) (in float32); an entry v keeps is proposed to the
    closer one from column R + slot. pt/pc/pd have R columns when f = 1, 2R otherwise."""
    redirects = np.empty(pool_c.shape[0], np.int64)
    _PROPOSE.run(SERIAL_BELOW, pool_c.shape[0], x, inv, kind, np.int64(seed), np.int64(rnd), np.float32(factor), pool_c,
                 pool_d, cnt, pt, pc, pd, redirects)
    return int(redirects.sum())


def _reverse(i0, i1, rho, pool_c, pool_d, cnt, pt, pc, pd):
    cap = pool_c.shape[1]
    for v in range(i0, i1):
        m = cnt[v]
        r = reverse_count(rho, m)
        for s in range(m):
            pt[v, s] = v                       # the vertex keeps its pool
            pc[v, s] = pool_c[v, s]
            pd[v, s] = pool_d[v, s]
        for s in range(m, cap):
            pt[v, s] = -1
        for s in range(r):                     # ... and offers itself to its r nearest entries
            pt[v, cap + s] = pool_c[v, s] >> 1
            pc[v, cap + s] = 2 * v + 1
            pd[v, cap + s] = pool_d[v, s]
        for s in range(r, pt.shape[1] - cap):
            pt[v, cap + s] = -1


def reverse(rho, pool_c, pool_d, cnt, pt, pc, pd):
    """Proposals of the reverse-edge step (section 3.6): every pool entry for its own vertex, and v for
    each of v's round(rho * count) nearest entries (pools are sorted). pt/pc/pd have R + ceil(rho R)
    columns. Returns the number of reverse edges offered."""
    _REVERSE.run(SERIAL_BELOW, pool_c.shape[0], np.float64(rho), pool_c, pool_d, cnt, pt, pc, pd)
    return int((pt[:, pool_c.shape[1]:] >= 0).sum())


@numba.njit(cache=True)
def _group(pt, n, offsets, order):
    flat = pt.ravel()
    offsets[:] = 0
    for e in range(flat.shape[0]):
        t = flat[e]
        if t >= 0:
            offsets[t + 1] += 1
    for t in range(n):
        offsets[t + 1] += offsets[t]
    fill = offsets[:n].copy()
    for e in range(flat.shape[0]):
        t = flat[e]
        if t >= 0:
            order[fill[t]] = e
            fill[t] += 1


def group(pt, pc, pd, n):
    """(offsets [n + 1], codes, distances): the proposals aimed at t are codes/distances[offsets[t]:
    offsets[t + 1]] (a stable counting sort by target)."""
    offsets = np.empty(n + 1, np.int64)
    order = np.empty(pt.size, np.int64)
    _group(pt, n, offsets, order)
    order = order[:offsets[n]]
    return offsets, pc.ravel()[order], pd.ravel()[order]


def _merge(i0, i1, offsets, fc, fd, pool_c, pool_d, cnt):
    cap = pool_c.shape[1]
    for t in range(i0, i1):
        m = 0
        for e in range(offsets[t], offsets[t + 1]):
            c = fc[e]
            d = fd[e]
            # a copy of an id already held: keep the surviving (old) copy
            dup = -1
            for s in range(m):
                if (pool_c[t, s] >> 1) == (c >> 1):
                    dup = s
                    break
            if dup >= 0:
                if c < pool_c[t, dup]:
                    pool_c[t, dup] = c
                continue
            if m == cap and not (d < pool_d[t, m - 1] or (d == pool_d[t, m - 1] and c < pool_c[t, m - 1])):
                continue
            # insert into the sorted pool, dropping the farthest when full
            s = m if m < cap else cap - 1
            while s > 0 and (d < pool_d[t, s - 1] or (d == pool_d[t, s - 1] and c < pool_c[t, s - 1])):
                pool_c[t, s] = pool_c[t, s - 1]
                pool_d[t, s] = pool_d[t, s - 1]
                s -= 1
            pool_c[t, s] = c
            pool_d[t, s] = d
            if m < cap:
                m += 1
        for s in range(m, cap):
            pool_c[t, s] = -1
            pool_d[t, s] = np.inf
        cnt[t] = m


def merge(grouping, pool_c, pool_d, cnt):
    """Step 3: each vertex's write pool = the R nearest distinct ids proposed to it (``grouping`` from
    :func:`group`), sorted by (distance, code), the surviving copy of a duplicated id kept; cnt = entries
    held (<= R). The result does not depend on the order of a target's proposals."""
    _MERGE.run(SERIAL_BELOW, pool_c.shape[0], *grouping, pool_c, pool_d, cnt)


# Each kernel does the vertices [i0, i1) and is compiled once, serial (primitives.compile.SplitKernel: numba's
# parallel builds took 4-5 times as long to compile); every call is split over numba's thread count, as the
# prange loops they were always ran threaded.
_RANDOM_ROWS = SplitKernel(_random_rows)
_ROW_PROPOSALS = SplitKernel(_row_proposals, fastmath=True)
_PROPOSE = SplitKernel(_propose, fastmath=True)
_REVERSE = SplitKernel(_reverse)
_MERGE = SplitKernel(_merge)
