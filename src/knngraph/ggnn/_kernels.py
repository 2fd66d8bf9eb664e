"""GGNN's CUDA kernels (imports numba.cuda: loaded on first GPU use).

**Search** (section 4.1, Algorithms 1 and 2): one thread block of one warp (32 threads, the authors'
"fast" configuration) per query, queries taken in a grid-stride loop. The whole cache lives in shared
memory: the sorted best list (kb), the sorted priority queue (P, stored descending so the head is its
last entry) and the visited ring (V ids). fetch() of a chunk of up to 32 proposals, one per lane:

    (a) lane t checks proposal t against best, prioq and visited (one probe or two of a shared hash
        table that counts the cache's ids, kept exact on every insert, eviction and ring overwrite;
        caches of more than 1024 ids: a branch-free scan) and against the lanes before it
        (``match_any_sync``); the kept ones are compacted in order by a ballot (section 4.1.1, "each
        thread compares its cache items ... removes matches")
    (b) the warp computes the distances of the kept proposals, four rows in flight at a time (lanes
        over dimensions, a shuffle sum); lane c keeps the c-th distance in a register
    (c) for each kept proposal in order, when it meets the criterion (re-evaluated after every push),
        the whole warp pushes it: the insertion positions in best and prioq come from ballots over
        slices of 32 entries and the entries behind them shift in parallel (read, ``syncwarp``,
        write), the push(p, d) of Algorithm 2 "parallel sorted insert" (section 4.1.1)

pop() is lane 0's. The block is one warp, so every barrier is a ``syncwarp``. The positions and the
evictions are exactly those of the CPU's serial loops (:mod:`.cpu`: ``best_insert`` / ``push_prioq``,
worked out as "the first entry the CPU's scan stops at", which also holds for the unsorted ties a merge's
layer translation can leave), so on data whose distances are exact in float32 both paths return the same
ids. Shared arrays have compile-time sizes; nothing is allocated in the kernel; graph rows are read in
chunks of 32 whatever the degree.
"""

from __future__ import annotations

import functools
import os

from numba import config as numba_config
from numba import cuda, float32, int8, int32, int64, uint32, uint64

from ..primitives.compile import cuda_version, device_function
from ..primitives.constants import FULL_MASK, INF, WARP
from ..primitives.warp import finish_device as _finish
from ..primitives.warp import less_device as _less
from ..primitives.warp import warp_distance, warp_partials4, warp_sum
from . import cpu as _cpu

__all__ = ["search_kernel", "merge_kernel", "brute_kernel", "sym_kernel", "THREADS"]

#: threads of a search block (one warp: every barrier below is a ``syncwarp``)
THREADS = WARP

#: register caps (0: none, numba's default) of the build's one-warp kernels (merge, symmetric linking; the
#: refinement runs them too) and of the search kernel. Uncapped (PTX for sm_90, ptxas 13, uint8 vectors)
#: the search kernel takes 168 registers per thread (12 one-warp blocks per SM), merge 140, sym 121. With
#: every kernel capped at 96, a k=24 build of sift-photos 450k on an H100 took 4.47 s instead of 5.07 s
#: (merge 1.03 s instead of 1.30 s; 64: 4.55 s, 128: 4.53 s) and built the same graph
#: (``benchmarks/profile_ggnn_registers.py``, ``results/profile_ggnn_registers_h100.jsonl``). The search
#: kernel stays uncapped: its QPS under a cap was not measured. KNNGRAPH_GGNN_MAX_REGISTERS sets both.
BUILD_MAX_REGISTERS = int(os.environ.get("KNNGRAPH_GGNN_MAX_REGISTERS", "96"))
SEARCH_MAX_REGISTERS = int(os.environ.get("KNNGRAPH_GGNN_MAX_REGISTERS", "0"))


def _jit(max_registers: int):
    if max_registers > 0 and not numba_config.ENABLE_CUDASIM:  # the simulator's jit takes no register cap
        return cuda.jit(max_registers=max_registers)
    return cuda.jit


_threshold = cuda_version(_cpu.threshold)
_push = cuda_version(_cpu.push)
_pop = cuda_version(_cpu.pop)
_push_prioq = cuda_version(_cpu.push_prioq)
_best_insert = cuda_version(_cpu.best_insert)
_reset = cuda_version(_cpu.reset)


@device_function
def _sync():
    cuda.syncwarp(FULL_MASK)


# --------------------------------------------------------------------------------------------------
# fetch (a): which proposals are new


@device_function
def _scan(ids, n, v):
    """Whether v is among ids[:n]: no early exit and no branch, so the loop unrolls and its loads (the
    same address on every lane: broadcasts) overlap instead of each waiting on a compare; unsigned
    indices (numba adds no negative-index wraparound for them)."""
    hit = False
    t = uint32(0)
    nn = uint32(n)
    while t < nn:
        hit = hit | (ids[t] == v)
        t += uint32(1)
    return hit


@device_function
def _in_cache_scan(v, bi, pi, vi, nb, pn, vn):
    """:func:`.cpu.in_cache` (the same answer) as three branch-free scans, every lane at once."""
    return _scan(bi, nb, v) | _scan(pi, pn, v) | _scan(vi, vn, v)


#: the cache's ids are also kept in a shared-memory hash table (when it fits: ``hash_bits``), so that
#: step (a) is a probe or two per lane instead of a scan of the whole cache; slot of the state array
#: ``st`` that counts the table's used slots
OCC = 7
#: largest cache (kb + P + V) given a hash table; the table has 4x its slots (at most 4096)
HASH_MAX_CACHE = 1024


def hash_bits(kb: int, P: int, V: int) -> int:
    """log2 of the hash table's size for a cache of kb + P + V ids (0: no table, the cache is scanned):
    the smallest power of two >= 4 (kb + P + V) and >= 128, so that the live ids fill at most a quarter
    of it and the table, rebuilt when half full before a chunk of at most 32 new ids, never fills (its
    probes end at an empty slot)."""
    c = kb + P + V
    if c > HASH_MAX_CACHE:
        return 0
    b = 7
    while (1 << b) < 4 * c:
        b += 1
    return b


@device_function
def _slot(v, bits):
    """Home slot of id v >= 0 (Fibonacci hashing: the top ``bits`` bits of the 32-bit product)."""
    return uint32(((uint64(v) * uint64(2654435761)) & uint64(0xFFFFFFFF)) >> uint64(32 - bits))


@device_function
def _hash_has(hk, hc, v, bits):
    """Whether id v (>= 0) is in the cache: linear probing from its home slot to v's key or an empty slot
    (keys are never removed between rebuilds, so no probe sequence is cut short; a key whose count fell
    to 0 is no longer in the cache)."""
    mask = uint32((1 << bits) - 1)
    p = _slot(v, bits)
    while True:
        k = hk[p]
        if k == v:
            return hc[p] > 0
        if k < 0:
            return False
        p = (p + uint32(1)) & mask


@device_function
def _hash_add(hk, hc, v, delta, bits, st):
    """One lane: the count of id v (the slots of best, prioq and visited that hold it) changes by delta."""
    mask = uint32((1 << bits) - 1)
    p = _slot(v, bits)
    while True:
        k = hk[p]
        if k == v:
            hc[p] += delta
            return
        if k < 0:
            if delta > 0:
                hk[p] = v
                hc[p] = delta
                st[OCC] += 1
            return
        p = (p + uint32(1)) & mask


@device_function
def _hash_rebuild(hk, hc, bits, bi, pi, vi, st, lane):
    """The table holding exactly the ids of best[:nb], prioq[:pn] and visited[:vn] with their counts
    (every lane calls it, after a barrier; after a reset, a layer translation, or when used slots reach
    half of the table)."""
    H = 1 << bits
    t = lane
    while t < H:
        hk[t] = -1
        hc[t] = 0
        t += WARP
    _sync()
    if lane == 0:
        st[OCC] = 0
        for t in range(st[0]):
            _hash_add(hk, hc, bi[t], 1, bits, st)
        for t in range(st[1]):
            _hash_add(hk, hc, pi[t], 1, bits, st)
        for t in range(st[3]):
            _hash_add(hk, hc, vi[t], 1, bits, st)
    _sync()


@device_function
def _pop_head(thr, pd, pi, vi, V, st, hk, hc, bits):
    """pop() (lane 0): :func:`.cpu.pop`; the head moves from prioq to the ring (its count unchanged) and,
    when the ring is full, the id it overwrites leaves the cache."""
    old = int32(-1)
    if st[3] == V:
        old = vi[st[2]]
    a = _pop(thr, pd, pi, vi, V, st)
    if bits > 0 and a >= 0 and old >= 0:
        _hash_add(hk, hc, old, -1, bits, st)
    return a


@device_function
def _new_proposals(v, lane, bi, pi, vi, st, cand, hk, hc, bits):
    """Step (a) of fetch() for the chunk whose proposal of this lane is v (-1: none): drops proposals in
    the cache or equal to a proposal of an earlier lane (as :func:`.cpu.fetch_chunk`: a repeat of an
    earlier proposal is in the cache when that one is, and a repeat of a kept one is dropped), writes the
    kept ones in lane order to cand[:m]; returns m on every lane. The caller's barrier must separate
    the cache's last update from this call."""
    v = int32(v)
    if bits > 0 and st[OCC] >= (1 << bits) // 2:  # <= 32 keys more per chunk: load < 3/4
        _hash_rebuild(hk, hc, bits, bi, pi, vi, st, lane)
    keep = v >= 0
    if keep:
        if bits > 0:
            keep = not _hash_has(hk, hc, v, bits)
        else:
            keep = not _in_cache_scan(v, bi, pi, vi, st[0], st[1], st[3])
    lower = (int64(1) << lane) - 1  # lanes before this one
    if (int64(cuda.match_any_sync(FULL_MASK, v)) & lower) != 0:
        keep = False
    b = int64(cuda.ballot_sync(FULL_MASK, keep)) & 0xFFFFFFFF
    if keep:
        cand[cuda.popc(b & lower)] = v
    _sync()
    return cuda.popc(b)


# --------------------------------------------------------------------------------------------------
# push (c): warp-parallel sorted inserts with the CPU's positions and evictions


@device_function
def _highest(flag, lane):
    """1 + the highest lane whose flag is set, 0 if none (two ballots, no bit-scan intrinsics)."""
    b = int64(cuda.ballot_sync(FULL_MASK, flag)) & 0xFFFFFFFF
    return cuda.popc(int64(cuda.ballot_sync(FULL_MASK, (b >> lane) != 0)) & 0xFFFFFFFF)


@device_function
def _lowest(flag, lane):
    """The lowest lane whose flag is set, 32 if none."""
    b = int64(cuda.ballot_sync(FULL_MASK, flag)) & 0xFFFFFFFF
    return cuda.popc(int64(cuda.ballot_sync(FULL_MASK, (b & ((int64(2) << lane) - 1)) == 0)) & 0xFFFFFFFF)


@device_function
def _shift_up(kd, ki, j, top, lane):
    """kd/ki[j:top] -> kd/ki[j + 1:top + 1], slices of 32 from the top down (a slice's writes land on
    entries that only it and the slice above read, both before their barriers)."""
    hi = top
    while hi > j:
        lo = max(j, hi - WARP)
        i = uint32(lo + lane)
        xd = float32(0.0)
        xi = int32(0)
        if i < hi:
            xd = kd[i]
            xi = ki[i]
        _sync()
        if i < hi:
            kd[i + uint32(1)] = xd
            ki[i + uint32(1)] = xi
        hi = lo


@device_function
def _shift_down(kd, ki, lo0, hi0, lane):
    """kd/ki[lo0:hi0] -> kd/ki[lo0 - 1:hi0 - 1], slices of 32 from the bottom up."""
    lo = lo0
    while lo < hi0:
        hi = min(hi0, lo + WARP)
        i = uint32(lo + lane)  # lo >= 1
        xd = float32(0.0)
        xi = int32(0)
        if i < hi:
            xd = kd[i]
            xi = ki[i]
        _sync()
        if i < hi:
            kd[i - uint32(1)] = xd
            ki[i - uint32(1)] = xi
        lo = hi


@device_function
def _warp_best_insert(d, v, bd, bi, nb, kb, lane):
    """:func:`.cpu.best_insert` by the warp; returns (new count, inserted, id evicted or -1), the same on
    every lane. The CPU starts at top = min(nb, kb - 1) and moves down while (d, v) < the entry below:
    it stops at 1 + the highest entry i < top with not (d, v) < entry i (0 if none), whatever the list's
    order; a full list loses its last entry."""
    ins = nb < kb
    ev = int32(-1)
    if not ins:
        wi = bi[nb - 1]
        if _less(d, v, bd[nb - 1], wi):
            ins = True
            ev = wi
    if not ins:
        return nb, False, ev
    top = nb if nb < kb else kb - 1
    j = 0
    s = ((top - 1) // WARP) * WARP
    while s >= 0:
        i = s + lane
        f = False
        if i < top:
            f = not _less(d, v, bd[uint32(i)], bi[uint32(i)])
        h = _highest(f, lane)
        if h > 0:
            j = s + h
            break
        s -= WARP
    _shift_up(bd, bi, j, top, lane)
    _sync()
    if lane == 0:
        bd[j] = d
        bi[j] = v
    return (nb + 1 if nb < kb else nb), True, ev


@device_function
def _warp_push_prioq(d, v, pd, pi, P, pn, lane):
    """:func:`.cpu.push_prioq` by the warp (prioq descending, head last); returns (new count, inserted, id
    evicted or -1). Not
    full: the CPU moves down from pn while the entry below is < (d, v), stopping at 1 + the highest
    i < pn with not entry i < (d, v). Full and (d, v) < pd[0]: entry 0 leaves and the CPU moves up from
    0 while (d, v) < the entry above, stopping at (the lowest i >= 1 with not (d, v) < entry i) - 1,
    P - 1 if none."""
    if pn < P:
        j = 0
        s = ((pn - 1) // WARP) * WARP
        while s >= 0:
            i = s + lane
            f = False
            if i < pn:
                f = not _less(pd[uint32(i)], pi[uint32(i)], d, v)
            h = _highest(f, lane)
            if h > 0:
                j = s + h
                break
            s -= WARP
        _shift_up(pd, pi, j, pn, lane)
        _sync()
        if lane == 0:
            pd[j] = d
            pi[j] = v
        return pn + 1, True, int32(-1)
    ev = pi[0]
    if _less(d, v, pd[0], ev):
        j = P - 1
        s = 1
        while s < P:
            i = s + lane
            f = False
            if i < P:
                f = not _less(d, v, pd[uint32(i)], pi[uint32(i)])
            lo = _lowest(f, lane)
            if lo < WARP:
                j = s + lo - 1
                break
            s += WARP
        _shift_down(pd, pi, 1, j + 1, lane)
        _sync()
        if lane == 0:
            pd[j] = d
            pi[j] = v
        return pn, True, ev
    return pn, False, int32(-1)


@device_function
def _push_kept(myd, m, lane, kind, tau, nn1, bd, bi, kb, pd, pi, P, st, cand, hk, hc, bits):
    """Step (c) of fetch(): the kept proposals cand[c] (distance ``myd`` of lane c), c < m, in order,
    each pushed by the whole warp into best and prioq when it meets the criterion at its turn (the
    threshold moves with every push, as in :func:`.cpu.fetch_chunk`); lane 0 brings the hash table's
    counts up to date (the id in, the ids evicted out). Counts are kept in registers (the same on every
    lane) and written back by lane 0; ends with a barrier."""
    nb = st[0]
    pn = st[1]
    pushed = False  # the same on every lane (d and the threshold are)
    for c in range(m):
        d = cuda.shfl_sync(FULL_MASK, myd, c)
        if d <= _threshold(kind, bd, nb, kb, tau, nn1):
            pushed = True
            v = cand[c]
            nb2, ins_b, ev_b = _warp_best_insert(d, v, bd, bi, nb, kb, lane)
            pn, ins_p, ev_p = _warp_push_prioq(d, v, pd, pi, P, pn, lane)
            nb = nb2
            if bits > 0 and lane == 0:
                n_in = (1 if ins_b else 0) + (1 if ins_p else 0)
                if n_in > 0:
                    _hash_add(hk, hc, v, n_in, bits, st)
                if ev_b >= 0:
                    _hash_add(hk, hc, ev_b, -1, bits, st)
                if ev_p >= 0:
                    _hash_add(hk, hc, ev_p, -1, bits, st)
            _sync()
    if not pushed:
        # every lane read st[0:2] above and no push has taken a barrier since (compute-sanitizer racecheck
        # reported the write below against those reads)
        _sync()
    if lane == 0:
        st[0] = nb
        st[1] = pn
    _sync()


@device_function
def _fetch(v, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, st, cand,
           use_trans, trans, hk, hc, bits):
    """fetch() of the chunk whose proposal of this lane is v (-1: none); every lane calls it. With
    ``use_trans`` the proposals are hierarchy rows whose vectors are ``base[trans[v]]``. Returns the
    number of distances computed (on every lane)."""
    m = _new_proposals(v, lane, bi, pi, vi, st, cand, hk, hc, bits)
    # (b) distances, four rows in flight at a time (lanes over dimensions, then a shuffle sum)
    dim = queries.shape[1]
    myd = INF
    for c0 in range(0, m, 4):
        u0 = cand[c0]
        u1 = cand[c0 + 1] if c0 + 1 < m else u0
        u2 = cand[c0 + 2] if c0 + 2 < m else u0
        u3 = cand[c0 + 3] if c0 + 3 < m else u0
        if use_trans:
            u0 = trans[u0]
            u1 = trans[u1]
            u2 = trans[u2]
            u3 = trans[u3]
        a0, a1, a2, a3 = warp_partials4(kind, base, u0, u1, u2, u3, queries, j, dim, lane)
        d0 = _finish(kind, warp_sum(a0), inv_b, u0, inv_q, j)
        d1 = _finish(kind, warp_sum(a1), inv_b, u1, inv_q, j)
        d2 = _finish(kind, warp_sum(a2), inv_b, u2, inv_q, j)
        d3 = _finish(kind, warp_sum(a3), inv_b, u3, inv_q, j)
        if lane == c0:
            myd = d0
        elif lane == c0 + 1:
            myd = d1
        elif lane == c0 + 2:
            myd = d2
        elif lane == c0 + 3:
            myd = d3
    # (c) push, in proposal order, those that meet the criterion
    _push_kept(myd, m, lane, kind, tau, nn1, bd, bi, kb, pd, pi, P, st, cand, hk, hc, bits)
    return m


@device_function
def _walk(graph, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, V, st, cand,
          use_trans, trans, zb, max_pops, hk, hc, bits):
    """pop / fetch(N_a) until pop gives nothing or ``max_pops`` expansions (Algorithm 1), graph rows in
    chunks of 32; with ``use_trans`` rows of vector ``zb`` are skipped. Returns (pops, distances)."""
    deg = graph.shape[1]
    pops = 0
    nd = 0
    while pops < max_pops:
        if lane == 0:
            st[4] = _pop_head(_threshold(kind, bd, st[0], kb, tau, nn1), pd, pi, vi, V, st, hk, hc, bits)
        _sync()
        a = st[4]
        _sync()
        if a < 0:
            break
        pops += 1
        for s0 in range(0, deg, WARP):
            v = graph[a, s0 + lane] if s0 + lane < deg else -1
            if use_trans and v >= 0 and trans[v] == zb:
                v = -1
            nd += _fetch(v, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, st,
                         cand, use_trans, trans, hk, hc, bits)
    return pops, nd


@device_function
def _write_best(lane, bd, bi, nb, k, out_d, out_i, row):
    """The first k of best into out_d/out_i[row], (inf, -1) padded."""
    for t in range(lane, k, WARP):
        if t < nb:
            out_d[row, t] = bd[t]
            out_i[row, t] = bi[t]
        else:
            out_d[row, t] = INF
            out_i[row, t] = -1


@functools.lru_cache(maxsize=None)
def search_kernel(kb: int, P: int, V: int):
    """The search kernel for a cache of kb best, P queue and V visited slots (compile-time sizes)."""
    bits = hash_bits(kb, P, V)
    H = 1 << bits if bits > 0 else 1

    @_jit(SEARCH_MAX_REGISTERS)
    def ggnn_search(graph, base, queries, inv_b, inv_q, kind, entries, k, tau, nn1, max_it, out_d, out_i, out_nd,
               out_ne):
        bd = cuda.shared.array(kb, float32)
        bi = cuda.shared.array(kb, int32)
        pd = cuda.shared.array(P, float32)
        pi = cuda.shared.array(P, int32)
        vi = cuda.shared.array(V, int32)
        cand = cuda.shared.array(WARP, int32)
        hk = cuda.shared.array(H, int32)  # hash table of the cache's ids: keys, counts
        hc = cuda.shared.array(H, int8)
        # best count, queue count, ring head, ring count, popped id, -, -, hash slots used
        st = cuda.shared.array(8, int32)
        lane = cuda.threadIdx.x
        nq = queries.shape[0]
        ne = entries.shape[0]
        for j in range(cuda.blockIdx.x, nq, cuda.gridDim.x):
            if lane == 0:
                _reset(st)
            _sync()
            if bits > 0:
                _hash_rebuild(hk, hc, bits, bi, pi, vi, st, lane)
            nd = 0
            # fetch(s): the entry points (the top layer), 32 at a time
            for s0 in range(0, ne, WARP):
                v = entries[s0 + lane] if s0 + lane < ne else -1
                nd += _fetch(v, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, st,
                             cand, False, entries, hk, hc, bits)
            pops, nd2 = _walk(graph, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi,
                              V, st, cand, False, entries, -1, max_it, hk, hc, bits)
            nd += nd2
            _write_best(lane, bd, bi, st[0], k, out_d, out_i, j)
            if lane == 0:
                out_nd[j] = nd
                out_ne[j] = pops
            _sync()

    return ggnn_search


@functools.lru_cache(maxsize=None)
def merge_kernel(k: int, P: int, V: int):
    """merge(lt, lm), lt > lm (Algorithm 4): one block per row z of layer lm, the cache of the search
    kernel with best = k; the top segment is fetched, then per layer the cache is translated (best ids
    through ``sel``, prioq = best, visited cleared) and walked. Same steps as :func:`.cpu.merge_queries`."""
    bits = hash_bits(k, P, V)
    H = 1 << bits if bits > 0 else 1

    @_jit(BUILD_MAX_REGISTERS)
    def ggnn_merge(base, inv, kind, graph, trans, sel, lo_m, nz, lo_t, top_seg, lt, lm, s, tau, nn1, max_pops, out_i,
               out_d):
        bd = cuda.shared.array(k, float32)
        bi = cuda.shared.array(k, int32)
        pd = cuda.shared.array(P, float32)
        pi = cuda.shared.array(P, int32)
        vi = cuda.shared.array(V, int32)
        cand = cuda.shared.array(WARP, int32)
        hk = cuda.shared.array(H, int32)
        hc = cuda.shared.array(H, int8)
        st = cuda.shared.array(8, int32)
        lane = cuda.threadIdx.x
        for z in range(cuda.blockIdx.x, nz, cuda.gridDim.x):
            zb = trans[lo_m + z]
            if lane == 0:
                _reset(st)
            _sync()
            if bits > 0:
                _hash_rebuild(hk, hc, bits, bi, pi, vi, st, lane)
            t0 = lo_t + top_seg[z] * s
            for s0 in range(t0, t0 + s, WARP):
                v = s0 + lane if s0 + lane < t0 + s else -1
                if v >= 0 and trans[v] == zb:
                    v = -1
                _fetch(v, lane, kind, base, base, zb, inv, inv, tau, nn1, bd, bi, k, pd, pi, P, vi, st, cand, True,
                       trans, hk, hc, bits)
            for layer in range(lt - 1, lm - 1, -1):
                # transform (once per layer, lane 0): to the rows of the layer below; prioq <- best (pushed
                # from the worst, each lands at the head: no shifts); visited cleared
                if lane == 0:
                    nb = st[0]
                    for t in range(nb):
                        bi[t] = sel[bi[t]]
                    st[1] = 0
                    for t in range(nb):
                        _push_prioq(bd[nb - 1 - t], bi[nb - 1 - t], pd, pi, P, st)
                    st[2] = 0
                    st[3] = 0
                _sync()
                if bits > 0:
                    _hash_rebuild(hk, hc, bits, bi, pi, vi, st, lane)
                _walk(graph, lane, kind, base, base, zb, inv, inv, tau, nn1, bd, bi, k, pd, pi, P, vi, V, st, cand,
                      True, trans, zb, max_pops, hk, hc, bits)
            _write_best(lane, bd, bi, st[0], k, out_d, out_i, z)
            _sync()

    return ggnn_merge


@functools.lru_cache(maxsize=None)
def brute_kernel(k: int):
    """merge(l, l): one thread per row, the k nearest rows of its segment by brute force (segments hold
    about s rows), kept in a sorted per-thread list of compile-time length k."""

    @cuda.jit
    def ggnn_brute(base, inv, kind, trans, lo, seg, starts, nrows, out_i, out_d):
        bd = cuda.local.array(k, float32)
        bi = cuda.local.array(k, int32)
        z = cuda.grid(1)
        if z >= nrows:
            return
        b = seg[z]
        zb = trans[lo + z]
        nb = 0
        dim = base.shape[1]
        for y in range(starts[b], starts[b + 1]):
            if y == z:
                continue
            yb = trans[lo + y]
            acc = float32(0.0)
            if kind == 0:
                for t in range(dim):
                    diff = float32(base[yb, t]) - float32(base[zb, t])
                    acc += diff * diff
                d = acc
            else:
                for t in range(dim):
                    acc += float32(base[yb, t]) * float32(base[zb, t])
                d = _finish(kind, acc, inv, yb, inv, zb)
            nb = _best_insert(d, lo + y, bd, bi, nb, k)
        for t in range(k):
            if t < nb:
                out_d[z, t] = bd[t]
                out_i[z, t] = bi[t]
            else:
                out_d[z, t] = INF
                out_i[z, t] = -1

    return ggnn_brute


@device_function
def _links_to(graph, knn, sym, cnt, ksym, a, z):
    """Whether row a holds z among its nearest-neighbour slots or the inverse links placed so far."""
    for t in range(knn):
        if graph[a, t] == z:
            return True
    for t in range(min(cnt[a], ksym)):
        if sym[a, t] == z:
            return True
    return False


@device_function
def _in_sphere(dz, dx, dxz, rad2, t_mid):
    """dz when the point (squared distances dz to z, dx to x) lies in the sphere of section 5.2.1,
    ||p - q_m||^2 = (1 - t) dz + t dx - t (1 - t) dxz <= rad2, else INF."""
    one = float32(1.0)
    dm = (one - t_mid) * dz + t_mid * dx - t_mid * (one - t_mid) * dxz
    return dz if dm <= rad2 else INF


@functools.lru_cache(maxsize=None)
def sym_kernel(kb: int, P: int, V: int, C: int, max_pops: int, midpoint: float):
    """The path searches of sym(l) (section 5.2, Algorithm 5), :func:`knngraph.ggnn.cpu.sym_requests` with
    one block per row z: for each nearest neighbour x of z that does not link back, a search from x
    towards z (the cache with best = kb, proposals accepted inside the sphere around q_m = z + midpoint
    (x - z) through x), at most ``max_pops`` pops; when z is not reached, the C best points are written
    as the candidates of an inverse link (``req_i/req_d[z - z0, i, :req_n]``). The links are placed
    between waves of rows in the CPU's row order (:mod:`._link_kernels`, the result of the sequential
    :func:`knngraph.ggnn.cpu.sym_place`), so the GPU build places the CPU build's links (an earlier version placed them with atomics as they were found: the
    order then depended on the scheduling, and on sift-photos 20k the graph searched at recall@10 0.89
    against the CPU's 0.95). An expanded row is fetched in chunks of 32 as in the search (new proposals
    found against the cache as it was at the chunk's start)."""
    t_mid = float32(midpoint)
    bits = hash_bits(kb, P, V)
    H = 1 << bits if bits > 0 else 1

    @_jit(BUILD_MAX_REGISTERS)
    def ggnn_sym_paths(base, inv, kind, graph, trans, lo, z0, nz, knn, ksym, sym, cnt, tau, nn1, req_i, req_d, req_n):
        bd = cuda.shared.array(kb, float32)
        bi = cuda.shared.array(kb, int32)
        pd = cuda.shared.array(P, float32)
        pi = cuda.shared.array(P, int32)
        vi = cuda.shared.array(V, int32)
        cand = cuda.shared.array(WARP, int32)
        hk = cuda.shared.array(H, int32)
        hc = cuda.shared.array(H, int8)
        # cache state, popped id, path found, a value lane 0 broadcasts (every decision is lane 0's and
        # shared: no divergent barrier), hash slots used
        st = cuda.shared.array(8, int32)
        lane = cuda.threadIdx.x
        dim = base.shape[1]
        one = float32(1.0)
        for zz in range(cuda.blockIdx.x, nz, cuda.gridDim.x):
            z = lo + z0 + zz
            zb = trans[z]
            for i in range(knn):
                x = graph[z, i]
                if lane == 0:
                    req_n[zz, i] = 0
                    st[6] = 1 if x < 0 or _links_to(graph, knn, sym, cnt, ksym, x, z) else 0
                _sync()
                skip = st[6]
                _sync()
                if skip == 1:
                    continue
                xb = trans[x]
                dxz = warp_distance(kind, base, xb, base, zb, inv, inv, lane)
                rad2 = (one - t_mid) * (one - t_mid) * dxz + tau * tau * nn1
                if lane == 0:
                    _reset(st)
                    st[5] = 0
                    _push(dxz, x, bd, bi, kb, pd, pi, P, st)
                _sync()
                if bits > 0:
                    _hash_rebuild(hk, hc, bits, bi, pi, vi, st, lane)
                pops = 0
                while pops < max_pops:
                    if lane == 0:
                        st[4] = _pop_head(_threshold(kind, bd, st[0], kb, tau, nn1), pd, pi, vi, V, st, hk, hc,
                                          bits)
                        if st[4] >= 0:
                            if _links_to(graph, knn, sym, cnt, ksym, st[4], z):
                                st[5] = 1
                            st[6] = knn + min(cnt[st[4]], ksym)
                    _sync()
                    a = st[4]
                    found = st[5]
                    na = st[6]
                    _sync()
                    if a < 0 or found == 1:
                        break
                    pops += 1
                    for s0 in range(0, na, WARP):
                        t = s0 + lane
                        v = -1
                        if t < na:
                            v = graph[a, t] if t < knn else sym[a, t - knn]
                        if v == z:
                            v = -1
                        m = _new_proposals(v, lane, bi, pi, vi, st, cand, hk, hc, bits)
                        # distances to z and to x, four rows in flight at a time; lane c keeps the c-th
                        # (INF outside the sphere of section 5.2.1, which never meets the criterion: an
                        # open one is the largest finite float32, see threshold)
                        myd = INF
                        for c0 in range(0, m, 4):
                            u0 = trans[cand[c0]]
                            u1 = trans[cand[c0 + 1]] if c0 + 1 < m else u0
                            u2 = trans[cand[c0 + 2]] if c0 + 2 < m else u0
                            u3 = trans[cand[c0 + 3]] if c0 + 3 < m else u0
                            a0, a1, a2, a3 = warp_partials4(kind, base, u0, u1, u2, u3, base, zb, dim, lane)
                            e0 = _finish(kind, warp_sum(a0), inv, u0, inv, zb)
                            e1 = _finish(kind, warp_sum(a1), inv, u1, inv, zb)
                            e2 = _finish(kind, warp_sum(a2), inv, u2, inv, zb)
                            e3 = _finish(kind, warp_sum(a3), inv, u3, inv, zb)
                            if kind != 1:  # the sphere (not for inner product)
                                a0, a1, a2, a3 = warp_partials4(kind, base, u0, u1, u2, u3, base, xb, dim, lane)
                                f0 = _finish(kind, warp_sum(a0), inv, u0, inv, xb)
                                f1 = _finish(kind, warp_sum(a1), inv, u1, inv, xb)
                                f2 = _finish(kind, warp_sum(a2), inv, u2, inv, xb)
                                f3 = _finish(kind, warp_sum(a3), inv, u3, inv, xb)
                                e0 = _in_sphere(e0, f0, dxz, rad2, t_mid)
                                e1 = _in_sphere(e1, f1, dxz, rad2, t_mid)
                                e2 = _in_sphere(e2, f2, dxz, rad2, t_mid)
                                e3 = _in_sphere(e3, f3, dxz, rad2, t_mid)
                            if lane == c0:
                                myd = e0
                            elif lane == c0 + 1:
                                myd = e1
                            elif lane == c0 + 2:
                                myd = e2
                            elif lane == c0 + 3:
                                myd = e3
                        _push_kept(myd, m, lane, kind, tau, nn1, bd, bi, kb, pd, pi, P, st, cand, hk, hc, bits)
                if lane == 0 and st[5] == 0:
                    c = min(st[0], C)
                    for t in range(c):
                        req_i[zz, i, t] = bi[t]
                        req_d[zz, i, t] = bd[t]
                    req_n[zz, i] = c
                _sync()

    return ggnn_sym_paths

