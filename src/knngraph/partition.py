"""Overlapping k-means clusters: which rows are processed together when data is cut into parts (the
out-of-core NN-Descent build; sharding of indices).

GNND ("Fast k-NN Graph Construction by GPU based NN-Descent", section 5) cuts the data into equal shards
in storage order and merges every shard pair once. With s shards, a node's true neighbours are spread
over all s of them, so each pair merge must find a few far-down cross neighbours starting from random
ones, and recall falls as shards grow (``benchmarks/REPORT.md`` has the out-of-core measurements). Here
the parts follow the data instead, as current GPU graph builders and DiskANN's partitioned build do:

1. **Centroids.** k-means (Lloyd, a fixed number of rounds) on a seeded sample of the rows, on the host.
2. **Overlapping assignment.** Every row joins the clusters of its ``overlap`` nearest centroids
   (default 3), so a row near a cluster border is built together with the neighbours on both sides.
3. **Pieces.** A cluster with more rows than fit the budget is halved, recursively, at the median of
   its rows' projection on the line between two sub-centroids (a 2-means of a sample of the cluster),
   so every piece fits and no piece is tiny.

Each piece is then processed on its own (the NN-Descent build: GNND), and every row's list is the merge
of its lists from the ``overlap`` pieces that hold it (``knngraph.nndescent._build.clustered_build``).
Total work is about ``overlap`` in-memory builds of the data; nothing is merged pairwise. Vectors are
float32 here (cosine: normalised rows; inner product: rows are assigned to the centroid of largest dot
product).
"""

from __future__ import annotations

import math

import numpy as np

from ._device import is_device_array
from .primitives.distances import DIST_COS, DIST_IP, inverse_norms

__all__ = ["features", "centroid_scores", "kmeans", "nearest_centroids", "split_pieces", "plan_clusters"]

#: rows of the k-means sample per centroid (and at least MIN_SAMPLE, at most MAX_SAMPLE rows)
SAMPLE_PER_CLUSTER = 256
MIN_SAMPLE = 20_000
MAX_SAMPLE = 500_000
KMEANS_ROUNDS = 10
#: a cluster gets ``FILL`` of the rows a piece may hold on average, leaving room for unequal sizes
FILL = 0.7
#: rows sampled for the two sub-centroids that halve a cluster too large for one piece (only their
#: direction matters: the halves are cut at the median of the projections of all the cluster's rows);
#: 20,000 made the halvings most of the partition's time (2M rows, 35 halvings: 10 s on 2 cores)
SPLIT_SAMPLE = 4096


def features(xp, block, kind):
    """float32 rows of ``block`` as ``xp`` arrays; cosine rows normalised (zero rows stay zero)."""
    f = xp.asarray(block).astype(xp.float32, copy=kind == DIST_COS)  # a copy only where it is scaled
    if kind == DIST_COS:
        f *= inverse_norms(f, xp)[:, None]
    return f


def centroid_scores(xp, f, cent, cent_sq, kind):
    """Smaller = nearer: ||c||^2 - 2<f, c> (squared distance minus ||f||^2), or -<f, c> for inner product."""
    dots = f @ cent.T
    if kind == DIST_IP:
        return -dots
    return cent_sq[None, :] - 2.0 * dots


def plan_clusters(n: int, max_rows: int, overlap: int) -> int:
    """Number of clusters: ``overlap * n`` row copies over clusters of about ``FILL * max_rows`` rows."""
    return max(2, math.ceil(overlap * n / (FILL * max_rows)))


def kmeans(data, n_clusters: int, kind: int, seed: int, *, rounds: int = KMEANS_ROUNDS, sample: int | None = None):
    """Centroids (float32, ``(c, d)``, NumPy) of ``n_clusters`` clusters from a seeded sample of ``data``
    (``sample`` rows, by default ``SAMPLE_PER_CLUSTER`` per cluster within [MIN_SAMPLE, MAX_SAMPLE]).

    Lloyd's rounds on the host; an empty cluster is re-seeded with the sample row farthest from its
    centroid, so every centroid ends up owning rows. Deterministic for a given seed.
    """
    n = data.shape[0]
    rng = np.random.default_rng([seed, 0x6B6D])
    m = sample if sample is not None else max(MIN_SAMPLE, min(MAX_SAMPLE, SAMPLE_PER_CLUSTER * n_clusters))
    m = int(min(n, m))
    rows = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
    x = features(np, _host_rows(data, rows), kind)
    c = min(n_clusters, m)
    cent = x[np.sort(rng.choice(m, size=c, replace=False))].copy()
    for _ in range(rounds):
        lab, dist = _assign_host(x, cent, kind)
        order = np.argsort(lab, kind="stable")
        starts = np.searchsorted(lab[order], np.arange(c))
        counts = np.bincount(lab, minlength=c)
        full = np.flatnonzero(counts > 0)
        sums = np.add.reduceat(x[order], starts[full], axis=0)
        cent[full] = sums / counts[full, None].astype(np.float32)
        empty = np.flatnonzero(counts == 0)
        if len(empty):
            # the rows farthest from their centroids restart the empty clusters
            cent[empty] = x[np.argsort(-dist, kind="stable")[:len(empty)]]
        if kind == DIST_COS:
            cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), np.float32(1e-30))
    return cent


def _assign_host(x, cent, kind, chunk=65536):
    """Nearest centroid of each row of ``x`` and the distance to it (squared L2, or -dot), in chunks."""
    lab = np.empty(len(x), np.int64)
    dist = np.empty(len(x), np.float32)
    c_sq = (cent * cent).sum(1)
    for lo in range(0, len(x), chunk):
        f = x[lo:lo + chunk]
        sc = centroid_scores(np, f, cent, c_sq, kind)
        lab[lo:lo + chunk] = best = sc.argmin(axis=1)
        d = sc[np.arange(len(f)), best]
        dist[lo:lo + chunk] = d if kind == DIST_IP else d + (f * f).sum(1)
    return lab, dist


def _host_rows(data, rows):
    """``data[rows]`` as a NumPy array (host, memory map or device input)."""
    if is_device_array(data):
        import cupy as cp

        return cp.asnumpy(data[cp.asarray(rows)])
    return np.asarray(data[rows])


def nearest_centroids(engine, data, cent, kind: int, overlap: int, block_rows: int):
    """Host int32 ``(n, overlap)``: each row's ``overlap`` nearest centroids, nearest first, computed
    block by block on the engine (GEMM of the rows against the centroids)."""
    xp = engine.xp
    n = data.shape[0]
    c = engine.asarray(cent)
    c_sq = (c * c).sum(1)
    out = np.empty((n, overlap), np.int32)
    for lo in range(0, n, block_rows):
        hi = min(n, lo + block_rows)
        f = features(xp, engine.asarray(data[lo:hi]), kind)
        sc = centroid_scores(xp, f, c, c_sq, kind)
        out[lo:hi] = engine.to_host(xp.argsort(sc, axis=1)[:, :overlap].astype(xp.int32))
    return out


def _median_halves(data, rows, kind, seed, block_rows):
    """Split sorted ``rows`` into two halves of equal size along the line between two sub-centroids."""
    sub = kmeans(_Rows(data, rows), 2, kind, seed, rounds=4, sample=SPLIT_SAMPLE)
    direction = (sub[1] - sub[0]).astype(np.float32)
    proj = np.empty(len(rows), np.float32)
    for lo in range(0, len(rows), block_rows):
        proj[lo:lo + block_rows] = features(np, _host_rows(data, rows[lo:lo + block_rows]), kind) @ direction
    half = len(rows) // 2
    order = np.argpartition(proj, half)  # the median's side of each row, not a full sort
    return np.sort(rows[order[:half]]), np.sort(rows[order[half:]])


class _Rows:
    """A row subset of ``data`` that :func:`kmeans` can sample from."""

    def __init__(self, data, rows):
        self.data = data
        self.rows = rows
        self.shape = (len(rows),) + tuple(data.shape[1:])

    def __getitem__(self, idx):
        return _host_rows(self.data, self.rows[idx])


def split_pieces(data, labels, n_clusters: int, kind: int, seed: int, max_rows: int, block_rows: int, *,
                 min_rows: int = 0):
    """Sorted int64 row lists, one per piece: each cluster's rows (a row is in the clusters of all its
    ``labels``), clusters larger than ``max_rows`` halved until they fit. Clusters of fewer than
    ``min_rows`` rows (outliers that k-means gave a centroid of their own) are pooled, and the pool joins
    the smallest piece when it is still too small on its own; empty clusters are dropped."""
    flat = labels.ravel()
    owner = np.repeat(np.arange(labels.shape[0], dtype=np.int64), labels.shape[1])
    order = np.argsort(flat, kind="stable")  # stable: rows stay ascending within a cluster
    bounds = np.searchsorted(flat[order], np.arange(n_clusters + 1))
    pieces = []
    small = []
    for c in range(n_clusters):
        todo = [owner[order[bounds[c]:bounds[c + 1]]]]
        while todo:
            rows = todo.pop()
            if len(rows) < min_rows:
                small.append(rows)
            elif len(rows) <= max_rows:
                pieces.append(rows)
            else:
                a, b = _median_halves(data, rows, kind, seed + 31 * len(pieces) + c, block_rows)
                todo += [b, a]
    if small:
        pool = np.unique(np.concatenate(small))
        while len(pool) > max_rows:  # many outliers: pool them in storage order
            pieces.append(pool[:max_rows])
            pool = pool[max_rows:]
        if len(pool) >= min_rows or not pieces:
            pieces.append(pool)
        elif len(pool):
            j = int(np.argmin([len(r) for r in pieces]))
            pieces[j] = np.union1d(pieces[j], pool)
    return pieces
