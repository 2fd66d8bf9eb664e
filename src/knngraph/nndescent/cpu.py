"""NN-Descent on the CPU (numba, parallel): the same iteration as the GPU path (GNND, paper 004), with
the initial graph and the update step that suit a CPU.

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

import time

import numba
import numpy as np
from numba import prange

from .._device import as_numpy
from .._distances import DIST_COS, DIST_IP, DIST_L2SQ, cpu_distance, cpu_vectors, inverse_norms
from .._progress import progress
from ._common import NEW, OLD, candidate_range, less, mix, progression

__all__ = ["init_graph", "sample_forward", "sample_reverse", "local_join", "apply_updates", "merge_lists",
           "refine_cpu", "join_capacity", "CpuEngine"]


@numba.njit(inline="always")
def _sort_row(gd, gi, gf, s):
    """Insertion sort of row ``s`` by (distance, id)."""
    k = gd.shape[1]
    for j in range(1, k):
        d = gd[s, j]
        v = gi[s, j]
        f = gf[s, j]
        t = j
        while t > 0 and less(d, v, gd[s, t - 1], gi[s, t - 1]):
            gd[s, t] = gd[s, t - 1]
            gi[s, t] = gi[s, t - 1]
            gf[s, t] = gf[s, t - 1]
            t -= 1
        gd[s, t] = d
        gi[s, t] = v
        gf[s, t] = f


def init_graph(x, inv, kind, gd, gi, gf, keep, split, seed):
    """Random initial lists (GNND Alg. 1 l.1-5): entries [keep, k) of each row get distinct random ids
    from the node's candidate range (:func:`candidate_range`) and are NEW; entries [0, keep) are kept as
    given (GGM: the first half of the subset's own list) and are OLD. Rows end up sorted."""
    n, k = gd.shape
    for s in prange(n):
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
        _sort_row(gd, gi, gf, s)


def sample_forward(gi, gf, split, new_f, nf, old_f, nof):
    """First NEW and first OLD entries of each list, as many as ``new_f`` and ``old_f`` have columns;
    sampled NEW entries become OLD (Alg. 1 l.32). In a merge, OLD entries in the other subset are not
    sampled: all their partners would be in the other subset too, so they could only produce skipped
    pairs."""
    n, k = gi.shape
    p = new_f.shape[1]
    po = old_f.shape[1]
    for s in prange(n):
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


def sample_reverse(fwd, nfwd, rev, nrev, seed, salt, n_workers):
    """Reverse samples: ``s`` joins ``rev[v]`` for each forward sample ``v`` of ``s``, keeping a uniform
    sample of at most p (the columns of ``rev``) by reservoir sampling with a seeded hash. ``nrev[v]``
    ends as the number offered (use ``min(nrev[v], p)``). Worker w owns the lists of the w-th of
    ``n_workers`` id ranges and reads all forward samples in order, so every list sees the same offers
    in the same order whatever the number of workers: the sample is reproducible."""
    n = fwd.shape[0]
    p = rev.shape[1]
    for w in prange(n_workers):
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
def _finish(kind, acc, binv, i, j):
    """Internal distance from a tile accumulator: squared L2 as is, -dot, or 1 - cos."""
    if kind == DIST_L2SQ:
        return acc
    if kind == DIST_IP:
        return -acc
    return np.float32(1.0) - acc * binv[i] * binv[j]


@numba.njit(inline="always")
def distance_rows(kind, buf, binv, i, i1, j0, j1, dm):
    """dm[i, j] and dm[i1, j] for j in [j0, j1) (``i1`` may equal ``i``), by tiles of 2 rows x 4 columns
    that share their loads: about 1.5x the speed of one pair at a time. Rows of ``buf`` are float32."""
    dim = buf.shape[1]
    j = j0
    while j + 4 <= j1:
        s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = np.float32(0.0)
        if kind == DIST_L2SQ:
            for q in range(dim):
                a0 = buf[i, q]
                a1 = buf[i1, q]
                b0 = buf[j, q]
                b1 = buf[j + 1, q]
                b2 = buf[j + 2, q]
                b3 = buf[j + 3, q]
                e = a0 - b0
                s00 += e * e
                e = a0 - b1
                s01 += e * e
                e = a0 - b2
                s02 += e * e
                e = a0 - b3
                s03 += e * e
                e = a1 - b0
                s10 += e * e
                e = a1 - b1
                s11 += e * e
                e = a1 - b2
                s12 += e * e
                e = a1 - b3
                s13 += e * e
        else:
            for q in range(dim):
                a0 = buf[i, q]
                a1 = buf[i1, q]
                b0 = buf[j, q]
                b1 = buf[j + 1, q]
                b2 = buf[j + 2, q]
                b3 = buf[j + 3, q]
                s00 += a0 * b0
                s01 += a0 * b1
                s02 += a0 * b2
                s03 += a0 * b3
                s10 += a1 * b0
                s11 += a1 * b1
                s12 += a1 * b2
                s13 += a1 * b3
        dm[i, j] = _finish(kind, s00, binv, i, j)
        dm[i, j + 1] = _finish(kind, s01, binv, i, j + 1)
        dm[i, j + 2] = _finish(kind, s02, binv, i, j + 2)
        dm[i, j + 3] = _finish(kind, s03, binv, i, j + 3)
        dm[i1, j] = _finish(kind, s10, binv, i1, j)
        dm[i1, j + 1] = _finish(kind, s11, binv, i1, j + 1)
        dm[i1, j + 2] = _finish(kind, s12, binv, i1, j + 2)
        dm[i1, j + 3] = _finish(kind, s13, binv, i1, j + 3)
        j += 4
    while j < j1:
        dm[i, j] = cpu_distance(kind, buf, i, buf, j, binv, binv)
        if i1 != i:
            dm[i1, j] = cpu_distance(kind, buf, i1, buf, j, binv, binv)
        j += 1


@numba.njit(inline="always")
def in_list(gi, u, v):
    """Whether ``v`` is in row ``u`` of ``gi``: a scan with no early exit, which vectorises (3x faster
    than stopping at the first hit)."""
    f = 0
    for j in range(gi.shape[1]):
        f |= gi[u, j] == v
    return f != 0


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
#: with 2 it was slower on sift-photos 100k: two rows already pay for gathering the samples)
FEW_NEW = 1


def local_join(x, inv, kind, gd, gi, new_f, nf, new_r, nr, old_f, nof, old_r, nor, split, selective,
               lo, hi, cap, upd_u, upd_v, upd_d, upd_n, resume):
    """Local join of nodes [lo, hi): node ``s = lo + t`` writes its updates (u, v, d) into slots
    [t * cap, t * cap + upd_n[t]). ``selective``: (u, v) offers v to u only, else to both ends.

    'all': NEW rows are joined from row ``resume[t]`` on; a node whose next row might not fit its slots
    stops there and leaves the row in ``resume[t]`` (-1 when done), to go on after the updates so far
    are applied. An end that already lists the other, or whose last entry is nearer, is not offered
    the pair (stored as -1 - id), and a pair offered to neither end is dropped. With at most
    ``FEW_NEW`` NEW samples (common in the last iterations) each vector is read once anyway, and the
    pairs are computed from the data in place rather than from gathered copies."""
    k = gd.shape[1]
    dim = x.shape[1]
    for t in prange(hi - lo):
        s = lo + t
        upd_n[t] = 0
        r0 = resume[t]
        if r0 < 0:
            continue
        ids = np.empty(new_f.shape[1] + new_r.shape[1] + old_f.shape[1] + old_r.shape[1], np.int32)
        nn, no = _gather_samples(s, new_f, nf, new_r, nr, old_f, nof, old_r, nor, ids)
        m = nn + no
        base = t * cap
        c = 0
        if nn == 0:
            resume[t] = -1
            continue
        na = 0
        oa = nn
        if split > 0:
            na = _subset_first(ids, 0, nn, split)
            oa = _subset_first(ids, nn, m, split)
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


@numba.njit(inline="always")
def _insert(gd, gi, gf, u, v, d):
    """Insert (d, v) into u's sorted list unless it is not better than the last entry or already there."""
    k = gd.shape[1]
    if not less(d, v, gd[u, k - 1], gi[u, k - 1]) or in_list(gi, u, v):
        return 0
    j = k - 1
    while j > 0 and less(d, v, gd[u, j - 1], gi[u, j - 1]):
        gd[u, j] = gd[u, j - 1]
        gi[u, j] = gi[u, j - 1]
        gf[u, j] = gf[u, j - 1]
        j -= 1
    gd[u, j] = d
    gi[u, j] = v
    gf[u, j] = NEW
    return 1


def apply_updates(gd, gi, gf, n_nodes, cap, upd_u, upd_v, upd_d, upd_n, symmetric, n_workers):
    """Apply a block's updates; worker w owns the lists of the w-th of n_workers id ranges (see module
    doc). (u, v, d) offers v to u when u >= 0 and, if ``symmetric``, u to v when v >= 0 (an end stored
    as -1 - id is not offered). Returns how many entries were inserted."""
    n = gd.shape[0]
    counts = np.zeros(n_workers, np.int64)
    for w in prange(n_workers):
        lo = w * n // n_workers
        hi = (w + 1) * n // n_workers
        for t in range(n_nodes):
            base = t * cap
            for e in range(upd_n[t]):
                u = upd_u[base + e]
                v = upd_v[base + e]
                if lo <= u < hi:
                    counts[w] += _insert(gd, gi, gf, u, v if v >= 0 else -1 - v, upd_d[base + e])
                if symmetric and lo <= v < hi:
                    counts[w] += _insert(gd, gi, gf, v, u if u >= 0 else -1 - u, upd_d[base + e])
    return counts.sum()


def merge_lists(ad, ai, bd, bi, out_d, out_i):
    """Per row: the first k (= out width) distinct ids of the (distance, id)-sorted rows a and b, merged;
    -1 entries are skipped and missing ones padded with (inf, -1). Used to re-add GGM's removed halves
    (Alg. 3 l.12) and to fold shard-pair results into the global lists (section 5)."""
    n = ad.shape[0]
    ka = ad.shape[1]
    kb = bd.shape[1]
    k = out_d.shape[1]
    for r in prange(n):
        i = 0
        j = 0
        c = 0
        while c < k and (i < ka or j < kb):
            take_a = j >= kb or (i < ka and less(ad[r, i], ai[r, i], bd[r, j], bi[r, j]))
            if take_a:
                d = ad[r, i]
                v = ai[r, i]
                i += 1
            else:
                d = bd[r, j]
                v = bi[r, j]
                j += 1
            if v < 0:
                continue
            dup = False
            for t in range(c):
                if out_i[r, t] == v:
                    dup = True
                    break
            if not dup:
                out_d[r, c] = d
                out_i[r, c] = v
                c += 1
        for t in range(c, k):
            out_d[r, t] = np.inf
            out_i[r, t] = -1


def unpermute_lists(gd, gi, order, out_d, out_i):
    """Lists of a graph built on ``x[order]`` in the ids of ``x``: row ``order[u]`` gets row u with its ids
    mapped through ``order``, re-sorted by (distance, id) since ties may change order."""
    n, k = gd.shape
    for u in prange(n):
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
# Every parallel kernel is compiled twice: with threads, and serial for small inputs. A parallel call
# costs a thread wake-up (milliseconds on a busy machine), which dominates the many small calls of
# shard-pair merges.

SERIAL_BELOW = 8192


def _compile_both(fn, fastmath):
    import types

    par = numba.njit(parallel=True, fastmath=fastmath, cache=True)(fn)
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_serial"
    twin.__doc__ = fn.__doc__
    ser = numba.njit(parallel=False, fastmath=fastmath, cache=True)(twin)
    return par, ser


_PARALLEL = {}
for _fn, _fast in ((init_graph, True), (sample_forward, False), (sample_reverse, False), (local_join, True),
                   (apply_updates, False), (merge_lists, False), (unpermute_lists, False)):
    _PARALLEL[_fn.__name__] = _compile_both(_fn, _fast)


init_graph, sample_forward, sample_reverse, local_join, apply_updates, merge_lists, unpermute_lists = (
    _PARALLEL[name][0] for name in ("init_graph", "sample_forward", "sample_reverse", "local_join", "apply_updates",
                                    "merge_lists", "unpermute_lists"))


def kernel(name: str, rows: int):
    """The compiled kernel ``name``: threaded for at least SERIAL_BELOW rows of work, else serial."""
    par, ser = _PARALLEL[name]
    return par if rows >= SERIAL_BELOW else ser


def _block_size(n: int, cap: int, buffer_bytes: int) -> int:
    """Nodes joined per block: update buffers of about ``buffer_bytes``, at least 64 nodes."""
    return int(max(64, min(n, buffer_bytes // (12 * cap))))


def refine_cpu(x, inv, kind, gd, gi, gf, *, p, max_iterations, threshold, seed, selective, split=0,
               verbose=False, desc="nn-descent (cpu)", stats=None, callback=None, buffer_bytes=48 << 20):
    """NN-Descent iterations on an initialised graph (gd, gi, gf are updated in place).

    Stops after ``max_iterations`` or when an iteration inserts fewer than ``threshold * n * k`` entries.
    Returns the list of per-iteration insert counts.
    """
    n, k = gd.shape
    new_f = np.full((n, p), -1, np.int32)
    old_f = np.full((n, p), -1, np.int32)
    new_r = np.full((n, p), -1, np.int32)
    old_r = np.full((n, p), -1, np.int32)
    nf = np.zeros(n, np.int32)
    nof = np.zeros(n, np.int32)
    nr = np.zeros(n, np.int32)
    nor = np.zeros(n, np.int32)
    cap = join_capacity(p, selective)
    block = _block_size(n, cap, buffer_bytes)
    upd_u = np.empty(block * cap, np.int32)
    upd_v = np.empty(block * cap, np.int32)
    upd_d = np.empty(block * cap, np.float32)
    upd_n = np.zeros(block, np.int32)
    resume = np.zeros(block, np.int64)
    workers = max(1, numba.get_num_threads())
    n_workers = workers if n >= SERIAL_BELOW else 1
    history = []
    times = []
    passes = 0
    paused = 0.0
    t0 = time.perf_counter()
    with progress(max_iterations, desc, disable=not verbose, min_steps=1) as bar:
        for it in range(max_iterations):
            kernel("sample_forward", n)(gi, gf, split, new_f, nf, old_f, nof)
            salt = np.int64(it) * 2 + 1
            kernel("sample_reverse", n)(new_f, nf, new_r, nr, np.int64(seed), salt, n_workers)
            kernel("sample_reverse", n)(old_f, nof, old_r, nor, np.int64(seed), salt + 1, n_workers)
            inserted = 0
            for lo in range(0, n, block):
                hi = min(n, lo + block)
                resume[:] = 0
                # joins that did not fit their update slots go on once the updates so far are applied
                while (resume[:hi - lo] >= 0).any():
                    kernel("local_join", n)(x, inv, kind, gd, gi, new_f, nf, new_r, nr, old_f, nof, old_r, nor, split,
                                            selective, lo, hi, cap, upd_u, upd_v, upd_d, upd_n, resume)
                    inserted += int(kernel("apply_updates", n)(gd, gi, gf, hi - lo, cap, upd_u, upd_v, upd_d, upd_n,
                                                               not selective, n_workers))
                    passes += 1
            history.append(inserted)
            times.append(time.perf_counter() - t0 - paused)
            bar.update(1)
            if callback is not None:
                tc = time.perf_counter()
                callback(it, gd, gi)
                paused += time.perf_counter() - tc
            if inserted < threshold * n * k:
                break
    if stats is not None:
        stats["updates_per_iteration"] = history
        stats["seconds_per_iteration"] = times
        stats["iterations"] = len(history)
        stats["join_passes"] = passes
    return history


class CpuEngine:
    """The engine interface ``_build.py`` drives (``cuda.CudaEngine`` has the same methods)."""

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

    def unpermute(self, gd, gi, order):
        """(distances, ids) of lists built on ``x[order]``, in the ids of ``x``."""
        out_d = np.empty_like(gd)
        out_i = np.empty_like(gi)
        kernel("unpermute_lists", gd.shape[0])(gd, gi, order, out_d, out_i)
        return out_d, out_i

    def merge_lists(self, ad, ai, bd, bi, k):
        n = ad.shape[0]
        out_d = np.empty((n, k), np.float32)
        out_i = np.empty((n, k), np.int32)
        kernel("merge_lists", n)(np.ascontiguousarray(ad), np.ascontiguousarray(ai), np.ascontiguousarray(bd),
                                 np.ascontiguousarray(bi), out_d, out_i)
        return out_d, out_i

    def refine(self, x, inv, kind, gd, gi, gf, *, p, max_iterations, threshold, seed, split=0, selective=False,
               verbose=False, desc="nn-descent (cpu)", stats=None, callback=None, buffer_bytes=48 << 20):
        return refine_cpu(x, inv, kind, gd, gi, gf, p=p, max_iterations=max_iterations, threshold=threshold,
                          seed=seed, selective=selective, split=split, verbose=verbose, desc=desc, stats=stats,
                          callback=callback, buffer_bytes=buffer_bytes)
