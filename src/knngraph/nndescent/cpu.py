"""NN-Descent on the CPU (numba, parallel): the engine of :mod:`knngraph.nndescent._build` running the
same iteration as the GPU path (GNND: Wang, Zhao, Zeng, "Fast k-NN Graph Construction by GPU based
NN-Descent"), with the initial graph and the update step that suit a CPU.

Initial lists: the nearest leaf-mates of each node in a few random projection trees (``_rptree.py``;
random projection trees as an NN-Descent initialisation, as pynndescent does and as tree-initialised
follow-ups of Dong et al.'s NN-Descent such as EFANNA do), or k random nodes (GNND Alg. 1 l.1-5, the
GPU's way and ``init="random"``). After a forest, the iterations run on the points reordered by the
first tree's leaves, so that a node's samples, their vectors and their lists sit close together in
memory, and the lists are mapped back at the end.

One iteration (GNND Alg. 1, section 4):

1. **Sample** (section 4.1). Each node takes the first ``p`` NEW and the first ``p`` OLD entries of its
   list (nearest first) as forward samples; the NEW ones it sampled become OLD. Reverse samples: node
   ``s`` is offered to the reverse list of each forward sample ``v``, capped at ``p`` entries by
   reservoir sampling with a seeded hash (the GPU gets its random choice from the race order of atomic
   appends; the CPU needs a reproducible one).
2. **Local join** (section 4.2). For each node, NEW = forward + reverse NEW samples, OLD = forward +
   reverse OLD samples minus NEW, deduplicated; distances of every NEW-NEW and NEW-OLD pair, computed on
   the gathered sample vectors in tiles of 2 x 4 pairs that share their loads.
3. **Update** (section 4.3). ``update="all"`` offers every pair that beats the current worst entry of
   either end to both lists (classic NN-Descent, GNND's "r1" ablation), except to an end that already
   lists the other (about two thirds of the pairs that beat a worst entry do: checking the samples'
   lists in the join drops them before they cost a random access each in the update).
   ``update="selective"`` is GNND's selective update: a NEW sample receives only its nearest NEW and its
   nearest OLD partner, an OLD sample only its nearest NEW partner. On a CPU distance computations
   dominate, so "all" reaches a given recall sooner and is the CPU default; "selective" reproduces the
   GPU scheme.

Determinism: nodes are joined in blocks; the join of a block only reads the graph and writes each node's
updates into its own slots (a node whose updates do not fit stops at a sample row and goes on in another
pass over the block), then the updates are applied by ``T`` workers, worker ``t`` owning the lists of
the t-th of T id ranges and applying their updates in block order. Reverse samples are drawn the same
way. Each list therefore sees the same updates in the same order whatever the thread count and
schedule: same seed, same graph.

Graph merge (GGM, section 5.1) runs the same iteration with ``split > 0``: nodes [0, split) and
[split, n) are two subsets whose graphs are already built, and pairs inside one subset are skipped.

Lists are kept sorted by (distance, id); distances are internal values (squared L2, -dot, 1 - cos).
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from .._device import as_numpy
from ..primitives.compile import SERIAL_BELOW, SplitKernel
from ..primitives.cpu_inputs import cpu_vectors
from ..primitives.distances import DIST_COS, inverse_norms
from ..primitives.lists import less
from ..primitives.pair_distance import cpu_distance
from ..primitives.random import mix, progression
from ._candidates import candidate_range
from ..primitives.visited import EMPTY as HASH_EMPTY
from ..primitives.visited import hash_contains, hash_insert
from ._common import HOP_SHIFT, HOP_TABLE, NEW, OLD, check_widen
from ._lists import distance_rows, in_list, insert, sort_row

__all__ = ["Engine", "init_graph", "sample_forward", "sample_reverse", "local_join", "apply_updates",
           "unpermute_lists", "widen_lists", "join_capacity", "kernel"]


def init_graph(i0, i1, x, inv, kind, gd, gi, gf, keep, split, seed):
    """Random initial lists (GNND Alg. 1 l.1-5): entries [keep, k) of each row get distinct random ids
    from the node's candidate range (:func:`candidate_range`) and are NEW; entries [0, keep) are kept as
    given (GGM: the first half of the subset's own list) and are OLD. Rows end up sorted."""
    n, k = gd.shape
    for s in range(i0, i1):
        lo, m, skip = candidate_range(s, n, split)
        fill = min(k - keep, m)
        start, step = progression(seed, s, m)
        for j in range(fill):
            v = lo + (start + j * step) % m
            if skip >= 0 and v >= skip:
                v += 1
            gi[s, keep + j] = v
            gd[s, keep + j] = cpu_distance(kind, x, s, x, v, inv, inv)
            gf[s, keep + j] = NEW
        for j in range(keep + fill, k):
            gi[s, j] = -1
            gd[s, j] = np.inf
            gf[s, j] = OLD
        for j in range(keep):
            gf[s, j] = OLD
        sort_row(gd, gi, gf, s)


def sample_forward(i0, i1, gi, gf, split, new_f, nf, old_f, nof):
    """First NEW and first OLD entries of each list, as many as ``new_f`` and ``old_f`` have columns;
    sampled NEW entries become OLD (Alg. 1 l.32). In a merge, OLD entries in the other subset are not
    sampled: all their partners would be in the other subset too, so they could only produce skipped
    pairs."""
    n, k = gi.shape
    p = new_f.shape[1]
    po = old_f.shape[1]
    for s in range(i0, i1):
        cn = 0
        co = 0
        for j in range(k):
            v = gi[s, j]
            if v < 0:
                continue
            if gf[s, j] == NEW:
                if cn < p:
                    new_f[s, cn] = v
                    cn += 1
                    gf[s, j] = OLD
            elif co < po and (split == 0 or (v < split) == (s < split)):
                old_f[s, co] = v
                co += 1
        nf[s] = cn
        nof[s] = co


def sample_reverse(i0, i1, fwd, nfwd, rev, nrev, seed, salt, n_workers):
    """Reverse samples: ``s`` joins ``rev[v]`` for each forward sample ``v`` of ``s``, keeping a uniform
    sample of at most p (the columns of ``rev``) by reservoir sampling with a seeded hash. ``nrev[v]``
    ends as the number offered (use ``min(nrev[v], p)``). Worker w owns the lists of the w-th of
    ``n_workers`` id ranges and reads all forward samples in order, so every list sees the same offers
    in the same order whatever the number of workers: the sample is reproducible."""
    n = fwd.shape[0]
    p = rev.shape[1]
    for w in range(i0, i1):
        lo = w * n // n_workers
        hi = (w + 1) * n // n_workers
        for v in range(lo, hi):
            nrev[v] = 0
        for s in range(n):
            for t in range(nfwd[s]):
                v = fwd[s, t]
                if v < lo or v >= hi:
                    continue
                c = nrev[v]
                if c < p:
                    rev[v, c] = s
                else:
                    r = mix(seed, salt + np.int64(v) * 977, np.int64(c) * 1000003 + s) % (c + 1)
                    if r < p:
                        rev[v, r] = s
                nrev[v] = c + 1


def widen_lists(i0, i1, x, inv, kind, gd1, gi1, gf1, gd, gi, gf, hops):
    """The two-hop fill: row ``s`` of the (n, width) lists gets the ``width`` nearest of its short list
    (n, k1) and of the first ``hops`` entries of the lists of its first ``hops`` entries (neighbours of
    neighbours), by (distance, id). An id is computed once per node: a set of the ids seen (the node, its
    list, the ids read so far; ``HOP_TABLE`` slots) drops the rest before any distance. Listed entries keep
    their flags; new ones are NEW within the first k1 entries and OLD behind (their own NEW entries are
    what the next iterations sample first). The GPU's ``widen_kernel`` fills by the same rule."""
    n, k1 = gd1.shape
    width = gd.shape[1]
    reach = min(hops, k1)
    seen = np.empty(HOP_TABLE, np.int32)
    mask = HOP_TABLE - 1
    for s in range(i0, i1):
        seen[:] = HASH_EMPTY
        hash_insert(seen, 0, mask, HOP_SHIFT, s)
        for j in range(width):
            if j < k1:
                gd[s, j] = gd1[s, j]
                gi[s, j] = gi1[s, j]
                gf[s, j] = gf1[s, j]
                if gi1[s, j] >= 0:
                    hash_insert(seen, 0, mask, HOP_SHIFT, gi1[s, j])
            else:
                gd[s, j] = np.inf
                gi[s, j] = -1
                gf[s, j] = OLD
        for t in range(reach):
            u = gi1[s, t]
            if u < 0:
                break  # empty entries only end a list
            for c in range(reach):
                v = gi1[u, c]
                if v < 0:
                    break
                if hash_contains(seen, 0, mask, HOP_SHIFT, v):
                    continue
                hash_insert(seen, 0, mask, HOP_SHIFT, v)
                insert(gd, gi, gf, s, v, cpu_distance(kind, x, s, x, v, inv, inv))
        for j in range(k1, width):
            if gi[s, j] >= 0 and gf[s, j] == NEW and not in_list(gi1, s, gi[s, j]):
                gf[s, j] = OLD


def join_capacity(p: int, selective: bool) -> int:
    """Update slots of one node's local join. Selective: two per NEW sample and one per OLD sample (NEW
    and OLD samples number at most 2p each), always enough. 'all': room for two rows of pairs (a row
    offers at most 4p - 1); a join that needs more goes on after the updates so far are applied (see
    :func:`local_join`), which few nodes do, since known pairs are not offered."""
    return 6 * p if selective else 8 * p


@numba.njit(inline="always")
def _append_unique(ids, m, v):
    """Append ``v`` to ids[:m] unless it is already there; returns the new length. The scan has no early
    exit, so it vectorises."""
    f = 0
    for t in range(m):
        f |= ids[t] == v
    if f != 0:
        return m
    ids[m] = v
    return m + 1


@numba.njit(inline="always")
def _gather_samples(s, new_f, nf, new_r, nr, old_f, nof, old_r, nor, ids):
    """NEW then OLD sample ids of node ``s`` into ``ids``, deduplicated; returns (n_new, n_old). A node
    without NEW samples has nothing to join and gets no OLD ones."""
    nn = 0
    for j in range(nf[s] + min(nr[s], new_r.shape[1])):
        nn = _append_unique(ids, nn, new_f[s, j] if j < nf[s] else new_r[s, j - nf[s]])
    m = nn
    if nn > 0:
        for j in range(nof[s] + min(nor[s], old_r.shape[1])):
            m = _append_unique(ids, m, old_f[s, j] if j < nof[s] else old_r[s, j - nof[s]])
    return nn, m - nn


@numba.njit(inline="always")
def _subset_first(ids, a, b, split):
    """Stable partition of ids[a:b]: ids below ``split`` first; returns where the others start."""
    c = a
    for r in range(a, b):
        if ids[r] < split:
            v = ids[r]
            for t in range(r, c, -1):
                ids[t] = ids[t - 1]
            ids[c] = v
            c += 1
    return c


@numba.njit(inline="always")
def _partners(r, nn, m, split, na, oa):
    """The column ranges [j0, j1) and [j2, j3) that NEW row ``r`` is joined with (columns after r).
    A build joins r with every later sample. A merge orders NEW as [A | B] (B from ``na``) and OLD as
    [A | B] (B from ``oa``) and joins only samples of different subsets."""
    if split == 0:
        return r + 1, m, m, m
    if r < na:
        return na, nn, oa, m
    return nn, oa, m, m


#: a node's local join with at most this many NEW samples reads the vectors in place (see local_join;
#: with 2 it was slower: two rows already pay for gathering the samples)
FEW_NEW = 1


@numba.njit(cache=True)
def _node_samples(s, new_f, nf, new_r, nr, old_f, nof, old_r, nor, split, ids, counts):
    """The samples of node ``s`` into ``ids`` (:func:`_gather_samples`; in a merge each part ordered by
    subset, :func:`_subset_first`); ``counts`` gets (NEW samples, all samples, where NEW samples of the
    second subset start, where OLD ones do). Compiled once for every vector dtype."""
    nn, no = _gather_samples(s, new_f, nf, new_r, nr, old_f, nof, old_r, nor, ids)
    m = nn + no
    na = 0
    oa = nn
    if split > 0 and nn > 0:
        na = _subset_first(ids, 0, nn, split)
        oa = _subset_first(ids, nn, m, split)
    counts[0] = nn
    counts[1] = m
    counts[2] = na
    counts[3] = oa


@numba.njit(fastmath=True, cache=True)
def _join_gathered(t, ids, nn, m, na, oa, r0, buf, binv, worst, kind, gi, split, selective, base, cap, upd_u, upd_v,
                   upd_d, upd_n, resume):
    """The local join of node ``t`` from its gathered samples (see :func:`local_join`): ``ids[:m]`` the
    sample ids (the first ``nn`` NEW), ``buf``/``binv``/``worst`` their float32 vectors, inverse norms and
    last list distances; NEW rows from ``r0`` on; updates into slots [base, base + cap)."""
    k = gi.shape[1]
    c = 0
    if not selective:
        # the samples' lists, to drop pairs that are already neighbours
        lists = np.empty((m, k), np.int32)
        for r in range(m):
            for j in range(k):
                lists[r, j] = gi[ids[r], j]
        dm = np.empty((nn, m), np.float32)
        cand = np.empty(m, np.int32)
        done = -1
        i = r0
        while i < nn:
            # distances of rows i and i + 1 (when it has the same partners), then their updates
            j0, j1, j2, j3 = _partners(i, nn, m, split, na, oa)
            i1 = i
            if i + 1 < nn:
                b0, b1, b2, b3 = _partners(i + 1, nn, m, split, na, oa)
                if b1 == j1 and b2 == j2 and b3 == j3:
                    i1 = i + 1
            distance_rows(kind, buf, binv, i, i1, j0, j1, dm)
            distance_rows(kind, buf, binv, i, i1, j2, j3, dm)
            for r in range(i, i1 + 1):
                if c + m > cap:
                    done = r
                    break
                u = ids[r]
                wr = worst[r]
                # partners nearer than the last entry of either end, collected without branches
                # (about one pair in five qualifies: a branch per pair mispredicts)
                a0, a1, a2, a3 = _partners(r, nn, m, split, na, oa)
                nc = 0
                for j in range(a0, a1):
                    cand[nc] = j
                    nc += (dm[r, j] < wr) | (dm[r, j] < worst[j])
                for j in range(a2, a3):
                    cand[nc] = j
                    nc += (dm[r, j] < wr) | (dm[r, j] < worst[j])
                for e in range(nc):
                    j = cand[e]
                    d = dm[r, j]
                    v = ids[j]
                    to_u = d < wr and not in_list(lists, r, v)
                    to_v = d < worst[j] and not in_list(lists, j, u)
                    if to_u or to_v:
                        upd_u[base + c] = u if to_u else -1 - u
                        upd_v[base + c] = v if to_v else -1 - v
                        upd_d[base + c] = d
                        c += 1
            if done >= 0:
                break
            i = i1 + 1
        resume[t] = done
    else:
        dm = np.full((m, m), np.inf, np.float32)
        for i in range(nn):
            u = ids[i]
            for j in range(i + 1, m):
                v = ids[j]
                if split > 0 and (u < split) == (v < split):
                    continue
                d = cpu_distance(kind, buf, i, buf, j, binv, binv)
                dm[i, j] = d
                dm[j, i] = d
        # GNND Alg. 2 GetNearestObject: nearest NEW and nearest OLD partner of a NEW sample,
        # nearest NEW partner of an OLD sample; ties to the lower id
        for r in range(m):
            u = ids[r]
            wu = worst[r]
            for part in range(2):
                if r >= nn and part == 1:
                    break
                a0 = 0 if part == 0 else nn
                a1 = nn if part == 0 else m
                bd = np.float32(np.inf)
                bv = -1
                for j in range(a0, a1):
                    if j != r and less(dm[r, j], ids[j], bd, bv):
                        bd = dm[r, j]
                        bv = ids[j]
                if bv >= 0 and bd < wu:
                    upd_u[base + c] = u
                    upd_v[base + c] = bv
                    upd_d[base + c] = bd
                    c += 1
        resume[t] = -1
    upd_n[t] = c


def local_join(i0, i1, x, inv, kind, gd, gi, new_f, nf, new_r, nr, old_f, nof, old_r, nor, split, selective,
               lo, hi, cap, upd_u, upd_v, upd_d, upd_n, resume):
    """Local join of nodes [lo, hi): node ``s = lo + t`` writes its updates (u, v, d) into slots
    [t * cap, t * cap + upd_n[t]). ``selective``: (u, v) offers v to u only, else to both ends.

    'all': NEW rows are joined from row ``resume[t]`` on; a node whose next row might not fit its slots
    stops there and leaves the row in ``resume[t]`` (-1 when done), to go on after the updates so far
    are applied. An end that already lists the other, or whose last entry is nearer, is not offered
    the pair (stored as -1 - id), and a pair offered to neither end is dropped. With at most
    ``FEW_NEW`` NEW samples (common in the last iterations) each vector is read once anyway, and the
    pairs are computed from the data in place rather than from gathered copies.

    Only the steps that read the vectors (the join of few NEW samples in place, the gathering of the
    samples as float32 rows) are compiled per vector dtype: a node's samples are :func:`_node_samples`
    and the join of the gathered samples is :func:`_join_gathered`, functions compiled once for every
    dtype. The whole join was compiled per dtype (4-5 s each, about half of NN-Descent's compilation),
    in a function per node that this kernel called: numba optimises a called function's code again in
    every caller it is linked into, so that layer cost its compilation once more per dtype."""
    k = gd.shape[1]
    dim = x.shape[1]
    ids = np.empty(new_f.shape[1] + new_r.shape[1] + old_f.shape[1] + old_r.shape[1], np.int32)
    counts = np.empty(4, np.int64)
    for t in range(i0, i1):
        s = lo + t
        upd_n[t] = 0
        r0 = resume[t]
        if r0 < 0:
            continue
        _node_samples(s, new_f, nf, new_r, nr, old_f, nof, old_r, nor, split, ids, counts)
        nn = counts[0]
        m = counts[1]
        na = counts[2]
        oa = counts[3]
        base = t * cap
        c = 0
        if nn == 0:
            resume[t] = -1
            continue
        if not selective and nn <= FEW_NEW:
            # few NEW samples (late iterations): their pairs straight from the data, nothing gathered
            done = -1
            for r in range(r0, nn):
                if c + m > cap:
                    done = r
                    break
                u = ids[r]
                wr = gd[u, k - 1]
                a0, a1, a2, a3 = _partners(r, nn, m, split, na, oa)
                for j in range(a0, a3):
                    if a1 <= j < a2:
                        continue
                    v = ids[j]
                    d = cpu_distance(kind, x, u, x, v, inv, inv)
                    to_u = d < wr and not in_list(gi, u, v)
                    to_v = d < gd[v, k - 1] and not in_list(gi, v, u)
                    if to_u or to_v:
                        upd_u[base + c] = u if to_u else -1 - u
                        upd_v[base + c] = v if to_v else -1 - v
                        upd_d[base + c] = d
                        c += 1
            resume[t] = done
            upd_n[t] = c
            continue
        # gather the sample vectors once (contiguous float32 rows, cache friendly)
        buf = np.empty((m, dim), np.float32)
        binv = np.empty(m, np.float32)
        worst = np.empty(m, np.float32)
        for r in range(m):
            v = ids[r]
            for q in range(dim):
                buf[r, q] = np.float32(x[v, q])
            binv[r] = inv[v] if inv.shape[0] > 0 else np.float32(0)
            worst[r] = gd[v, k - 1]
        _join_gathered(t, ids, nn, m, na, oa, r0, buf, binv, worst, kind, gi, split, selective, base, cap, upd_u, upd_v,
                       upd_d, upd_n, resume)


def apply_updates(i0, i1, gd, gi, gf, n_nodes, cap, upd_u, upd_v, upd_d, upd_n, symmetric, n_workers):
    """Apply a block's updates; worker w owns the lists of the w-th of n_workers id ranges (see module
    doc). (u, v, d) offers v to u when u >= 0 and, if ``symmetric``, u to v when v >= 0 (an end stored
    as -1 - id is not offered). Returns how many entries were inserted."""
    n = gd.shape[0]
    count = np.int64(0)
    for w in range(i0, i1):
        lo = w * n // n_workers
        hi = (w + 1) * n // n_workers
        for t in range(n_nodes):
            base = t * cap
            for e in range(upd_n[t]):
                u = upd_u[base + e]
                v = upd_v[base + e]
                if lo <= u < hi:
                    count += insert(gd, gi, gf, u, v if v >= 0 else -1 - v, upd_d[base + e])
                if symmetric and lo <= v < hi:
                    count += insert(gd, gi, gf, v, u if u >= 0 else -1 - u, upd_d[base + e])
    return count


def unpermute_lists(i0, i1, gd, gi, order, out_d, out_i):
    """Lists of a graph built on ``x[order]`` in the ids of ``x``: row ``order[u]`` gets row u with its ids
    mapped through ``order``, re-sorted by (distance, id) since ties may change order."""
    n, k = gd.shape
    for u in range(i0, i1):
        o = order[u]
        for j in range(k):
            v = gi[u, j]
            out_i[o, j] = order[v] if v >= 0 else -1
            out_d[o, j] = gd[u, j]
        for j in range(1, k):
            d = out_d[o, j]
            v = out_i[o, j]
            t = j
            while t > 0 and less(d, v, out_d[o, t - 1], out_i[o, t - 1]):
                out_d[o, t] = out_d[o, t - 1]
                out_i[o, t] = out_i[o, t - 1]
                t -= 1
            out_d[o, t] = d
            out_i[o, t] = v


# --------------------------------------------------------------------------------------------------
# Every kernel above does the items [i0, i1) of what would be a prange loop (nodes, or workers that each
# own an id range) and is compiled once, serial and nogil (primitives.compile.SplitKernel): a small input
# runs it on every item in the calling thread (no thread wake-up, which dominates the many small calls
# of shard-pair merges), a large one on numba's thread count of equal parts at once. numba's parallel
# builds of the same kernels took 4-5 times as long to compile as the serial ones.

#: name -> (kernel, items of a call from its arguments)
_BUILDS = {fn.__name__: (SplitKernel(fn, fastmath=fast, combine=combine), items) for fn, fast, combine, items in (
    (init_graph, True, None, lambda a: a[3].shape[0]),
    (sample_forward, False, None, lambda a: a[0].shape[0]),
    (sample_reverse, False, None, lambda a: a[6]),
    (local_join, True, None, lambda a: a[16] - a[15]),
    (apply_updates, False, sum, lambda a: a[10]),
    (unpermute_lists, False, None, lambda a: a[0].shape[0]),
    (widen_lists, True, None, lambda a: a[3].shape[0]))}
init_graph, sample_forward, sample_reverse, local_join, apply_updates, unpermute_lists, widen_lists = (
    _BUILDS[name][0] for name in ("init_graph", "sample_forward", "sample_reverse", "local_join", "apply_updates",
                                  "unpermute_lists", "widen_lists"))


def kernel(name: str, rows: int):
    """The kernel ``name`` as a function of its arguments (without the item range): split over threads
    for at least SERIAL_BELOW rows of work, else run whole in the calling thread."""
    build, items = _BUILDS[name]
    return lambda *args: build.run(rows, items(args), *args)


def _block_size(n: int, cap: int, buffer_bytes: int) -> int:
    """Nodes joined per block: update buffers of about ``buffer_bytes``, at least 64 nodes."""
    return int(max(64, min(n, buffer_bytes // (12 * cap))))


@dataclasses.dataclass
class _RefineState:
    """What one refinement allocates once and its iterations reuse (see :meth:`Engine.start_refine`)."""

    x: np.ndarray
    inv: np.ndarray
    kind: int
    gd: np.ndarray
    gi: np.ndarray
    gf: np.ndarray
    samples: tuple
    updates: tuple
    resume: np.ndarray
    cap: int
    block: int
    seed: int
    split: int
    selective: bool
    n_workers: int
    passes: int = 0


class Engine:
    """The CPU implementation of the engine interface that ``_build.py`` drives (``cuda.Engine`` has the
    same methods)."""

    is_cuda = False
    simulate = False
    xp = np

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def prepare(self, x, kind):
        """(vectors numba can read, inverse norms or an empty array)."""
        xc = np.asarray(x)
        xc = np.ascontiguousarray(xc.astype(np.float32) if xc.dtype == np.float64 else cpu_vectors(xc))
        inv = inverse_norms(xc) if kind == DIST_COS else np.empty(0, np.float32)
        return xc, inv

    def asarray(self, a):
        return as_numpy(a)

    def to_host(self, a):
        return as_numpy(a)

    def new_graph(self, n, k):
        return np.empty((n, k), np.float32), np.empty((n, k), np.int32), np.empty((n, k), np.uint8)

    def synchronize(self):
        pass

    def memory_per_node(self, d, itemsize, k, p, cosine):
        """Host bytes per node of a build or merge (float32 vectors for float16 input); a build from a
        forest needs :func:`~._common.forest_bytes_per_node` more."""
        return d * (4 if itemsize == 2 else itemsize) + (4 if cosine else 0) + 9 * k + 16 * p + 16 + 8 * k

    def init(self, x, inv, kind, gd, gi, gf, keep, split, seed):
        kernel("init_graph", gd.shape[0])(x, inv, kind, gd, gi, gf, keep, split, np.int64(seed))

    def init_forest(self, x, inv, kind, gd, gi, gf, seed, n_trees, leaf_size):
        """Initial lists from a random projection forest (see ``_rptree.py``), for the points reordered
        by the first tree's leaves. Returns (vectors, inverse norms, order): the reordered copy the
        iterations run on, and ``order`` for :meth:`unpermute`."""
        from ._rptree import rp_forest_graph

        return rp_forest_graph(x, inv, kind, gd, gi, gf, n_trees, leaf_size, seed)

    def widen(self, x, inv, kind, gd1, gi1, gf1, width, hops):
        """(gd, gi, gf) of ``width`` columns from the short lists (:func:`widen_lists`)."""
        check_widen(gd1.shape[1], width, hops)
        gd, gi, gf = self.new_graph(gd1.shape[0], width)
        kernel("widen_lists", gd1.shape[0])(x, inv, kind, gd1, gi1, gf1, gd, gi, gf, hops)
        return gd, gi, gf

    def unpermute(self, gd, gi, order):
        """(distances, ids) of lists built on ``x[order]``, in the ids of ``x``."""
        out_d = np.empty_like(gd)
        out_i = np.empty_like(gi)
        kernel("unpermute_lists", gd.shape[0])(gd, gi, order, out_d, out_i)
        return out_d, out_i

    def merge_lists(self, ad, ai, bd, bi, k):
        from ..graphops import cpu as graphops_cpu

        return graphops_cpu.merge_sorted_lists(ad, ai, bd, bi, k)

    def start_refine(self, x, inv, kind, gd, gi, gf, *, p, seed, split=0, selective=False, buffer_bytes=48 << 20):
        """Allocate what the iterations on this initialised graph need (once)."""
        n, k = gd.shape
        samples = tuple(np.full((n, p), -1, np.int32) for _ in range(4)) + tuple(np.zeros(n, np.int32)
                                                                              for _ in range(4))
        cap = join_capacity(p, selective)
        block = _block_size(n, cap, buffer_bytes)
        updates = (np.empty(block * cap, np.int32), np.empty(block * cap, np.int32),
                   np.empty(block * cap, np.float32), np.zeros(block, np.int32))
        workers = max(1, numba.get_num_threads())
        return _RefineState(x=x, inv=inv, kind=kind, gd=gd, gi=gi, gf=gf, samples=samples, updates=updates,
                            resume=np.zeros(block, np.int64), cap=cap, block=block, seed=seed, split=split,
                            selective=selective, n_workers=workers if n >= SERIAL_BELOW else 1)

    def iterate(self, st: _RefineState, it: int) -> int:
        """One iteration (sample, local join, update); returns the entries inserted."""
        x, inv, kind, gd, gi, gf = st.x, st.inv, st.kind, st.gd, st.gi, st.gf
        new_f, old_f, new_r, old_r, nf, nof, nr, nor = st.samples
        upd_u, upd_v, upd_d, upd_n = st.updates
        n = gd.shape[0]
        kernel("sample_forward", n)(gi, gf, st.split, new_f, nf, old_f, nof)
        salt = np.int64(it) * 2 + 1
        kernel("sample_reverse", n)(new_f, nf, new_r, nr, np.int64(st.seed), salt, st.n_workers)
        kernel("sample_reverse", n)(old_f, nof, old_r, nor, np.int64(st.seed), salt + 1, st.n_workers)
        inserted = 0
        resume = st.resume
        for lo in range(0, n, st.block):
            hi = min(n, lo + st.block)
            resume[:] = 0
            # joins that did not fit their update slots go on once the updates so far are applied
            while (resume[:hi - lo] >= 0).any():
                kernel("local_join", n)(x, inv, kind, gd, gi, new_f, nf, new_r, nr, old_f, nof, old_r, nor, st.split,
                                        st.selective, lo, hi, st.cap, upd_u, upd_v, upd_d, upd_n, resume)
                inserted += int(kernel("apply_updates", n)(gd, gi, gf, hi - lo, st.cap, upd_u, upd_v, upd_d, upd_n,
                                                           not st.selective, st.n_workers))
                st.passes += 1
        return inserted

    def refine_stats(self, st: _RefineState) -> dict:
        return {"join_passes": st.passes}
