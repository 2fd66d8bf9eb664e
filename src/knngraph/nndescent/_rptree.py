"""Random projection forest: the initial graph of NN-Descent on the CPU.

NN-Descent (Dong et al., WWW'11; GNND Alg. 1 l.1-5) starts from random lists, and its first iterations
do little more than replace random entries by plausible ones. Starting instead from the lists that a few
random projection trees give (Dasgupta & Freund's RP trees; pynndescent initialises NN-Descent this way,
and follow-ups of NN-Descent such as EFANNA start it from the leaves of randomised k-d trees) saves those
iterations: points that share a leaf are close with good probability, and a few independent trees catch
most true neighbours.

**Split rule.** A node (a contiguous range of its tree's permutation of the points) with more than
``leaf_size`` points is cut by the hyperplane halfway between two distinct random points a, b of it.
L2: x goes left when <a - b, x - (a + b) / 2> > 0, i.e. when x is nearer to a than to b. Inner product
and cosine: the same on the unit sphere, <a/|a| - b/|b|, x> > 0. A point exactly on the plane takes a
random side; a split that leaves one side empty (duplicates), and every split at depth ``MAX_DEPTH`` or
more, cuts the range in halves instead, so the depth stays bounded. Leaves hold at most ``leaf_size``.

**Building all trees** (two phases, because reading the rows of a large node in its permuted order is
a cache miss per row):

1. *Large nodes* (more than ``LOCAL_ROWS`` points), level by level for all trees at once: the planes of
   the level's nodes, then every point's side in each tree in one pass over the data in storage order,
   then a stable partition of each node's range.
2. *Small nodes* are finished one per task: the node's rows are gathered into a contiguous buffer and its
   subtree is split depth first there (explicit stack, in-place two-pointer partitions).

**Leaf join.** For every leaf, the distances of all its pairs (each pair once), and every point's
leaf-mates offered to its list, which keeps the k best distinct ids sorted by (distance, id): the local
join of NN-Descent with the leaf as the sample. The leaves of one tree are disjoint, so they are joined in
parallel without locks, the trees one after the other. Lists that end with fewer than k entries (tiny
inputs) are filled with random nodes. Inner product keeps only the nearest half of each list and fills the
other half with random nodes: its nearest neighbours are often points of large norm in other directions,
which the leaves (groups of directions) miss and random entries lead to (on clustered data half-forest
lists recalled as well as random ones and far better than whole forest lists). All entries are NEW.

**Order.** The points are renumbered in the order of the first tree's leaves, and the graph comes back
in those ids together with the reordered vectors (:func:`rp_forest_graph`): near points get near ids, so
the NN-Descent iterations that follow find the vectors and lists they read together in cache (much less
time spent gathering sample vectors).

**Determinism.** Every random choice is a hash (:func:`knngraph.primitives.random.mix`) of the seed, the tree, the node's
depth and position; the phase of a node depends on its size only; the joins follow a fixed order. The
same seed gives the same graph on any number of threads.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ..primitives.compile import pick, threaded_and_serial
from ..primitives.distances import DIST_IP, DIST_L2SQ
from ..primitives.lists import less
from ..primitives.pair_distance import cpu_distance
from ..primitives.random import hash32, mix, progression
from ._candidates import candidate_range
from ._common import NEW, OLD
from ._lists import distance_rows, in_list, insert

__all__ = ["rp_forest_graph", "forest_leaves", "MAX_DEPTH", "LOCAL_ROWS"]

#: from this depth on every split is made in halves (a bisector of two random points can be very uneven)
MAX_DEPTH = 40
#: nodes of at most this many points are split depth first in a gathered buffer (phase 2)
LOCAL_ROWS = 2048
_SALT = 0x5EED7EE5
_CHUNK = 1024


# --------------------------------------------------------------------------------------------------
# split rule


@numba.njit(inline="always")
def _two_points(seed, t, depth, lo, size):
    """Hash of the node (tree t, depth, first position lo) and two distinct offsets in [0, size)."""
    h = mix(seed, (np.int64(depth) << 32) + lo, np.int64(t) + _SALT)
    a = h % size
    b = hash32(h + 1) % (size - 1)
    if b >= a:
        b += 1
    return h, a, b


@numba.njit(inline="always")
def _plane(xa_src, a, xb_src, b, angular, w):
    """Normal ``w`` (written) and offset of the hyperplane halfway between rows a and b."""
    dim = w.shape[0]
    if angular:
        na = np.float32(0.0)
        nb = np.float32(0.0)
        for q in range(dim):
            na += np.float32(xa_src[a, q]) * np.float32(xa_src[a, q])
            nb += np.float32(xb_src[b, q]) * np.float32(xb_src[b, q])
        ia = np.float32(1.0) / np.sqrt(na) if na > 0 else np.float32(0.0)
        ib = np.float32(1.0) / np.sqrt(nb) if nb > 0 else np.float32(0.0)
        for q in range(dim):
            w[q] = np.float32(xa_src[a, q]) * ia - np.float32(xb_src[b, q]) * ib
        return np.float32(0.0)
    off = np.float32(0.0)
    for q in range(dim):
        ya = np.float32(xa_src[a, q])
        yb = np.float32(xb_src[b, q])
        w[q] = ya - yb
        off -= (ya - yb) * (ya + yb) * np.float32(0.5)
    return off


@numba.njit(inline="always")
def _goes_left(x, r, w, off, key):
    """Side of row ``r`` of ``x``: margin > 0 is left; on the plane, a side from the hash of ``key``."""
    acc = np.float32(0.0)
    for q in range(w.shape[0]):
        acc += w[q] * np.float32(x[r, q])
    acc += off
    if acc == 0:
        return (hash32(key) & 1) == 1
    return acc > 0


# --------------------------------------------------------------------------------------------------
# phase 1: large nodes, level by level


def level_planes(x, angular, perm, node_tree, node_lo, node_hi, depth, seed, planes, offsets, keys):
    """Plane (normal, offset) and hash key of each node of the level."""
    for i in prange(node_tree.shape[0]):
        t = node_tree[i]
        h, a, b = _two_points(seed, t, depth, node_lo[i], node_hi[i] - node_lo[i])
        keys[i] = h
        offsets[i] = _plane(x, perm[t, node_lo[i] + a], x, perm[t, node_lo[i] + b], angular, planes[i])


def level_sides(x, assign, planes, offsets, keys, side):
    """side[t, p] = 1 when point p goes left in tree t (for points whose node is split this level);
    one pass over the rows in storage order."""
    n_trees, n = assign.shape
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        for p in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            for t in range(n_trees):
                i = assign[t, p]
                if i >= 0:
                    side[t, p] = 1 if _goes_left(x, p, planes[i], offsets[i], keys[i] + p) else 0


def level_partition(perm, side, node_tree, node_lo, node_hi, tmp, mid):
    """Stable partition of each node's range by side (left first); ``mid[i]`` gets the boundary, or the
    middle when one side is empty."""
    for i in prange(node_tree.shape[0]):
        t = node_tree[i]
        lo = node_lo[i]
        hi = node_hi[i]
        c = lo
        for j in range(lo, hi):
            if side[t, perm[t, j]] == 1:
                tmp[t, c] = perm[t, j]
                c += 1
        m = c
        for j in range(lo, hi):
            if side[t, perm[t, j]] == 0:
                tmp[t, c] = perm[t, j]
                c += 1
        for j in range(lo, hi):
            perm[t, j] = tmp[t, j]
        mid[i] = m if lo < m < hi else lo + (hi - lo) // 2


def level_assign(perm, node_tree, node_lo, node_hi, assign):
    """assign[t, p] = i for the points of node i (-1 for nodes not split by phase 1)."""
    for i in prange(node_tree.shape[0]):
        t = node_tree[i]
        for j in range(node_lo[i], node_hi[i]):
            assign[t, perm[t, j]] = i


# --------------------------------------------------------------------------------------------------
# phase 2: small nodes, one subtree per task


def local_subtrees(x, angular, perm, node_tree, node_lo, node_hi, node_depth, leaf_size, seed, leaf_mark):
    """Split each small node's subtree depth first in a gathered buffer; mark leaf starts. Only the
    gathering reads the vectors (compiled per vector dtype); the split is :func:`_split_gathered`,
    compiled once for every dtype."""
    dim = x.shape[1]
    for i in prange(node_tree.shape[0]):
        t = node_tree[i]
        base = node_lo[i]
        size = node_hi[i] - base
        # gather the node's rows once
        buf = np.empty((size, dim), np.float32)
        idx = np.empty(size, np.int32)
        for r in range(size):
            v = perm[t, base + r]
            idx[r] = v
            for q in range(dim):
                buf[r, q] = np.float32(x[v, q])
        _split_gathered(buf, idx, angular, perm, t, base, node_depth[i], leaf_size, seed, leaf_mark)


@numba.njit(fastmath=True, cache=True)
def _split_gathered(buf, idx, angular, perm, t, base, depth0, leaf_size, seed, leaf_mark):
    """The subtree of tree ``t``'s node at ``base`` (depth ``depth0``), whose rows ``idx`` are gathered
    in ``buf`` (float32), split depth first; marks its leaf starts and writes its order into ``perm``."""
    size = buf.shape[0]
    dim = buf.shape[1]
    order = np.arange(size)
    w = np.empty(dim, np.float32)
    # explicit stack of (lo, hi, depth) ranges of ``order``
    stack = np.empty((MAX_DEPTH + 64, 3), np.int64)
    stack[0, 0] = 0
    stack[0, 1] = size
    stack[0, 2] = depth0
    top = 1
    while top > 0:
        top -= 1
        lo = stack[top, 0]
        hi = stack[top, 1]
        depth = stack[top, 2]
        n_pts = hi - lo
        if n_pts <= leaf_size:
            leaf_mark[t, base + lo] = 1
            continue
        cut = lo + n_pts // 2
        if depth < MAX_DEPTH:
            h, a, b = _two_points(seed, t, depth, base + lo, n_pts)
            off = _plane(buf, order[lo + a], buf, order[lo + b], angular, w)
            # two-pointer partition: [lo, i0) left, (j0, hi) right
            i0 = lo
            j0 = hi - 1
            while True:
                while i0 <= j0 and _goes_left(buf, order[i0], w, off, h + idx[order[i0]]):
                    i0 += 1
                while i0 <= j0 and not _goes_left(buf, order[j0], w, off, h + idx[order[j0]]):
                    j0 -= 1
                if i0 >= j0:
                    break
                r = order[i0]
                order[i0] = order[j0]
                order[j0] = r
                i0 += 1
                j0 -= 1
            if lo < i0 < hi:
                cut = i0
        stack[top, 0] = cut
        stack[top, 1] = hi
        stack[top, 2] = depth + 1
        stack[top + 1, 0] = lo
        stack[top + 1, 1] = cut
        stack[top + 1, 2] = depth + 1
        top += 2
    for r in range(size):
        perm[t, base + r] = idx[order[r]]


# --------------------------------------------------------------------------------------------------
# leaf join


@numba.njit(inline="always")
def _merge_into(gd, gi, gf, u, cd, cv, c, td, ti, tf):
    """Merge c candidates (sorted by (distance, id), ids not in the list) into u's sorted list."""
    k = gd.shape[1]
    for j in range(k):
        td[j] = gd[u, j]
        ti[j] = gi[u, j]
        tf[j] = gf[u, j]
    a = 0
    b = 0
    for j in range(k):
        if b < c and (a >= k or less(cd[b], cv[b], td[a], ti[a])):
            gd[u, j] = cd[b]
            gi[u, j] = cv[b]
            gf[u, j] = NEW
            b += 1
        else:
            gd[u, j] = td[a]
            gi[u, j] = ti[a]
            gf[u, j] = tf[a]
            a += 1


@numba.njit(inline="always")
def _kth_smallest(a, n, kk):
    """The kk-th smallest (0-based) of a[:n], by quickselect in place (a is reordered)."""
    lo = 0
    hi = n - 1
    while lo < hi:
        # median of three as pivot
        mid = (lo + hi) // 2
        x0 = a[lo]
        x1 = a[mid]
        x2 = a[hi]
        piv = max(min(x0, x1), min(max(x0, x1), x2))
        i = lo
        j = hi
        while i <= j:
            while a[i] < piv:
                i += 1
            while a[j] > piv:
                j -= 1
            if i <= j:
                t = a[i]
                a[i] = a[j]
                a[j] = t
                i += 1
                j -= 1
        if kk <= j:
            hi = j
        elif kk >= i:
            lo = i
        else:
            return a[kk]
    return a[kk]


def join_leaves(x, inv, kind, perm_t, starts, gd, gi, gf):
    """Local join of every leaf [starts[l], starts[l + 1]) of one tree: all pairs once, each point's
    leaf-mates offered to its list (this leaf is the only writer of these lists in this tree). Only the
    gathering reads the vectors (compiled per vector dtype); the join is :func:`_join_gathered_leaf`,
    compiled once for every dtype."""
    dim = x.shape[1]
    for l in prange(starts.shape[0] - 1):
        lo = starts[l]
        s = starts[l + 1] - lo
        if s < 2:
            continue
        # gather the leaf's vectors (contiguous float32 rows)
        buf = np.empty((s, dim), np.float32)
        binv = np.empty(s, np.float32)
        for a in range(s):
            v = perm_t[lo + a]
            for q in range(dim):
                buf[a, q] = np.float32(x[v, q])
            binv[a] = inv[v] if inv.shape[0] > 0 else np.float32(0)
        _join_gathered_leaf(buf, binv, kind, perm_t, lo, gd, gi, gf)


@numba.njit(fastmath=True, cache=True)
def _join_gathered_leaf(buf, binv, kind, perm_t, lo, gd, gi, gf):
    """The local join of the leaf whose points ``perm_t[lo:lo + s]`` are gathered in ``buf`` (float32,
    s rows) with their inverse norms ``binv`` (see :func:`join_leaves`)."""
    s = buf.shape[0]
    k = gd.shape[1]
    # every pair once (upper triangle, two rows at a time)
    dm = np.empty((s, s), np.float32)
    for a in range(0, s, 2):
        distance_rows(kind, buf, binv, a, min(a + 1, s - 1), a + 1, s, dm)
    for a in range(s):
        for b in range(a):
            dm[a, b] = dm[b, a]
    # each list: the leaf-mates that beat its last entry, are among the k nearest in the leaf and
    # are not in the list yet, sorted and merged in
    row = np.empty(s, np.float32)
    cand = np.empty(s, np.int64)
    cd = np.empty(s, np.float32)
    cv = np.empty(s, np.int32)
    td = np.empty(k, np.float32)
    ti = np.empty(k, np.int32)
    tf = np.empty(k, np.uint8)
    for a in range(s):
        u = perm_t[lo + a]
        wd = gd[u, k - 1]
        wv = gi[u, k - 1]
        # leaf-mates not farther than the last entry, collected without branches
        nc = 0
        for b in range(s):
            cand[nc] = b
            nc += (dm[a, b] <= wd) & (b != a)
        # many of them (the first trees): only the k nearest can enter
        lim = wd
        if nc > 2 * k:
            for e in range(nc):
                row[e] = dm[a, cand[e]]
            lim = min(wd, _kth_smallest(row, nc, k - 1))
        c = 0
        for e in range(nc):
            b = cand[e]
            d = dm[a, b]
            if d > lim:
                continue
            v = perm_t[lo + b]
            if not less(d, v, wd, wv) or in_list(gi, u, v):
                continue
            # insertion into the sorted candidates (at most k, plus ties at the k-th distance)
            h = c
            while h > 0 and less(d, v, cd[h - 1], cv[h - 1]):
                cd[h] = cd[h - 1]
                cv[h] = cv[h - 1]
                h -= 1
            cd[h] = d
            cv[h] = v
            c += 1
        if c > 0:
            _merge_into(gd, gi, gf, u, cd, cv, min(c, k), td, ti, tf)


def fill_random(x, inv, kind, gd, gi, gf, seed):
    """Lists with empty slots get random nodes (distinct from what they hold), as the random init."""
    n, k = gd.shape
    for s in prange(n):
        if gi[s, k - 1] >= 0:
            continue
        lo, m, skip = candidate_range(s, n, 0)
        start, step = progression(seed, s, m)
        for j in range(m):
            if gi[s, k - 1] >= 0:
                break
            v = lo + (start + j * step) % m
            if skip >= 0 and v >= skip:
                v += 1
            insert(gd, gi, gf, s, v, cpu_distance(kind, x, s, x, v, inv, inv))


_KERNELS = {fn.__name__: threaded_and_serial(fn, fastmath=fast) for fn, fast in
            ((level_planes, True), (level_sides, True), (level_partition, False), (level_assign, False),
             (local_subtrees, True), (join_leaves, True), (fill_random, True))}


def _kernel(name, rows):
    return pick(_KERNELS[name], rows)


def forest_leaves(x, kind, n_trees, leaf_size, seed, local_rows=LOCAL_ROWS):
    """Build the forest. Returns (perm [n_trees, n] int32, starts): ``starts[t]`` holds the first
    position of each leaf of tree t in perm[t], then n."""
    n, dim = x.shape
    angular = kind != DIST_L2SQ
    seed = np.int64(seed)
    leaf_size = max(1, leaf_size)
    local_rows = max(local_rows, leaf_size)
    perm = np.empty((n_trees, n), np.int32)
    perm[:] = np.arange(n, dtype=np.int32)
    leaf_mark = np.zeros((n_trees, n + 1), np.uint8)
    tree = np.arange(n_trees, dtype=np.int64)
    lo = np.zeros(n_trees, np.int64)
    hi = np.full(n_trees, n, np.int64)
    depth = 0
    small_parts = []
    assign = side = tmp = None
    # phase 1: nodes of more than local_rows points, level by level
    while True:
        small = hi - lo <= local_rows
        small_parts.append((tree[small], lo[small], hi[small], np.full(int(small.sum()), depth, np.int64)))
        tree, lo, hi = tree[~small], lo[~small], hi[~small]
        m = tree.shape[0]
        if m == 0:
            break
        if assign is None:
            assign = np.empty((n_trees, n), np.int32)
            side = np.zeros((n_trees, n), np.uint8)
            tmp = np.empty((n_trees, n), np.int32)
        assign[:] = -1
        _kernel("level_assign", n)(perm, tree, lo, hi, assign)
        planes = np.empty((m, dim), np.float32)
        offsets = np.empty(m, np.float32)
        keys = np.empty(m, np.int64)
        _kernel("level_planes", n)(x, angular, perm, tree, lo, hi, depth, seed, planes, offsets, keys)
        _kernel("level_sides", n)(x, assign, planes, offsets, keys, side)
        mid = np.empty(m, np.int64)
        _kernel("level_partition", n)(perm, side, tree, lo, hi, tmp, mid)
        if depth >= MAX_DEPTH:
            mid = lo + (hi - lo) // 2
        tree = np.concatenate([tree, tree])
        lo, hi = np.concatenate([lo, mid]), np.concatenate([mid, hi])
        depth += 1
    # phase 2: the small nodes' subtrees
    st, sl, sh, sd = (np.concatenate([part[j] for part in small_parts]) for j in range(4))
    _kernel("local_subtrees", n)(x, angular, perm, st, sl, sh, sd, leaf_size, seed, leaf_mark)
    starts = []
    for t in range(n_trees):
        leaf_mark[t, n] = 1
        starts.append(np.flatnonzero(leaf_mark[t]).astype(np.int64))
    return perm, starts


def rp_forest_graph(x, inv, kind, gd, gi, gf, n_trees, leaf_size, seed):
    """Initial lists from a forest of ``n_trees`` random projection trees with leaves of at most
    ``leaf_size`` points, plus random nodes where a list is not full, for the points reordered by the
    first tree's leaves: near points get near ids, so that the iterations find the vectors and lists
    they read together in cache. Returns (x[order], inv[order], order); gd, gi, gf (written) hold
    the lists of the reordered points."""
    n = x.shape[0]
    gd[:] = np.inf
    gi[:] = -1
    gf[:] = OLD
    perm, starts = forest_leaves(x, kind, n_trees, leaf_size, seed)
    # renumber: point perm[0][i] becomes i
    order = perm[0].copy()
    rank = np.empty(n, np.int32)
    rank[order] = np.arange(n, dtype=np.int32)
    xr = np.ascontiguousarray(x[order])
    invr = inv[order] if inv.shape[0] > 0 else inv
    for t in range(n_trees):
        _kernel("join_leaves", n)(xr, invr, kind, rank[perm[t]], starts[t], gd, gi, gf)
    del perm
    if kind == DIST_IP:
        # an inner product's nearest neighbours are often points of large norm in other leaves (the
        # leaves group directions): half of every list starts random, as after a random init
        k = gd.shape[1]
        gd[:, k // 2:] = np.inf
        gi[:, k // 2:] = -1
    _kernel("fill_random", n)(xr, invr, kind, gd, gi, gf, np.int64(seed))
    return xr, invr, order
