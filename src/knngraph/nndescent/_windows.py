"""Cluster windows: the initial graph of NN-Descent on the GPU.

NN-Descent from random lists (GNND Alg. 1 l.1-5) spends its first iterations replacing random entries
by plausible ones. The CPU path starts instead from a random projection forest (``_rptree.py``), whose
recursive splits suit a CPU thread per node. On the GPU the same idea, "points of one cell are probably
neighbours", is cheapest as dense linear algebra:

1. **Order.** ``C = n / W`` centres (random points, then ``LLOYD_STEPS`` k-means steps on a sample), a
   greedy nearest-neighbour chain through them, every point assigned to its nearest centre and sorted by
   (the centre's place in the chain, its projection on the direction from the previous centre to the
   next one). Neighbouring clusters lie side by side, and the end of a cluster faces the cluster it
   borders.
2. **Windows.** The ordering is cut into windows of ``W`` consecutive points (the last one aligned to the
   end); each point's list is the exact k-NN inside its window: a batched GEMM per group of windows and
   the exact k-NN's selection kernel (:func:`knngraph.primitives.kselect.smallest_per_row`).
3. **Orderings.** Steps 1-2 ``ORDERINGS`` times with different random centres; the lists are merged
   (top-k distinct ids) and every entry marked NEW. L2 distances are then recomputed exactly by the
   exact k-NN's refinement (:func:`knngraph.primitives.rescore.refine_l2`; the window keys come from the GEMM form
   of the distance); cosine and inner product distances are the keys themselves.

The lists start far better than random ones, but the windows hold few long-range links and the last
thousandths of recall come slowly (replacing part of each list by random nodes made the iterations
dearer and was no faster overall), so high recall is reached no sooner than from random lists: an option
(``init='cluster_windows'``), not the GPU default. ``benchmarks/studies/profile_join.py`` measures it against
random lists (``benchmarks/results/profile_join_h200.jsonl``).

Inner product is served poorly: its nearest neighbours are points of large norm in other directions,
which cells of near points miss (the same holds for the forest).
"""

from __future__ import annotations

import math

import numpy as np

from ..partition import centroid_scores, features
from ..primitives.distances import DIST_COS, DIST_L2SQ
from ..primitives.rescore import refine_l2
from ._common import NEW

__all__ = ["window_graph", "window_bytes_per_node", "WINDOW", "ORDERINGS"]

#: points per window
WINDOW = 1024
#: independent orderings whose window lists are merged
ORDERINGS = 3
LLOYD_STEPS = 2
LLOYD_SAMPLE = 50_000
#: rows of the largest group of windows handled at once (its distance tile is rows x W float32)
MAX_GROUP_ROWS = 131_072
_ASSIGN_ROWS = 65_536


def window_size(n: int, k: int) -> int:
    return min(n, max(WINDOW, 2 * k))


def _group_rows(n: int, w: int) -> int:
    """Rows per group of windows: at most MAX_GROUP_ROWS and n / 4 (the tile then adds at most W bytes per
    node to a build), at least one window."""
    return max(1, min(MAX_GROUP_ROWS, n // 4) // w) * w


def window_bytes_per_node(d: int, k: int, n: int) -> int:
    """Working bytes per node of :func:`window_graph` beyond the build's own arrays: float32 features and
    squared norms, the ordering, two orderings' lists and their merge, the distance tile's share (at most
    W bytes per node whatever n: a group has at most n / 4 rows of W float32), the centre assignment's
    temporaries (blocks of 65,536 rows x n / W centres, 8 bytes each) and the Lloyd steps' one-hot
    matrix (50,000 x n / W, 5 bytes each), plus a margin."""
    w = window_size(n, k)
    return 4 * d + 4 + 8 + 3 * 8 * k + w + (8 * _ASSIGN_ROWS + 5 * LLOYD_SAMPLE) // w + 64


def _nearest(xp, f, centres, kind):
    """Index of each row's nearest centre (as the out-of-core partition scores it), in row blocks."""
    csq = (centres * centres).sum(1)
    out = xp.empty(f.shape[0], np.int32)
    for lo in range(0, f.shape[0], _ASSIGN_ROWS):
        block = f[lo:lo + _ASSIGN_ROWS]
        out[lo:lo + len(block)] = xp.argmin(centroid_scores(xp, block, centres, csq, kind), axis=1)
    return out


def _chain(centres_host):
    """A greedy nearest-neighbour path through the centres (C x C distances on the host)."""
    c = len(centres_host)
    sq = (centres_host * centres_host).sum(1)
    dist = sq[:, None] + sq[None, :] - 2 * centres_host @ centres_host.T
    path = np.empty(c, np.int64)
    visited = np.zeros(c, bool)
    cur = 0
    for i in range(c):
        path[i] = cur
        visited[cur] = True
        if i + 1 < c:
            row = np.where(visited, np.inf, dist[cur])
            cur = int(np.argmin(row))
    return path


def _ordering(engine, f, kind, w, rng):
    """Step 1: a permutation of the rows of ``f`` in which near points are mostly near each other."""
    xp = engine.xp
    n = f.shape[0]
    c = max(1, math.ceil(n / w))
    centres = f[xp.asarray(rng.choice(n, c, replace=False))]
    sample = f[xp.asarray(np.sort(rng.choice(n, min(n, LLOYD_SAMPLE), replace=False)))]
    for _ in range(LLOYD_STEPS):
        a = _nearest(xp, sample, centres, kind)
        one_hot = (a[:, None] == xp.arange(c, dtype=np.int32)[None, :]).astype(np.float32)
        counts = one_hot.sum(0)
        sums = one_hot.T @ sample
        centres = xp.where(counts[:, None] > 0, sums / xp.maximum(counts, 1)[:, None], centres)
    path = _chain(engine.to_host(centres).astype(np.float64))
    place = np.empty(c, np.int64)
    place[path] = np.arange(c)
    prev_c = path[np.maximum(place - 1, 0)]
    next_c = path[np.minimum(place + 1, c - 1)]
    direction = centres[xp.asarray(next_c)] - centres[xp.asarray(prev_c)]
    a = _nearest(xp, f, centres, kind)
    proj = xp.empty(n, np.float64)
    for lo in range(0, n, _ASSIGN_ROWS):
        hi = min(n, lo + _ASSIGN_ROWS)
        proj[lo:hi] = (f[lo:hi] * direction[a[lo:hi]]).sum(1)
    span = float(proj.max() - proj.min()) if n > 1 else 0.0
    key = xp.asarray(place)[a].astype(np.float64) * 2.0 + (proj - proj.min()) / (span * 1.0001 + 1e-30)
    return xp.argsort(key).astype(np.int32)


def _window_lists(engine, f, sq, kind, order, w, k):
    """Step 2: each row's k nearest others inside its window of ``order`` (keys, ids); keys are the
    squared distance less the row's own squared norm (L2) or minus the dot product (inner product; cosine
    on normalised rows)."""
    xp = engine.xp
    n = f.shape[0]
    out_k = xp.empty((n, k), np.float32)
    out_i = xp.empty((n, k), np.int32)
    n_windows = math.ceil(n / w)
    starts = np.minimum(np.arange(n_windows) * w, n - w)
    per_group = _group_rows(n, w) // w
    cols = xp.arange(w, dtype=np.int32)
    for g0 in range(0, n_windows, per_group):
        st = xp.asarray(starts[g0:g0 + per_group].astype(np.int32))
        rows = order[st[:, None] + cols[None, :]]            # [B, W] point ids
        fw = f[rows]                                         # [B, W, d]
        tile = fw @ fw.transpose(0, 2, 1)                    # [B, W, W] dot products
        if kind == DIST_L2SQ:
            tile *= -2
            tile += sq[rows][:, None, :]
        else:
            tile *= -1
        b = rows.shape[0]
        diag = xp.arange(w)
        tile[:, diag, diag] = np.inf                         # not its own neighbour
        keys, pos = engine.smallest_per_row(tile.reshape(b * w, w), k)
        ids = rows[(xp.arange(b * w) // w)[:, None], pos]
        # each row written once: the last window (aligned to the end) skips the rows of the one before
        # it (a scatter with repeated indices leaves either value on the GPU)
        nominal = np.arange(g0, g0 + b) * w
        first = xp.asarray((nominal - starts[g0:g0 + b]).astype(np.int32))
        mine = (cols[None, :] >= first[:, None]).reshape(-1)
        flat = rows.reshape(-1)[mine]
        out_k[flat] = keys[mine]
        out_i[flat] = ids[mine]
    return out_k, out_i


def window_graph(engine, x, kind, gd, gi, gf, seed, *, orderings=ORDERINGS, timings=None):
    """Fill the lists (gd, gi, gf) of the points ``x`` from cluster windows (see the module docstring).
    ``timings``: a dict that receives seconds per phase (synchronising after each; benchmarks only)."""
    import time

    xp = engine.xp
    n = x.shape[0]
    k = gd.shape[1]
    w = window_size(n, k)
    clock = [time.perf_counter()]

    def tick(name):
        if timings is not None:
            engine.synchronize()
            now = time.perf_counter()
            timings[name] = timings.get(name, 0.0) + now - clock[0]
            clock[0] = now

    f = features(xp, x, kind)
    sq = (f * f).sum(1) if kind == DIST_L2SQ else None
    n_orderings = orderings if w < n else 1
    best = None
    for t in range(n_orderings):
        rng = np.random.default_rng([seed, t, 0x57D0])
        order = _ordering(engine, f, kind, w, rng) if w < n else xp.arange(n, dtype=np.int32)
        tick("ordering")
        lists = _window_lists(engine, f, sq, kind, order, w, k)
        tick("windows")
        best = lists if best is None else engine.merge_lists(best[0], best[1], lists[0], lists[1], k)
        tick("merge")
    del f, sq
    keys, ids = best
    if kind == DIST_L2SQ:
        # the keys come from the GEMM form of the distance: exact distances of the chosen ids, rows
        # re-sorted by (distance, id), as the exact k-NN finishes its float rows
        gd[...], gi[...] = refine_l2(x, x, ids, "sqeuclidean", xp)
    else:
        if n_orderings == 1:  # rows sorted by (key, id), as a merge leaves them
            keys, ids = engine.merge_lists(keys, ids, keys[:, :0], ids[:, :0], k)
        gd[...] = keys + np.float32(1.0) if kind == DIST_COS else keys  # 1 - cos, -dot
        gi[...] = ids
    gf.fill(NEW)
    tick("distances")
