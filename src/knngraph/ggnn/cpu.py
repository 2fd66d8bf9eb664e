"""GGNN on the CPU (numba, rows and queries in parallel): the cache of section 4.1 and the build steps
of section 5, the same algorithm as the GPU kernels with one thread per query instead of one block.

**The cache** (section 4.1.1, Fig. 2) of one query: a sorted ``best`` list (the kb nearest so far),
a sorted priority queue ``prioq`` of capacity P (stored descending, so its head is the last entry)
and a FIFO ring ``visited`` of V ids. Proposals come in chunks of up to 32 (a graph row, the GPU's warp
takes one per lane): a proposed id is dropped when it is in any of the three or earlier in the chunk
(fetch, step a); the distances of the others are computed and, in ascending order, each is inserted into
best and prioq while it meets the criterion (push; the paper leaves the order open). pop() takes the prioq head when it still meets the criterion and moves it to the
visited ring (Algorithm 2). The criterion (Eq. 2) is d <= d_k + xi with xi = tau^2 * min(d_1, nn1) on
internal distances: squared L2 (1 - cos for cosine, half the squared distance of normalised vectors),
as the authors' code applies the rule (decision A3 of :mod:`knngraph.ggnn`; the paper's plain-distance
form (d_k^.5 + tau min(d_1^.5, nn1^.5))^2 is several times looser at the same tau); inner product uses
|d_1|. Until best is full d_k is infinite.

State of a cache: ``st = [nb, pn, vh, vn]`` (best count, prioq count, ring head, ring count).
"""

from __future__ import annotations

import numba
import numpy as np

from ..primitives.compile import SERIAL_BELOW, SplitKernel, host_and_device
from ..primitives.constants import INF
from ..primitives.cpu_inputs import writable_view
from ..primitives.distances import DIST_IP
from ..primitives.lists import best_insert, less, slack_bound, sort_pairs
from ..primitives.pair_distance import cpu_distance
from ._layout import MIDPOINT, SYM_MAX_POPS, cache_layout

__all__ = ["search", "brute_segments", "merge_queries", "sym_requests", "sym_place", "sym_write",
           "pick_per_segment"]

#: rows (queries) of one task, the items the kernels below split over threads (each kernel does the tasks
#: [i0, i1) and is compiled once, serial: primitives.compile.SplitKernel; numba's parallel builds took
#: 4-5 times as long to compile); every call is split, as the prange loops they were always ran threaded
_TASK = 16
#: proposals fetched together (one per lane of the GPU's warp)
#:
#: fetch_chunk and walk are compiled functions of their own, called by the kernels: numba compiles such a
#: function once per argument types its callers pass, and a literal argument (``0``, ``True``, ``-1``,
#: or a counter that starts as ``c = 0``) is a type of its own. The kernels pass int64 counters and ids
#: and run-time flags, so that the build and the search of float32 vectors share one compiled
#: fetch_chunk and walk, and every vector dtype has one of each (a cold warm-up compiled eight
#: fetch_chunk and four walk before, about 1 s each).
CHUNK = 32


@host_and_device
def threshold(kind, bd, nb, kb, path, tau, nn1):
    """The criterion's bound on internal distances: d_k + tau^2 * min(d_1, nn1) (Eq. 2 on squared
    distances, as the authors' code applies it; ``nn1`` is internal too); while best holds fewer than
    kb, the largest float32 (open to every finite distance; not inf, whose comparisons fastmath leaves
    undefined and which the symmetric linking uses to mark points outside its sphere). With ``path``
    (the path searches of sym) the bound is d_1 + tau^2 * nn1, as the authors' code bounds them (their
    symmetric-linking query): a walk towards z with slack rather than a gathering of the kb points nearest
    to z. On sift-photos 100k it spends 40% less time there for the same graph quality
    (``benchmarks/studies/ggnn_build_tradeoff.py``); the slack of the queries, tau^2 min(d_1, nn1), made the
    walk too narrow (sift-photos 20k, k=16: recall@10 0.90 instead of 0.95)."""
    if path:
        if nb < 1:
            return np.float32(3.4028235e38)
        return slack_bound(bd[0], nn1, tau, nn1)
    if nb < kb:
        return np.float32(3.4028235e38)
    return slack_bound(bd[kb - 1], bd[0], tau, nn1)


@host_and_device
def in_cache(v, bi, pi, vi, st):
    nb = st[0]
    pn = st[1]
    vn = st[3]
    for t in range(nb):
        if bi[t] == v:
            return True
    for t in range(pn):
        if pi[t] == v:
            return True
    for t in range(vn):
        if vi[t] == v:
            return True
    return False


@host_and_device
def push_prioq(d, v, pd, pi, P, st):
    """Insert (d, v) into prioq (sorted descending, head last); when full the worst (index 0) leaves, or
    (d, v) is dropped when it is no better."""
    pn = st[1]
    if pn < P:
        j = pn
        while j > 0 and less(pd[j - 1], pi[j - 1], d, v):
            pd[j] = pd[j - 1]
            pi[j] = pi[j - 1]
            j -= 1
        pd[j] = d
        pi[j] = v
        st[1] = pn + 1
    elif less(d, v, pd[0], pi[0]):
        j = 0
        while j + 1 < P and less(d, v, pd[j + 1], pi[j + 1]):
            pd[j] = pd[j + 1]
            pi[j] = pi[j + 1]
            j += 1
        pd[j] = d
        pi[j] = v


@host_and_device
def push(d, v, bd, bi, kb, pd, pi, P, st):
    """push(p, d) of Algorithm 2: insert into best (sorted ascending) and into prioq."""
    st[0] = best_insert(d, v, bd, bi, st[0], kb)
    push_prioq(d, v, pd, pi, P, st)


@host_and_device
def pop(thr, pd, pi, vi, V, st):
    """The prioq head when it meets the criterion (moved to the visited ring), else -1."""
    pn = st[1]
    if pn == 0:
        return -1
    if pd[pn - 1] > thr:
        return -1
    v = pi[pn - 1]
    st[1] = pn - 1
    vi[st[2]] = v
    st[2] = (st[2] + 1) % V
    if st[3] < V:
        st[3] += 1
    return v


@host_and_device
def reset(st):
    st[0] = 0
    st[1] = 0
    st[2] = 0
    st[3] = 0


@numba.njit(fastmath=True)
def fetch_chunk(cand, c, kind, base, Q, qj, inv_b, inv_q, tau, nn1, use_trans, trans, bd, bi, kb, pd, pi, P, vi,
                st, cd):
    """fetch() of one chunk of c <= 32 proposals (Algorithm 2): (a) drop those already in the cache or
    earlier in the chunk, (b) compute the distances of the rest, (c) push them nearest first while they
    meet the criterion (:func:`push_sorted`). The GPU kernel does (a) and (b) with one proposal per lane, so both paths agree exactly.
    Returns the distances computed."""
    m = 0
    for t in range(c):
        v = cand[t]
        dup = in_cache(v, bi, pi, vi, st)
        for u in range(m):
            if cand[u] == v:
                dup = True
        if not dup:
            cand[m] = v
            m += 1
    for t in range(m):
        x = trans[cand[t]] if use_trans else cand[t]
        cd[t] = cpu_distance(kind, base, x, Q, qj, inv_b, inv_q)
    push_sorted(cand, cd, m, bd, bi, kb, False, pd, pi, P, st, tau, nn1)
    return m


@host_and_device
def push_sorted(cand, cd, m, bd, bi, kb, path, pd, pi, P, st, tau, nn1):
    """Step (c) of fetch() for the m proposals cand/cd[:m] of a chunk: sorted by (distance, id), each
    pushed while it meets the criterion (:func:`threshold`) at its turn (the first that does not ends the
    chunk: the ones after it are no nearer, and nothing changed). The GPU kernel computes the same prefix and merges it
    into the lists at once (the paper pushes proposals "one after another" in an order it leaves open)."""
    sort_pairs(cd, cand, 0, m)
    for t in range(m):
        if cd[t] > threshold(0, bd, st[0], kb, path, tau, nn1):
            break
        push(cd[t], cand[t], bd, bi, kb, pd, pi, P, st)


@numba.njit(fastmath=True)
def walk(graph, kind, base, Q, qj, inv_b, inv_q, tau, nn1, use_trans, trans, zb, bd, bi, kb, pd, pi, P, vi, V,
         st, max_pops, cand, cd):
    """pop / fetch(N_a) until pop gives nothing or ``max_pops`` vertices were expanded (Algorithm 1),
    rows fetched in chunks of 32. With ``use_trans`` the cache holds rows whose vectors are
    ``base[trans[row]]`` and rows of vector ``zb`` are skipped (the build's query point); else ids are
    vector ids. Returns (pops, distances)."""
    deg = graph.shape[1]
    pops = 0
    nd = 0
    while pops < max_pops:
        a = pop(threshold(kind, bd, st[0], kb, False, tau, nn1), pd, pi, vi, V, st)
        if a < 0:
            break
        pops += 1
        for s0 in range(0, deg, CHUNK):
            c = np.int64(0)  # not the literal 0: see CHUNK
            for t in range(s0, min(deg, s0 + CHUNK)):
                v = graph[a, t]
                if v < 0 or (use_trans and trans[v] == zb):
                    continue
                cand[c] = v
                c += 1
            nd += fetch_chunk(cand, c, kind, base, Q, qj, inv_b, inv_q, tau, nn1, use_trans, trans, bd, bi, kb, pd,
                              pi, P, vi, st, cd)
    return pops, nd


# --------------------------------------------------------------------------------------------------
# search (section 4.1, 5.4): start from the entry points (the top layer), search the bottom layer


def _search(i0, i1, graph, base, queries, inv_b, inv_q, kind, entries, k, kb, P, V, tau, nn1, max_it,
            out_d, out_i, out_nd, out_ne):
    nq = queries.shape[0]
    dummy = np.zeros(1, np.int32)
    # no translation, as run-time values rather than the literals False and -1 (see CHUNK)
    use_trans = dummy[0] != 0
    no_row = np.int64(dummy[0]) - 1
    for task in range(i0, i1):
        bd = np.empty(kb, np.float32)
        bi = np.empty(kb, np.int32)
        pd = np.empty(P, np.float32)
        pi = np.empty(P, np.int32)
        vi = np.empty(V, np.int32)
        st = np.zeros(4, np.int64)
        cand = np.empty(CHUNK, np.int32)
        cd = np.empty(CHUNK, np.float32)
        for j in range(task * _TASK, min(nq, (task + 1) * _TASK)):
            reset(st)
            nd = 0
            ne = entries.shape[0]
            for s0 in range(0, ne, CHUNK):
                c = min(ne, s0 + CHUNK) - s0
                for t in range(c):
                    cand[t] = entries[s0 + t]
                nd += fetch_chunk(cand, c, kind, base, queries, j, inv_b, inv_q, tau, nn1, use_trans, dummy, bd, bi,
                                  kb, pd, pi, P, vi, st, cd)
            pops, nd2 = walk(graph, kind, base, queries, j, inv_b, inv_q, tau, nn1, use_trans, dummy, no_row, bd, bi,
                             kb, pd, pi, P, vi, V, st, max_it, cand, cd)
            nb = st[0]
            for t in range(k):
                if t < nb:
                    out_d[j, t] = bd[t]
                    out_i[j, t] = bi[t]
                else:
                    out_d[j, t] = np.inf
                    out_i[j, t] = -1
            out_nd[j] = nd + nd2
            out_ne[j] = pops


_SEARCH = SplitKernel(_search, fastmath=True)


def _tasks(rows) -> int:
    """Tasks of ``_TASK`` rows (queries) each, the items of a split kernel."""
    return (int(rows) + _TASK - 1) // _TASK


def search(graph_ids, base, queries, inv_b, inv_q, kind, entries, k, tau, nn1, max_iterations, queue_size,
           cache_size, *, batch_size=0):
    """Search every query (host arrays, validated): ``graph_ids`` [n, degree] (-1 = none), ``base`` what
    CPU kernels read, ``queries`` float32, ``entries`` int32 start ids, ``nn1`` the graph's d+_nn1.
    Returns internal distances, ids ([nq, k], -1 / inf padded), distances computed and vertices
    expanded per query. ``batch_size`` is a GPU setting (same signature as :func:`.cuda.search`)."""
    base, queries = writable_view(base), writable_view(queries)  # read-only inputs: the same compiled kernel
    nq = queries.shape[0]
    kb, P, V = cache_layout(k, queue_size, cache_size)
    out_d = np.empty((nq, k), np.float32)
    out_i = np.empty((nq, k), np.int32)
    out_nd = np.empty(nq, np.int32)
    out_ne = np.empty(nq, np.int32)
    _SEARCH.run(SERIAL_BELOW, _tasks(nq), graph_ids, base, queries, inv_b, inv_q, kind, entries, k, kb, P, V,
                np.float32(tau), np.float32(nn1), max_iterations, out_d, out_i, out_nd, out_ne)
    return out_d, out_i, out_nd, out_ne


# --------------------------------------------------------------------------------------------------
# build: merge (section 5.1, Algorithms 3 and 4)


def _brute_segments(i0, i1, base, inv, kind, trans, lo, starts, k, out_i, out_d):
    for b in range(i0, i1):
        a0 = starts[b]
        a1 = starts[b + 1]
        bd = np.empty(k, np.float32)
        bi = np.empty(k, np.int32)
        for z in range(a0, a1):
            nb = np.int64(0)  # best_insert's arguments of the other callers (see CHUNK)
            zb = trans[lo + z]
            for y in range(a0, a1):
                if y == z:
                    continue
                d = cpu_distance(kind, base, trans[lo + y], base, zb, inv, inv)
                nb = best_insert(d, np.int32(lo + y), bd, bi, nb, k)
            for t in range(k):
                if t < nb:
                    out_d[z, t] = bd[t]
                    out_i[z, t] = bi[t]
                else:
                    out_d[z, t] = np.inf
                    out_i[z, t] = -1


_BRUTE_SEGMENTS = SplitKernel(_brute_segments, fastmath=True)


def brute_segments(base, inv, kind, trans, lo, starts, k, out_i, out_d):
    """merge(l, l): the k nearest of every row inside its segment (brute force); the segments of the
    layer whose first global row is ``lo`` are local rows ``starts[b] .. starts[b + 1]``. Writes global
    rows."""
    _BRUTE_SEGMENTS.run(SERIAL_BELOW, starts.shape[0] - 1, base, inv, kind, trans, lo, starts, k, out_i, out_d)


def _merge_queries(i0, i1, base, inv, kind, graph, trans, sel, offsets, top_seg, lt, lm, s, k, P, V, tau, nn1,
                   max_pops, out_i, out_d):
    lo_m = offsets[lm]
    nz = offsets[lm + 1] - lo_m
    lo_t = offsets[lt]
    use_trans = trans.shape[0] > 0  # True, as a run-time value rather than the literal (see CHUNK)
    for task in range(i0, i1):
        bd = np.empty(k, np.float32)
        bi = np.empty(k, np.int32)
        pd = np.empty(P, np.float32)
        pi = np.empty(P, np.int32)
        vi = np.empty(V, np.int32)
        st = np.zeros(4, np.int64)
        cand = np.empty(CHUNK, np.int32)
        cd = np.empty(CHUNK, np.float32)
        for z in range(task * _TASK, min(nz, (task + 1) * _TASK)):
            zb = np.int64(trans[lo_m + z])
            reset(st)
            t0 = lo_t + top_seg[z] * s
            for s0 in range(t0, t0 + s, CHUNK):
                c = np.int64(0)
                for v in range(s0, min(t0 + s, s0 + CHUNK)):
                    if trans[v] != zb:
                        cand[c] = v
                        c += 1
                fetch_chunk(cand, c, kind, base, base, zb, inv, inv, tau, nn1, use_trans, trans, bd, bi, k, pd, pi,
                            P, vi, st, cd)
            for layer in range(lt - 1, lm - 1, -1):
                # transform: rows of layer + 1 -> the rows they were selected from; prioq <- best
                nb = st[0]
                for t in range(nb):
                    bi[t] = sel[bi[t]]
                sort_pairs(bd, bi, 0, nb)  # the new ids can reorder ties
                st[1] = 0
                for t in range(nb):
                    push_prioq(bd[nb - 1 - t], bi[nb - 1 - t], pd, pi, P, st)
                st[2] = 0
                st[3] = 0
                walk(graph, kind, base, base, zb, inv, inv, tau, nn1, use_trans, trans, zb, bd, bi, k, pd, pi, P, vi,
                     V, st, max_pops, cand, cd)
            nb = st[0]
            for t in range(k):
                if t < nb:
                    out_d[z, t] = bd[t]
                    out_i[z, t] = bi[t]
                else:
                    out_d[z, t] = np.inf
                    out_i[z, t] = -1


_MERGE_QUERIES = SplitKernel(_merge_queries, fastmath=True)


def merge_queries(base, inv, kind, graph, trans, sel, offsets, top_seg, lt, lm, s, k, P, V, tau, nn1, max_pops,
                  out_i, out_d):
    """merge(lt, lm), lt > lm: for every row z of layer lm, the hierarchical query of Algorithm 4: fetch
    the s rows of its top segment ``top_seg[z]`` at layer lt, then for each layer lt - 1 .. lm translate
    the cache to that layer (best kept, prioq = best, visited cleared, as the authors' cache ``transform``
    does) and walk it. The query is z's vector; rows of z's vector are never proposed. Writes the k best
    (global rows)."""
    _MERGE_QUERIES.run(SERIAL_BELOW, _tasks(offsets[lm + 1] - offsets[lm]), base, inv, kind, graph, trans, sel, offsets,
                       top_seg, lt, lm, s, k, P, V, tau, nn1, max_pops, out_i, out_d)


# --------------------------------------------------------------------------------------------------
# build: symmetric linking (section 5.2, Algorithm 5)


@numba.njit(inline="always")
def links_to(graph, knn, sym, cnt, a, z):
    """Whether row a holds z among its nearest-neighbour slots or its inverse links so far."""
    for t in range(knn):
        if graph[a, t] == z:
            return True
    for t in range(cnt[a]):
        if sym[a, t] == z:
            return True
    return False


def _sym_requests(i0, i1, base, inv, kind, graph, trans, lo, z0, z1, knn, sym, cnt, P, V, tau, nn1, req_i, req_d,
                  req_n):
    C = req_i.shape[2]
    nz = z1 - z0
    kb = knn
    for task in range(i0, i1):
        bd = np.empty(kb, np.float32)
        bi = np.empty(kb, np.int32)
        pd = np.empty(P, np.float32)
        pi = np.empty(P, np.int32)
        vi = np.empty(V, np.int32)
        st = np.zeros(4, np.int64)
        cand = np.empty(CHUNK, np.int32)
        cd = np.empty(CHUNK, np.float32)
        for zz in range(task * _TASK, min(nz, (task + 1) * _TASK)):
            z = lo + z0 + zz
            zb = trans[z]
            for i in range(knn):
                req_n[zz, i] = 0
                x = graph[z, i]
                if x < 0 or links_to(graph, knn, sym, cnt, x, z):
                    continue
                xb = trans[x]
                dxz = cpu_distance(kind, base, xb, base, zb, inv, inv)
                # squared radius of the sphere through x around q_m, plus the slack (authors' code form)
                rad2 = np.float32((1.0 - MIDPOINT) * (1.0 - MIDPOINT) * dxz + tau * tau * nn1)
                reset(st)
                push(dxz, x, bd, bi, kb, pd, pi, P, st)
                found = False
                pops = 0
                while pops < SYM_MAX_POPS:
                    a = pop(threshold(kind, bd, st[0], kb, True, tau, nn1), pd, pi, vi, V, st)
                    if a < 0:
                        break
                    pops += 1
                    if links_to(graph, knn, sym, cnt, a, z):
                        found = True
                        break
                    na = knn + cnt[a]
                    for s0 in range(0, na, CHUNK):
                        # a chunk as the GPU's warp takes it: new proposals against the cache at the chunk's
                        # start and the chunk before them, their distances, then push_sorted (outside the
                        # sphere: inf, never pushed)
                        m = 0
                        for t in range(s0, min(na, s0 + CHUNK)):
                            v = graph[a, t] if t < knn else sym[a, t - knn]
                            if v < 0 or v == z or in_cache(v, bi, pi, vi, st):
                                continue
                            dup = False
                            for u in range(m):
                                if cand[u] == v:
                                    dup = True
                            if not dup:
                                cand[m] = v
                                m += 1
                        kept = 0
                        for t in range(m):
                            v = cand[t]
                            vb = trans[v]
                            dz = cpu_distance(kind, base, vb, base, zb, inv, inv)
                            if dz > slack_bound(bd[0], nn1, tau, nn1):
                                continue  # beyond every bound of this chunk (d_1 only falls): never pushed
                            if kind != DIST_IP:
                                # ||v - q_m||^2 = (1 - t) d(v, z) + t d(v, x) - t (1 - t) d(x, z)
                                dx = cpu_distance(kind, base, vb, base, xb, inv, inv)
                                dm = (1.0 - MIDPOINT) * dz + MIDPOINT * dx - MIDPOINT * (1.0 - MIDPOINT) * dxz
                                if dm > rad2:
                                    continue  # outside the sphere: never pushed (the GPU sorts it last as inf)
                            cand[kept] = v
                            cd[kept] = dz
                            kept += 1
                        push_sorted(cand, cd, kept, bd, bi, kb, True, pd, pi, P, st, tau, nn1)
                if found:
                    continue
                c = min(st[0], C)
                for t in range(c):
                    req_i[zz, i, t] = bi[t]
                    req_d[zz, i, t] = bd[t]
                req_n[zz, i] = c


_SYM_REQUESTS = SplitKernel(_sym_requests, fastmath=True)


def sym_requests(base, inv, kind, graph, trans, lo, z0, z1, knn, sym, cnt, P, V, tau, nn1, req_i, req_d, req_n):
    """Path searches of the rows z0 .. z1 (local rows of the layer starting at global row ``lo``): for
    each of z's nearest neighbours x that does not link back to z, search from x towards z over the
    nearest-neighbour slots and the inverse links placed so far, accepting only points inside the
    sphere around q_m = z + 0.4 (x - z) through x (section 5.2.1, plus the slack tau^2 * mean nn1) and
    within d_1 + tau^2 * mean nn1 of z (:func:`threshold` with ``path``), at most SYM_MAX_POPS pops. When
    z is not reached, the search's best list (nearest to z first) is kept as the candidates for an
    inverse link: ``req_i/req_d[z - z0, i, :req_n]``."""
    _SYM_REQUESTS.run(SERIAL_BELOW, _tasks(z1 - z0), base, inv, kind, graph, trans, lo, z0, z1, knn, sym, cnt, P, V,
                      tau, nn1, req_i, req_d, req_n)


@numba.njit(cache=True)
def sym_place(graph, lo, z0, z1, knn, ksym, sym, sym_d, cnt, req_i, req_d, req_n):
    """Place the inverse links of rows z0 .. z1 in row order (deterministic; the GPU build uses it too): for
    each missing path, z goes to the first candidate p (nearest to z first) with a free inverse slot,
    unless p links to z already. Returns the links placed."""
    placed = 0
    for zz in range(z1 - z0):
        z = lo + z0 + zz
        for i in range(knn):
            for t in range(req_n[zz, i]):
                p = req_i[zz, i, t]
                if links_to(graph, knn, sym, cnt, p, z):
                    break
                if cnt[p] < ksym:
                    sym[p, cnt[p]] = z
                    sym_d[p, cnt[p]] = req_d[zz, i, t]
                    cnt[p] += 1
                    placed += 1
                    break
    return placed


def _sym_write(i0, i1, graph, gdist, lo, n_rows, knn, sym, sym_d, cnt):
    deg = graph.shape[1]
    for r in range(i0, i1):
        z = lo + r
        c = cnt[z]
        if c == 0:
            continue
        rewrite_row(graph, gdist, z, knn, c, sym, sym_d, graph[z, knn:].copy(), gdist[z, knn:].copy(), deg - knn)


_SYM_WRITE = SplitKernel(_sym_write)


def sym_write(graph, gdist, lo, n_rows, knn, sym, sym_d, cnt):
    """Write the inverse links into the rows: [nearest neighbours | inverse links | further nearest
    neighbours not already present], degree kept."""
    _SYM_WRITE.run(SERIAL_BELOW, n_rows, graph, gdist, lo, n_rows, knn, sym, sym_d, cnt)


@host_and_device
def rewrite_row(graph, gdist, z, knn, c, sym, sym_d, old_i, old_d, n_old):
    """Row z as [nearest neighbours | its c inverse links | the first n_old of its old entries from knn on
    (``old_i/old_d``, copied before the call) not among the links], degree kept, (-1, inf) padded; the
    CPU's and the GPU's :func:`sym_write` (``_link_kernels.sym_write_kernel``)."""
    deg = graph.shape[1]
    w = knn
    for t in range(c):
        graph[z, w] = sym[z, t]
        gdist[z, w] = sym_d[z, t]
        w += 1
    for t in range(n_old):
        if w >= deg:
            break
        v = old_i[t]
        dup = False
        for u in range(c):
            if sym[z, u] == v:
                dup = True
        if not dup:
            graph[z, w] = v
            gdist[z, w] = old_d[t]
            w += 1
    while w < deg:
        graph[z, w] = -1
        gdist[z, w] = INF
        w += 1


# --------------------------------------------------------------------------------------------------
# the selection of an upper layer's rows (knngraph.ggnn._hierarchy.select_layer)


@numba.njit(cache=True)
def pick_per_segment(key, seg_starts, s, g, size):
    """From each segment c (rows seg_starts[c] .. seg_starts[c + 1], contiguous) its ``(c % g + 1) * s // g -
    (c % g) * s // g`` rows of largest key (ties: lower row first), segment by segment, each segment's
    in that order: the rows a sort by (segment, -key, row) puts first in each segment, without the sort
    (a segment holds about s rows, its quota is about s / g)."""
    out = np.empty(size, np.int64)
    taken = np.zeros(seg_starts[-1], np.bool_)
    w = 0
    for c in range(seg_starts.shape[0] - 1):
        a, b = seg_starts[c], seg_starts[c + 1]
        cg = c % g
        quota = min((cg + 1) * s // g - cg * s // g, b - a)
        for _ in range(quota):
            best = -1
            for r in range(a, b):
                if not taken[r] and (best < 0 or key[r] > key[best]):
                    best = r
            taken[best] = True
            out[w] = best
            w += 1
    return out[:w]
