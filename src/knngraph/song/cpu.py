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

**The beam searcher** (:func:`search_beam`, what ``song.search`` runs on the CPU unless a filter, a
hashed index or ``visited='bloom'`` needs SONG's walk) is the walk of the GPU's fast searcher
(``_beam_kernels.py``) with ``search_width=1``: one sorted list of the Q nearest vertices seen, each
marked once expanded; expand the first unmarked one, offer its unvisited neighbours, stop when every
entry is marked. It is SONG's search with the queue and the top-k merged into one list of Q entries
(section IV's two structures of Q each keep expanding until the queue's best is worse than the Q-th
result; here a vertex that falls off the list is never expanded), and it reaches SONG's recall with
about 30% fewer distances on sift (``benchmarks/cpu_search.py``). The visited stamps never forget within
a query, so no distance is computed twice. Per expansion the unvisited neighbours are gathered first
and their rows prefetched (a ``prefetcht0`` per cache line, up to 8), then their distances computed: the
loads of later rows overlap the arithmetic of earlier ones, which took the search from memory-latency
bound to about 1.6x fewer CPU-seconds per query on sift 20k. Queries go to 4 workers per thread, each
with its own stamps row, handed out one at a time, so a thread slowed by other work on the machine holds
up only its current worker.
"""

from __future__ import annotations

import contextlib
import time

import numba
import numpy as np
from numba import prange, types
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ..primitives.compile import threaded_and_serial
from .._device import Device
from ..primitives.distances import DIST_COS, DIST_IP, DIST_L2SQ, cpu_distance, distance_kind
from ..primitives.filters import is_allowed
from ..primitives.lists import less, maxheap_offer_unique, maxheap_sort, slack_bound, sort_pairs
from ..primitives.visited import bloom_contains, bloom_insert, bloom_shape

__all__ = ["search", "search_cpu", "search_beam", "index_search_beam", "index_scratch", "uses_beam", "rerank_cpu",
           "Scratch", "threads", "DIST_HAMMING", "popcount32"]

#: distance kind for 1-bit codes (uint32 words): the Hamming distance, section VII
DIST_HAMMING = 3
CHUNK = 32
_CPU = Device("cpu")
#: largest stamp before the stamps of a thread are cleared (uint16)
_MAX_GEN = 65535


@numba.njit(cache=True)
def popcount32(x):
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) & 0xFFFFFFFF) >> 24


def _row_distance(kind, base, i, qrow, inv_b, inv_q):
    """Distance between base[i] and the float32 query row ``qrow`` (inverse norm ``inv_q``, cosine only)
    under ``kind``, or the Hamming distance when ``base`` holds uint32 codes (section VII; ``qrow`` is
    then the query's codes); chosen at compile time by dtype."""
    raise NotImplementedError  # pragma: no cover - only the compiled overload runs


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the uint32 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


#: 2**112: scales a float16's exponent field, shifted into float32's, to float32's bias (and makes
#: float16 subnormals float32 normals)
_HALF_SCALE = np.float32(2.0**112)


@numba.njit(inline="always")
def half_bits_to_float32(h):
    """The value of the float16 with bit pattern ``h`` (uint16; finite values): sign, exponent and
    mantissa moved to their float32 places, then the exponent rebiased by one multiply; integer and
    float arithmetic only, so a loop of it vectorises."""
    h32 = np.uint32(h)
    bits = np.uint32(((h32 & np.uint32(0x8000)) << np.uint32(16)) | ((h32 & np.uint32(0x7FFF)) << np.uint32(13)))
    return _float32_from_bits(bits) * _HALF_SCALE


@overload(_row_distance, jit_options={"fastmath": True})
def _row_distance_impl(kind, base, i, qrow, inv_b, inv_q):
    if isinstance(base, types.Array) and base.dtype == types.uint16:  # float16 vectors as their bits
        def half(kind, base, i, qrow, inv_b, inv_q):
            row = base[i]
            acc = np.float32(0.0)
            if kind == DIST_L2SQ:
                for t in range(qrow.shape[0]):
                    diff = half_bits_to_float32(row[t]) - qrow[t]
                    acc += diff * diff
                return acc
            for t in range(qrow.shape[0]):
                acc += half_bits_to_float32(row[t]) * qrow[t]
            if kind == DIST_IP:
                return -acc
            return np.float32(1.0) - acc * inv_b[i] * inv_q
        return half
    if isinstance(base, types.Array) and base.dtype == types.uint32:
        def hamming(kind, base, i, qrow, inv_b, inv_q):
            acc = 0
            for w in range(base.shape[1]):
                acc += popcount32(np.int64(base[i, w] ^ qrow[w]))
            return np.float32(acc)
        return hamming

    def metric(kind, base, i, qrow, inv_b, inv_q):
        row = base[i]
        acc = np.float32(0.0)
        if kind == DIST_L2SQ:
            for t in range(qrow.shape[0]):
                diff = np.float32(row[t]) - qrow[t]
                acc += diff * diff
            return acc
        for t in range(qrow.shape[0]):
            acc += np.float32(row[t]) * qrow[t]
        if kind == DIST_IP:
            return -acc
        return np.float32(1.0) - acc * inv_b[i] * inv_q
    return metric


def _query_row(queries):
    """A buffer for one query row: uint32 for 1-bit codes, float32 otherwise."""
    raise NotImplementedError  # pragma: no cover - only the compiled overload runs


@overload(_query_row, inline="always")
def _query_row_impl(queries):
    dt = np.uint32 if isinstance(queries, types.Array) and queries.dtype == types.uint32 else np.float32

    def make(queries):
        return np.empty(queries.shape[1], dt)
    return make


@intrinsic
def _prefetch(typingctx, arr, i, t):
    """Hint the cache to load the line holding ``arr[i, t]`` (2-D array; LLVM's ``prefetch``, read, high
    locality). Compiles to one ``prefetcht0``; no effect on results."""
    sig = types.void(arr, i, t)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        inds = [context.cast(builder, args[a], signature.args[a], types.intp) for a in (1, 2)]
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data,
                                        shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                        inds=inds, boundscheck=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return sig, codegen


@numba.njit(inline="always")
def _prefetch_row(base, v, step, lines):
    """Prefetch the first ``lines`` cache lines of row v (``step`` elements per line)."""
    for s in range(lines):
        _prefetch(base, v, s * step)



@numba.njit(inline="always")
def _line_shape(base):
    """(elements per 64-byte cache line, lines to prefetch per row: at most 8, the hardware streams the rest)."""
    step = max(1, 64 // base.itemsize)
    return step, min(8, (base.shape[1] + step - 1) // step)


@numba.njit(inline="always")
def _write_row(out_k, out_i, j, keys, ids, m, k):
    """Row j of the output: the first k of the m sorted (key, id) pairs, then inf / -1."""
    for t in range(k):
        if t < m:
            out_k[j, t] = keys[t]
            out_i[j, t] = ids[t]
        else:
            out_k[j, t] = np.inf
            out_i[j, t] = -1


@numba.njit(inline="always")
def _load_query(queries, j, qrow, kind):
    """Copy query j into ``qrow`` (widened to float32, or uint32 codes); returns its inverse norm for
    cosine (0 for a zero query, as :func:`knngraph.primitives.distances.inverse_norms`), else 0."""
    s2 = np.float32(0.0)
    for t in range(qrow.shape[0]):
        qrow[t] = queries[j, t]
        s2 += np.float32(qrow[t]) * np.float32(qrow[t])
    if kind == DIST_COS and s2 > 0:
        return np.float32(1.0) / np.sqrt(s2)
    return np.float32(0.0)


@numba.njit(inline="always")
def _next_generation(vis, gens, w):
    """The visited stamp of worker w's next query; its stamps are cleared when the uint16 runs out."""
    gn = np.int64(gens[w]) + 1
    if gn > _MAX_GEN:
        vis[:] = 0
        gn = 1
    gens[w] = gn
    return np.uint16(gn)


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
        qrow = _query_row(queries)
        for j in range(w, nq, workers):
            inv_q = _load_query(queries, j, qrow, kind)
            g = np.uint16(0)
            if use_bloom:
                bw[:] = 0
            else:
                g = _next_generation(vis, gens, w)
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
                    cd[t] = _row_distance(kind, base, cand[t], qrow, inv_b, inv_q)
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
                        cd[t] = _row_distance(kind, base, cand[t], qrow, inv_b, inv_q)
                    nd += c
                    if filtered:
                        mr = _offer_allowed(c, cand, cd, allowed, rk, ri, mr, k)
                    h, n = _offer(c, cand, cd, h, n, m, qsize, qk, qi, tk, ti, use_bloom, vis, g, bw, bbits,
                                  bnhash)
            if filtered:
                maxheap_sort(rk, ri, 0, mr)
                _write_row(out_k, out_i, j, rk, ri, mr, k)
            else:
                _write_row(out_k, out_i, j, tk, ti, m, k)
            out_nd[j] = nd
            out_ne[j] = ne_


_SEARCH = threaded_and_serial(_search, fastmath=True)


# --------------------------------------------------------------------------------------------------
# the beam searcher: one sorted list (the CPU twin of song/_beam_kernels.py)


@numba.njit(inline="always")
def _beam_insert(lk, li, lx, m, cap, d, v):
    """Insert (d, v), unexpanded, into the ascending list lk/li/lx[:m] (capacity ``cap``; when full the
    last entry falls off; the caller checked that (d, v) comes before it). Returns the slot."""
    t = m if m < cap else cap - 1
    while t > 0 and less(d, v, lk[t - 1], li[t - 1]):
        lk[t] = lk[t - 1]
        li[t] = li[t - 1]
        lx[t] = lx[t - 1]
        t -= 1
    lk[t] = d
    li[t] = v
    lx[t] = 0
    return t


def _beam(graph, base, queries, inv_b, kind, entries, k, cap, stamps, gens, workers, out_k, out_i, out_nd,
          out_ne, kb, tau, nn1, max_exp):
    nq = queries.shape[0]
    deg = graph.shape[1]
    ne = entries.shape[0]
    step, lines = _line_shape(base)
    for w in prange(workers):
        vis = stamps[w]
        lk = np.empty(cap, np.float32)
        li = np.empty(cap, np.int32)
        lx = np.empty(cap, np.uint8)
        cand = np.empty(max(deg, ne), np.int32)
        qrow = _query_row(queries)
        for j in range(w, nq, workers):
            inv_q = _load_query(queries, j, qrow, kind)
            g = _next_generation(vis, gens, w)
            m = 0
            nd = 0
            ne_ = 0
            lo = cap
            c = 0
            for t in range(ne):
                v = entries[t]
                if vis[v] != g:
                    vis[v] = g
                    cand[c] = v
                    c += 1
                    _prefetch_row(base, v, step, lines)
            for t in range(c):
                v = cand[t]
                d = _row_distance(kind, base, v, qrow, inv_b, inv_q)
                if m < cap or less(d, v, lk[m - 1], li[m - 1]):
                    pos = _beam_insert(lk, li, lx, m, cap, d, v)
                    if m < cap:
                        m += 1
                    lo = min(lo, pos)
            nd += c
            p = lo
            while p < m:
                # GGNN's slack stop (kb > 0): the first unexpanded vertex beyond the bound, or the expansion cap
                if kb > 0 and (ne_ >= max_exp or (m >= kb and lk[p] > slack_bound(lk[kb - 1], lk[0], tau, nn1))):
                    break
                # expand the first unexpanded vertex; everything before it is expanded
                u = li[p]
                lx[p] = 1
                ne_ += 1
                if p + 1 < m and not lx[p + 1]:  # most often the next vertex to expand: fetch its row now
                    _prefetch(graph, li[p + 1], 0)
                lo = cap
                # gather the unvisited neighbours and prefetch their rows, then compute: the loads of
                # one row overlap the arithmetic of the previous ones
                c = 0
                for t in range(deg):
                    v = graph[u, t]
                    if v >= 0 and vis[v] != g:
                        vis[v] = g
                        cand[c] = v
                        c += 1
                        _prefetch_row(base, v, step, lines)
                nd += c
                for t in range(c):
                    v = cand[t]
                    d = _row_distance(kind, base, v, qrow, inv_b, inv_q)
                    if m < cap or less(d, v, lk[m - 1], li[m - 1]):
                        pos = _beam_insert(lk, li, lx, m, cap, d, v)
                        if m < cap:
                            m += 1
                        if pos <= p:
                            p += 1
                        lo = min(lo, pos)
                p = min(lo, p + 1)
                while p < m and lx[p]:
                    p += 1
            _write_row(out_k, out_i, j, lk, li, m, k)
            out_nd[j] = nd
            out_ne[j] = ne_


_BEAM = threaded_and_serial(_beam, fastmath=True)


#: workers per thread: each worker answers every W-th query with its own stamps row, and workers are
#: handed to threads one at a time as threads free up, so a thread slowed by other work delays only its
#: current worker
_WORKERS_PER_THREAD = 4


#: stamps memory that extra workers may touch (beyond one row per thread)
_STAMPS_BUDGET = 1 << 28


def _workers(nq: int, scratch) -> int:
    if nq <= 1:
        return 1
    threads = numba.get_num_threads()
    per_row = 2 * scratch.stamps.shape[1]
    cap = max(threads, min(_WORKERS_PER_THREAD * threads, _STAMPS_BUDGET // per_row))
    return max(1, min(nq, cap, scratch.gens.shape[0]))


class Scratch:
    """Visited stamps for searches over ``n`` vertices, one row of n uint16 per worker (4 per thread of
    ``NUMBA_NUM_THREADS``: zero pages until a worker touches its row) and each row's last generation;
    made once per index and reused by every call, so a query clears nothing."""

    def __init__(self, n: int):
        rows = max(1, _WORKERS_PER_THREAD * numba.config.NUMBA_NUM_THREADS)
        self.stamps = np.zeros((rows, max(1, n)), np.uint16)
        self.gens = np.zeros(rows, np.int64)


@contextlib.contextmanager
def threads(n_threads):
    """Run the numba kernels inside with ``n_threads`` threads (None: leave the setting as it is); the
    previous setting is restored on exit."""
    if n_threads is None:
        yield
        return
    top = numba.config.NUMBA_NUM_THREADS
    if isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer)) or not 1 <= n_threads:
        raise ValueError(f"n_threads must be a positive integer (at most {top}) or None, got {n_threads!r}")
    old = numba.get_num_threads()
    numba.set_num_threads(min(int(n_threads), top))
    try:
        yield
    finally:
        numba.set_num_threads(old)


def search_cpu(graph_ids, base, queries, inv_b, inv_q, kind, entries, k, queue_size, visited, allowed=None,
               scratch=None):
    """Run the search for every query (host arrays, already validated); ``allowed``: None or the uint32
    bitset of the ids that may be returned (:mod:`knngraph.primitives.filters`); ``scratch``: a
    :class:`Scratch` for ``len(base)`` vertices to reuse (default: a new one). ``inv_q`` is accepted
    for the GPU path's signature: the kernel computes each query's inverse norm itself.

    ``base`` is what the CPU kernels can read (see :func:`knngraph.primitives.distances.cpu_vectors`) or
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
    workers = _workers(nq, scratch)
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


def search_beam(graph_ids, base, queries, inv_b, kind, entries, k, queue_size, *, scratch=None, out=None,
                slack=None):
    """The beam searcher on every query (host arrays, already validated): best-first over one sorted list
    of the ``queue_size`` nearest vertices seen, expanding the first unexpanded one until none is left,
    with a visited set that never forgets (the search of :mod:`knngraph.song._beam_kernels`, the same
    walk as ``reference_walk`` in ``tests/song/test_beam_sim.py``). ``queries``: any dtype (each row is
    read as float32) or uint32 codes with ``DIST_HAMMING``; ``scratch``: see :func:`search_cpu`;
    ``out``: (float32, int32) C-contiguous [nq, k] arrays to write; ``slack``: None, or ``(kb, tau, nn1,
    max_exp)`` to stop each query at GGNN's bound too (as the GPU kernel, :mod:`._beam_kernels`).
    Returns internal distances float32, ids int32 (both [nq, k], -1 / inf where fewer than k were
    reached), distance computations and expansions per query."""
    q = queries if queries.flags.c_contiguous else np.ascontiguousarray(queries)
    if kind != DIST_HAMMING and q.dtype == np.float16:
        q = q.astype(np.float32)
    nq = q.shape[0]
    if out is None:
        out = (np.empty((nq, k), np.float32), np.empty((nq, k), np.int32))
    out_nd = np.empty(nq, np.int32)
    out_ne = np.empty(nq, np.int32)
    if scratch is None:
        scratch = Scratch(base.shape[0])
    workers = _workers(nq, scratch)
    kb, tau, nn1, max_exp = (0, 0.0, 0.0, 0) if slack is None else slack
    stop = (np.int64(kb), np.float32(tau), np.float32(nn1), np.int64(max_exp))
    if workers == 1:
        _BEAM[1](graph_ids, base, q, inv_b, kind, entries, k, queue_size, scratch.stamps, scratch.gens, 1,
                 out[0], out[1], out_nd, out_ne, *stop)
    else:
        with numba.parallel_chunksize(1):
            _BEAM[0](graph_ids, base, q, inv_b, kind, entries, k, queue_size, scratch.stamps, scratch.gens, workers,
                     out[0], out[1], out_nd, out_ne, *stop)
    return out[0], out[1], out_nd, out_ne


# --------------------------------------------------------------------------------------------------
# what song.search runs on the CPU


def index_scratch(index) -> Scratch:
    """The :class:`Scratch` of a SONG index, made on first use and kept with its other cached arrays."""
    sc = index._cache.get("cpu-scratch")
    if sc is None:
        sc = index._cache["cpu-scratch"] = Scratch(index.shape[0])
    return sc


def uses_beam(index, sp, filtered: bool) -> bool:
    """Whether a CPU search runs the beam searcher (``SearchParams.algo``): 'auto' and 'beam' do, except
    for hashed indexes, filters and ``visited='bloom'``, which need SONG's walk ('beam' then raises, as
    on the GPU)."""
    if sp.algo == "song":
        return False
    blockers = [why for why, on in (("a hashed index (hash_bits)", index.hasher is not None),
                                    ("a filter", filtered), ("visited='bloom'", sp.visited == "bloom")) if on]
    if blockers and sp.algo == "beam":
        raise ValueError(f"algo='beam' does not support {' or '.join(blockers)}; use algo='song' or 'auto'")
    return not blockers


def half_bits(index, xb):
    """The vectors the beam kernel reads: a float16 dataset as its uint16 bit patterns (widened in the
    distance loop by :func:`half_bits_to_float32`: half the bytes of the float32 copy per row, which on
    minilm-words (384-d) gave about 1.2x the queries per CPU-second), else ``xb``. Made once per index."""
    x = index.dataset
    if not isinstance(x, np.ndarray) or x.dtype != np.float16:
        return xb
    bits = index._cache.get("cpu-half-bits")
    if bits is None:
        bits = index._cache["cpu-half-bits"] = np.ascontiguousarray(x).view(np.uint16)
    return bits


def index_search_beam(index, queries, k, queue_size, *, stats=None, out=None, slack=None):
    """The beam searcher over a SONG index's host arrays (made once per index: graph, vectors the kernel
    reads, inverse norms, entry points, visited stamps). ``queries``: validated host vectors; ``slack``: see
    :func:`search_beam`. Per call:
    the kernel and the metric's reported distances, computed in place. Returns (distances, ids)."""
    t0 = time.perf_counter()
    g_ids, xb, inv_b, entries, _ = index._arrays(_CPU)
    metric = index.metric
    kind = distance_kind(metric)
    d, i, nd, ne = search_beam(g_ids, half_bits(index, xb), queries, inv_b, kind, entries, k, queue_size,
                               scratch=index_scratch(index), out=out, slack=slack)
    if metric == "sqeuclidean" or metric == "euclidean":
        np.maximum(d, 0, out=d)
        if metric == "euclidean":
            np.sqrt(d, out=d)
    elif metric == "cosine":
        np.clip(d, 0, 2, out=d)
    if d.size and i[:, -1].min() < 0:  # fewer than k reached
        d[i < 0] = np.inf
    if stats is not None:
        stats["distances_per_query"] = float(nd.mean()) if nd.size else 0.0
        stats["expansions_per_query"] = float(ne.mean()) if ne.size else 0.0
        stats["algo"] = "beam"
        stats["seconds"] = time.perf_counter() - t0
    return d, i


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
