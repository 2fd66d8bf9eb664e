"""Placing GGNN's inverse links on the device (section 5.2, Algorithm 5, step 4) with the result of the
host's sequential :func:`knngraph.ggnn.cpu.sym_place`, and writing them into the rows
(:func:`knngraph.ggnn.cpu.sym_write`).

**The sequential rule.** The requests of a wave are taken in order q = zz * knn + i (row z = lo + z0 + zz,
its i-th nearest neighbour missing a path back); request q walks its candidates p (nearest to z first)
and stops at the first p that links to z already (a nearest-neighbour slot, or an inverse link placed so
far, by an earlier wave or by an earlier request of z in this wave), or places z at p when p still has a
free slot, in slot ``cnt[p]`` (then ``cnt[p] += 1``); a p without room is passed over.

**In parallel.** The fate of request q (the candidate it is placed at, or none) depends only on the
fates of the requests before it: p has a free slot for q iff ``#{q' < q placed at p} < room(p)`` with
``room(p) = ksym - cnt[p]``, and p links to z iff it did at the wave's start or an earlier request of z
(q' = zz * knn + i', i' < i) is placed at p. So the fates are the unique fixed point of

    fate_{r + 1}(q) = rule(q, fate_r restricted to q' < q)

(by induction over q: after round r the first r requests have their final fate, and a round that
changes nothing has reached the fixed point, which is the sequential result). What does not change
within a wave (which candidates have a free slot at its start, the first that links to z then) is worked
out once per wave (``static_kernel``); one round is one thread per request with candidates. The count it needs is read from ``first[p - lo, :room(p)]``, the room(p)
smallest requests placed at p in the previous round, ascending (``ID_NONE``-padded): q has room at p iff
``q <= first[p - lo, room(p) - 1]``. Each thread that places its request at p inserts it into the next
round's lists by a chain of ``atomic.min`` (the value a slot gives up moves on to the next slot, so slot
s ends up with the (s + 1)-th smallest of all inserted, whatever the interleaving). Three sets of lists
and fates rotate: a round reads one, fills the next and empties the one before (at the targets of its
fates), so a round is one launch and a read of its "changed" flag, with no sort. Rounds needed
(sift-photos 20k, degree 24, one refinement, the same rule on the CPU): 11 per wave on average, 33 at
most (a request passed over moves on by one candidate per round, and the requests after it see the change
a round later). Then the links are written: the requests placed at p, ascending (= the sequential order),
take slots ``cnt[p], cnt[p] + 1, ...``, and ``cnt[p]`` grows by their number.

Everything is one thread per request or per row, with no allocation in the kernels; the temporary
arrays (``act``, the fates, the lists, the round flag) are the caller's (:func:`knngraph.ggnn.cuda.sym_place`
keeps them between the waves and shards of a build, the lists empty between calls). Every candidate is a
row of the layer being linked (``p >= lo``: the lists are indexed by ``p - lo``), as the path searches
give them.
"""

from __future__ import annotations

import functools

from numba import cuda, float32, int32

from ..primitives.compile import cuda_version, device_function, host_and_device
from ..primitives.constants import ID_NONE
from ._layout import LINK_THREADS as THREADS
from .cpu import rewrite_row

__all__ = ["active_kernel", "place_kernel", "sym_write_kernel", "static_candidates", "place_fate",
           "blocks_for"]



@host_and_device
def static_candidates(graph, knn, ksym, sym, cnt, z, zz, i, req_i, req_n):
    """What the rule knows of request (zz, i) from the wave's start alone: bit t set when candidate t has
    a free slot then (a target without one gets no link in this wave, so the rule passes it over), bits
    24 and up the first candidate that links to z then (a nearest-neighbour slot or an inverse link; the
    rule stops there), ``req_n[zz, i]`` if none. Candidates fit in 24 bits (the caller checks)."""
    n = req_n[zz, i]
    mask = 0
    for t in range(n):
        p = req_i[zz, i, t]
        for u in range(knn):
            if graph[p, u] == z:
                return mask | (t << 24)
        for u in range(min(cnt[p], ksym)):
            if sym[p, u] == z:
                return mask | (t << 24)
        if cnt[p] < ksym:
            mask |= 1 << t
    return mask | (n << 24)


@host_and_device
def place_fate(static, ksym, cnt, lo, zz, i, knn, req_i, assign, first):
    """The candidate index (into ``req_i[zz, i]``) request (zz, i) is placed at, or -1 (dropped, or no room
    anywhere), given its :func:`static_candidates` word and the fates ``assign`` of the other requests
    (``first[p - lo, :room]``: the smallest request indices placed at p, ascending, ``ID_NONE``-padded): the
    rule of :func:`knngraph.ggnn.cpu.sym_place`, with this wave's links read from ``assign``.
    Self-contained (no helper calls) so that the same source runs on the CPU, the GPU and in the
    simulator."""
    q = zz * knn + i
    for t in range(static >> 24):
        if (static >> t) & 1 == 0:
            continue
        p = req_i[zz, i, t]
        # an earlier request of z placed z at p: p links to z
        for i2 in range(i):
            a = assign[zz, i2]
            if a >= 0:
                if req_i[zz, i2, a] == p:
                    return -1
        # fewer than room requests before q placed at p
        room = ksym - cnt[p]
        if q <= first[p - lo, room - 1]:
            return t
    return -1


_static_candidates = cuda_version(static_candidates)
_place_fate = cuda_version(place_fate)
_rewrite_row = cuda_version(rewrite_row)


@device_function
def _insert(first, row, room, q):
    """Request q into the ascending list first[row, :room] (its room smallest are kept): a chain of
    atomic minima, safe for any number of threads inserting at once."""
    v = int32(q)
    for s in range(room):
        old = cuda.atomic.min(first, (row, s), v)
        if old == ID_NONE:  # an empty slot: ID_NONE sorts after every request index
            return
        if old > v:
            v = old


@device_function
def _empty(first, row, ksym):
    for s in range(ksym):
        first[row, s] = ID_NONE


@device_function
def _empty_at(a, req_i, zz, i, lo, ksym, first0, first1, first2):
    if a >= 0:
        row = req_i[zz, i, a] - lo
        _empty(first0, row, ksym)
        _empty(first1, row, ksym)
        _empty(first2, row, ksym)


@device_function
def _request(act, j, knn):
    """(q, zz, i) of the j-th request with candidates: its index, its row and its neighbour."""
    q = act[j]
    zz = q // knn
    return q, zz, q - zz * knn


@device_function
def _placed_at(act, j, knn, assign, req_i):
    """(q, zz, i, a, p) of the j-th request with candidates: p its target given ``assign`` (-1: none)
    and a that target's candidate index."""
    q, zz, i = _request(act, j, knn)
    a = assign[zz, i]
    return q, zz, i, a, (req_i[zz, i, a] if a >= 0 else -1)


@cuda.jit
def active_kernel(req_n, nz, knn, act, count):
    """The requests with candidates (order irrelevant: every later step is keyed by q)."""
    q = cuda.grid(1)
    if q >= nz * knn:
        return
    zz = q // knn
    if req_n[zz, q - zz * knn] > 0:
        act[cuda.atomic.add(count, 0, 1)] = q


@device_function
def _rank(first, row, ksym, q):
    """Position of q in the list first[row] (it is there)."""
    s = 0
    while s < ksym and first[row, s] != q:
        s += 1
    return s


@device_function
def _round(j, static, ksym, cnt, lo, knn, act, req_i, assign, first, out, out_first, stale, stale_first):
    """Request j's part of a round: ``out`` = its fate given ``assign`` (and its lists ``first``),
    inserted into the lists ``out_first`` (empty at the round's start); its entry in the lists
    ``stale_first`` of the fates ``stale`` (two rounds back) emptied. Returns whether its fate changed."""
    q, zz, i = _request(act, j, knn)
    s = stale[zz, i]
    if s >= 0:
        _empty(stale_first, req_i[zz, i, s] - lo, ksym)
    f = _place_fate(static[j], ksym, cnt, lo, zz, i, knn, req_i, assign, first)
    out[zz, i] = f
    if f >= 0:
        p = req_i[zz, i, f]
        _insert(out_first, p - lo, ksym - cnt[p], q)
    return f != assign[zz, i]


@cuda.jit
def place_kernel(graph, knn, ksym, sym, sym_d, cnt, lo, z0, act, na, req_i, req_d, req_n, static, fates, lists,
                 flags):
    """One wave's placement in one cooperative launch (every block resident; the steps are separated by
    grid-wide barriers, a round's end included, instead of a launch and a host read per round): the
    :func:`static_candidates` of the requests with candidates (``act[:na]``), then the rounds of the
    fixed-point iteration until one changes no fate, then the links written (the requests placed at p
    take slots cnt[p] + their rank at p = request order), cnt[p] raised by the links placed at p, and the
    lists emptied for the next call. ``fates`` / ``lists``: three sets that rotate (a round reads one,
    fills the next, empties the one before at the targets of its fates); ``flags[:3]`` the rounds'
    "changed" flags (round r sets flags[r % 3]; the one round r + 1 sets is cleared in round r, after
    every thread read it two rounds back), ``flags[3]`` gets the number of rounds."""
    grid = cuda.cg.this_grid()
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    nz = fates.shape[1]
    for q in range(start, nz * knn, stride):  # every request, with candidates or not: "placed nowhere"
        zz = q // knn
        for b in range(3):
            fates[b, zz, q - zz * knn] = -1
    for j in range(start, na, stride):
        q, zz, i = _request(act, j, knn)
        static[j] = _static_candidates(graph, knn, ksym, sym, cnt, lo + z0 + zz, zz, i, req_i, req_n)
    if start == 0:
        flags[0] = 0
        flags[1] = 0
    grid.sync()
    r = 0
    while True:
        cur = r % 3
        nxt = (r + 1) % 3
        old = (r + 2) % 3
        if start == 0:
            flags[nxt] = 0
        changed = False
        for j in range(start, na, stride):
            if _round(j, static, ksym, cnt, lo, knn, act, req_i, fates[cur], lists[cur], fates[nxt], lists[nxt],
                      fates[old], lists[old]):
                changed = True
        if changed:
            flags[cur] = 1
        grid.sync()
        r += 1
        if flags[cur] == 0:  # F(a) = a: the fixed point
            break
    final = r % 3
    for j in range(start, na, stride):
        q, zz, i, a, p = _placed_at(act, j, knn, fates[final], req_i)
        if p >= 0:
            slot = cnt[p] + _rank(lists[final], p - lo, ksym, q)
            sym[p, slot] = lo + z0 + zz
            sym_d[p, slot] = req_d[zz, i, a]
    grid.sync()  # every slot written from cnt before cnt grows
    for j in range(start, na, stride):
        q, zz, i, a, p = _placed_at(act, j, knn, fates[final], req_i)
        if p >= 0:
            s = _rank(lists[final], p - lo, ksym, q)
            if s + 1 == ksym or lists[final, p - lo, s + 1] == ID_NONE:  # the last placed at p
                cnt[p] += s + 1
    grid.sync()  # the counts read the lists before they are emptied
    for j in range(start, na, stride):
        q, zz, i = _request(act, j, knn)
        for b in range(3):
            _empty_at(fates[b, zz, i], req_i, zz, i, lo, ksym, lists[0], lists[1], lists[2])
    if start == 0:
        flags[3] = r


@functools.lru_cache(maxsize=None)
def sym_write_kernel(width: int):
    """:func:`knngraph.ggnn.cpu.sym_write` with one thread per row; ``width`` = degree - knn (the part of
    the row rewritten, kept in a local array of compile-time length)."""

    @cuda.jit
    def ggnn_sym_write(graph, gdist, lo, n_rows, knn, sym, sym_d, cnt):
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

    return ggnn_sym_write


def blocks_for(n: int) -> int:
    return max(1, (int(n) + THREADS - 1) // THREADS)
