"""GGNN's CUDA kernels (imports numba.cuda: loaded on first GPU use).

**Search** (section 4.1, Algorithms 1 and 2): one thread block of one warp (32 threads, the authors'
"fast" configuration) per query, queries taken in a grid-stride loop. The whole cache lives in shared
memory: the sorted best list (kb), the sorted priority queue (P, stored descending so the head is its
last entry) and the visited ring (V ids). fetch() of a chunk of up to 32 proposals:

    (a) lane t checks proposal t against best, prioq and visited and the lanes before it  (in parallel)
    (b) the warp computes the distances of the remaining proposals, four rows in flight at a time
        (lanes over dimensions, a shuffle sum)
    (c) lane 0 pushes each that meets the criterion into best and prioq, in proposal order

pop() is lane 0's. The cache operations are the CPU's (:mod:`.cpu`, written once, compiled for both), so
on data whose distances are exact in float32 both paths return the same ids. Shared arrays have
compile-time sizes; nothing is allocated in the kernel; graph rows are read in chunks of 32 whatever the
degree.
"""

from __future__ import annotations

import functools

from numba import cuda, float32, int32

from ..primitives.compile import cuda_version, device_function
from ..primitives.constants import INF, WARP
from ..primitives.warp import finish_device as _finish
from ..primitives.warp import warp_distance, warp_partials4, warp_sum
from . import cpu as _cpu

__all__ = ["search_kernel", "merge_kernel", "brute_kernel", "sym_kernel", "THREADS"]

#: threads of a search block (one warp)
THREADS = WARP

_threshold = cuda_version(_cpu.threshold)
_in_cache = cuda_version(_cpu.in_cache)
_push = cuda_version(_cpu.push)
_pop = cuda_version(_cpu.pop)
_push_prioq = cuda_version(_cpu.push_prioq)
_best_insert = cuda_version(_cpu.best_insert)
_reset = cuda_version(_cpu.reset)


@device_function
def _fetch(v, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, st, cand, cd,
           use_trans, trans):
    """fetch() of the chunk whose proposal of this lane is v (-1: none); every lane calls it. With
    ``use_trans`` the proposals are hierarchy rows whose vectors are ``base[trans[v]]``. Returns the
    number of distances computed (on every lane)."""
    keep = v >= 0
    if keep:
        keep = not _in_cache(v, bi, pi, vi, st)
    cand[lane] = v if keep else -1
    cuda.syncthreads()
    if keep:
        for u in range(lane):
            if cand[u] == v:
                keep = False
    cuda.syncthreads()
    cand[lane] = v if keep else -1
    cuda.syncthreads()
    if lane == 0:  # compact the kept proposals, in order
        m = 0
        for c in range(WARP):
            if cand[c] >= 0:
                cand[m] = cand[c]
                m += 1
        st[7] = m
    cuda.syncthreads()
    m = st[7]
    # (b) distances, four rows in flight at a time (lanes over dimensions, then a shuffle sum)
    dim = queries.shape[1]
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
        if lane == 0:
            cd[c0] = d0
            if c0 + 1 < m:
                cd[c0 + 1] = d1
            if c0 + 2 < m:
                cd[c0 + 2] = d2
            if c0 + 3 < m:
                cd[c0 + 3] = d3
    cuda.syncthreads()
    # (c) lane 0 pushes, in proposal order, those that meet the criterion
    if lane == 0:
        for c in range(m):
            if cd[c] <= _threshold(kind, bd, st[0], kb, tau, nn1):
                _push(cd[c], cand[c], bd, bi, kb, pd, pi, P, st)
    cuda.syncthreads()
    return m


@device_function
def _walk(graph, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, V, st, cand, cd,
          use_trans, trans, zb, max_pops):
    """pop / fetch(N_a) until pop gives nothing or ``max_pops`` expansions (Algorithm 1), graph rows in
    chunks of 32; with ``use_trans`` rows of vector ``zb`` are skipped. Returns (pops, distances)."""
    deg = graph.shape[1]
    pops = 0
    nd = 0
    while pops < max_pops:
        if lane == 0:
            st[4] = _pop(_threshold(kind, bd, st[0], kb, tau, nn1), pd, pi, vi, V, st)
        cuda.syncthreads()
        a = st[4]
        cuda.syncthreads()
        if a < 0:
            break
        pops += 1
        for s0 in range(0, deg, WARP):
            v = graph[a, s0 + lane] if s0 + lane < deg else -1
            if use_trans and v >= 0 and trans[v] == zb:
                v = -1
            nd += _fetch(v, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, st,
                         cand, cd, use_trans, trans)
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

    @cuda.jit
    def kernel(graph, base, queries, inv_b, inv_q, kind, entries, k, tau, nn1, max_it, out_d, out_i, out_nd,
               out_ne):
        bd = cuda.shared.array(kb, float32)
        bi = cuda.shared.array(kb, int32)
        pd = cuda.shared.array(P, float32)
        pi = cuda.shared.array(P, int32)
        vi = cuda.shared.array(V, int32)
        cand = cuda.shared.array(WARP, int32)
        cd = cuda.shared.array(WARP, float32)
        st = cuda.shared.array(8, int32)  # best count, queue count, ring head, ring count, popped id, -, -, kept
        lane = cuda.threadIdx.x
        nq = queries.shape[0]
        ne = entries.shape[0]
        for j in range(cuda.blockIdx.x, nq, cuda.gridDim.x):
            if lane == 0:
                _reset(st)
            cuda.syncthreads()
            nd = 0
            # fetch(s): the entry points (the top layer), 32 at a time
            for s0 in range(0, ne, WARP):
                v = entries[s0 + lane] if s0 + lane < ne else -1
                nd += _fetch(v, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi, st,
                             cand, cd, False, entries)
            pops, nd2 = _walk(graph, lane, kind, base, queries, j, inv_b, inv_q, tau, nn1, bd, bi, kb, pd, pi, P, vi,
                              V, st, cand, cd, False, entries, -1, max_it)
            nd += nd2
            _write_best(lane, bd, bi, st[0], k, out_d, out_i, j)
            if lane == 0:
                out_nd[j] = nd
                out_ne[j] = pops
            cuda.syncthreads()

    return kernel


@functools.lru_cache(maxsize=None)
def merge_kernel(k: int, P: int, V: int):
    """merge(lt, lm), lt > lm (Algorithm 4): one block per row z of layer lm, the cache of the search
    kernel with best = k; the top segment is fetched, then per layer the cache is translated (best ids
    through ``sel``, prioq = best, visited cleared) and walked. Same steps as :func:`.cpu.merge_queries`."""

    @cuda.jit
    def kernel(base, inv, kind, graph, trans, sel, lo_m, nz, lo_t, top_seg, lt, lm, s, tau, nn1, max_pops, out_i,
               out_d):
        bd = cuda.shared.array(k, float32)
        bi = cuda.shared.array(k, int32)
        pd = cuda.shared.array(P, float32)
        pi = cuda.shared.array(P, int32)
        vi = cuda.shared.array(V, int32)
        cand = cuda.shared.array(WARP, int32)
        cd = cuda.shared.array(WARP, float32)
        st = cuda.shared.array(8, int32)
        lane = cuda.threadIdx.x
        for z in range(cuda.blockIdx.x, nz, cuda.gridDim.x):
            zb = trans[lo_m + z]
            if lane == 0:
                _reset(st)
            cuda.syncthreads()
            t0 = lo_t + top_seg[z] * s
            for s0 in range(t0, t0 + s, WARP):
                v = s0 + lane if s0 + lane < t0 + s else -1
                if v >= 0 and trans[v] == zb:
                    v = -1
                _fetch(v, lane, kind, base, base, zb, inv, inv, tau, nn1, bd, bi, k, pd, pi, P, vi, st, cand, cd,
                       True, trans)
            for layer in range(lt - 1, lm - 1, -1):
                if lane == 0:  # transform: to the rows of the layer below; prioq <- best; visited cleared
                    nb = st[0]
                    for t in range(nb):
                        bi[t] = sel[bi[t]]
                    st[1] = 0
                    for t in range(nb):
                        _push_prioq(bd[nb - 1 - t], bi[nb - 1 - t], pd, pi, P, st)
                    st[2] = 0
                    st[3] = 0
                cuda.syncthreads()
                _walk(graph, lane, kind, base, base, zb, inv, inv, tau, nn1, bd, bi, k, pd, pi, P, vi, V, st, cand, cd,
                      True, trans, zb, max_pops)
            _write_best(lane, bd, bi, st[0], k, out_d, out_i, z)
            cuda.syncthreads()

    return kernel


@functools.lru_cache(maxsize=None)
def brute_kernel(k: int):
    """merge(l, l): one thread per row, the k nearest rows of its segment by brute force (segments hold
    about s rows), kept in a sorted per-thread list of compile-time length k."""

    @cuda.jit
    def kernel(base, inv, kind, trans, lo, seg, starts, nrows, out_i, out_d):
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

    return kernel


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


@functools.lru_cache(maxsize=None)
def sym_kernel(kb: int, P: int, V: int, C: int, max_pops: int, midpoint: float):
    """The path searches of sym(l) (section 5.2, Algorithm 5), :func:`knngraph.ggnn.cpu.sym_requests` with
    one block per row z: for each nearest neighbour x of z that does not link back, a search from x
    towards z (the cache with best = kb, proposals accepted inside the sphere around q_m = z + midpoint
    (x - z) through x), at most ``max_pops`` pops; when z is not reached, the C best points are written
    as the candidates of an inverse link (``req_i/req_d[z - z0, i, :req_n]``). The links are placed on
    the host in row order between waves of rows (:func:`knngraph.ggnn.cpu.sym_place`), so the GPU build
    places the CPU build's links (an earlier version placed them with atomics as they were found: the
    order then depended on the scheduling, and on sift-photos 20k the graph searched at recall@10 0.89
    against the CPU's 0.95)."""
    t_mid = float32(midpoint)

    @cuda.jit
    def kernel(base, inv, kind, graph, trans, lo, z0, nz, knn, ksym, sym, cnt, tau, nn1, req_i, req_d, req_n):
        bd = cuda.shared.array(kb, float32)
        bi = cuda.shared.array(kb, int32)
        pd = cuda.shared.array(P, float32)
        pi = cuda.shared.array(P, int32)
        vi = cuda.shared.array(V, int32)
        cand = cuda.shared.array(WARP, int32)
        cd = cuda.shared.array(WARP, float32)
        # cache state, popped id, path found, a value lane 0 broadcasts (every decision is lane 0's and
        # shared: no divergent barrier)
        st = cuda.shared.array(7, int32)
        lane = cuda.threadIdx.x
        for zz in range(cuda.blockIdx.x, nz, cuda.gridDim.x):
            z = lo + z0 + zz
            zb = trans[z]
            for i in range(knn):
                x = graph[z, i]
                if lane == 0:
                    req_n[zz, i] = 0
                    st[6] = 1 if x < 0 or _links_to(graph, knn, sym, cnt, ksym, x, z) else 0
                cuda.syncthreads()
                skip = st[6]
                cuda.syncthreads()
                if skip == 1:
                    continue
                xb = trans[x]
                dxz = warp_distance(kind, base, xb, base, zb, inv, inv, lane)
                rad2 = (float32(1.0) - t_mid) * (float32(1.0) - t_mid) * dxz + tau * tau * nn1
                if lane == 0:
                    _reset(st)
                    st[5] = 0
                    _push(dxz, x, bd, bi, kb, pd, pi, P, st)
                cuda.syncthreads()
                pops = 0
                while pops < max_pops:
                    if lane == 0:
                        st[4] = _pop(_threshold(kind, bd, st[0], kb, tau, nn1), pd, pi, vi, V, st)
                        if st[4] >= 0:
                            if _links_to(graph, knn, sym, cnt, ksym, st[4], z):
                                st[5] = 1
                            st[6] = knn + min(cnt[st[4]], ksym)
                    cuda.syncthreads()
                    a = st[4]
                    found = st[5]
                    na = st[6]
                    cuda.syncthreads()
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
                        keep = v >= 0
                        if keep:
                            keep = not _in_cache(v, bi, pi, vi, st)
                        cand[lane] = v if keep else -1
                        cuda.syncthreads()
                        if keep:
                            for u in range(lane):
                                if cand[u] == v:
                                    keep = False
                        cuda.syncthreads()
                        cand[lane] = v if keep else -1
                        cuda.syncthreads()
                        for c in range(WARP):
                            u = cand[c]
                            if u >= 0:
                                ub = trans[u]
                                dz = warp_distance(kind, base, ub, base, zb, inv, inv, lane)
                                ok = True
                                if kind != 1:  # the sphere of section 5.2.1 (not for inner product)
                                    dx = warp_distance(kind, base, ub, base, xb, inv, inv, lane)
                                    dm = (float32(1.0) - t_mid) * dz + t_mid * dx - t_mid * (float32(1.0) - t_mid) * dxz
                                    ok = dm <= rad2
                                if lane == 0:
                                    cd[c] = dz if ok else INF
                        cuda.syncthreads()
                        if lane == 0:
                            for c in range(WARP):
                                u = cand[c]
                                # INF (outside the sphere) never meets the criterion: an open one is
                                # the largest finite float32 (see threshold)
                                if u >= 0 and cd[c] <= _threshold(kind, bd, st[0], kb, tau, nn1):
                                    _push(cd[c], u, bd, bi, kb, pd, pi, P, st)
                        cuda.syncthreads()
                if lane == 0 and st[5] == 0:
                    c = min(st[0], C)
                    for t in range(c):
                        req_i[zz, i, t] = bi[t]
                        req_d[zz, i, t] = bd[t]
                    req_n[zz, i] = c
                cuda.syncthreads()

    return kernel
