"""SONG's GPU kernel (numba-cuda): warp-per-query graph search.

Search (SONG, sections III-VI), one warp per query, the three stages of Fig. 3 per expansion:

1. *candidate locating* (section V): lane 0 pops the nearest unexpanded vertex u from q, applies the stop
   test and updates topk; then the warp reads u's row 32 ids at a time (lane t takes id t: one coalesced
   load), every lane probes the visited set for its own id (read-only, in parallel), and a ballot
   compacts the unvisited ids into the shared candidate list;
2. *bulk distance computation* (section VI): the whole warp computes the candidates' distances. Lane t
   reads dimensions t, t+32, ... (coalesced) and a butterfly of shuffles sums the partials. Four
   candidates go through the loop together, so four independent loads are in flight per lane. 1-byte
   vectors with dim % 4 == 0 are read as uint32 words (4 dims per load; the query is staged
   transposed so that the shared-memory reads are conflict-free). 1-bit codes (section VII) use one lane
   per candidate: popc(xor) over the code's words;
3. *data-structure maintenance* (section IV): lane 0 alone offers each candidate to q / topk / visited,
   sequentially (section IV-A: dozens of insertions are too few for concurrent structures).

q (bounded SMMH), topk (max-heap), the visited hash table / Bloom filter, the query and the candidate
list all live in shared memory, sized by compile-time caps (section VIII: with selected insertion and
visited deletion the visited set is bounded by 2Q, so it fits there). Nothing is allocated in the
kernel. A warp takes its next query from a global counter when it finishes one (the number of
expansions varies a lot between queries), so blocks never wait for their slowest warp.

A filtered search (``filtered``, a compile-time flag: unfiltered kernels are unchanged) walks the same
way and lane 0 also offers every candidate whose id the bitset allows to a max-heap of the k best
allowed ids, which is returned instead of topk (the CPU path's ``_offer_allowed``).

Stages are separated by ``syncwarp``: the parallel visited probes never overlap lane 0's writes.
"""

from __future__ import annotations

import functools

from numba import cuda, float32, int32, uint32

from ..primitives import bitset, lists, visited
from ..primitives.compile import cuda_version, device_function
from ..primitives.constants import FULL_MASK, INF, WARP
from ..primitives.distances import DIST_COS
from ..primitives.warp import accumulate4, finish_query_device, warp_partials4, warp_sum
from ._layout import (MODE_GENERIC, MODE_HAMMING, MODE_PACKED_I8, MODE_PACKED_U8, SHARED_BUDGET,  # noqa: F401
                      shared_bytes_per_warp, warps_per_block)

# the shared CPU/GPU structures (knngraph.primitives), compiled for the device
smmh_push = cuda_version(lists.smmh_push)
smmh_pop_min = cuda_version(lists.smmh_pop_min)
smmh_pop_max = cuda_version(lists.smmh_pop_max)
smmh_max_slot = cuda_version(lists.smmh_max_slot)
maxheap_push = cuda_version(lists.maxheap_push)
maxheap_replace_top = cuda_version(lists.maxheap_replace_top)
maxheap_sort = cuda_version(lists.maxheap_sort)
maxheap_offer_unique = cuda_version(lists.maxheap_offer_unique)
is_allowed = cuda_version(bitset.is_allowed)
hash_contains = cuda_version(visited.hash_contains)
hash_insert = cuda_version(visited.hash_insert)
hash_delete = cuda_version(visited.hash_delete)
bloom_contains = cuda_version(visited.bloom_contains)
bloom_insert = cuda_version(visited.bloom_insert)



# --------------------------------------------------------------------------------------------------
# bulk distance computation (section VI)


@device_function
def _byte(word, b, signed):
    x = int32((word >> (8 * b)) & 255)
    if signed and x >= 128:
        x -= 256
    return float32(x)


@device_function
def _dist4_packed(kind, words, v0, v1, v2, v3, qv, w, nwords, signed, lane):
    """As ``warp_partials4`` for 1-byte vectors read as uint32 words; qv[w, 128 s + 32 b + l] holds query
    dimension 4 (32 s + l) + b (word 32 s + l, byte b)."""
    a0 = float32(0.0)
    a1 = float32(0.0)
    a2 = float32(0.0)
    a3 = float32(0.0)
    s = 0
    for wi in range(lane, nwords, WARP):
        y0 = words[v0, wi]
        y1 = words[v1, wi]
        y2 = words[v2, wi]
        y3 = words[v3, wi]
        for b in range(4):
            q = qv[w, 128 * s + 32 * b + lane]
            x0 = _byte(y0, b, signed)
            x1 = _byte(y1, b, signed)
            x2 = _byte(y2, b, signed)
            x3 = _byte(y3, b, signed)
            a0, a1, a2, a3 = accumulate4(kind, q, x0, x1, x2, x3, a0, a1, a2, a3)
        s += 1
    return a0, a1, a2, a3


@device_function
def _store4(kind, c, t0, a0, a1, a2, a3, v0, v1, v2, v3, cdist, w, inv_b, qinv, lane):
    a0 = warp_sum(a0)
    a1 = warp_sum(a1)
    a2 = warp_sum(a2)
    a3 = warp_sum(a3)
    if lane == 0:
        cdist[w, t0] = finish_query_device(kind, a0, inv_b, v0, qinv)
        if t0 + 1 < c:
            cdist[w, t0 + 1] = finish_query_device(kind, a1, inv_b, v1, qinv)
        if t0 + 2 < c:
            cdist[w, t0 + 2] = finish_query_device(kind, a2, inv_b, v2, qinv)
        if t0 + 3 < c:
            cdist[w, t0 + 3] = finish_query_device(kind, a3, inv_b, v3, qinv)


@device_function
def _stage_generic(kind, base, queries, j, qv, w, cand, cdist, c, inv_b, qinv, signed, lane):
    dim = base.shape[1]
    for t0 in range(0, c, 4):
        v0 = cand[w, t0]
        v1 = cand[w, t0 + 1] if t0 + 1 < c else v0
        v2 = cand[w, t0 + 2] if t0 + 2 < c else v0
        v3 = cand[w, t0 + 3] if t0 + 3 < c else v0
        a0, a1, a2, a3 = warp_partials4(kind, base, v0, v1, v2, v3, qv, w, dim, lane)
        _store4(kind, c, t0, a0, a1, a2, a3, v0, v1, v2, v3, cdist, w, inv_b, qinv, lane)


@device_function
def _stage_packed(kind, words, queries, j, qv, w, cand, cdist, c, inv_b, qinv, signed, lane):
    nwords = words.shape[1]
    for t0 in range(0, c, 4):
        v0 = cand[w, t0]
        v1 = cand[w, t0 + 1] if t0 + 1 < c else v0
        v2 = cand[w, t0 + 2] if t0 + 2 < c else v0
        v3 = cand[w, t0 + 3] if t0 + 3 < c else v0
        a0, a1, a2, a3 = _dist4_packed(kind, words, v0, v1, v2, v3, qv, w, nwords, signed, lane)
        _store4(kind, c, t0, a0, a1, a2, a3, v0, v1, v2, v3, cdist, w, inv_b, qinv, lane)


@device_function
def _stage_hamming(kind, codes, qcodes, j, qv, w, cand, cdist, c, inv_b, qinv, signed, lane):
    """One lane per candidate: codes are a few words, so no reduction is needed (section VII)."""
    if lane < c:
        cv = cand[w, lane]
        acc = 0
        for t in range(codes.shape[1]):
            acc += cuda.popc(codes[cv, t] ^ qcodes[j, t])
        cdist[w, lane] = float32(acc)


@device_function
def _load_query_generic(queries, j, qv, w, lane):
    for t in range(lane, queries.shape[1], WARP):
        qv[w, t] = queries[j, t]


@device_function
def _load_query_packed(queries, j, qv, w, lane):
    s = 0
    for wi in range(lane, queries.shape[1] // 4, WARP):
        for b in range(4):
            qv[w, 128 * s + 32 * b + lane] = queries[j, 4 * wi + b]
        s += 1


@device_function
def _load_query_none(queries, j, qv, w, lane):
    pass


# --------------------------------------------------------------------------------------------------
# search


@device_function
def _visited(use_bloom, ht, bw, voff, hmask, hshift, bbits, bnhash, v):
    if use_bloom:
        return bloom_contains(bw, voff, bbits, bnhash, v)
    return hash_contains(ht, voff, hmask, hshift, v)


@device_function
def _offer(c, cand, cdist, w, n, m, qsize, qk, qi, tk, ti, off, use_bloom, ht, bw, voff, hmask, hshift,
           bbits, bnhash):
    """Lane 0's maintenance stage for c candidates (the CPU path's ``_offer``); returns |q|."""
    for t in range(c):
        v = cand[w, t]
        d = cdist[w, t]
        if m == qsize and not (d < tk[off] or (d == tk[off] and v < ti[off])):
            continue  # selected insertion (IV-D)
        ms = off
        if n == qsize:
            ms = smmh_max_slot(off, n)
            if not (d < qk[ms] or (d == qk[ms] and v < qi[ms])):
                continue  # bounded queue (IV-C)
        if _visited(use_bloom, ht, bw, voff, hmask, hshift, bbits, bnhash, v):
            continue  # the same id twice in one chunk
        if n == qsize:
            ev = qi[ms]
            n = smmh_pop_max(qk, qi, off, n)
            if not use_bloom:
                hash_delete(ht, voff, hmask, hshift, ev)  # visited deletion (IV-E)
        n = smmh_push(qk, qi, off, n, d, v)
        if use_bloom:
            bloom_insert(bw, voff, bbits, bnhash, v)
        else:
            hash_insert(ht, voff, hmask, hshift, v)
    return n


@device_function
def _offer_allowed(c, cand, cdist, w, allowed, rk, ri, roff, mr, k):
    """Lane 0: offer the chunk's allowed candidates to the k best allowed ids; returns their number."""
    for t in range(c):
        v = cand[w, t]
        if is_allowed(allowed, v):
            mr = maxheap_offer_unique(rk, ri, roff, mr, k, cdist[w, t], v)
    return mr


@functools.lru_cache(maxsize=None)
def search_kernel(qcap: int, use_bloom: bool, vsize: int, dpad: int, mode: int, wpb: int,
                  max_registers: int | None = None, filtered: bool = False):
    """The search kernel for queue capacity ``qcap`` (runtime queue_size <= qcap), a visited set of
    ``vsize`` hash slots or Bloom words, a staged query row of ``dpad`` floats and a distance mode.
    ``max_registers`` caps registers per thread (more resident warps, possibly some spilling);
    ``filtered`` builds the variant that returns only ids the ``allowed`` bitset holds (k <= qcap)."""
    QN = wpb * qcap
    RN = wpb * qcap if filtered else 1
    HN = wpb * vsize if not use_bloom else 1
    BN = wpb * vsize if use_bloom else 1
    DP = max(dpad, 1)
    signed = mode == MODE_PACKED_I8
    if mode == MODE_HAMMING:
        stage, load_query = _stage_hamming, _load_query_none
    elif mode in (MODE_PACKED_U8, MODE_PACKED_I8):
        stage, load_query = _stage_packed, _load_query_packed
    else:
        stage, load_query = _stage_generic, _load_query_generic

    jit = cuda.jit(max_registers=max_registers) if max_registers else cuda.jit

    @jit
    def kernel(graph, base, queries, inv_b, inv_q, kind, entries, k, qsize, hshift, bnhash, allowed, counter,
               out_k, out_i, out_nd, out_ne):
        qk = cuda.shared.array(QN, dtype=float32)
        qi = cuda.shared.array(QN, dtype=int32)
        tk = cuda.shared.array(QN, dtype=float32)
        ti = cuda.shared.array(QN, dtype=int32)
        rk = cuda.shared.array(RN, dtype=float32)
        ri = cuda.shared.array(RN, dtype=int32)
        ht = cuda.shared.array(HN, dtype=int32)
        bw = cuda.shared.array(BN, dtype=uint32)
        qv = cuda.shared.array((wpb, DP), dtype=float32)
        cand = cuda.shared.array((wpb, WARP), dtype=int32)
        cdist = cuda.shared.array((wpb, WARP), dtype=float32)
        ctl = cuda.shared.array(wpb, dtype=int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        off = w * qcap
        voff = w * vsize
        hmask = vsize - 1
        bbits = vsize * 32 - 1
        nq = queries.shape[0]
        deg = graph.shape[1]
        ne = entries.shape[0]
        while True:
            # next query for this warp (dynamic: queries differ a lot in length)
            jj = 0
            if lane == 0:
                jj = cuda.atomic.add(counter, 0, 1)
            j = cuda.shfl_sync(FULL_MASK, jj, 0)
            if j >= nq:
                return
            # stage the query in shared memory; clear the visited set
            load_query(queries, j, qv, w, lane)
            for t in range(lane, vsize, WARP):
                if use_bloom:
                    bw[voff + t] = 0
                else:
                    ht[voff + t] = -1
            qinv = float32(0.0)
            if kind == DIST_COS:
                qinv = inv_q[j]
            cuda.syncwarp(FULL_MASK)
            n = 0  # |q|, |topk| and the number of allowed results: meaningful in lane 0 only
            m = 0
            mr = 0
            nd = 0
            ne_ = 0
            u = int32(-1)
            step = 0  # 0: entry points, then expansions of u
            ns = (ne + WARP - 1) // WARP
            while True:
                # ---- stage 1: candidate locating (32 ids per round)
                v = int32(-1)
                if u < 0:
                    t = step * WARP + lane
                    if t < ne:
                        v = entries[t]
                else:
                    t = step * WARP + lane
                    if t < deg:
                        v = graph[u, t]
                ok = v >= 0 and not _visited(use_bloom, ht, bw, voff, hmask, hshift, bbits, bnhash, v)
                vote = cuda.ballot_sync(FULL_MASK, ok)
                if ok:
                    cand[w, cuda.popc(vote & cuda.lanemask_lt())] = v
                c = cuda.popc(vote)
                cuda.syncwarp(FULL_MASK)
                # ---- stage 2: bulk distance computation
                stage(kind, base, queries, j, qv, w, cand, cdist, c, inv_b, qinv, signed, lane)
                cuda.syncwarp(FULL_MASK)
                # ---- stage 3: data-structure maintenance (lane 0), then the next expansion
                if lane == 0:
                    nd += c
                    if filtered:
                        mr = _offer_allowed(c, cand, cdist, w, allowed, rk, ri, off, mr, k)
                    n = _offer(c, cand, cdist, w, n, m, qsize, qk, qi, tk, ti, off, use_bloom, ht, bw, voff,
                               hmask, hshift, bbits, bnhash)
                step += 1
                more = (step < ns) if u < 0 else (step * WARP < deg)
                if not more:
                    # pop the nearest unexpanded vertex (Algorithm 1 lines 3-8)
                    if lane == 0:
                        nu = int32(-1)
                        if n > 0:
                            dk = qk[off]
                            du = qi[off]
                            n = smmh_pop_min(qk, qi, off, n)
                            if m < qsize:
                                m = maxheap_push(tk, ti, off, m, dk, du)
                                nu = du
                            elif dk < tk[off] or (dk == tk[off] and du < ti[off]):
                                ev = ti[off]
                                maxheap_replace_top(tk, ti, off, m, dk, du)
                                if not use_bloom:
                                    hash_delete(ht, voff, hmask, hshift, ev)
                                nu = du
                        if nu >= 0:
                            ne_ += 1
                        ctl[w] = nu
                    cuda.syncwarp(FULL_MASK)
                    u = ctl[w]
                    step = 0
                    cuda.syncwarp(FULL_MASK)  # every lane has read ctl before lane 0 writes it again
                    if u < 0:
                        break
                else:
                    cuda.syncwarp(FULL_MASK)  # lane 0's maintenance is visible to the next probes
            # results: topk sorted ascending, first k
            if lane == 0:
                if filtered:
                    maxheap_sort(rk, ri, off, mr)
                    ctl[w] = mr
                else:
                    maxheap_sort(tk, ti, off, m)
                    ctl[w] = m
                out_nd[j] = nd
                out_ne[j] = ne_
            cuda.syncwarp(FULL_MASK)
            mm = ctl[w]
            for t in range(lane, k, WARP):
                if t < mm:
                    if filtered:
                        out_k[j, t] = rk[off + t]
                        out_i[j, t] = ri[off + t]
                    else:
                        out_k[j, t] = tk[off + t]
                        out_i[j, t] = ti[off + t]
                else:
                    out_k[j, t] = INF
                    out_i[j, t] = -1
            cuda.syncwarp(FULL_MASK)

    kernel.warps_per_block = wpb
    return kernel
