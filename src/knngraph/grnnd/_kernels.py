"""CUDA kernels of the GRNND rounds (numba-cuda). The steps, and why each vertex writes only its own
proposal slots, are those of :mod:`knngraph.grnnd.cpu`; here:

* :func:`propose_kernel`: one warp per vertex (section 3.3). The pool (codes, distances, alive flags)
  sits in shared memory. The warp scans the random pair order 32 terms at a time and queues, in term
  order, the terms that need a distance (i < j, both alive, one new: about a third of them); 32 queued
  terms at a time, each lane computes one pair's distance (the pool's vectors are read by many pairs, so
  they stay in L1) and its Eq. (2) test; the batch's terms go to shared memory and lane 0 applies the
  redirects in term order, a pair whose member was redirected by an earlier term being skipped. That is
  the sequential order of the CPU path, so both paths make the same decisions on the same distances.
  (The paper computes one pair at a time with a warp-wide distance, Alg. 5; 32 independent pairs keep
  more loads in flight.)
* :func:`merge_kernel`: one warp per target vertex. Proposals arrive sorted by target; the warp keeps the
  current pool and the next chunk of proposals side by side in shared memory, sorts them with the warp
  bitonic sort and keeps the first copy of each id (ballot + popc compaction), at most R: the
  fixed-capacity write pool of section 3.5 without atomics.
* :func:`count_kernel`, :func:`scatter_kernel`: the grouping of proposals by target (atomic counts, a
  scan, an atomic scatter; the merge does not depend on the order within a target).
* :func:`row_proposals_kernel`, :func:`random_rows_kernel`, :func:`reverse_kernel`: one thread per
  entry / row.

Nothing allocates: shared arrays have compile-time sizes (capacity rounded up to a power of two >= 32),
every other array is the caller's. Flat offsets into the proposal arrays are int64.
"""

from __future__ import annotations

import functools

from numba import cuda, float32, int32, int64, uint32, uint64

from ..primitives.compile import cuda_version, device_function
from ..primitives.constants import FULL_MASK, ID_NONE, INF, WARP
from ..primitives.distances import DIST_L2SQ
from ..primitives.intrinsics import dp4a_i8, dp4a_u8
from ..primitives.random import progression
from ..primitives.warp import finish_device, warp_bitonic_sort
from ._common import pair_of, pair_order, reverse_count
from ._layout import LAYOUT_ELEMENTS, LAYOUT_WORDS_I8, LAYOUT_WORDS_U8, WPB

__all__ = ["propose_kernel", "merge_kernel", "row_proposals_kernel", "random_rows_kernel", "reverse_kernel",
           "count_kernel", "scatter_kernel", "WPB", "LAYOUT_ELEMENTS", "LAYOUT_WORDS_U8", "LAYOUT_WORDS_I8"]

_pair_order = cuda_version(pair_order)
_pair_of = cuda_version(pair_of)
_reverse_count = cuda_version(reverse_count)
_progression = cuda_version(progression)

_LOW32 = uint64(0xFFFFFFFF)


@device_function
def _dp4a_pair(layout, l2, wa, wb, aa, bb, ab):
    """One 32-bit word of each row into the sums a.a, b.b (L2 only) and a.b."""
    if layout == LAYOUT_WORDS_U8:
        ab = dp4a_u8(wa, wb, ab)
        if l2:
            aa = dp4a_u8(wa, wa, aa)
            bb = dp4a_u8(wb, wb, bb)
    else:
        ab = dp4a_i8(wa, wb, ab)
        if l2:
            aa = dp4a_i8(wa, wa, aa)
            bb = dp4a_i8(wb, wb, bb)
    return aa, bb, ab


@device_function
def pair_distance(kind, x, xw, layout, inv, a, b):
    """d(x[a], x[b]) by one thread, in the canonical order a < b (every copy of a pair's distance is the
    same float, which the duplicate rule relies on). With ``layout`` = LAYOUT_WORDS_*, ``xw`` is x seen as
    64-bit words: an eighth of the loads, one ``dp4a`` per half word and product (L2 as |a|^2 + |b|^2 -
    2 a.b). The integer sums are exact, and so are the CPU path's float32 sums of the same integer terms
    while they stay below 2^24 (the caller takes words only when d * 255^2 < 2^24): the same distances."""
    if a > b:
        a, b = b, a
    if layout != LAYOUT_ELEMENTS:
        ab = int32(0)
        aa = int32(0)
        bb = int32(0)
        l2 = kind == DIST_L2SQ
        for t in range(xw.shape[1]):
            wa = xw[a, t]
            wb = xw[b, t]
            aa, bb, ab = _dp4a_pair(layout, l2, uint32(wa & _LOW32), uint32(wb & _LOW32), aa, bb, ab)
            aa, bb, ab = _dp4a_pair(layout, l2, uint32(wa >> uint64(32)), uint32(wb >> uint64(32)), aa, bb, ab)
        acc = float32(aa + bb - 2 * ab) if l2 else float32(ab)
        return finish_device(kind, acc, inv, a, inv, b)
    acc = float32(0.0)
    if kind == DIST_L2SQ:
        for t in range(x.shape[1]):
            diff = float32(x[a, t]) - float32(x[b, t])
            acc += diff * diff
    else:
        for t in range(x.shape[1]):
            acc += float32(x[a, t]) * float32(x[b, t])
    return finish_device(kind, acc, inv, a, inv, b)


@cuda.jit
def random_rows_kernel(n, s, seed, lo, out):
    """out[r, :s] = s distinct random ids other than lo + r (one thread per row)."""
    r = cuda.grid(1)
    if r >= out.shape[0]:
        return
    v = lo + r
    start, step = _progression(seed, v, n - 1)
    for t in range(s):
        c = (start + t * step) % (n - 1)
        out[r, t] = c + 1 if c >= v else c


@cuda.jit
def row_proposals_kernel(x, xw, layout, inv, kind, rows, lo, pt, pc, pd):
    """Proposal (lo + r, rows[r, t], new) with its distance, one thread per entry."""
    e = cuda.grid(1)
    w = rows.shape[1]
    if e >= rows.shape[0] * w:
        return
    r = e // w
    t = e - r * w
    v = lo + r
    c = rows[r, t]
    if c < 0 or c == v:
        pt[r, t] = -1
        return
    pt[r, t] = v
    pc[r, t] = 2 * c + 1
    pd[r, t] = pair_distance(kind, x, xw, layout, inv, v, c)


@cuda.jit
def reverse_kernel(rho, pool_c, pool_d, cnt, pt, pc, pd):
    """Reverse-edge proposals of one vertex per thread (see :func:`knngraph.grnnd.cpu.reverse`)."""
    v = cuda.grid(1)
    n = pool_c.shape[0]
    cap = pool_c.shape[1]
    if v >= n:
        return
    m = cnt[v]
    r = _reverse_count(rho, m)
    for s in range(cap):
        if s < m:
            pt[v, s] = v
            pc[v, s] = pool_c[v, s]
            pd[v, s] = pool_d[v, s]
        else:
            pt[v, s] = -1
    for s in range(pt.shape[1] - cap):
        if s < r:
            pt[v, cap + s] = pool_c[v, s] >> 1
            pc[v, cap + s] = 2 * v + 1
            pd[v, cap + s] = pool_d[v, s]
        else:
            pt[v, cap + s] = -1


@cuda.jit
def count_kernel(pt, counts):
    """counts[t] += 1 for every proposal aimed at t (one thread per proposal)."""
    e = cuda.grid(1)
    if e < pt.shape[0]:
        t = pt[e]
        if t >= 0:
            cuda.atomic.add(counts, t, 1)


@cuda.jit
def scatter_kernel(pt, pc, pd, fill, sc, sd):
    """Each proposal into the next free slot of its target's range (fill: the ranges' next slots)."""
    e = cuda.grid(1)
    if e < pt.shape[0]:
        t = pt[e]
        if t >= 0:
            pos = cuda.atomic.add(fill, t, 1)
            sc[pos] = pc[e]
            sd[pos] = pd[e]


@device_function
def _test_and_apply(x, xw, layout, inv, kind, f, v, r, b, qb, tb, nb, lane, sc, sd, al, qi, qj, ti, tj, td, pt, pc, pd):
    """The first ``nb`` (<= 32) queued terms: lane u computes term u's distance and Eq. (2) test, then lane
    0 applies the redirects in queue (= term) order, skipping a pair whose member was redirected by an
    earlier term. Returns the redirects lane 0 made (0 on the other lanes)."""
    ok = False
    i = 0
    j = 0
    dij = float32(0.0)
    if lane < nb:
        i = qi[qb + lane]
        j = qj[qb + lane]
        dij = pair_distance(kind, x, xw, layout, inv, sc[b + i] >> 1, sc[b + j] >> 1)
        ok = dij < max(sd[b + i], sd[b + j])  # Eq. (2)
    # through shared memory: every lane's term stays where it was computed
    ti[tb + lane] = i if ok else -1
    tj[tb + lane] = j
    td[tb + lane] = dij
    # a vote implies no memory ordering (CUDA guide, warp vote functions): the barrier orders the stores
    # above before lane 0 reads them
    cuda.syncwarp(FULL_MASK)
    any_ok = cuda.ballot_sync(FULL_MASK, ok)
    red = 0
    if lane == 0:
        pending = int64(any_ok) & 0xFFFFFFFF
        while pending != 0:  # the terms that passed, in lane (= term) order: lowest set bit first
            low = pending & -pending
            pending ^= low
            u = cuda.popc(low - 1)
            li = ti[tb + u]
            lj = tj[tb + u]
            if al[b + li] == 0 or al[b + lj] == 0:
                continue  # a member was redirected by an earlier term
            di = sd[b + li]
            dj = sd[b + lj]
            ci = sc[b + li]
            cj = sc[b + lj]
            if di < dj or (di == dj and ci < cj):
                close = li
                far = lj
            else:
                close = lj
                far = li
            # dropped only when the relaxed test holds too (f * dij in float32, as the CPU path); else
            # kept and offered to the closer one from column R + slot, once
            if f * td[tb + u] < max(di, dj):
                al[b + far] = 0
                pt[v, far] = sc[b + close] >> 1
                pc[v, far] = sc[b + far] | 1
                pd[v, far] = td[tb + u]
                red += 1
            elif pt[v, r + far] < 0:
                pt[v, r + far] = sc[b + close] >> 1
                pc[v, r + far] = sc[b + far] | 1
                pd[v, r + far] = td[tb + u]
                red += 1
    cuda.syncwarp(FULL_MASK)
    return red


@functools.lru_cache(maxsize=None)
def propose_kernel(cap: int):
    """Step 1 of a round (Alg. 4), one warp per vertex, pools of up to ``cap`` entries (a power of two)."""
    slots = WPB * cap
    terms = WPB * WARP
    queue = WPB * 2 * WARP

    @cuda.jit
    def kernel(x, xw, layout, inv, kind, seed, rnd, factor, pool_c, pool_d, cnt, pt, pc, pd, redirects):
        sc = cuda.shared.array(slots, dtype=int32)
        sd = cuda.shared.array(slots, dtype=float32)
        al = cuda.shared.array(slots, dtype=int32)
        ti = cuda.shared.array(terms, dtype=int32)  # a batch's terms: slot i (-1: no redirect), j,
        tj = cuda.shared.array(terms, dtype=int32)  # and d(i, j)
        td = cuda.shared.array(terms, dtype=float32)
        qi = cuda.shared.array(queue, dtype=int32)  # the queue of live terms (slots i < j), term order
        qj = cuda.shared.array(queue, dtype=int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        v = cuda.blockIdx.x * WPB + w
        if v >= pool_c.shape[0]:
            return  # whole warps leave together
        b = w * cap
        tb = w * WARP
        qb = w * 2 * WARP
        m = cnt[v]
        r = pool_c.shape[1]
        for s in range(lane, cap, WARP):
            if s < m:
                sc[b + s] = pool_c[v, s]
                sd[b + s] = pool_d[v, s]
            al[b + s] = 1
        for s in range(r + lane, pt.shape[1], WARP):  # relaxed (2R columns): no offers yet
            pt[v, s] = -1
        cuda.syncwarp(FULL_MASK)
        red = 0
        f = float32(factor)
        if m > 1:
            start, step = _pair_order(seed, rnd, v, m)
            mm = m * m
            qn = 0  # terms queued (the same on every lane)
            for t0 in range(0, mm, WARP):
                # a term needs a distance when i < j, both members are alive and one of them is new
                # (old-old pairs were tested last round): about a third of the m^2 terms. Those are
                # queued in term order and tested 32 at a time, so no lane idles on a dead term; a member
                # alive when queued but redirected before its turn is skipped when applied
                t = t0 + lane
                live = False
                i = 0
                j = 0
                if t < mm:
                    i, j = _pair_of(start, step, t, m)
                    if i < j and al[b + i] != 0 and al[b + j] != 0:
                        live = (sc[b + i] & 1) != 0 or (sc[b + j] & 1) != 0
                vote = cuda.ballot_sync(FULL_MASK, live)
                if live:
                    pos = qn + cuda.popc(vote & cuda.lanemask_lt())
                    qi[qb + pos] = i
                    qj[qb + pos] = j
                qn += cuda.popc(vote)
                cuda.syncwarp(FULL_MASK)
                if qn >= WARP:
                    red += _test_and_apply(x, xw, layout, inv, kind, f, v, r, b, qb, tb, WARP, lane, sc, sd, al, qi,
                                           qj, ti, tj, td, pt, pc, pd)
                    qn -= WARP
                    ri = 0
                    rj = 0
                    if lane < qn:  # the rest (< 32) to the queue's front
                        ri = qi[qb + WARP + lane]
                        rj = qj[qb + WARP + lane]
                    cuda.syncwarp(FULL_MASK)
                    if lane < qn:
                        qi[qb + lane] = ri
                        qj[qb + lane] = rj
                    cuda.syncwarp(FULL_MASK)
            if qn > 0:
                red += _test_and_apply(x, xw, layout, inv, kind, f, v, r, b, qb, tb, qn, lane, sc, sd, al, qi, qj,
                                       ti, tj, td, pt, pc, pd)
        for s in range(lane, r, WARP):
            if s < m:
                if al[b + s] != 0:
                    pt[v, s] = v
                    pc[v, s] = sc[b + s] & ~1
                    pd[v, s] = sd[b + s]
            else:
                pt[v, s] = -1
        if lane == 0:
            redirects[v] = red

    return kernel


@functools.lru_cache(maxsize=None)
def merge_kernel(cap: int):
    """Step 3 of a round, one warp per target vertex; ``cap`` (a power of two >= 32) >= R."""
    c2 = 2 * cap
    slots2 = WPB * c2
    slots1 = WPB * cap

    @cuda.jit
    def kernel(sc, sd, offsets, r, pool_c, pool_d, cnt):
        bd = cuda.shared.array(slots2, dtype=float32)
        bi = cuda.shared.array(slots2, dtype=int32)
        td = cuda.shared.array(slots1, dtype=float32)
        ti = cuda.shared.array(slots1, dtype=int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        t = cuda.blockIdx.x * WPB + w
        if t >= pool_c.shape[0]:
            return
        b2 = w * c2
        b1 = w * cap
        below = (1 << lane) - 1
        for s in range(lane, cap, WARP):
            bd[b2 + s] = INF
            bi[b2 + s] = ID_NONE
        lo = offsets[t]
        hi = offsets[t + 1]
        kept = 0
        for c0 in range(lo, hi, cap):
            # the next chunk of proposals beside the current pool
            for s in range(lane, cap, WARP):
                e = c0 + s
                if e < hi:
                    bd[b2 + cap + s] = sd[e]
                    bi[b2 + cap + s] = sc[e]
                else:
                    bd[b2 + cap + s] = INF
                    bi[b2 + cap + s] = ID_NONE
            cuda.syncwarp(FULL_MASK)
            warp_bitonic_sort(bd, bi, b2, c2, lane)
            # first copy of each id (copies are adjacent, the surviving one first), at most r
            kept = 0
            for s0 in range(0, c2, WARP):
                pos = s0 + lane
                c = bi[b2 + pos]
                keep = c != ID_NONE
                if keep and pos > 0:
                    keep = (bi[b2 + pos - 1] >> 1) != (c >> 1)
                bal = cuda.ballot_sync(FULL_MASK, keep)
                dst = kept + cuda.popc(bal & below)
                if keep and dst < r:
                    ti[b1 + dst] = c
                    td[b1 + dst] = bd[b2 + pos]
                kept += cuda.popc(bal)
            if kept > r:
                kept = r
            cuda.syncwarp(FULL_MASK)
            for s in range(lane, cap, WARP):
                if s < kept:
                    bd[b2 + s] = td[b1 + s]
                    bi[b2 + s] = ti[b1 + s]
                else:
                    bd[b2 + s] = INF
                    bi[b2 + s] = ID_NONE
            cuda.syncwarp(FULL_MASK)
        for s in range(lane, pool_c.shape[1], WARP):
            if s < kept:
                pool_c[t, s] = bi[b2 + s]
                pool_d[t, s] = bd[b2 + s]
            else:
                pool_c[t, s] = -1
                pool_d[t, s] = INF
        if lane == 0:
            cnt[t] = kept

    return kernel
