"""The fast graph searcher on the CPU (numba, queries in parallel): the walk of the GPU kernels
(:mod:`._kernels`) with ``search_width=1``.

One sorted list of the Q nearest vertices seen, each marked once expanded; expand the first unmarked one,
offer its unvisited neighbours, stop when every entry is marked. It is SONG's search with the queue and the
top-k merged into one list of Q entries (Zhao, Tan, Li, "SONG: Approximate Nearest Neighbor Search on GPU",
section IV: its two structures of Q each keep expanding until the queue's best is worse than the Q-th
result; here a vertex that falls off the list is never expanded), and it reaches SONG's recall with about
30% fewer distances on sift (``benchmarks/studies/cpu_search.py``). The visited stamps
(:mod:`knngraph.primitives.stamps`) never forget within a query, so no distance is computed twice. Per
expansion the unvisited neighbours are gathered first and their rows prefetched (a ``prefetcht0`` per cache
line, up to 8), then their distances computed: the loads of later rows overlap the arithmetic of earlier
ones, which took the search from memory-latency bound to about 1.6x fewer CPU-seconds per query on sift
20k. Queries go to 4 workers per thread, each with its own stamps row, handed out one at a time, so a
thread slowed by other work on the machine holds up only its current worker.

With ``slack`` each query also stops at GGNN's bound (Groh et al., "GGNN: Graph-Based GPU Nearest Neighbor
Search", Eq. 2; :func:`~knngraph.primitives.lists.slack_bound`) or after ``max_exp`` expansions, as the GPU
kernel does. With ``allowed`` (a bitset, :mod:`knngraph.primitives.filters`) the walk is the same and each
query returns the first k allowed entries of its final list, as the GPU's filtered kernel does.

Distances are those of :func:`knngraph.primitives.rows.row_distance`: the query row is widened to float32
once per query and each base row read once (float16 vectors as their bit patterns, see
:func:`knngraph.beam.search`).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ..primitives.bitset import is_allowed
from ..primitives.compile import threaded_and_serial
from ..primitives.cpu_inputs import cpu_vectors, writable_view
from ..primitives.lists import best_insert, less, slack_bound
from ..primitives.rows import line_shape, load_query, prefetch, prefetch_row, query_row, row_distance, write_row
from ..primitives.stamps import Scratch, next_generation, worker_count

__all__ = ["search_beam", "rerank"]


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


@numba.njit(inline="always")
def _write_allowed_row(out_k, out_i, j, keys, ids, m, k, allowed):
    """Row j of the output: the first k of the m sorted (key, id) pairs whose ids the bitset ``allowed``
    holds, then inf / -1."""
    t = 0
    for p in range(m):
        if t == k:
            break
        if is_allowed(allowed, ids[p]):
            out_k[j, t] = keys[p]
            out_i[j, t] = ids[p]
            t += 1
    for r in range(t, k):
        out_k[j, r] = np.inf
        out_i[j, r] = -1


def _beam(graph, base, queries, inv_b, kind, entries, k, cap, stamps, gens, workers, out_k, out_i, out_nd,
          out_ne, kb, tau, nn1, max_exp, filtered, allowed):
    nq = queries.shape[0]
    deg = graph.shape[1]
    ne = entries.shape[0]
    step, lines = line_shape(base)
    for w in prange(workers):
        vis = stamps[w]
        lk = np.empty(cap, np.float32)
        li = np.empty(cap, np.int32)
        lx = np.empty(cap, np.uint8)
        cand = np.empty(max(deg, ne), np.int32)
        qrow = query_row(queries)
        for j in range(w, nq, workers):
            inv_q = load_query(queries, j, qrow, kind)
            g = next_generation(vis, gens, w)
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
                    prefetch_row(base, v, step, lines)
            for t in range(c):
                v = cand[t]
                d = row_distance(kind, base, v, qrow, inv_b, inv_q)
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
                    prefetch(graph, li[p + 1], 0)
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
                        prefetch_row(base, v, step, lines)
                nd += c
                for t in range(c):
                    v = cand[t]
                    d = row_distance(kind, base, v, qrow, inv_b, inv_q)
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
            if filtered:
                _write_allowed_row(out_k, out_i, j, lk, li, m, k, allowed)
            else:
                write_row(out_k, out_i, j, lk, li, m, k)
            out_nd[j] = nd
            out_ne[j] = ne_


_BEAM = threaded_and_serial(_beam, fastmath=True)


def _rerank(base, queries, inv_b, kind, ids, k, workers, out_k, out_i, out_nd):
    nq = ids.shape[0]
    m = ids.shape[1]
    for w in prange(workers):
        qrow = query_row(queries)
        dk = np.empty(k, np.float32)
        ik = np.empty(k, np.int32)
        for j in range(w, nq, workers):
            inv_q = load_query(queries, j, qrow, kind)
            c = np.int64(0)  # not the literal 0: best_insert is compiled per argument types
            for t in range(m):
                v = ids[j, t]
                if v < 0:
                    continue
                c = best_insert(row_distance(kind, base, v, qrow, inv_b, inv_q), v, dk, ik, c, k)
                out_nd[j] += 1
            write_row(out_k, out_i, j, dk, ik, c, k)


_RERANK = threaded_and_serial(_rerank, fastmath=True)


def rerank(base, queries, inv_b, kind, ids, k, *, workers=1, out=None, counts=None):
    """The first ``k`` of each row of ``ids`` (a walk's final lists, -1 where empty) by the exact distances
    of :func:`~knngraph.primitives.rows.row_distance` over ``base`` (what the exact walk reads: float16 as
    uint16 bits), nearest first, ties by lower id, -1 / inf where a row holds fewer than k ids; ``counts``
    (int32 per query) is increased by the distances computed. The second step of a walk over int8 codes
    (:func:`knngraph.beam.search` with ``cpu_walk='int8'``): the walk finds the list, this orders it as the
    exact walk would. Returns internal distances float32 and ids int32 ([nq, k])."""
    q = cpu_vectors(queries if queries.flags.c_contiguous else np.ascontiguousarray(queries))
    base = writable_view(base)
    nq = q.shape[0]
    if out is None:
        out = (np.empty((nq, k), np.float32), np.empty((nq, k), np.int32))
    if counts is None:
        counts = np.zeros(nq, np.int32)
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    workers = max(1, min(int(workers), nq))
    if workers == 1:
        _RERANK[1](base, q, inv_b, kind, ids, k, 1, out[0], out[1], counts)
    else:
        with numba.parallel_chunksize(1):
            _RERANK[0](base, q, inv_b, kind, ids, k, workers, out[0], out[1], counts)
    return out[0], out[1]
#: the bitset an unfiltered search passes (never read)
_NO_FILTER = np.zeros(1, np.uint32)


def search_beam(graph_ids, base, queries, inv_b, kind, entries, k, queue_size, *, scratch=None, out=None,
                slack=None, allowed=None):
    """The beam searcher on every query (host arrays, already validated): best-first over one sorted list
    of the ``queue_size`` nearest vertices seen, expanding the first unexpanded one until none is left,
    with a visited set that never forgets (the search of :mod:`knngraph.beam._kernels`, the same walk as
    ``reference_walk`` in ``tests/beam/test_search_sim.py``). ``base``: what
    :func:`~knngraph.primitives.rows.row_distance` reads (any numeric dtype, float16 as uint16 bits);
    ``queries``: any dtype (each row is read as float32); ``scratch``: a
    :class:`~knngraph.primitives.stamps.Scratch` for ``len(base)`` vertices to reuse (default: a new one);
    ``out``: (float32, int32) C-contiguous [nq, k] arrays to write; ``slack``: None, or ``(kb, tau, nn1,
    max_exp)`` to stop each query at GGNN's bound too (as the GPU kernel, :mod:`._kernels`); ``allowed``:
    None, or the uint32 bitset of the ids that may be returned (the first k allowed entries of each final
    list are).
    Returns internal distances float32, ids int32 (both [nq, k], -1 / inf where fewer than k were
    reached or allowed), distance computations and expansions per query."""
    q = cpu_vectors(queries if queries.flags.c_contiguous else np.ascontiguousarray(queries))
    if q.dtype != np.uint32:
        # the kernel widens each query row to float32 as it starts it (load_query); widened here, every
        # search of one base dtype runs one compiled kernel (uint8 and int8 queries were kernels of their
        # own, about 3 s of compilation each, beside the float32 queries of GGNN's and the int8 walk's)
        q = q.astype(np.float32, copy=False)
    # a read-only base (a memory-mapped file) as a writable view: one compiled kernel for both kinds (its
    # float16 rows are read as they are, not widened as the queries are)
    base = writable_view(base)
    nq = q.shape[0]
    if out is None:
        out = (np.empty((nq, k), np.float32), np.empty((nq, k), np.int32))
    out_nd = np.empty(nq, np.int32)
    out_ne = np.empty(nq, np.int32)
    if scratch is None:
        scratch = Scratch(base.shape[0])
    workers = worker_count(nq, scratch)
    kb, tau, nn1, max_exp = (0, 0.0, 0.0, 0) if slack is None else slack
    stop = (np.int64(kb), np.float32(tau), np.float32(nn1), np.int64(max_exp))
    # one compiled kernel for both: a filtered search reads the bitset, an unfiltered one a placeholder
    filt = (allowed is not None, allowed if allowed is not None else _NO_FILTER)
    if workers == 1:
        _BEAM[1](graph_ids, base, q, inv_b, kind, entries, k, queue_size, scratch.stamps, scratch.gens, 1,
                 out[0], out[1], out_nd, out_ne, *stop, *filt)
    else:
        with numba.parallel_chunksize(1):
            _BEAM[0](graph_ids, base, q, inv_b, kind, entries, k, queue_size, scratch.stamps, scratch.gens, workers,
                     out[0], out[1], out_nd, out_ne, *stop, *filt)
    return out[0], out[1], out_nd, out_ne
