"""SONG graph search on the CPU (numba, queries in parallel): the GPU kernel's algorithm, step for step,
with data structures chosen for a CPU core.

Per query (SONG, Algorithm 1 with the optimisations of section IV):

    visited <- {} ; q <- {} (bounded, capacity Q) ; topk <- {} (capacity Q)
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

The order of every list is the total (distance, id) order, so which structure holds q and topk does not
change the result: the GPU keeps them in a symmetric min-max heap and a max-heap in shared memory; here
both are sorted arrays (q with a moving head: pop_min advances it, pop_max shortens the tail, an insert
shifts the shorter side), which cost a few cache-resident moves per insert and no branches that
mispredict like a heap's. The visited set ``'hash'`` holds exactly q U topk, as SONG's hash table with
deletion does (section IV-E); on the CPU it is a generation-stamped array of n uint16 per thread (a
vertex is visited when its stamp is the current query's generation; deletion writes 0), allocated once per
index and thread and reused by every query (stamps are cleared once every 65535 queries). Same set, so
the same ids as the GPU, at one memory access per test instead of a probe sequence. ``'bloom'`` is the
Bloom filter of the GPU path (section IV-B).

With a filter (``allowed``), the walk is the same: vertices that may not be returned still lead to those
that may. Every candidate whose distance was computed is also offered to a third list, the k best
allowed ids (a max-heap that keeps each id once, since a forgotten vertex can be offered again), which
is returned instead of topk.

Once topk is full an evicted vertex can never re-enter (its distance is >= topk.max from then on), so
every vertex is expanded at most once and the loop ends. The chunking into 32 ids mirrors the GPU warp
(one id per lane); the GPU tests compare both paths id for id on integer data.

Distances (section VI, bulk distance computation): the query row is converted to float32 once per query
and each base row is read once, widened element by element inside a loop that the compiler vectorises
(``fastmath`` lets it reorder the sum); cosine uses the base's inverse norms, computed once per index,
and the query's, computed once per query. One query runs the serial build of the kernel (no thread
wake-up); batches run queries in parallel, ``n_threads`` per call.

The fast searcher's CPU twin (what ``song.search`` runs on the CPU unless a filter, a hashed index or
``visited='bloom'`` needs SONG's walk) is :mod:`knngraph.beam.cpu`; both walks read rows with
:mod:`knngraph.primitives.rows` and mark vertices with :mod:`knngraph.primitives.stamps`.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ..primitives.bitset import is_allowed
from ..primitives.compile import threaded_and_serial
from ..primitives.distances import DIST_HAMMING
from ..primitives.lists import less, maxheap_offer_unique, maxheap_sort, sort_pairs
from ..primitives.pair_distance import cpu_distance
from ..primitives.rows import load_query, query_row, row_distance, write_row
from ..primitives.stamps import Scratch, next_generation, worker_count
from ..primitives.visited import bloom_contains, bloom_insert
from ._layout import bloom_shape

__all__ = ["search", "search_cpu", "rerank_cpu"]

CHUNK = 32


@numba.njit(inline="always")
def _q_insert(qk, qi, h, n, d, v):
    """Insert (d, v) into the ascending list qk/qi[h:h+n] (capacity 2Q, n < Q); returns the new head."""
    lo = h
    hi = h + n
    while lo < hi:  # first slot whose pair is after (d, v)
        mid = (lo + hi) >> 1
        if less(qk[mid], qi[mid], d, v):
            lo = mid + 1
        else:
            hi = mid
    if h > 0 and (lo - h < h + n - lo or h + n == qk.shape[0]):
        for t in range(h, lo):  # shift the front one slot left
            qk[t - 1] = qk[t]
            qi[t - 1] = qi[t]
        qk[lo - 1] = d
        qi[lo - 1] = v
        return h - 1
    for t in range(h + n, lo, -1):  # shift the back one slot right
        qk[t] = qk[t - 1]
        qi[t] = qi[t - 1]
    qk[lo] = d
    qi[lo] = v
    return h


@numba.njit(inline="always")
def _t_insert(tk, ti, m, d, v):
    """Insert (d, v) into the ascending list tk/ti[:m] (m < capacity); new pairs are mostly the largest."""
    t = m
    while t > 0 and less(d, v, tk[t - 1], ti[t - 1]):
        tk[t] = tk[t - 1]
        ti[t] = ti[t - 1]
        t -= 1
    tk[t] = d
    ti[t] = v


@numba.njit(inline="always")
def _seen(use_bloom, vis, g, bw, bbits, bnhash, v):
    if use_bloom:
        return bloom_contains(bw, 0, bbits, bnhash, v)
    return vis[v] == g


@numba.njit(inline="always")
def _offer(c, cand, cd, h, n, m, qsize, qk, qi, tk, ti, use_bloom, vis, g, bw, bbits, bnhash):
    """Data-structure maintenance for one chunk of ``c`` candidates; returns the queue's (head, size)."""
    for t in range(c):
        v = cand[t]
        d = cd[t]
        if m == qsize and not less(d, v, tk[m - 1], ti[m - 1]):
            continue  # selected insertion
        if n == qsize and not less(d, v, qk[h + n - 1], qi[h + n - 1]):
            continue  # bounded queue
        if _seen(use_bloom, vis, g, bw, bbits, bnhash, v):
            continue
        if n == qsize:
            n -= 1  # pop_max
            if not use_bloom:
                vis[qi[h + n]] = 0
        h = _q_insert(qk, qi, h, n, d, v)
        n += 1
        if use_bloom:
            bloom_insert(bw, 0, bbits, bnhash, v)
        else:
            vis[v] = g
    return h, n


@numba.njit(inline="always")
def _offer_allowed(c, cand, cd, allowed, rk, ri, mr, k):
    """Offer a chunk's candidates to the k best allowed ids (filtered search); returns their number."""
    for t in range(c):
        if is_allowed(allowed, cand[t]):
            mr = maxheap_offer_unique(rk, ri, 0, mr, k, cd[t], cand[t])
    return mr


def _search(graph, base, queries, inv_b, kind, entries, k, qsize, use_bloom, bwords, bnhash, filtered, allowed,
            stamps, gens, workers, out_k, out_i, out_nd, out_ne):
    nq = queries.shape[0]
    deg = graph.shape[1]
    ne = entries.shape[0]
    bbits = bwords * 32 - 1
    # worker w answers queries w, w + workers, ... with stamps row w: rows are never shared, whatever
    # thread runs the worker, and interleaving spreads the queries evenly
    for w in prange(workers):
        vis = stamps[w]
        qk = np.empty(2 * qsize, np.float32)
        qi = np.empty(2 * qsize, np.int32)
        tk = np.empty(qsize, np.float32)
        ti = np.empty(qsize, np.int32)
        bw = np.empty(bwords, np.uint32)
        cand = np.empty(CHUNK, np.int32)
        cd = np.empty(CHUNK, np.float32)
        rk = np.empty(k if filtered else 1, np.float32)
        ri = np.empty(k if filtered else 1, np.int32)
        qrow = query_row(queries)
        for j in range(w, nq, workers):
            inv_q = load_query(queries, j, qrow, kind)
            g = np.uint16(0)
            if use_bloom:
                bw[:] = 0
            else:
                g = next_generation(vis, gens, w)
            h = 0
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
                    if not _seen(use_bloom, vis, g, bw, bbits, bnhash, v):
                        cand[c] = v
                        c += 1
                for t in range(c):
                    cd[t] = row_distance(kind, base, cand[t], qrow, inv_b, inv_q)
                nd += c
                if filtered:
                    mr = _offer_allowed(c, cand, cd, allowed, rk, ri, mr, k)
                h, n = _offer(c, cand, cd, h, n, m, qsize, qk, qi, tk, ti, use_bloom, vis, g, bw, bbits, bnhash)
            while n > 0:
                dk = qk[h]
                du = qi[h]
                h += 1
                n -= 1
                if n == 0:
                    h = 0
                if m == qsize:
                    if not less(dk, du, tk[m - 1], ti[m - 1]):
                        break  # the best unexpanded vertex is worse than all of topk
                    m -= 1
                    if not use_bloom:
                        vis[ti[m]] = 0
                _t_insert(tk, ti, m, dk, du)
                m += 1
                ne_ += 1
                for s in range(0, deg, CHUNK):
                    c = 0
                    for t in range(s, min(deg, s + CHUNK)):
                        v = graph[du, t]
                        if v >= 0 and not _seen(use_bloom, vis, g, bw, bbits, bnhash, v):
                            cand[c] = v
                            c += 1
                    for t in range(c):
                        cd[t] = row_distance(kind, base, cand[t], qrow, inv_b, inv_q)
                    nd += c
                    if filtered:
                        mr = _offer_allowed(c, cand, cd, allowed, rk, ri, mr, k)
                    h, n = _offer(c, cand, cd, h, n, m, qsize, qk, qi, tk, ti, use_bloom, vis, g, bw, bbits,
                                  bnhash)
            if filtered:
                maxheap_sort(rk, ri, 0, mr)
                write_row(out_k, out_i, j, rk, ri, mr, k)
            else:
                write_row(out_k, out_i, j, tk, ti, m, k)
            out_nd[j] = nd
            out_ne[j] = ne_


_SEARCH = threaded_and_serial(_search, fastmath=True)


def search_cpu(graph_ids, base, queries, inv_b, inv_q, kind, entries, k, queue_size, visited, allowed=None,
               scratch=None):
    """Run the search for every query (host arrays, already validated); ``allowed``: None or the uint32
    bitset of the ids that may be returned (:mod:`knngraph.primitives.filters`); ``scratch``: a
    :class:`Scratch` for ``len(base)`` vertices to reuse (default: a new one). ``inv_q`` is accepted
    for the GPU path's signature: the kernel computes each query's inverse norm itself.

    ``base`` is what the CPU kernels can read (see :func:`knngraph.primitives.cpu_inputs.cpu_vectors`) or
    uint32 codes with
    ``kind=DIST_HAMMING``; ``queries`` float32 (or uint32 codes). Returns internal distances float32,
    ids int32 (both [nq, k], -1/inf where fewer than k were found), distance computations and expanded
    vertices per query.
    """
    nq = queries.shape[0]
    out_k = np.empty((nq, k), np.float32)
    out_i = np.empty((nq, k), np.int32)
    out_nd = np.empty(nq, np.int32)
    out_ne = np.empty(nq, np.int32)
    use_bloom = visited == "bloom"
    bwords, bnhash = bloom_shape(queue_size) if use_bloom else (1, 1)
    if scratch is None:
        scratch = Scratch(0 if use_bloom else base.shape[0])
    filtered = allowed is not None
    bits = allowed if filtered else np.zeros(1, np.uint32)
    workers = worker_count(nq, scratch)
    # one query: the serial build, no thread wake-up
    kernel = _SEARCH[0] if workers > 1 else _SEARCH[1]
    with numba.parallel_chunksize(1):
        kernel(graph_ids, base, queries, inv_b, kind, entries, k, queue_size, use_bloom, bwords, bnhash, filtered,
               bits, scratch.stamps, scratch.gens, workers, out_k, out_i, out_nd, out_ne)
    return out_k, out_i, out_nd, out_ne


def search(graph_ids, base, queries, inv_b, kind, entries, k, queue_size, visited, *, batch_size=0,
           max_registers=None, verbose=False, allowed=None, scratch=None):
    """Search every query: host arrays ``graph_ids``, ``base`` (what the CPU kernels can read, or uint32
    codes with ``kind=DIST_HAMMING``), ``inv_b`` (inverse norms for cosine, else a 1-element dummy),
    ``entries``; ``queries`` (uint32 codes with ``DIST_HAMMING``, else any dtype: each row is read as
    float32). Returns internal distances float32, ids int32 (both [nq, k], -1 / inf where fewer than k
    were found), distance computations and expanded vertices per query. ``allowed``: None or the uint32
    bitset of the ids that may be returned; ``scratch``: see :func:`search_cpu`. ``batch_size`` and
    ``max_registers`` are GPU settings, accepted for the same signature as :func:`knngraph.song.cuda.search`."""
    q = np.ascontiguousarray(queries)
    if kind != DIST_HAMMING and q.dtype == np.float16:
        q = q.astype(np.float32)
    return search_cpu(graph_ids, base, q, inv_b, None, kind, entries, k, queue_size, visited, allowed, scratch)


@numba.njit(parallel=True, cache=True, fastmath=True)
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
