"""SONG graph search on the CPU (numba, queries in parallel): the GPU kernel's algorithm, step for step.

Per query (SONG, Algorithm 1 with the optimisations of section IV):

    visited <- {} ; q <- {} (bounded min-max heap, capacity Q) ; topk <- {} (max-heap, capacity Q)
    offer(entry points)
    while q not empty:
        (d, u) <- q.pop_min()
        if |topk| = Q and (d, u) >= topk.max: stop                       # Algorithm 1 lines 4-5
        topk.push(u); if topk overflowed: visited.delete(evicted)         # visited deletion, IV-E
        for each chunk of 32 ids of u's row:                               # candidate locating, V
            candidates <- ids of the chunk that are not -1 and not visited
            compute their distances                                        # bulk distances, VI
            offer(candidates)                                              # maintenance, IV
    return the first k of topk, sorted

    offer(v, d):
        if |topk| = Q and (d, v) >= topk.max: drop                         # selected insertion, IV-D
        if |q| = Q and (d, v) >= q.max: drop                               # bounded queue, IV-C
        if v visited: drop                                                 # duplicate id
        if |q| = Q: visited.delete(q.pop_max())                            # visited deletion, IV-E
        q.push(v); visited.add(v)

With a filter (``allowed``), the walk is the same: vertices that may not be returned still lead to those
that may. Every candidate whose distance was computed is also offered to a third list, the k best
allowed ids (a max-heap that keeps each id once, since a forgotten vertex can be offered again), which
is returned instead of topk.

With the hash table, visited = q U topk at all times (at most 2Q ids). Once topk is full an evicted
vertex can never re-enter (its distance is >= topk.max from then on), so every vertex is expanded at
most once and the loop ends. The chunking into 32 ids mirrors the GPU warp (one id per lane); the
GPU tests compare both paths id for id on integer data.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange, types
from numba.extending import overload

from ..primitives.distances import DIST_COS, cpu_distance, inverse_norms
from ..primitives.filters import is_allowed
from ..primitives.lists import (maxheap_offer_unique, maxheap_push, maxheap_replace_top, maxheap_sort, smmh_max_slot,
                                smmh_pop_max, smmh_pop_min, smmh_push, sort_pairs)
from ..primitives.visited import (bloom_contains, bloom_insert, bloom_shape, hash_capacity, hash_contains,
                                  hash_delete, hash_insert)

__all__ = ["search", "search_cpu", "rerank_cpu", "DIST_HAMMING", "popcount32"]

#: distance kind for 1-bit codes (uint32 words): the Hamming distance, section VII
DIST_HAMMING = 3
CHUNK = 32
_QUERIES_PER_TASK = 8


@numba.njit(cache=True)
def popcount32(x):
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) & 0xFFFFFFFF) >> 24


def _distance(kind, base, i, queries, j, inv_b, inv_q):
    """Distance between base[i] and queries[j]: the metric's (see :func:`knngraph.primitives.distances.cpu_distance`), or the
    Hamming distance when ``base`` holds uint32 codes (section VII); chosen at compile time by dtype."""
    raise NotImplementedError  # pragma: no cover - only the compiled overload runs


@overload(_distance)
def _distance_impl(kind, base, i, queries, j, inv_b, inv_q):
    if isinstance(base, types.Array) and base.dtype == types.uint32:
        def hamming(kind, base, i, queries, j, inv_b, inv_q):
            acc = 0
            for w in range(base.shape[1]):
                acc += popcount32(np.int64(base[i, w] ^ queries[j, w]))
            return np.float32(acc)
        return hamming

    def metric(kind, base, i, queries, j, inv_b, inv_q):
        return cpu_distance(kind, base, i, queries, j, inv_b, inv_q)
    return metric


@numba.njit(cache=True)
def _is_visited(use_bloom, ht, bw, hmask, hshift, bbits, bnhash, v):
    if use_bloom:
        return bloom_contains(bw, 0, bbits, bnhash, v)
    return hash_contains(ht, 0, hmask, hshift, v)


@numba.njit(cache=True)
def _offer(c, cand, cd, n, m, qsize, qk, qi, tk, ti, use_bloom, ht, bw, hmask, hshift, bbits, bnhash):
    """Data-structure maintenance for one chunk of ``c`` candidates; returns the new queue size."""
    for t in range(c):
        v = cand[t]
        d = cd[t]
        if m == qsize and not (d < tk[0] or (d == tk[0] and v < ti[0])):
            continue  # selected insertion
        ms = 0
        if n == qsize:
            ms = smmh_max_slot(0, n)
            if not (d < qk[ms] or (d == qk[ms] and v < qi[ms])):
                continue  # bounded queue
        if _is_visited(use_bloom, ht, bw, hmask, hshift, bbits, bnhash, v):
            continue
        if n == qsize:
            ev = qi[ms]
            n = smmh_pop_max(qk, qi, 0, n)
            if not use_bloom:
                hash_delete(ht, 0, hmask, hshift, ev)
        n = smmh_push(qk, qi, 0, n, d, v)
        if use_bloom:
            bloom_insert(bw, 0, bbits, bnhash, v)
        else:
            hash_insert(ht, 0, hmask, hshift, v)
    return n


@numba.njit(cache=True)
def _offer_allowed(c, cand, cd, allowed, rk, ri, mr, k):
    """Offer a chunk's candidates to the k best allowed ids (filtered search); returns their number."""
    for t in range(c):
        if is_allowed(allowed, cand[t]):
            mr = maxheap_offer_unique(rk, ri, 0, mr, k, cd[t], cand[t])
    return mr


@numba.njit(parallel=True, cache=True)
def _search(graph, base, queries, inv_b, inv_q, kind, entries, k, qsize, use_bloom, hslots, hshift,
            bwords, bnhash, filtered, allowed, out_k, out_i, out_nd, out_ne):
    nq = queries.shape[0]
    deg = graph.shape[1]
    ne = entries.shape[0]
    hmask = hslots - 1
    bbits = bwords * 32 - 1
    ntasks = (nq + _QUERIES_PER_TASK - 1) // _QUERIES_PER_TASK
    for task in prange(ntasks):
        qk = np.empty(qsize, np.float32)
        qi = np.empty(qsize, np.int32)
        tk = np.empty(qsize, np.float32)
        ti = np.empty(qsize, np.int32)
        ht = np.empty(hslots, np.int32)
        bw = np.empty(bwords, np.uint32)
        cand = np.empty(CHUNK, np.int32)
        cd = np.empty(CHUNK, np.float32)
        rk = np.empty(k if filtered else 1, np.float32)
        ri = np.empty(k if filtered else 1, np.int32)
        for j in range(task * _QUERIES_PER_TASK, min(nq, (task + 1) * _QUERIES_PER_TASK)):
            ht[:] = -1
            bw[:] = 0
            n = 0
            m = 0
            mr = 0
            nd = 0
            ne_ = 0
            # entry points, 32 at a time, like any other candidate chunk
            for s in range(0, ne, CHUNK):
                c = 0
                for t in range(s, min(ne, s + CHUNK)):
                    v = entries[t]
                    if not _is_visited(use_bloom, ht, bw, hmask, hshift, bbits, bnhash, v):
                        cand[c] = v
                        c += 1
                for t in range(c):
                    cd[t] = _distance(kind, base, cand[t], queries, j, inv_b, inv_q)
                nd += c
                if filtered:
                    mr = _offer_allowed(c, cand, cd, allowed, rk, ri, mr, k)
                n = _offer(c, cand, cd, n, m, qsize, qk, qi, tk, ti, use_bloom, ht, bw, hmask, hshift, bbits, bnhash)
            while n > 0:
                dk = qk[0]
                du = qi[0]
                n = smmh_pop_min(qk, qi, 0, n)
                if m == qsize:
                    if not (dk < tk[0] or (dk == tk[0] and du < ti[0])):
                        break  # the best unexpanded vertex is worse than all of topk
                    ev = ti[0]
                    maxheap_replace_top(tk, ti, 0, m, dk, du)
                    if not use_bloom:
                        hash_delete(ht, 0, hmask, hshift, ev)
                else:
                    m = maxheap_push(tk, ti, 0, m, dk, du)
                ne_ += 1
                for s in range(0, deg, CHUNK):
                    c = 0
                    for t in range(s, min(deg, s + CHUNK)):
                        v = graph[du, t]
                        if v >= 0 and not _is_visited(use_bloom, ht, bw, hmask, hshift, bbits, bnhash, v):
                            cand[c] = v
                            c += 1
                    for t in range(c):
                        cd[t] = _distance(kind, base, cand[t], queries, j, inv_b, inv_q)
                    nd += c
                    if filtered:
                        mr = _offer_allowed(c, cand, cd, allowed, rk, ri, mr, k)
                    n = _offer(c, cand, cd, n, m, qsize, qk, qi, tk, ti, use_bloom, ht, bw, hmask, hshift, bbits, bnhash)
            if filtered:
                maxheap_sort(rk, ri, 0, mr)
                for t in range(k):
                    if t < mr:
                        out_k[j, t] = rk[t]
                        out_i[j, t] = ri[t]
                    else:
                        out_k[j, t] = np.inf
                        out_i[j, t] = -1
                out_nd[j] = nd
                out_ne[j] = ne_
                continue
            maxheap_sort(tk, ti, 0, m)
            for t in range(k):
                if t < m:
                    out_k[j, t] = tk[t]
                    out_i[j, t] = ti[t]
                else:
                    out_k[j, t] = np.inf
                    out_i[j, t] = -1
            out_nd[j] = nd
            out_ne[j] = ne_



def search_cpu(graph_ids, base, queries, inv_b, inv_q, kind, entries, k, queue_size, visited, allowed=None):
    """Run the search for every query (host arrays, already validated); ``allowed``: None or the uint32
    bitset of the ids that may be returned (:mod:`knngraph.primitives.filters`).

    ``base`` is what the CPU kernels can read (see :func:`knngraph.primitives.distances.cpu_vectors`) or uint32 codes with
    ``kind=DIST_HAMMING``; ``queries`` float32 (or uint32 codes). Returns internal distances float32,
    ids int32 (both [nq, k], -1/inf where fewer than k were found), distance computations and expanded
    vertices per query.
    """
    nq = queries.shape[0]
    out_k = np.empty((nq, k), np.float32)
    out_i = np.empty((nq, k), np.int32)
    out_nd = np.empty(nq, np.int32)
    out_ne = np.empty(nq, np.int32)
    hslots, hshift = hash_capacity(queue_size)
    bwords, bnhash = bloom_shape(queue_size)
    use_bloom = visited == "bloom"
    filtered = allowed is not None
    bits = allowed if filtered else np.zeros(1, np.uint32)
    _search(graph_ids, base, queries, inv_b, inv_q, kind, entries, k, queue_size, use_bloom,
            hslots, hshift, bwords if use_bloom else 1, bnhash, filtered, bits, out_k, out_i, out_nd, out_ne)
    return out_k, out_i, out_nd, out_ne


def search(graph_ids, base, queries, inv_b, kind, entries, k, queue_size, visited, *, batch_size=0,
           max_registers=None, verbose=False, allowed=None):
    """Search every query: host arrays ``graph_ids``, ``base`` (what the CPU kernels can read, or uint32
    codes with ``kind=DIST_HAMMING``), ``inv_b`` (inverse norms for cosine, else a 1-element dummy),
    ``entries``; ``queries`` float (or uint32 codes). Returns internal distances float32, ids int32
    (both [nq, k], -1 / inf where fewer than k were found), distance computations and expanded vertices
    per query. ``allowed``: None or the uint32 bitset of the ids that may be returned. ``batch_size`` and
    ``max_registers`` are GPU settings, accepted for the same signature as :func:`knngraph.song.cuda.search`."""
    if kind == DIST_HAMMING:
        q = np.ascontiguousarray(queries)
        inv_q = np.zeros(1, np.float32)
    else:
        q = np.ascontiguousarray(queries, dtype=np.float32)
        inv_q = inverse_norms(q) if kind == DIST_COS else np.zeros(1, np.float32)
    return search_cpu(graph_ids, base, q, inv_b, inv_q, kind, entries, k, queue_size, visited, allowed)


@numba.njit(parallel=True, cache=True)
def _rerank(base, queries, inv_b, inv_q, kind, cand, k, out_k, out_i):
    nq, r = cand.shape
    for j in prange(nq):
        d = np.empty(r, np.float32)
        ids = np.empty(r, np.int32)
        c = 0
        for t in range(r):
            v = cand[j, t]
            if v < 0:
                continue
            ids[c] = v
            d[c] = cpu_distance(kind, base, v, queries, j, inv_b, inv_q)
            c += 1
        sort_pairs(d, ids, 0, c)
        for t in range(k):
            if t < c:
                out_k[j, t] = d[t]
                out_i[j, t] = ids[t]
            else:
                out_k[j, t] = np.inf
                out_i[j, t] = -1


def rerank_cpu(base, queries, inv_b, inv_q, kind, candidates, k):
    """Exact distances of each query to its candidate ids (host arrays); the k nearest, sorted by
    (distance, id): internal distances float32 and ids int32 [nq, k]."""
    nq = queries.shape[0]
    out_k = np.empty((nq, k), np.float32)
    out_i = np.empty((nq, k), np.int32)
    _rerank(base, queries, inv_b, inv_q, kind, np.ascontiguousarray(candidates), k, out_k, out_i)
    return out_k, out_i
