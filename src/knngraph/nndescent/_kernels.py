"""GNND kernels in numba-cuda (Wang, Zhao, Zeng, "Fast k-NN Graph Construction by GPU based
NN-Descent", sections 4-5; "the paper" below).

Graph layout in global memory (section 4): n fixed-degree lists, ``gd`` float32 [n, k] distances,
``gi`` int32 [n, k] ids, ``gf`` uint8 [n, k] flags (1 = NEW), each row sorted by (distance, id); -1 ids
(with inf distances) only at the end of a row. Distances are internal values (squared L2, -dot, 1 - cos).

One iteration is two launches (three with candidate slots), none of which allocates memory:

``sample_kernel`` (section 4.1), one warp per node: the first ``p`` NEW and first ``p`` OLD entries of
    the list become the node's forward samples (ballot + popc prefix, coalesced); the sampled NEW
    entries are marked OLD. Each forward sample ``v`` receives the node in its reverse list with an
    atomic append that stops at ``p`` entries (forward p + reverse p = the paper's bound of 2p per
    list; the race order of the appends is the random choice).

``join_kernel`` (sections 4.2, 4.3), one block per node: dedupe the NEW and OLD samples in shared
    memory (NEW wins over OLD), then cross-match. Vectors are staged through shared memory in chunks
    (the paper's sub-vectors), dimension-major with an odd row stride. The distance matrix of the NEW
    rows against all samples is cut into 4 x 4 tiles, one per thread (NEW-NEW tiles of the lower
    triangle, found through Eqs. (1)-(2) over tiles, then NEW-OLD tiles); a tile's 16 sums stay in
    registers over all dimensions: 8 shared loads per dimension for 16 pairs (the paper's 16 x 16
    shared tiling with a register tile per thread). Float data is staged as float32 (differences for
    L2); uint8 and int8 data with d % 4 == 0 as 32-bit words of 4 bytes, multiplied with ``dp4a``
    (one instruction for 4 dimensions; L2 as |x|^2 + |y|^2 - 2 x.y). The tile arithmetic is one small
    inline function per instruction set (``_tile_sq_diff``, ``_tile_dot``, ``_tile_dp4a``) over the
    tile's 16 sums as a tuple, which the compiler keeps in registers.
    Shared-memory indices are unsigned: numba emits negative-index wraparound code for signed ones.
    Selective update (Alg. 2): for each sample a warp finds its nearest NEW and nearest OLD partner
    with a shuffle min-reduction and inserts only those.

    Insertion, ``insert="lock"`` (default): the warp inserts straight into the list under a spinlock per
    list (:func:`locked_insert`), the paper's scheme with one lock per list instead of k/32 segments, so
    the list stays globally sorted and needs no segment merge. ``insert="slots"``: the "packed 64-bit
    distance|id atomics" alternative, one ``atomicMin`` of (order-preserving distance bits << 32 | v)
    into ``cand[u, v % SLOTS]``, then ``merge_kernel`` (one warp per node: the 32 candidates are checked
    for duplicates, ranked with shuffles and by binary search, and merged into the list). Slots never
    wait but keep only the nearest of the offers that collide in a slot; the lost offers slow
    convergence far more than the locks cost (``benchmarks/studies/profile_join.py`` measures both), so locks
    are the default.

``init_kernel`` draws the random initial lists (Alg. 1 l.1-5; the same ids as the CPU path for the same
seed) or, for GGM (section 5.1), keeps the first half of each list and fills the rest from the other
subset. Folding two sorted lists into their top-k (GGM's Alg. 3 l.12, the out-of-core results) is the
shared :func:`knngraph.graphops.merge_sorted_lists`.

Kernels using shared memory are built by factories for compile-time sizes.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, int16, int32, int64, uint8, uint32, uint64

from ..primitives.compile import device_function
from ..primitives.constants import FULL_MASK, ID_NONE, INF, WARP
from ..primitives.distances import DIST_L2SQ
from ..primitives.intrinsics import dp4a_i8, dp4a_u8
from ..primitives.lists import less
from ..primitives.random import progression
from ..primitives.warp import (finish_device, warp_bitonic_sort, warp_min, warp_partials4, warp_partials4_unrolled,
                               warp_sum)
from ._candidates import candidate_range
from ..beam._kernels import claim
from ._common import DC, EMPTY, HOP_TABLE, NEW, OLD, SLOTS, WPB



# --------------------------------------------------------------------------------------------------
# small device helpers


@device_function
def pack(d, v):
    """(distance, id) as a uint64 whose unsigned order is the (distance, id) order (v >= 0)."""
    a = cuda.local.array(1, float32)
    a[0] = d
    u = uint64(a.view(np.uint32)[0])
    if u >= uint64(0x80000000):
        u = uint64(0xFFFFFFFF) - u  # negative floats: flip all bits
    else:
        u = u + uint64(0x80000000)  # non-negative floats: set the sign bit
    return (u << uint64(32)) | uint64(v)


@device_function
def unpack(key):
    """Inverse of :func:`pack`."""
    v = int32(key & uint64(0x7FFFFFFF))
    u = key >> uint64(32)
    if u >= uint64(0x80000000):
        u = u - uint64(0x80000000)
    else:
        u = uint64(0xFFFFFFFF) - u
    a = cuda.local.array(1, uint32)
    a[0] = uint32(u)
    return a.view(np.float32)[0], v


@device_function
def _warp_distances4(kind, x, inv, u, v0, v1, v2, v3, lane, steps):
    """Distances from x[u] to four rows, by the whole warp, the four rows' loads in flight together:
    the random initial lists are latency-bound (``benchmarks/studies/profile_join.py`` times the init). Every
    lane returns the four results. ``steps`` > 0: ceil(d / 32), a constant of the calling kernel, for the
    unrolled loop over dimensions (:func:`~knngraph.primitives.warp.warp_partials4_unrolled`)."""
    if steps > 0:
        a0, a1, a2, a3 = warp_partials4_unrolled(kind, x, v0, v1, v2, v3, x, u, x.shape[1], lane, steps)
    else:
        a0, a1, a2, a3 = warp_partials4(kind, x, v0, v1, v2, v3, x, u, x.shape[1], lane)
    return (finish_device(kind, warp_sum(a0), inv, u, inv, v0), finish_device(kind, warp_sum(a1), inv, u, inv, v1),
            finish_device(kind, warp_sum(a2), inv, u, inv, v2), finish_device(kind, warp_sum(a3), inv, u, inv, v3))


@device_function
def _tri(t):
    """Eqs. (1)-(2): pair t of the strict lower triangle -> (u, v), u > v; integer-corrected."""
    u = int32(math.ceil(math.sqrt(float32(2 * t) + float32(2.25)) - float32(0.5)))
    while u * (u - 1) // 2 > t:
        u -= 1
    while (u + 1) * u // 2 <= t:
        u += 1
    return u, t - u * (u - 1) // 2


@functools.lru_cache(maxsize=None)
def locked_insert(rounds: int):
    """Device function inserting (d, v) into u's sorted list under u's spinlock, for lists of at most
    ``32 * rounds`` entries; one whole warp (section 4.3, "Multiple Spinlocks", with one lock per list:
    the list stays globally sorted, so no segment merge is needed).

    A lock-free pre-check drops offers whose id is already listed (most offers of late iterations; a
    stale read can only make us skip an offer). Then lane 0 takes the lock (atomic CAS, nanosleep
    back-off); the warp reads the list once with ld.global.cg (L2: never a stale L1 line written by
    another SM) into registers, rejects a duplicate or a pair not better than the last entry, finds the
    position with ballots, and writes the shifted tail (each lane's predecessor comes by shfl_up) and the
    new NEW entry; a fence precedes the release.
    """

    @device_function
    def insert(gd, gi, gf, locks, u, d, v, lane):
        k = gd.shape[1]
        uu = int64(u)
        seen = False
        for r in range(rounds):
            j = r * WARP + lane
            if j < k and gi[u, j] == v:
                seen = True
        if cuda.any_sync(FULL_MASK, seen):
            return 0
        if lane == 0:
            while cuda.atomic.cas(locks, u, 0, 1) != 0:
                cuda.nanosleep(32)
        cuda.syncwarp(FULL_MASK)
        ld = cuda.local.array(rounds, float32)
        li = cuda.local.array(rounds, int32)
        lf = cuda.local.array(rounds, int32)
        for r in range(rounds):
            j = r * WARP + lane
            if j < k:
                ld[r] = cuda.ldcg(gd, (uu, int64(j)))
                li[r] = cuda.ldcg(gi, (uu, int64(j)))
                lf[r] = int32(cuda.ldcg(gf, (uu, int64(j))))
            else:
                ld[r] = INF
                li[r] = int32(ID_NONE)
                lf[r] = int32(OLD)
        dup = False
        pos = 0
        inserted = 0
        for r in range(rounds):
            j = r * WARP + lane
            if cuda.any_sync(FULL_MASK, li[r] == v):
                dup = True
            pos += cuda.popc(cuda.ballot_sync(FULL_MASK, j < k and less(ld[r], li[r], d, v)))
        if not dup and pos < k:
            cd = INF
            ci = int32(-1)
            cf = int32(OLD)
            for r in range(rounds):
                j = r * WARP + lane
                pd = cuda.shfl_up_sync(FULL_MASK, ld[r], 1)
                pi = cuda.shfl_up_sync(FULL_MASK, li[r], 1)
                pf = cuda.shfl_up_sync(FULL_MASK, lf[r], 1)
                if lane == 0:
                    pd = cd
                    pi = ci
                    pf = cf
                cd = cuda.shfl_sync(FULL_MASK, ld[r], WARP - 1)
                ci = cuda.shfl_sync(FULL_MASK, li[r], WARP - 1)
                cf = cuda.shfl_sync(FULL_MASK, lf[r], WARP - 1)
                if j < k:
                    if j == pos:
                        cuda.stcg(gd, (uu, int64(j)), d)
                        cuda.stcg(gi, (uu, int64(j)), v)
                        cuda.stcg(gf, (uu, int64(j)), uint8(NEW))
                    elif j > pos:
                        cuda.stcg(gd, (uu, int64(j)), pd)
                        cuda.stcg(gi, (uu, int64(j)), pi)
                        cuda.stcg(gf, (uu, int64(j)), uint8(pf))
            inserted = 1
        cuda.threadfence()
        cuda.syncwarp(FULL_MASK)
        if lane == 0:
            cuda.atomic.exch(locks, u, 0)
        return inserted

    return insert


# --------------------------------------------------------------------------------------------------
# initial graph


@device_function
def _advance(c, step, m):
    """(c + step) mod m for c, step in [0, m)."""
    c += step
    if c >= m:
        c -= m
    return c


@device_function
def _entry_id(c, lo, skip):
    """Random list entry at progression value c (Alg. 1 l.1-5): lo + c, shifted past the node itself."""
    v = lo + c
    if skip >= 0 and v >= skip:
        v += 1
    return v


@functools.lru_cache(maxsize=None)
def init_kernel(kc: int):
    """Random initial lists for rows of up to ``kc`` (power of two >= k) entries; one warp per node."""
    jit = cuda.jit
    try:
        # uncapped, ptxas gave it 192 registers: 12% occupancy for a latency-bound kernel
        jit = cuda.jit(max_registers=64)
    except TypeError:  # the simulator's jit takes no register cap
        pass

    slots = WPB * kc  # shared array sizes must be plain compile-time constants

    @jit
    def init_lists(x, inv, kind, gd, gi, gf, keep, split, seed):
        sd = cuda.shared.array(slots, float32)
        si = cuda.shared.array(slots, int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        n = gd.shape[0]
        k = gd.shape[1]
        base = w * kc
        s = cuda.blockIdx.x * WPB + w
        while s < n:
            lo, m, skip = candidate_range(s, n, split)
            fill = min(k - keep, m)
            start, step = progression(seed, s, m)
            for j in range(lane, kc, WARP):
                if j < keep:
                    sd[base + j] = gd[s, j]
                    si[base + j] = gi[s, j]
                elif j >= k:
                    sd[base + j] = INF
                    si[base + j] = ID_NONE
                elif j >= keep + fill:
                    sd[base + j] = INF
                    si[base + j] = -1
            cur = int64(start)
            for j0 in range(0, fill, 4):
                # four entries at a time (past the last one: computed, not stored); the progression
                # start + j step mod m advances by additions (step < m), not a 64-bit modulo per entry
                c0 = cur
                c1 = _advance(c0, step, m)
                c2 = _advance(c1, step, m)
                c3 = _advance(c2, step, m)
                cur = _advance(c3, step, m)
                v0 = _entry_id(c0, lo, skip)
                v1 = _entry_id(c1, lo, skip)
                v2 = _entry_id(c2, lo, skip)
                v3 = _entry_id(c3, lo, skip)
                d0, d1, d2, d3 = _warp_distances4(kind, x, inv, s, v0, v1, v2, v3, lane, 0)
                if lane < 4 and j0 + lane < fill:
                    j = keep + j0 + lane
                    sd[base + j] = d0 if lane == 0 else (d1 if lane == 1 else (d2 if lane == 2 else d3))
                    si[base + j] = v0 if lane == 0 else (v1 if lane == 1 else (v2 if lane == 2 else v3))
            cuda.syncwarp(FULL_MASK)
            warp_bitonic_sort(sd, si, base, kc, lane)
            for j in range(lane, k, WARP):
                v = si[base + j]
                gd[s, j] = sd[base + j]
                gi[s, j] = v
                # the random entries are NEW, the kept ones OLD: random ids come from the other subset in
                # a merge (candidate_range), the kept ones from the node's own, and a build keeps none
                gf[s, j] = NEW if v >= 0 and (split == 0 or (v < split) != (s < split)) else OLD
            cuda.syncwarp(FULL_MASK)
            s += cuda.gridDim.x * WPB

    return init_lists


# --------------------------------------------------------------------------------------------------
# widening short lists by two hops (the two-phase schedule of ``_build.build_in_memory``)

@functools.lru_cache(maxsize=None)
def widen_kernel(sc: int, kc: int, wpb: int, chunks: int = 0):
    """The two-hop fill of lists of ``k1`` <= ``kc`` entries (``kc`` a power of two) into lists of
    ``width`` entries, ``sc`` (a power of two) >= width + 64; ``wpb`` warps per block, one per node.

    Each warp keeps the node's working list in shared memory: its k1 entries, then up to 64 staged
    candidates. It reads the first ``hops`` entries of the lists of its first ``hops`` neighbours, one
    list per step with one lane per entry; an id that is not yet in the set (the node, its list and the
    ids read so far) is staged, the warp computes the staged ids' distances four rows at a time, and
    once more than 32 are staged the working list is sorted by (distance, id) and cut to ``width``.

    ``chunks`` = ceil(d / 32) (at most ``_common.HOP_UNROLL_CHUNKS``; 0: any d): the loop over dimensions
    has that many steps, a constant, which the compiler unrolls so that the four rows' loads of every step
    are in flight together (the rows are random, so the fill is bound by memory latency;
    :func:`~knngraph.primitives.warp.warp_partials4_unrolled`)."""
    jit = cuda.jit
    try:
        jit = cuda.jit(max_registers=64)  # latency-bound like the random initial lists (init_kernel)
    except TypeError:  # the simulator's jit takes no register cap
        pass
    slots = wpb * sc
    table = wpb * HOP_TABLE
    own = wpb * kc

    @jit
    def widen_lists(x, inv, kind, gd1, gi1, gf1, gd, gi, gf, hops):
        sd = cuda.shared.array(slots, float32)
        si = cuda.shared.array(slots, int32)
        seen = cuda.shared.array(table, int32)
        oi = cuda.shared.array(own, int32)
        of = cuda.shared.array(own, uint8)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        n = gd1.shape[0]
        k1 = gd1.shape[1]
        width = gd.shape[1]
        base = w * sc
        tb = w * HOP_TABLE
        ob = w * kc
        reach = min(hops, k1)
        stage = base + width  # staged candidates: si/sd[stage : stage + staged]
        s = cuda.blockIdx.x * wpb + w
        while s < n:
            for j in range(lane, HOP_TABLE, WARP):
                seen[tb + j] = -1
            for j in range(lane, sc, WARP):
                if j < k1:
                    sd[base + j] = gd1[s, j]
                    si[base + j] = gi1[s, j]
                else:
                    sd[base + j] = INF
                    si[base + j] = ID_NONE
            for j in range(lane, kc, WARP):
                oi[ob + j] = gi1[s, j] if j < k1 else -1
                of[ob + j] = gf1[s, j] if j < k1 else OLD
            cuda.syncwarp(FULL_MASK)
            if lane == 0:
                claim(seen, tb, HOP_TABLE - 1, s)
            cuda.syncwarp(FULL_MASK)
            for j in range(lane, k1, WARP):
                if oi[ob + j] >= 0:
                    claim(seen, tb, HOP_TABLE - 1, oi[ob + j])
            cuda.syncwarp(FULL_MASK)
            staged = 0
            for t in range(reach):
                u = oi[ob + t]
                if u < 0:
                    break  # empty entries only end a list
                v = int32(-1)
                if lane < reach:
                    v = gi1[u, lane]
                fresh = v >= 0 and claim(seen, tb, HOP_TABLE - 1, v)
                mask = cuda.ballot_sync(FULL_MASK, fresh)
                count = cuda.popc(mask)
                if fresh:
                    si[stage + staged + cuda.popc(mask & cuda.lanemask_lt())] = v
                cuda.syncwarp(FULL_MASK)
                for g in range(0, count, 4):
                    v0 = si[stage + staged + g]
                    # past the last staged id: the node itself (a valid row), not stored
                    v1 = si[stage + staged + g + 1] if g + 1 < count else s
                    v2 = si[stage + staged + g + 2] if g + 2 < count else s
                    v3 = si[stage + staged + g + 3] if g + 3 < count else s
                    d0, d1, d2, d3 = _warp_distances4(kind, x, inv, s, v0, v1, v2, v3, lane, chunks)
                    if lane < 4 and g + lane < count:
                        sd[stage + staged + g + lane] = d0 if lane == 0 else (d1 if lane == 1 else (
                            d2 if lane == 2 else d3))
                staged += count
                cuda.syncwarp(FULL_MASK)
                if staged > WARP:  # room for the next list's 32 entries in the 64 staging slots
                    warp_bitonic_sort(sd, si, base, sc, lane)
                    for j in range(width + lane, sc, WARP):
                        sd[base + j] = INF
                        si[base + j] = ID_NONE
                    staged = 0
                    cuda.syncwarp(FULL_MASK)
            if staged > 0:
                warp_bitonic_sort(sd, si, base, sc, lane)
                cuda.syncwarp(FULL_MASK)
            for j in range(lane, width, WARP):
                v = si[base + j]
                if v < 0 or v == ID_NONE:
                    gd[s, j] = INF
                    gi[s, j] = -1
                    gf[s, j] = OLD
                else:
                    # a listed entry keeps its flag; a new one is NEW within the first k1 entries, OLD behind
                    f = NEW if j < k1 else OLD
                    for c in range(k1):
                        if oi[ob + c] == v:
                            f = of[ob + c]
                    gd[s, j] = sd[base + j]
                    gi[s, j] = v
                    gf[s, j] = f
            cuda.syncwarp(FULL_MASK)
            s += cuda.gridDim.x * wpb

    return widen_lists


# --------------------------------------------------------------------------------------------------
# sampling (section 4.1)


@cuda.jit
def sample_kernel(gi, gf, p, split, new_f, nf, old_f, nof, new_r, nr, old_r, nor):
    """Forward samples, NEW -> OLD marking and atomic reverse appends (capped at p); one warp per node.
    ``nr``/``nor`` must be zero on entry; afterwards min(nr[v], p) entries of new_r[v] are valid."""
    w = cuda.threadIdx.x // WARP
    lane = cuda.threadIdx.x % WARP
    wpb = cuda.blockDim.x // WARP
    n = gi.shape[0]
    k = gi.shape[1]
    s = cuda.blockIdx.x * wpb + w
    while s < n:
        cn = 0
        co = 0
        for j0 in range(0, k, WARP):
            j = j0 + lane
            v = -1
            f = OLD
            if j < k:
                v = gi[s, j]
                f = gf[s, j]
            is_new = v >= 0 and f == NEW
            # in a merge, OLD entries of the other subset could only pair with same-subset nodes
            is_old = v >= 0 and f != NEW and (split == 0 or (v < split) == (s < split))
            bn = cuda.ballot_sync(FULL_MASK, is_new)
            bo = cuda.ballot_sync(FULL_MASK, is_old)
            below = cuda.lanemask_lt()
            if is_new:
                pos = cn + cuda.popc(bn & below)
                if pos < p:
                    new_f[s, pos] = v
                    gf[s, j] = OLD
                    r = cuda.atomic.add(nr, v, 1)
                    if r < p:
                        new_r[v, r] = s
            if is_old:
                pos = co + cuda.popc(bo & below)
                if pos < p:
                    old_f[s, pos] = v
                    r = cuda.atomic.add(nor, v, 1)
                    if r < p:
                        old_r[v, r] = s
            cn += cuda.popc(bn)
            co += cuda.popc(bo)
            if cn >= p and co >= p:
                break
        if lane == 0:
            nf[s] = min(cn, p)
            nof[s] = min(co, p)
        s += cuda.gridDim.x * wpb


# --------------------------------------------------------------------------------------------------
# local join (sections 4.2, 4.3): its steps as small inline functions, then the kernel


@device_function
def _gather_samples(raw, s, a, b, c, e, new_f, new_r, old_f, old_r, p2, tid, nt):
    """Node s's samples as gathered: NEW in raw[0, p2) (``a`` forward, then ``b`` reverse), OLD in
    raw[p2, 2 p2) (``c`` forward, then ``e`` reverse); -1 in the unused slots."""
    for t in range(tid, 2 * p2, nt):
        v = -1
        if t < p2:
            if t < a:
                v = new_f[s, t]
            elif t < a + b:
                v = new_r[s, t - a]
        else:
            q = t - p2
            if q < c:
                v = old_f[s, q]
            elif q < c + e:
                v = old_r[s, q - c]
        raw[t] = v


@device_function
def _mark_first_copies(raw, keep, n_new, p2, tid, nt):
    """keep[t] = 1 where raw[t] is the first copy of its id (a thread per sample); an id among both the
    NEW and the OLD samples stays NEW."""
    for t in range(tid, 2 * p2, nt):
        v = raw[t]
        ok = v >= 0
        if ok:
            lo = p2 if t >= p2 else 0
            for j in range(lo, t):
                if raw[j] == v:
                    ok = False
                    break
            if ok and t >= p2:
                for j in range(n_new):
                    if raw[j] == v:
                        ok = False
                        break
        keep[t] = 1 if ok else 0


@device_function
def _compact(raw, keep, src, count, ids, dst, lane):
    """Append the kept ids of raw[src, src + count) to ids[dst, ...), in order; one warp (ballot prefix
    sums). Returns how many."""
    below = cuda.lanemask_lt()
    c = 0
    for b0 in range(0, count, WARP):
        i = b0 + lane
        ok = i < count and keep[src + i] != 0
        bal = cuda.ballot_sync(FULL_MASK, ok)
        if ok:
            ids[dst + c + cuda.popc(bal & below)] = raw[src + i]
        c += cuda.popc(bal)
    return c


@device_function
def _tile_position(t, n_t1, ob, nb, tri4):
    """Block row and column (ti, tj) of 4 x 4 tile t: the NEW-NEW tiles of the lower triangle first (Eqs.
    (1)-(2), precomputed in ``tri4``), then the NEW-OLD tiles row by row."""
    if t < n_t1:
        ij = int32(tri4[t])
        return int32(ij >> 8), int32(ij & 255)
    t2 = t - n_t1
    ti = t2 // ob
    return int32(ti), int32(nb + t2 - ti * ob)


@device_function
def _stage_floats(sv, x, ids, c0, dim, m4, nn, nn4, no, p2, dc, sv_stride, groups, tid, nt):
    """Dimensions [c0, c0 + dc) of every sample as float32 into ``sv``, dimension-major, sample r at
    column (r % 4) * groups + r // 4 (a tile's 4 rows are ``groups`` apart); zeros for the pads."""
    for st in range(tid, m4 * dc, nt):
        r = st // dc
        q = st - r * dc
        val = float32(0.0)
        if c0 + q < dim:
            if r < nn:
                val = float32(x[ids[r], c0 + q])
            elif r >= nn4 and r - nn4 < no:
                val = float32(x[ids[p2 + r - nn4], c0 + q])
        sv[uint64(q * sv_stride + (r & 3) * groups + (r >> 2))] = val


@device_function
def _stage_words(sw, xw, ids, w0, m4, nn, nn4, no, p2, dc, sv_stride, groups, tid, nt):
    """As :func:`_stage_floats` for 32-bit words [w0, w0 + dc) of 4 bytes (the dp4a path)."""
    nw = xw.shape[1]
    for st in range(tid, m4 * dc, nt):
        r = st // dc
        q = st - r * dc
        wv = int32(0)
        if w0 + q < nw:
            if r < nn:
                wv = int32(xw[ids[r], w0 + q])
            elif r >= nn4 and r - nn4 < no:
                wv = int32(xw[ids[p2 + r - nn4], w0 + q])
        sw[uint64(q * sv_stride + (r & 3) * groups + (r >> 2))] = wv


@device_function
def _tile_operands(buf, o, ri, ci, groups):
    """The 4 row samples' and the 4 column samples' values at staged offset ``o`` (8 shared loads)."""
    g1 = uint64(groups)
    g2 = uint64(2 * groups)
    g3 = uint64(3 * groups)
    return (buf[o + ri], buf[o + ri + g1], buf[o + ri + g2], buf[o + ri + g3],
            buf[o + ci], buf[o + ci + g1], buf[o + ci + g2], buf[o + ci + g3])


@device_function
def _zero_tile():
    z = float32(0.0)
    return (z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z)


@device_function
def _zero_int_tile():
    z = int32(0)
    return (z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z)


@device_function
def _sq(x, y):
    f = x - y
    return f * f


@device_function
def _tile_sq_diff(a, v):
    """A 4 x 4 tile's 16 sums (row-major tuple) plus one dimension's squared differences; ``v`` holds
    the 4 row values, then the 4 column values (:func:`_tile_operands`)."""
    x0, x1, x2, x3, y0, y1, y2, y3 = v
    return (a[0] + _sq(x0, y0), a[1] + _sq(x0, y1), a[2] + _sq(x0, y2), a[3] + _sq(x0, y3),
            a[4] + _sq(x1, y0), a[5] + _sq(x1, y1), a[6] + _sq(x1, y2), a[7] + _sq(x1, y3),
            a[8] + _sq(x2, y0), a[9] + _sq(x2, y1), a[10] + _sq(x2, y2), a[11] + _sq(x2, y3),
            a[12] + _sq(x3, y0), a[13] + _sq(x3, y1), a[14] + _sq(x3, y2), a[15] + _sq(x3, y3))


@device_function
def _tile_dot(a, v):
    """As :func:`_tile_sq_diff` with one dimension's products."""
    x0, x1, x2, x3, y0, y1, y2, y3 = v
    return (a[0] + x0 * y0, a[1] + x0 * y1, a[2] + x0 * y2, a[3] + x0 * y3,
            a[4] + x1 * y0, a[5] + x1 * y1, a[6] + x1 * y2, a[7] + x1 * y3,
            a[8] + x2 * y0, a[9] + x2 * y1, a[10] + x2 * y2, a[11] + x2 * y3,
            a[12] + x3 * y0, a[13] + x3 * y1, a[14] + x3 * y2, a[15] + x3 * y3)


@functools.lru_cache(maxsize=None)
def _tile_dp4a(signed: bool):
    """As :func:`_tile_sq_diff` for int32 sums of 4-byte words: 16 ``dp4a`` (4 dimensions each)."""
    dp4a = dp4a_i8 if signed else dp4a_u8

    @device_function
    def tile(a, v):
        x0, x1, x2, x3, y0, y1, y2, y3 = v
        return (dp4a(x0, y0, a[0]), dp4a(x0, y1, a[1]), dp4a(x0, y2, a[2]), dp4a(x0, y3, a[3]),
                dp4a(x1, y0, a[4]), dp4a(x1, y1, a[5]), dp4a(x1, y2, a[6]), dp4a(x1, y3, a[7]),
                dp4a(x2, y0, a[8]), dp4a(x2, y1, a[9]), dp4a(x2, y2, a[10]), dp4a(x2, y3, a[11]),
                dp4a(x3, y0, a[12]), dp4a(x3, y1, a[13]), dp4a(x3, y2, a[14]), dp4a(x3, y3, a[15]))

    return tile


@device_function
def _add_int_tile(a, b):
    """Float sums plus a chunk's exact int32 sums."""
    return (a[0] + float32(b[0]), a[1] + float32(b[1]), a[2] + float32(b[2]), a[3] + float32(b[3]),
            a[4] + float32(b[4]), a[5] + float32(b[5]), a[6] + float32(b[6]), a[7] + float32(b[7]),
            a[8] + float32(b[8]), a[9] + float32(b[9]), a[10] + float32(b[10]), a[11] + float32(b[11]),
            a[12] + float32(b[12]), a[13] + float32(b[13]), a[14] + float32(b[14]), a[15] + float32(b[15]))


@device_function
def _l2_from_dots(a, snrm, ti, tj):
    """Dot products -> squared L2 distances |x|^2 + |y|^2 - 2 x.y of tile (ti, tj) (the dp4a path)."""
    r0 = uint64(4 * ti)
    q0 = uint64(4 * tj)
    n0 = snrm[r0]
    n1 = snrm[r0 + uint64(1)]
    n2 = snrm[r0 + uint64(2)]
    n3 = snrm[r0 + uint64(3)]
    m0 = snrm[q0]
    m1 = snrm[q0 + uint64(1)]
    m2 = snrm[q0 + uint64(2)]
    m3 = snrm[q0 + uint64(3)]
    two = float32(2.0)
    return (n0 + m0 - two * a[0], n0 + m1 - two * a[1], n0 + m2 - two * a[2], n0 + m3 - two * a[3],
            n1 + m0 - two * a[4], n1 + m1 - two * a[5], n1 + m2 - two * a[6], n1 + m3 - two * a[7],
            n2 + m0 - two * a[8], n2 + m1 - two * a[9], n2 + m2 - two * a[10], n2 + m3 - two * a[11],
            n3 + m0 - two * a[12], n3 + m1 - two * a[13], n3 + m2 - two * a[14], n3 + m3 - two * a[15])


@device_function
def _store_tile(dm, ti, tj, d_stride, a):
    """Tile (ti, tj)'s 16 values into the distance matrix (row i: NEW sample i, column: combined sample);
    written out, so every tuple index is a constant (a register, never a local-memory array)."""
    o = uint64(4 * ti * d_stride + 4 * tj)
    ds = uint64(d_stride)
    dm[o] = a[0]
    dm[o + uint64(1)] = a[1]
    dm[o + uint64(2)] = a[2]
    dm[o + uint64(3)] = a[3]
    o += ds
    dm[o] = a[4]
    dm[o + uint64(1)] = a[5]
    dm[o + uint64(2)] = a[6]
    dm[o + uint64(3)] = a[7]
    o += ds
    dm[o] = a[8]
    dm[o + uint64(1)] = a[9]
    dm[o + uint64(2)] = a[10]
    dm[o + uint64(3)] = a[11]
    o += ds
    dm[o] = a[12]
    dm[o + uint64(1)] = a[13]
    dm[o + uint64(2)] = a[14]
    dm[o + uint64(3)] = a[15]


@device_function
def _nearest_partner(dm, ids, r, part, nn, nn4, no, p2, d_stride, kind, inv, u, lane):
    """(distance, id) of sample row ``r``'s nearest NEW (``part`` 0) or OLD (1) partner, by the warp
    (Alg. 2 GetNearestObject, ties to the lower id); (inf, ID_NONE) when it has none."""
    bd = INF
    bv = int32(ID_NONE)
    n_cols = nn if part == 0 else no
    for j in range(lane, n_cols, WARP):
        if part == 0:
            if j == r:
                continue
            if r < nn:
                acc = dm[uint64(max(r, j) * d_stride + min(r, j))]
            else:
                acc = dm[uint64(j * d_stride + nn4 + r - nn)]
            vj = ids[j]
        else:
            acc = dm[uint64(r * d_stride + nn4 + j)]
            vj = ids[p2 + j]
        dd = finish_device(kind, acc, inv, u, inv, vj)
        if less(dd, vj, bd, bv):
            bd = dd
            bv = vj
    return warp_min(bd, bv)


@functools.lru_cache(maxsize=None)
def join_kernel(pmax: int, insert: str = "lock", max_registers: int | None = None, kmax: int = 64, packed: int = 0,
                dc: int = DC):
    """The local-join kernel for sample counts p <= ``pmax`` (NEW and OLD sets of at most 2 pmax).

    ``packed``: 0 stages the vectors as float32 and computes differences (L2) or products; 1 (uint8) and
    2 (int8, dimensions a multiple of 4) stage 32-bit words of 4 bytes (``xw``, a view of x) and take
    dot products with ``dp4a`` (exact int32 sums, converted to float32 once per chunk of 4 ``dc``
    dimensions), L2 distances as |x|^2 + |y|^2 - 2 x.y with the float32 squared norms ``sqn``: exact
    while 2 d max|x_i|^2 <= 2^24, which ``cuda.packed_words`` checks before it picks this path for L2.
    ``dc``: dimensions (words when packed) per staged chunk.

    ``insert="lock"``: selected pairs go straight into the lists under per-list spinlocks
    (:func:`locked_insert`, lists of at most ``kmax`` entries); ``"slots"``: into the packed 64-bit
    candidate slots, merged afterwards by :func:`merge_kernel`. ``max_registers`` caps registers per
    thread (occupancy vs spills)."""
    use_lock = insert == "lock"
    use_slots = insert == "slots"
    insert_fn = locked_insert(max(1, -(-kmax // WARP)))
    jit = cuda.jit
    if max_registers:
        try:
            jit = cuda.jit(max_registers=max_registers)
        except TypeError:  # the simulator's jit takes no register cap
            pass
    p2 = 2 * pmax
    # samples in one combined list: NEW at [0, nn4), OLD at [nn4, m4), each part padded with zero vectors
    # to a multiple of 4 (the 4 x 4 tiles never straddle NEW and OLD)
    rows4 = 4 * (-(-p2 // 4))       # NEW capacity (rows of the distance matrix)
    m4_max = 2 * rows4              # NEW + OLD capacity
    groups = m4_max // 4            # staged column of sample r: (r % 4) * groups + r // 4
    sv_stride = m4_max + 1          # odd: the staging writes (consecutive dimensions) hit distinct banks
    d_stride = m4_max + 1           # odd: conflict-free column reads in the selective update
    nb_max = rows4 // 4
    n_tri4 = nb_max * (nb_max + 1) // 2
    # shared array sizes must be plain compile-time constants
    ids_len = 2 * p2
    sv_len = dc * sv_stride if not packed else 1
    sw_len = dc * sv_stride if packed else 1
    dm_len = rows4 * d_stride
    dims_per_chunk = 4 * dc if packed else dc
    tile_dp4a = _tile_dp4a(packed == 2)

    @jit
    def local_join(x, inv, kind, gd, gi, gf, new_f, nf, new_r, nr, old_f, nof, old_r, nor, p, split, cand, locks,
                   counter, xw, sqn):
        raw = cuda.shared.array(ids_len, int32)    # samples as gathered: NEW [0, p2), OLD [p2, 2 p2)
        keep = cuda.shared.array(ids_len, int32)   # 1 where raw[i] is the first copy of its id
        ids = cuda.shared.array(ids_len, int32)    # deduplicated: NEW [0, nn), OLD [p2, p2 + no)
        cnt = cuda.shared.array(2, int32)
        tri4 = cuda.shared.array(n_tri4, int16)    # Eqs. (1)-(2) over 4 x 4 blocks, diagonal included: I << 8 | J
        sv = cuda.shared.array(sv_len, float32)    # dc dimensions of every sample, dimension-major
        sw = cuda.shared.array(sw_len, int32)      # packed: dc words (4 dc dimensions) of every sample
        snrm = cuda.shared.array(m4_max, float32)  # packed L2: squared norm of every sample
        dm = cuda.shared.array(dm_len, float32)    # dm[i * d_stride + c]: NEW sample i to combined sample c
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        w = tid // WARP
        lane = tid % WARP
        n_warps = nt // WARP
        n = gd.shape[0]
        k = gd.shape[1]
        dim = x.shape[1]
        merge = split > 0
        for t in range(tid, n_tri4, nt):
            u, v = _tri(t)  # strict lower triangle of nb + 1 rows = lower triangle of nb rows with diagonal
            tri4[t] = int16((u - 1) * 256 + v)
        s = cuda.blockIdx.x
        n_inserted = int64(0)
        while s < n:
            # 1. the node's samples, deduplicated and compacted: NEW ids[0, nn), OLD ids[p2, p2 + no)
            a = nf[s]
            b = min(nr[s], p)
            c = nof[s]
            e = min(nor[s], p)
            _gather_samples(raw, s, a, b, c, e, new_f, new_r, old_f, old_r, p2, tid, nt)
            cuda.syncthreads()
            _mark_first_copies(raw, keep, a + b, p2, tid, nt)
            cuda.syncthreads()
            if w == 0:
                nn = _compact(raw, keep, 0, a + b, ids, 0, lane)
                no = _compact(raw, keep, p2, c + e, ids, p2, lane)
                if lane == 0:
                    cnt[0] = nn
                    cnt[1] = no
            cuda.syncthreads()
            nn = cnt[0]
            no = cnt[1]
            m = nn + no
            nn4 = (nn + 3) & ~3
            m4 = nn4 + ((no + 3) & ~3)
            nb = nn4 >> 2
            ob = (m4 - nn4) >> 2
            # 2. distances of the NEW rows to all samples in 4 x 4 tiles: NEW-NEW blocks (I >= J, the
            # diagonal blocks included), then NEW-OLD blocks. GGM: every NEW sample of a node lies in the
            # other subset, so NEW-NEW pairs are same-subset pairs and are not computed (section 5.1);
            # NEW-OLD are all cross pairs
            n_t1 = 0 if merge else (nb * (nb + 1)) >> 1
            n_tiles = n_t1 + nb * ob
            if packed and kind == DIST_L2SQ:
                for r in range(tid, m4, nt):
                    val = float32(0.0)
                    if r < nn:
                        val = sqn[ids[r]]
                    elif r >= nn4 and r - nn4 < no:
                        val = sqn[ids[p2 + r - nn4]]
                    snrm[r] = val
            if nn > 0 and n_tiles > 0:
                # one tile per thread and round; its 16 sums stay in registers over all dimensions (the
                # paper's 16 x 16 shared-memory tiling of section 4.2, with a 4 x 4 register tile per
                # thread: 8 shared loads per dimension for 16 pairs)
                for t0 in range(0, n_tiles, nt):
                    t = t0 + tid
                    valid = t < n_tiles
                    ti = 0
                    tj = 0
                    if valid:
                        ti, tj = _tile_position(t, n_t1, ob, nb, tri4)
                    ri = uint64(ti)
                    ci = uint64(tj)
                    acc = _zero_tile()
                    for c0 in range(0, dim, dims_per_chunk):
                        if packed:
                            _stage_words(sw, xw, ids, c0 >> 2, m4, nn, nn4, no, p2, dc, sv_stride, groups, tid, nt)
                            cuda.syncthreads()
                            if valid:
                                iacc = _zero_int_tile()
                                for q in range(dc):
                                    iacc = tile_dp4a(iacc, _tile_operands(sw, uint64(q * sv_stride), ri, ci, groups))
                                acc = _add_int_tile(acc, iacc)
                        else:
                            _stage_floats(sv, x, ids, c0, dim, m4, nn, nn4, no, p2, dc, sv_stride, groups, tid, nt)
                            cuda.syncthreads()
                            # unsigned indices: no negative-index wraparound code in the inner loop
                            if valid and kind == DIST_L2SQ:
                                for q in range(dc):
                                    acc = _tile_sq_diff(acc, _tile_operands(sv, uint64(q * sv_stride), ri, ci, groups))
                            elif valid:
                                for q in range(dc):
                                    acc = _tile_dot(acc, _tile_operands(sv, uint64(q * sv_stride), ri, ci, groups))
                        cuda.syncthreads()
                    if valid:
                        if packed and kind == DIST_L2SQ:
                            acc = _l2_from_dots(acc, snrm, ti, tj)
                        _store_tile(dm, ti, tj, d_stride, acc)
                cuda.syncthreads()

                # 3. selective update (Alg. 2): one warp per sample row; part 0 = nearest NEW partner (none
                # for a NEW row in a merge: same-subset pairs), part 1 = nearest OLD partner (NEW rows)
                for r in range(w, m, n_warps):
                    if r < nn:
                        u = ids[r]
                    else:
                        u = ids[p2 + r - nn]
                    wd = gd[u, k - 1]
                    for part in range(2):
                        if (part == 0 and merge and r < nn) or (part == 1 and r >= nn):
                            continue
                        bd, bv = _nearest_partner(dm, ids, r, part, nn, nn4, no, p2, d_stride, kind, inv, u, lane)
                        if bv != ID_NONE and bd < wd:
                            if use_lock:
                                n_inserted += insert_fn(gd, gi, gf, locks, u, bd, bv, lane)
                            elif use_slots:
                                if lane == 0:
                                    cuda.atomic.min(cand, (u, bv % SLOTS), pack(bd, bv))
                            else:
                                n_inserted += 1  # insert="none": the join without its inserts
            cuda.syncthreads()  # shared memory is reused by the next node
            s += cuda.gridDim.x
        # one atomic per warp, not one per insert (~25M inserts in an early iteration of sift 450k)
        if not use_slots and lane == 0 and n_inserted > 0:
            cuda.atomic.add(counter, 0, n_inserted)

    return local_join


# --------------------------------------------------------------------------------------------------
# candidate merge


@functools.lru_cache(maxsize=None)
def merge_kernel(kc: int):
    """Merge each node's candidate slots into its list (rows of up to ``kc`` entries, kc % 32 == 0)."""

    @cuda.jit
    def merge_candidates(gd, gi, gf, cand, counter):
        sd = cuda.shared.array((WPB, kc), float32)
        si = cuda.shared.array((WPB, kc), int32)
        sf = cuda.shared.array((WPB, kc), int32)
        cd = cuda.shared.array((WPB, WARP), float32)
        ci = cuda.shared.array((WPB, WARP), int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        n = gd.shape[0]
        k = gd.shape[1]
        s = cuda.blockIdx.x * WPB + w
        while s < n:
            key = cand[s, lane]
            has = key != EMPTY
            if cuda.any_sync(FULL_MASK, has):
                if has:
                    cand[s, lane] = EMPTY
                for j in range(lane, k, WARP):
                    sd[w, j] = gd[s, j]
                    si[w, j] = gi[s, j]
                    sf[w, j] = gf[s, j]
                cuda.syncwarp(FULL_MASK)
                d = INF
                v = int32(ID_NONE)
                if has:
                    d, v = unpack(key)
                valid = has and less(d, v, sd[w, k - 1], si[w, k - 1])
                if valid:
                    for j in range(k):
                        if si[w, j] == v:
                            valid = False
                            break
                # rank among the valid candidates (all distinct ids)
                vi = int32(1) if valid else int32(0)
                rank = 0
                for o in range(WARP):
                    od = cuda.shfl_sync(FULL_MASK, d, o)
                    ov = cuda.shfl_sync(FULL_MASK, v, o)
                    ok = cuda.shfl_sync(FULL_MASK, vi, o)
                    if ok != 0 and less(od, ov, d, v):
                        rank += 1
                # rank in the list: entries before (d, v)
                lo = 0
                hi = k
                while lo < hi:
                    mid = (lo + hi) // 2
                    if less(sd[w, mid], si[w, mid], d, v):
                        lo = mid + 1
                    else:
                        hi = mid
                pos = rank + lo
                n_valid = cuda.popc(cuda.ballot_sync(FULL_MASK, valid))
                if valid:
                    cd[w, rank] = d
                    ci[w, rank] = v
                cuda.syncwarp(FULL_MASK)
                for j in range(lane, k, WARP):
                    ed = sd[w, j]
                    ei = si[w, j]
                    a = 0
                    b = n_valid
                    while a < b:
                        mid = (a + b) // 2
                        if less(cd[w, mid], ci[w, mid], ed, ei):
                            a = mid + 1
                        else:
                            b = mid
                    if j + a < k:
                        gd[s, j + a] = ed
                        gi[s, j + a] = ei
                        gf[s, j + a] = sf[w, j]
                ins = valid and pos < k
                if ins:
                    gd[s, pos] = d
                    gi[s, pos] = v
                    gf[s, pos] = NEW
                n_ins = cuda.popc(cuda.ballot_sync(FULL_MASK, ins))
                if lane == 0 and n_ins > 0:
                    cuda.atomic.add(counter, 0, n_ins)
                cuda.syncwarp(FULL_MASK)
            s += cuda.gridDim.x * WPB

    return merge_candidates
