"""GNND kernels (paper 004, sections 4-5) in numba-cuda.

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
    memory (NEW wins over OLD), then cross-match. Vectors are staged through shared memory in chunks of
    ``DC`` dimensions (the paper's sub-vectors), stored dimension-major with an odd row stride so that a
    warp reads consecutive banks. NEW-NEW distances fill the strict lower triangle ``D_new`` indexed by
    Eqs. (1)-(2) (evaluated once per block into a lookup table); NEW-OLD distances fill ``D_no``, each
    thread computing a 2 x 2 register tile. Shared-memory indices are unsigned: numba emits
    negative-index wraparound code for signed ones, which tripled the inner loop. Selective update
    (Alg. 2): for each sample a warp finds its nearest NEW and nearest OLD partner with a shuffle
    min-reduction and inserts only those.

    Insertion, ``insert="lock"`` (default): the warp inserts straight into the list under a spinlock per
    list (:func:`locked_insert`), the paper's scheme with one lock per list instead of k/32 segments, so
    the list stays globally sorted and needs no segment merge. ``insert="slots"``: the "packed 64-bit
    distance|id atomics" alternative, one ``atomicMin`` of (order-preserving distance bits << 32 | v)
    into ``cand[u, v % SLOTS]``, then ``merge_kernel`` (one warp per node: the 32 candidates are checked
    for duplicates, ranked with shuffles and by binary search, and merged into the list). Slots never
    wait but keep only the nearest of the offers that collide in a slot. Measured on an H200 (sift 450k,
    k=64, p=32, 6 iterations): slots 0.536 s at recall@10 0.915, locks 0.560 s at 0.9965; the lost
    offers slow convergence far more than the locks cost, so locks are the default.

``init_kernel`` draws the random initial lists (Alg. 1 l.1-5; the same ids as the CPU path for the same
seed) or, for GGM (section 5.1), keeps the first half of each list and fills the rest from the other
subset. ``merge_lists_kernel`` folds two sorted lists into the top-k distinct ids (GGM's Alg. 3 l.12 and
the out-of-core shard results).

Kernels using shared memory are built by factories for compile-time sizes.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, int16, int32, int64, uint8, uint32, uint64

from .._distances import DIST_IP, DIST_L2SQ, FULL_MASK, warp_distance
from ._common import NEW, OLD, candidate_range, less, progression

WARP = 32
#: candidate slots per node (one per lane of the merging warp)
SLOTS = 32
#: dimensions staged in shared memory at a time by the join kernel
DC = 32
#: warps per block of the warp-per-node kernels
WPB = 4
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
ID_PAD = 2**31 - 1
INF = float32(np.inf)


# --------------------------------------------------------------------------------------------------
# small device helpers


@cuda.jit(device=True, inline=True)
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


@cuda.jit(device=True, inline=True)
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


@cuda.jit(device=True, inline=True)
def _finish(acc, kind, inv, u, v):
    """Accumulated squared difference or dot product -> internal distance (as cpu_distance)."""
    if kind == DIST_L2SQ:
        return acc
    if kind == DIST_IP:
        return -acc
    return float32(1.0) - acc * inv[u] * inv[v]


@cuda.jit(device=True, inline=True)
def _warp_min(bd, bv):
    """(distance, id) minimum over the warp; every lane gets it (Alg. 2 l.11-15, butterfly form)."""
    off = 16
    while off > 0:
        od = cuda.shfl_xor_sync(FULL_MASK, bd, off)
        ov = cuda.shfl_xor_sync(FULL_MASK, bv, off)
        if less(od, ov, bd, bv):
            bd = od
            bv = ov
        off //= 2
    return bd, bv


@cuda.jit(device=True, inline=True)
def _tri(t):
    """Eqs. (1)-(2): pair t of the strict lower triangle -> (u, v), u > v; integer-corrected."""
    u = int32(math.ceil(math.sqrt(float32(2 * t) + float32(2.25)) - float32(0.5)))
    while u * (u - 1) // 2 > t:
        u -= 1
    while (u + 1) * u // 2 <= t:
        u += 1
    return u, t - u * (u - 1) // 2


@cuda.jit(device=True, inline=True)
def _bitonic(sd, si, sf, w, size, lane):
    """Sort row w of the shared arrays (sd, si, sf)[w, :size] by (distance, id); size a power of two;
    one warp."""
    span = 2
    while span <= size:
        stride = span // 2
        while stride > 0:
            for t in range(lane, size // 2, WARP):
                i = 2 * stride * (t // stride) + (t % stride)
                j = i + stride
                ad = sd[w, i]
                ai = si[w, i]
                bd = sd[w, j]
                bi = si[w, j]
                if (i & span) == 0:
                    swap = less(bd, bi, ad, ai)
                else:
                    swap = less(ad, ai, bd, bi)
                if swap:
                    sd[w, i] = bd
                    si[w, i] = bi
                    sd[w, j] = ad
                    si[w, j] = ai
                    f = sf[w, i]
                    sf[w, i] = sf[w, j]
                    sf[w, j] = f
            cuda.syncwarp(FULL_MASK)
            stride //= 2
        span *= 2


def pow2_at_least(x: int) -> int:
    return 1 << max(5, math.ceil(math.log2(max(x, 1))))


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

    @cuda.jit(device=True, inline=True)
    def insert(gd, gi, gf, locks, counter, u, d, v, lane):
        k = gd.shape[1]
        uu = int64(u)
        seen = False
        for r in range(rounds):
            j = r * WARP + lane
            if j < k and gi[u, j] == v:
                seen = True
        if cuda.any_sync(FULL_MASK, seen):
            return
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
                li[r] = int32(ID_PAD)
                lf[r] = int32(OLD)
        dup = False
        pos = 0
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
            if lane == 0:
                cuda.atomic.add(counter, 0, 1)
        cuda.threadfence()
        cuda.syncwarp(FULL_MASK)
        if lane == 0:
            cuda.atomic.exch(locks, u, 0)

    return insert


# --------------------------------------------------------------------------------------------------
# initial graph


@functools.lru_cache(maxsize=None)
def init_kernel(kc: int):
    """Random initial lists for rows of up to ``kc`` (power of two >= k) entries; one warp per node."""

    @cuda.jit
    def kernel(x, inv, kind, gd, gi, gf, keep, split, seed):
        sd = cuda.shared.array((WPB, kc), float32)
        si = cuda.shared.array((WPB, kc), int32)
        sf = cuda.shared.array((WPB, kc), int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        n = gd.shape[0]
        k = gd.shape[1]
        s = cuda.blockIdx.x * WPB + w
        while s < n:
            lo, m, skip = candidate_range(s, n, split)
            fill = min(k - keep, m)
            start, step = progression(seed, s, m)
            for j in range(lane, kc, WARP):
                if j < keep:
                    sd[w, j] = gd[s, j]
                    si[w, j] = gi[s, j]
                    sf[w, j] = OLD
                elif j >= k:
                    sd[w, j] = INF
                    si[w, j] = ID_PAD
                    sf[w, j] = OLD
                elif j >= keep + fill:
                    sd[w, j] = INF
                    si[w, j] = -1
                    sf[w, j] = OLD
            for j in range(fill):
                v = lo + (start + j * step) % m
                if skip >= 0 and v >= skip:
                    v += 1
                dd = warp_distance(kind, x, s, x, v, inv, inv, lane)
                if lane == 0:
                    sd[w, keep + j] = dd
                    si[w, keep + j] = v
                    sf[w, keep + j] = NEW
            cuda.syncwarp(FULL_MASK)
            _bitonic(sd, si, sf, w, kc, lane)
            for j in range(lane, k, WARP):
                gd[s, j] = sd[w, j]
                gi[s, j] = si[w, j]
                gf[s, j] = sf[w, j]
            cuda.syncwarp(FULL_MASK)
            s += cuda.gridDim.x * WPB

    return kernel


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
# local join (sections 4.2, 4.3)


@functools.lru_cache(maxsize=None)
def join_kernel(pmax: int, insert: str = "lock", max_registers: int | None = None, kmax: int = 64):
    """The local-join kernel for sample counts p <= ``pmax`` (NEW and OLD sets of at most 2 pmax).

    ``insert="lock"``: selected pairs go straight into the lists under per-list spinlocks
    (:func:`locked_insert`, lists of at most ``kmax`` entries); ``"slots"``: into the packed 64-bit
    candidate slots, merged afterwards by
    :func:`merge_kernel`. ``max_registers`` caps registers per thread (occupancy vs spills)."""
    use_lock = insert == "lock"
    insert_fn = locked_insert(max(1, -(-kmax // WARP)))
    jit = cuda.jit
    if max_registers:
        try:
            jit = cuda.jit(max_registers=max_registers)
        except TypeError:  # the simulator's jit takes no register cap
            pass
    p2 = 2 * pmax
    stride = p2 + 1                 # odd row stride: conflict-free column and row reads
    n_tri = p2 * (p2 - 1) // 2
    cols = pow2_at_least(p2)        # NEW-OLD pair t -> (t / cols, t % cols): shifts, no division
    lg_cols = cols.bit_length() - 1
    # shared array sizes must be plain compile-time constants
    ids_len = 2 * p2
    chunk_len = DC * stride + cols  # + cols: the NEW-OLD tiles may read (and discard) past the last row
    half = cols // 2
    no_len = p2 * stride

    @jit
    def kernel(x, inv, kind, gd, gi, gf, new_f, nf, new_r, nr, old_f, nof, old_r, nor, p, split, cand, locks,
               counter):
        raw = cuda.shared.array(ids_len, int32)    # samples as gathered: NEW [0, p2), OLD [p2, 2 p2)
        keep = cuda.shared.array(ids_len, int32)   # 1 where raw[i] is the first copy of its id
        ids = cuda.shared.array(ids_len, int32)    # deduplicated: NEW [0, nn), OLD [p2, p2 + no)
        cnt = cuda.shared.array(2, int32)
        tri_uv = cuda.shared.array(n_tri, int16)   # Eqs. (1)-(2) evaluated once: u << 8 | v
        sn = cuda.shared.array(chunk_len, float32)   # NEW vectors, dimension-major chunk
        so = cuda.shared.array(chunk_len, float32)   # OLD vectors
        d_new = cuda.shared.array(n_tri, float32)    # NEW-NEW, D_new[u(u-1)/2 + v], u > v
        d_no = cuda.shared.array(no_len, float32)    # NEW-OLD, D_no[i * stride + j]
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        w = tid // WARP
        lane = tid % WARP
        n_warps = nt // WARP
        n = gd.shape[0]
        k = gd.shape[1]
        dim = x.shape[1]
        merge = split > 0
        ustride = uint64(stride)
        for t in range(tid, n_tri, nt):
            u, v = _tri(t)
            tri_uv[t] = int16(u * 256 + v)
        # the 2 x 2 tiles read (and discard) unused columns: make those finite once
        for t in range(tid, chunk_len, nt):
            sn[t] = float32(0.0)
            so[t] = float32(0.0)
        s = cuda.blockIdx.x
        while s < n:
            a = nf[s]
            b = min(nr[s], p)
            c = nof[s]
            e = min(nor[s], p)
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
            cuda.syncthreads()
            # dedupe: a thread per sample; an id in both sets stays NEW
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
                        for j in range(a + b):
                            if raw[j] == v:
                                ok = False
                                break
                keep[t] = 1 if ok else 0
            cuda.syncthreads()
            # compact (warp 0, ballot prefix sums)
            if w == 0:
                below = cuda.lanemask_lt()
                nn = 0
                for base in range(0, a + b, WARP):
                    i = base + lane
                    ok = i < a + b and keep[i] != 0
                    bal = cuda.ballot_sync(FULL_MASK, ok)
                    if ok:
                        ids[nn + cuda.popc(bal & below)] = raw[i]
                    nn += cuda.popc(bal)
                no = 0
                for base in range(0, c + e, WARP):
                    i = base + lane
                    ok = i < c + e and keep[p2 + i] != 0
                    bal = cuda.ballot_sync(FULL_MASK, ok)
                    if ok:
                        ids[p2 + no + cuda.popc(bal & below)] = raw[p2 + i]
                    no += cuda.popc(bal)
                if lane == 0:
                    cnt[0] = nn
                    cnt[1] = no
            cuda.syncthreads()
            nn = cnt[0]
            no = cnt[1]
            m = nn + no
            # GGM: every NEW sample of a node lies in the other subset, so NEW-NEW pairs are same-subset
            # pairs and are not computed (section 5.1); NEW-OLD pairs are all cross pairs
            n_nn = 0 if merge else nn * (nn - 1) // 2
            n_no = ((nn + 1) // 2) * half if no > 0 else 0
            if nn > 0 and n_nn + n_no > 0:
                for c0 in range(0, dim, DC):
                    # stage dims [c0, c0 + DC) of every sample, dimension-major
                    for t in range(tid, m * DC, nt):
                        r = t // DC
                        q = t - r * DC
                        val = float32(0.0)
                        if c0 + q < dim:
                            if r < nn:
                                val = float32(x[ids[r], c0 + q])
                            else:
                                val = float32(x[ids[p2 + r - nn], c0 + q])
                        if r < nn:
                            sn[q * stride + r] = val
                        else:
                            so[q * stride + r - nn] = val
                    cuda.syncthreads()
                    # unsigned indices below: no negative-index wraparound code in the inner loops
                    for t in range(tid, n_nn, nt):
                        uv = uint64(tri_uv[t])
                        bu = uv >> uint64(8)
                        bv = uv & uint64(255)
                        acc = float32(0.0)
                        if kind == DIST_L2SQ:
                            for q in range(DC):
                                off = uint64(q * stride)
                                df = sn[off + bu] - sn[off + bv]
                                acc += df * df
                        else:
                            for q in range(DC):
                                off = uint64(q * stride)
                                acc += sn[off + bu] * sn[off + bv]
                        ut = uint64(t)
                        if c0 == 0:
                            d_new[ut] = acc
                        else:
                            d_new[ut] += acc
                    # NEW-OLD: 2 x 2 register tiles, rows (i, i + 1) x columns (j, j + cols/2): four pairs
                    # from four shared loads per dimension (the paper's 16 x 16 tiling, one level down)
                    for t in range(tid, n_no, nt):
                        ut = uint64(t)
                        bi = (ut >> uint64(lg_cols - 1)) * uint64(2)
                        bj = ut & uint64(half - 1)
                        bj2 = bj + uint64(half)
                        if bj < uint64(no):
                            a00 = float32(0.0)
                            a01 = float32(0.0)
                            a10 = float32(0.0)
                            a11 = float32(0.0)
                            if kind == DIST_L2SQ:
                                for q in range(DC):
                                    off = uint64(q * stride)
                                    x0 = sn[off + bi]
                                    x1 = sn[off + bi + uint64(1)]
                                    y0 = so[off + bj]
                                    y1 = so[off + bj2]
                                    f00 = x0 - y0
                                    f01 = x0 - y1
                                    f10 = x1 - y0
                                    f11 = x1 - y1
                                    a00 += f00 * f00
                                    a01 += f01 * f01
                                    a10 += f10 * f10
                                    a11 += f11 * f11
                            else:
                                for q in range(DC):
                                    off = uint64(q * stride)
                                    x0 = sn[off + bi]
                                    x1 = sn[off + bi + uint64(1)]
                                    y0 = so[off + bj]
                                    y1 = so[off + bj2]
                                    a00 += x0 * y0
                                    a01 += x0 * y1
                                    a10 += x1 * y0
                                    a11 += x1 * y1
                            row2 = bi + uint64(1) < uint64(nn)
                            col2 = bj2 < uint64(no)
                            o = bi * ustride + bj
                            if c0 == 0:
                                d_no[o] = a00
                                if col2:
                                    d_no[o + uint64(half)] = a01
                                if row2:
                                    d_no[o + ustride] = a10
                                    if col2:
                                        d_no[o + ustride + uint64(half)] = a11
                            else:
                                d_no[o] += a00
                                if col2:
                                    d_no[o + uint64(half)] += a01
                                if row2:
                                    d_no[o + ustride] += a10
                                    if col2:
                                        d_no[o + ustride + uint64(half)] += a11
                    cuda.syncthreads()

                # selective update (Alg. 2): one warp per sample row; part 0 = nearest NEW partner (none
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
                        bd = INF
                        bv = int32(ID_PAD)
                        n_cols = nn if part == 0 else no
                        for j in range(lane, n_cols, WARP):
                            if part == 0:
                                if j == r:
                                    continue
                                if r < nn:
                                    hi = max(r, j)
                                    lo = min(r, j)
                                    acc = d_new[hi * (hi - 1) // 2 + lo]
                                else:
                                    acc = d_no[j * stride + (r - nn)]
                                vj = ids[j]
                            else:
                                acc = d_no[r * stride + j]
                                vj = ids[p2 + j]
                            dd = _finish(acc, kind, inv, u, vj)
                            if less(dd, vj, bd, bv):
                                bd = dd
                                bv = vj
                        bd, bv = _warp_min(bd, bv)
                        if bv != ID_PAD and bd < wd:
                            if use_lock:
                                insert_fn(gd, gi, gf, locks, counter, u, bd, bv, lane)
                            elif lane == 0:
                                cuda.atomic.min(cand, (u, bv % SLOTS), pack(bd, bv))
            cuda.syncthreads()  # shared memory is reused by the next node
            s += cuda.gridDim.x

    return kernel


# --------------------------------------------------------------------------------------------------
# candidate merge


@functools.lru_cache(maxsize=None)
def merge_kernel(kc: int):
    """Merge each node's candidate slots into its list (rows of up to ``kc`` entries, kc % 32 == 0)."""

    @cuda.jit
    def kernel(gd, gi, gf, cand, counter):
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
                v = int32(ID_PAD)
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

    return kernel


# --------------------------------------------------------------------------------------------------
# list merge (GGM Alg. 3 l.12, shard results)


@functools.lru_cache(maxsize=None)
def merge_lists_kernel(c2: int):
    """Top-k distinct ids of two sorted rows a [n, ka], b [n, kb] (ka + kb <= c2, a power of two)."""

    @cuda.jit
    def kernel(ad, ai, bd, bi, out_d, out_i):
        sd = cuda.shared.array((WPB, c2), float32)
        si = cuda.shared.array((WPB, c2), int32)
        sf = cuda.shared.array((WPB, c2), int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        n = ad.shape[0]
        ka = ad.shape[1]
        kb = bd.shape[1]
        k = out_d.shape[1]
        s = cuda.blockIdx.x * WPB + w
        while s < n:
            for j in range(lane, c2, WARP):
                dd = INF
                v = int32(ID_PAD)
                if j < ka:
                    dd = ad[s, j]
                    v = ai[s, j]
                elif j < ka + kb:
                    dd = bd[s, j - ka]
                    v = bi[s, j - ka]
                if v < 0:
                    dd = INF
                    v = int32(ID_PAD)
                sd[w, j] = dd
                si[w, j] = v
                sf[w, j] = 0
            cuda.syncwarp(FULL_MASK)
            _bitonic(sd, si, sf, w, c2, lane)
            below = cuda.lanemask_lt()
            c = 0
            for base in range(0, c2, WARP):
                j = base + lane
                v = si[w, j]
                keep = v != ID_PAD
                if keep:
                    for t in range(j):
                        if si[w, t] == v:
                            keep = False
                            break
                bal = cuda.ballot_sync(FULL_MASK, keep)
                pos = c + cuda.popc(bal & below)
                if keep and pos < k:
                    out_d[s, pos] = sd[w, j]
                    out_i[s, pos] = v
                c += cuda.popc(bal)
                if c >= k:
                    break
            for j in range(c + lane, k, WARP):
                out_d[s, j] = INF
                out_i[s, j] = -1
            cuda.syncwarp(FULL_MASK)
            s += cuda.gridDim.x * WPB

    return kernel
