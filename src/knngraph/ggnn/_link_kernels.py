"""Placing GGNN's inverse links on the device (section 5.2, Algorithm 5, step 4) with the result of the
host's sequential :func:`knngraph.ggnn.cpu.sym_place`, and writing them into the rows
(:func:`knngraph.ggnn.cpu.sym_write`).

**The sequential rule.** The requests of a wave are taken in order q = zz * knn + i (row z = lo + z0 + zz,
its i-th nearest neighbour missing a path back); request q walks its candidates p (nearest to z first)
and stops at the first p that links to z already (a nearest-neighbour slot, or an inverse link placed so
far, by an earlier wave or by an earlier request of z in this wave), or places z at p when p still has a
free slot, in slot ``cnt[p]`` (then ``cnt[p] += 1``); a p without room is passed over.

**In parallel.** The fate of request q (the candidate it is placed at, or none) depends only on the
fates of the requests before it: p has a free slot for q iff ``cnt[p] + #{q' < q placed at p} < ksym``,
and p links to z iff it did at the wave's start or an earlier request of z (q' = zz * knn + i', i' < i)
is placed at p. So the fates are the unique fixed point of

    fate_{r + 1}(q) = rule(q, fate_r restricted to q' < q)

(by induction over q: after round r the first r requests have their final fate, and a round that
changes nothing has reached the fixed point, which is the sequential result). One round is one thread
per request with candidates (it also writes the keys ``p * nq + q`` of the fates it found);
``#{q' < q placed at p}`` is a difference of two binary searches in the previous round's keys, sorted
(one device sort per round). Rounds needed, measured with the same rule on the CPU (sift-photos 20k,
degree 24, one refinement: 76 waves, every one equal to the sequential placement): 11 per wave on
average, 33 at most (a request passed over moves on by one candidate per round, and the requests after
it see the change a round later). Then the links are written: the placed requests at p, in key order (= the
sequential order), take slots ``cnt[p], cnt[p] + 1, ...``, and ``cnt[p]`` grows by their number.

Everything is one thread per request or per row, with no allocation in the kernels; the temporary
arrays (``act``, ``assign``, ``keys``, the round flag) are the caller's (:func:`knngraph.ggnn.cuda.sym_place`
keeps them between waves, allocated at the first wave, the largest).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, int32, int64

from ..primitives.compile import cuda_version, host_and_device
from .cpu import rewrite_row

__all__ = ["KEY_NONE", "active_kernel", "round_kernel", "write_links_kernel", "count_links_kernel",
           "sym_write_kernel", "place_fate", "lower_bound", "blocks_for"]

#: key of a request placed nowhere (sorts after every placed one)
KEY_NONE = np.int64(np.iinfo(np.int64).max)
#: threads per block of the one-thread-per-item kernels
THREADS = 128


@host_and_device
def lower_bound(keys, n, key):
    """First position in the ascending ``keys[:n]`` whose entry is >= key."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


@host_and_device
def place_fate(graph, knn, ksym, sym, cnt, lo, z0, zz, i, req_i, req_n, assign, keys, nkeys, nq):
    """The candidate index (into ``req_i[zz, i]``) request (zz, i) is placed at given the fates
    ``assign`` of the other requests (``keys[:nkeys]``: the sorted keys p * nq + q of the placed ones
    among the requests with candidates, KEY_NONE for the others), or -1 (dropped, or no
    room anywhere): the rule of :func:`knngraph.ggnn.cpu.sym_place`, with this wave's links read from
    ``assign``. Self-contained (no helper calls) so that the same source runs on the CPU, the GPU and
    in the simulator."""
    z = lo + z0 + zz
    q = np.int64(zz) * knn + i
    for t in range(req_n[zz, i]):
        p = req_i[zz, i, t]
        # p links to z at the wave's start: a nearest-neighbour slot or an inverse link
        for u in range(knn):
            if graph[p, u] == z:
                return -1
        for u in range(min(cnt[p], ksym)):
            if sym[p, u] == z:
                return -1
        # ... or an earlier request of z placed z at p
        for i2 in range(i):
            a = assign[zz, i2]
            if a >= 0:
                if req_i[zz, i2, a] == p:
                    return -1
        # requests before q placed at p: keys in [p * nq, p * nq + q)
        k0 = np.int64(p) * nq
        before = np.int64(0)
        for side in range(2):
            key = k0 + q if side == 0 else k0
            a0 = np.int64(0)
            a1 = np.int64(nkeys)
            while a0 < a1:
                mid = (a0 + a1) >> 1
                if keys[mid] < key:
                    a0 = mid + 1
                else:
                    a1 = mid
            before = before + a0 if side == 0 else before - a0
        if cnt[p] + before < ksym:
            return t
    return -1


_lower_bound = cuda_version(lower_bound)
_place_fate = cuda_version(place_fate)
_rewrite_row = cuda_version(rewrite_row)


@cuda.jit
def active_kernel(req_n, nz, knn, act, count):
    """The requests with candidates (order irrelevant: every later step is keyed by q)."""
    q = cuda.grid(1)
    if q >= nz * knn:
        return
    zz = q // knn
    if req_n[zz, q - zz * knn] > 0:
        act[cuda.atomic.add(count, 0, 1)] = q


@cuda.jit
def round_kernel(graph, knn, ksym, sym, cnt, lo, z0, act, na, req_i, req_n, assign, keys, nq, out, out_keys,
                 changed):
    """One round of the fixed-point iteration: ``out`` = the fates given ``assign`` (and its sorted
    ``keys``), ``out_keys`` their keys (unsorted); ``changed[0]`` set when any fate differs."""
    j = cuda.grid(1)
    if j >= na:
        return
    q = act[j]
    zz = q // knn
    i = q - zz * knn
    f = _place_fate(graph, knn, ksym, sym, cnt, lo, z0, zz, i, req_i, req_n, assign, keys, na, nq)
    out[zz, i] = f
    if f >= 0:
        out_keys[j] = int64(req_i[zz, i, f]) * nq + q
    else:
        out_keys[j] = KEY_NONE
    if f != assign[zz, i]:
        changed[0] = 1


@cuda.jit
def write_links_kernel(act, na, assign, req_i, req_d, lo, z0, knn, nq, keys, sym, sym_d, cnt):
    """The requests placed at p take slots cnt[p] + (their rank at p in key order = request order)."""
    j = cuda.grid(1)
    if j >= na:
        return
    q = act[j]
    zz = q // knn
    i = q - zz * knn
    a = assign[zz, i]
    if a < 0:
        return
    p = req_i[zz, i, a]
    k0 = int64(p) * nq
    slot = cnt[p] + _lower_bound(keys, na, k0 + q) - _lower_bound(keys, na, k0)
    sym[p, slot] = lo + z0 + zz
    sym_d[p, slot] = req_d[zz, i, a]


@cuda.jit
def count_links_kernel(act, na, assign, req_i, knn, nq, keys, cnt):
    """cnt[p] += the links placed at p, by the last of them in key order (after write_links_kernel,
    which reads cnt)."""
    j = cuda.grid(1)
    if j >= na:
        return
    q = act[j]
    zz = q // knn
    i = q - zz * knn
    a = assign[zz, i]
    if a < 0:
        return
    p = req_i[zz, i, a]
    k0 = int64(p) * nq
    first = _lower_bound(keys, na, k0)
    rank = _lower_bound(keys, na, k0 + q) - first
    if _lower_bound(keys, na, k0 + nq) - first == rank + 1:
        cnt[p] += rank + 1


@functools.lru_cache(maxsize=None)
def sym_write_kernel(width: int):
    """:func:`knngraph.ggnn.cpu.sym_write` with one thread per row; ``width`` = degree - knn (the part of
    the row rewritten, kept in a local array of compile-time length)."""

    @cuda.jit
    def kernel(graph, gdist, lo, n_rows, knn, sym, sym_d, cnt):
        old_i = cuda.local.array(width, int32)
        old_d = cuda.local.array(width, float32)
        r = cuda.grid(1)
        if r >= n_rows:
            return
        z = lo + r
        c = cnt[z]
        if c == 0:
            return
        for t in range(width):
            old_i[t] = graph[z, knn + t]
            old_d[t] = gdist[z, knn + t]
        _rewrite_row(graph, gdist, z, knn, c, sym, sym_d, old_i, old_d, width)

    return kernel


def blocks_for(n: int) -> int:
    return max(1, (int(n) + THREADS - 1) // THREADS)
