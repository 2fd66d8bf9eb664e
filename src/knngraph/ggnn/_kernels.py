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
    (c) the kept proposals not beyond d_k + tau^2 nn1 (no bound of the chunk is higher) are sorted over the
        lanes by (distance, id) (by counting when at most 8, else a bitonic sort in registers) and
        the prefix of them that meets the criterion, each with the lists as the pushes before it left them
        (:func:`.cpu.push_sorted`: the bound after c pushes is worked out per lane from the c-th smallest
        of best and the first c proposals), is merged into best and prioq at once: every entry's new
        index is its index plus the entries of the other list before it (binary searches in shared
        memory), entries that leave the lists leave the hash table (section 4.1.1's "parallel sorted
        insert", for a whole chunk instead of one proposal at a time)

pop() is lane 0's. The block is one warp, so every barrier is a ``syncwarp``. Lists, evictions and
counts are exactly those of the CPU's serial loops (:mod:`.cpu`: ``push_sorted`` into
:func:`~knngraph.primitives.lists.best_insert` / ``push_prioq``), so on data whose distances are exact in float32 both paths return the same ids. Shared
arrays have compile-time sizes; nothing is allocated in the kernel; graph rows are read in chunks of 32
whatever the degree.
"""

from __future__ import annotations

import functools
import os

from numba import config as numba_config
from numba import cuda, float32, int32, int64, uint32, uint64

from ..primitives.compile import cuda_version, device_function
from ..primitives.constants import FULL_MASK, ID_NONE, INF, WARP
from ..primitives.lists import best_insert, slack_bound, sort_pairs
from ..primitives.warp import finish_device as _finish
from ..primitives.warp import less_device as _less
from ..primitives.warp import warp_distance, warp_partials4, warp_sort32, warp_sum
from . import cpu as _cpu
from ._layout import THREADS

__all__ = ["search_kernel", "merge_kernel", "brute_kernel", "sym_kernel", "THREADS"]


#: register caps (0: none, numba's default) of the build's one-warp kernels (merge, symmetric linking; the
#: refinement runs them too) and of the search kernel. Uncapped (PTX for sm_90, ptxas 13; ``python
#: scripts/kernel_ptx.py OUT ggnn``) the search kernel takes 178 registers per thread (11 one-warp blocks per
#: SM), merge 182, the path searches 156. Measured on an H100 (sift-photos 450k, k=24, 10k queries at tau
#: 0.5, ``benchmarks/studies/profile_ggnn_build.py``, results/profile_ggnn_build_caps_h100.jsonl): capped at 128 the
#: search takes 9.5-10.0 ms instead of 13.0-13.3 ms uncapped (and 10.3-10.5 ms with the per-proposal pushes
#: this kernel had before, capped alike), and the build 4.26-4.69 s instead of 5.56 s uncapped and 4.68-4.70 s
#: at 96 (the graph is the same at every cap). KNNGRAPH_GGNN_MAX_REGISTERS sets both.
BUILD_MAX_REGISTERS = int(os.environ.get("KNNGRAPH_GGNN_MAX_REGISTERS", "128"))
SEARCH_MAX_REGISTERS = int(os.environ.get("KNNGRAPH_GGNN_MAX_REGISTERS", "128"))


def _jit(max_registers: int):
    if max_registers > 0 and not numba_config.ENABLE_CUDASIM:  # the simulator's jit takes no register cap
        return cuda.jit(max_registers=max_registers)
    return cuda.jit


_threshold = cuda_version(_cpu.threshold)
_slack_bound = cuda_version(slack_bound)
_sort_pairs = cuda_version(sort_pairs)
_push = cuda_version(_cpu.push)
_pop = cuda_version(_cpu.pop)
_push_prioq = cuda_version(_cpu.push_prioq)
_best_insert = cuda_version(best_insert)
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


#: chunks of at most this many proposals to push are ordered by counting, larger ones by a bitonic sort
SMALL_SORT = 8

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
    """The count of id v (the slots of best, prioq and visited that hold it) changes by delta; any number
    of lanes at once, for distinct ids or not (a new key takes an empty slot by compare-and-swap; a lane
    that loses the slot to another key probes on)."""
    mask = uint32((1 << bits) - 1)
    p = _slot(v, bits)
    while True:
        k = hk[p]
        if k == v:
            cuda.atomic.add(hc, p, delta)
            return
        if k < 0:
            if delta <= 0:
                return
            old = cuda.atomic.cas(hk, p, int32(-1), v)
            if old == -1 or old == v:
                cuda.atomic.add(hc, p, delta)
                if old == -1:
                    cuda.atomic.add(st, OCC, 1)
                return
        else:
            p = (p + uint32(1)) & mask


@device_function
def _hash_rebuild(hk, hc, bits, bi, pi, vi, st, lane):
    """The table holding exactly the ids of best[:nb], prioq[:pn] and visited[:vn] with their counts
    (every lane calls it, after a barrier; after a reset, a layer translation, or when used slots reach
    half of the table); the lanes insert the entries together."""
    H = 1 << bits
    t = lane
    while t < H:
        hk[t] = -1
        hc[t] = 0
        t += WARP
    _sync()  # every lane has read st[OCC] (the caller's test) before it is reset
    if lane == 0:
        st[OCC] = 0
    _sync()
    for t in range(lane, st[0], WARP):
        _hash_add(hk, hc, bi[t], 1, bits, st)
    for t in range(lane, st[1], WARP):
        _hash_add(hk, hc, pi[t], 1, bits, st)
    for t in range(lane, st[3], WARP):
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
# push (c): the chunk's kept proposals sorted, the prefix that meets the criterion merged into the lists


@device_function
def _count_below(kd, ki, n, d, v, descending):
    """How many of the entries kd/ki[:n], sorted ascending (or descending: then they are the last ones),
    are < (d, v) (binary search)."""
    a = 0
    b = n
    while a < b:
        mid = (a + b) >> 1
        if _less(kd[mid], ki[mid], d, v) != descending:
            a = mid + 1
        else:
            b = mid
    return n - a if descending else a


@device_function
def _pushed_prefix(d, v, m, lane, tau, nn1, bd, bi, nb, kb, path):
    """How many of the sorted proposals (lane c holds the c-th, c < m) :func:`.cpu.push_sorted` pushes:
    the longest prefix in which each meets the criterion at its turn, that is with the best list merged
    with the proposals before it (:func:`.cpu.threshold`: d_kr with kr = kb, or 1 with ``path``). The
    kr-th smallest of best[:nb] and the first c proposals is the larger of best[kr - 1 - j] and proposal
    j - 1 for j = min(c, J), J the proposals that beat the best entry they would push out (a prefix:
    proposals ascend, the entries they meet descend)."""
    kr = 1 if path else kb
    beats = False
    if lane < m and lane < kr:
        t = kr - 1 - lane
        beats = t >= nb or _less(d, v, bd[t], bi[t])
    J = cuda.popc(int64(cuda.ballot_sync(FULL_MASK, beats)) & 0xFFFFFFFF)
    j = min(lane, J)
    dj = cuda.shfl_sync(FULL_MASK, d, max(j - 1, 0))
    d0 = cuda.shfl_sync(FULL_MASK, d, 0)
    thr = float32(3.4028235e38)  # open until best holds kr (as cpu.threshold)
    if nb + lane >= kr:
        dk = dj
        if j < kr:
            t = kr - 1 - j
            dk = bd[t] if t < nb else INF
            if j > 0 and dj > dk:
                dk = dj
        d1 = bd[0] if nb > 0 else d0
        if lane > 0 and d0 < d1:
            d1 = d0
        thr = _slack_bound(dk, nn1 if path else d1, tau, nn1)
    ok = lane < m and d <= thr
    fail = int64(cuda.ballot_sync(FULL_MASK, not ok)) & 0xFFFFFFFF
    return cuda.popc((fail & -fail) - 1) if fail != 0 else WARP


@device_function
def _push_kept(myd, m, lane, tau, nn1, bd, bi, kb, path, pd, pi, P, st, cand, candd, hk, hc, bits):
    """Step (c) of fetch() (:func:`.cpu.push_sorted`): the kept proposals cand[c] (distance ``myd`` of lane
    c), c < m, sorted over the lanes; the prefix that meets the criterion is merged into best (kb
    smallest kept) and prioq (descending, P smallest kept) at once: every entry's new index is its index
    plus the entries of the other list before it (binary searches), so entries only move up in best
    and, in prioq, those that move up and those that move down are written in two passes (up from the
    top slice, down from the bottom one). The hash table's counts follow (the pushed ids in, the
    entries pushed out leave). Proposals beyond d_k + tau^2 nn1 at the start are dropped first (no bound of
    the chunk is higher), and a chunk without any returns at once. ``path``: the criterion of sym's path
    searches (:func:`.cpu.threshold`). Ends with a barrier."""
    nb = st[0]
    pn = st[1]
    kr = 1 if path else kb
    # no later bound of this chunk exceeds d_k + tau^2 nn1 (d_k only falls, min(|d_1|, nn1) <= nn1, for
    # every metric): a proposal beyond it now is never pushed
    ok = lane < m and (nb < kr or myd <= _slack_bound(bd[kr - 1], nn1, tau, nn1))
    live = int64(cuda.ballot_sync(FULL_MASK, ok)) & 0xFFFFFFFF
    m = cuda.popc(live)
    if m == 0:
        _sync()
        return
    d = myd if ok else INF
    v = cand[lane] if ok else int32(ID_NONE)
    if m <= SMALL_SORT:
        # few: each one's rank by comparing it with the others (m shuffles), then placed by rank
        rank = 0
        rest = live
        for _ in range(m):
            src = cuda.popc((rest & -rest) - 1)
            od = cuda.shfl_sync(FULL_MASK, d, src)
            ov = cuda.shfl_sync(FULL_MASK, v, src)
            if _less(od, ov, d, v):
                rank += 1
            rest &= rest - 1
        _sync()
        if ok:
            cand[rank] = v
            candd[rank] = d
        _sync()
        d = candd[lane] if lane < m else INF
        v = cand[lane] if lane < m else int32(ID_NONE)
    else:
        d, v = warp_sort32(d, v, lane)
        _sync()  # every lane read cand (the distances' rows) before it is rewritten below
    npush = _pushed_prefix(d, v, m, lane, tau, nn1, bd, bi, nb, kb, path)
    if npush == 0:
        _sync()
        return
    # the pushed proposals, ascending, for the entries' searches; their own places from the lists as
    # they are now
    nb2 = min(kb, nb + npush)
    pn2 = min(P, pn + npush)
    pos_b = kb
    pos_p = -1
    if lane < npush:
        cand[lane] = v
        candd[lane] = d
        pos_b = lane + _count_below(bd, bi, nb, d, v, False)
        pos_p = pn2 - 1 - (lane + _count_below(pd, pi, pn, d, v, True))
    _sync()
    # best: entries move up by the pushed ones before them; from the top slice down
    s = ((nb - 1) // WARP) * WARP
    while s >= 0:
        i = s + lane
        xd = float32(0.0)
        xi = int32(0)
        ni = kb
        if i < nb:
            xd = bd[i]
            xi = bi[i]
            ni = i + _count_below(candd, cand, npush, xd, xi, False)
        _sync()
        if i < nb:
            if ni < kb:
                bd[ni] = xd
                bi[ni] = xi
            elif bits > 0:
                _hash_add(hk, hc, xi, -1, bits, st)
        s -= WARP
    # prioq (descending): entry i goes to i + (pn2 - pn) - (pushed ones below it); the shift grows with i,
    # so the entries moving up are above those moving down
    for direction in range(2):
        s = ((pn - 1) // WARP) * WARP if direction == 0 else 0
        while (s >= 0) if direction == 0 else (s < pn):
            i = s + lane
            xd = float32(0.0)
            xi = int32(0)
            ni = i
            if i < pn:
                xd = pd[i]
                xi = pi[i]
                ni = i + (pn2 - pn) - _count_below(candd, cand, npush, xd, xi, False)
            _sync()
            if i < pn:
                if direction == 0 and ni > i:
                    pd[ni] = xd
                    pi[ni] = xi
                elif direction == 1 and ni < i:
                    if ni >= 0:
                        pd[ni] = xd
                        pi[ni] = xi
                    elif bits > 0:
                        _hash_add(hk, hc, xi, -1, bits, st)
            s = s - WARP if direction == 0 else s + WARP
        _sync()  # the moves up are written before the moves down read (and the pushed ones are written)
    if lane < npush:
        if pos_b < kb:
            bd[pos_b] = d
            bi[pos_b] = v
        if pos_p >= 0:
            pd[pos_p] = d
            pi[pos_p] = v
        if bits > 0:
            n_in = (1 if pos_b < kb else 0) + (1 if pos_p >= 0 else 0)
            if n_in > 0:
                _hash_add(hk, hc, v, n_in, bits, st)
    if lane == 0:
        st[0] = nb2
        st[1] = pn2
    _sync()


@device_function
def _lane_pick(lane, c0, mine, e0, e1, e2, e3):
    """e_c when ``lane`` is c0 + c (c < 4), else ``mine``: the lane that keeps the c-th of four values
    computed together."""
    if lane == c0:
        return e0
    if lane == c0 + 1:
        return e1
    if lane == c0 + 2:
        return e2
    if lane == c0 + 3:
        return e3
    return mine


@device_function
def _fetch(v, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, st, cand, candd,
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
        myd = _lane_pick(lane, c0, myd, d0, d1, d2, d3)
    # (c) push, nearest first, those that meet the criterion
    _push_kept(myd, m, lane, tau, nn1, bd, bi, kb, False, pd, pi, P, st, cand, candd, hk, hc, bits)
    return m


@device_function
def _walk(graph, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, V, st, cand,
          candd, use_trans, trans, zb, max_pops, hk, hc, bits):
    """pop / fetch(N_a) until pop gives nothing or ``max_pops`` expansions (Algorithm 1), graph rows in
    chunks of 32; with ``use_trans`` rows of vector ``zb`` are skipped. Returns (pops, distances)."""
    deg = graph.shape[1]
    pops = 0
    nd = 0
    while pops < max_pops:
        if lane == 0:
            st[4] = _pop_head(_threshold(kind, bd, st[0], kb, False, tau, nn1), pd, pi, vi, V, st, hk, hc, bits)
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
                         cand, candd, use_trans, trans, hk, hc, bits)
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
        hc = cuda.shared.array(H, int32)
        candd = cuda.shared.array(WARP, float32)
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
                             cand, candd, False, entries, hk, hc, bits)
            pops, nd2 = _walk(graph, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi,
                              V, st, cand, candd, False, entries, -1, max_it, hk, hc, bits)
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
        hc = cuda.shared.array(H, int32)
        candd = cuda.shared.array(WARP, float32)
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
                _fetch(v, lane, kind, base, base, zb, inv, inv, tau, nn1, bd, bi, k, pd, pi, P, vi, st, cand, candd,
                       True, trans, hk, hc, bits)
            for layer in range(lt - 1, lm - 1, -1):
                # transform (once per layer, lane 0): to the rows of the layer below (best re-sorted: the new
                # ids can reorder ties); prioq <- best (pushed from the worst, each lands at the head: no
                # shifts); visited cleared
                if lane == 0:
                    nb = st[0]
                    for t in range(nb):
                        bi[t] = sel[bi[t]]
                    _sort_pairs(bd, bi, 0, nb)
                    st[1] = 0
                    for t in range(nb):
                        _push_prioq(bd[nb - 1 - t], bi[nb - 1 - t], pd, pi, P, st)
                    st[2] = 0
                    st[3] = 0
                _sync()
                if bits > 0:
                    _hash_rebuild(hk, hc, bits, bi, pi, vi, st, lane)
                _walk(graph, lane, kind, base, base, zb, inv, inv, tau, nn1, bd, bi, k, pd, pi, P, vi, V, st, cand,
                      candd, True, trans, zb, max_pops, hk, hc, bits)
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
    towards z (the cache with best = kb, the criterion of a path search, proposals accepted inside the
    sphere around q_m = z + midpoint (x - z) through x), at most ``max_pops`` pops; when z is not reached,
    the C best points are written as the candidates of an inverse link (``req_i/req_d[z - z0, i,
    :req_n]``). The links are placed between waves of rows in the CPU's row order (:mod:`._link_kernels`,
    the result of the sequential :func:`knngraph.ggnn.cpu.sym_place`), so the GPU build places the CPU
    build's links (an earlier version placed them with atomics as they were found: the order then
    depended on the scheduling, and on sift-photos 20k the graph searched at recall@10 0.89 against the
    CPU's 0.95). An expanded row is fetched in chunks of 32 as in the search (new proposals found against
    the cache as it was at the chunk's start)."""
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
        near_lane = cuda.shared.array(WARP, int32)
        hk = cuda.shared.array(H, int32)
        hc = cuda.shared.array(H, int32)
        candd = cuda.shared.array(WARP, float32)
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
                        st[4] = _pop_head(_threshold(kind, bd, st[0], kb, True, tau, nn1), pd, pi, vi, V, st, hk,
                                          hc, bits)
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
                        # distances to z, four rows in flight at a time; lane c keeps the c-th
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
                            myd = _lane_pick(lane, c0, myd, e0, e1, e2, e3)
                        if kind != 1:  # the sphere of section 5.2.1 (not for inner product)
                            # distances to x only for the proposals within the path bound d_1 + tau^2 nn1 (no
                            # later bound of the chunk is higher: the others are never pushed); outside the
                            # sphere INF, which never meets the criterion (an open one is the largest finite
                            # float32, see threshold)
                            near = lane < m and myd <= _slack_bound(bd[0], nn1, tau, nn1)
                            b = int64(cuda.ballot_sync(FULL_MASK, near)) & 0xFFFFFFFF
                            m2 = cuda.popc(b)
                            rank = cuda.popc(b & ((int64(1) << lane) - 1)) if near else -1
                            if near:
                                near_lane[rank] = lane
                            else:
                                myd = INF
                            _sync()
                            myf = INF
                            for c0 in range(0, m2, 4):
                                u0 = trans[cand[near_lane[c0]]]
                                u1 = trans[cand[near_lane[c0 + 1]]] if c0 + 1 < m2 else u0
                                u2 = trans[cand[near_lane[c0 + 2]]] if c0 + 2 < m2 else u0
                                u3 = trans[cand[near_lane[c0 + 3]]] if c0 + 3 < m2 else u0
                                a0, a1, a2, a3 = warp_partials4(kind, base, u0, u1, u2, u3, base, xb, dim, lane)
                                f0 = _finish(kind, warp_sum(a0), inv, u0, inv, xb)
                                f1 = _finish(kind, warp_sum(a1), inv, u1, inv, xb)
                                f2 = _finish(kind, warp_sum(a2), inv, u2, inv, xb)
                                f3 = _finish(kind, warp_sum(a3), inv, u3, inv, xb)
                                myf = _lane_pick(rank, c0, myf, f0, f1, f2, f3)
                            if near:
                                myd = _in_sphere(myd, myf, dxz, rad2, t_mid)
                            # (near_lane is rewritten in the next chunk after the push's closing barrier)
                        _push_kept(myd, m, lane, tau, nn1, bd, bi, kb, True, pd, pi, P, st, cand, candd, hk, hc,
                                   bits)
                if lane == 0 and st[5] == 0:
                    c = min(st[0], C)
                    for t in range(c):
                        req_i[zz, i, t] = bi[t]
                        req_d[zz, i, t] = bd[t]
                    req_n[zz, i] = c
                _sync()

    return ggnn_sym_paths

