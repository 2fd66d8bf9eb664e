"""Overlapping k-means clusters: which rows are processed together when data is cut into parts (the
out-of-core NN-Descent build; sharding of indices).

GNND ("Fast k-NN Graph Construction by GPU based NN-Descent", section 5) cuts the data into equal shards
in storage order and merges every shard pair once. With s shards, a node's true neighbours are spread
over all s of them, so each pair merge must find a few far-down cross neighbours starting from random
ones, and recall falls as shards grow (``benchmarks/REPORT.md`` has the out-of-core measurements). Here
the parts follow the data instead, as current GPU graph builders and DiskANN's partitioned build do:

1. **Centroids.** k-means (Lloyd, a fixed number of rounds) on a seeded sample of the rows, on the
   engine's arrays (CuPy on a GPU, NumPy on the host).
2. **Assignment.** One pass over the rows (GEMM against the centroids) gives each row's ``overlap``
   nearest centroids and its distance to the border between its nearest cluster and each of the others
   (the hyperplane halfway between the two centroids); the same pass gives the distance of a few
   sample rows to their k-th nearest neighbour, whose median ``r`` is the data's neighbourhood radius.
   A row joins its nearest cluster, and another of its ``overlap`` nearest only where it lies within
   ``margin * r`` of that cluster's border: rows deep inside a cluster are built once, and a row whose
   neighbours reach across a border is built on both sides (:func:`border_threshold`;
   ``margin=None``: every row joins its ``overlap`` nearest clusters).
3. **Pieces.** A cluster with more rows than fit the budget drops its border rows farthest from the
   border when that suffices; otherwise it is halved, recursively, at the median of its rows'
   projections on the line between two sub-centroids (a 2-means of a sample of the cluster), the rows
   within the same distance of the cut joining both halves, so every piece fits and no piece is tiny.

Each piece is then processed on its own (the NN-Descent build: GNND), and every row's list is the merge
of its lists from the pieces that hold it (``knngraph.nndescent._build.clustered_build``). Total work is
about ``copies`` in-memory builds of the data (rows built / n); nothing is merged pairwise. Vectors are
float32 here (cosine: normalised rows; inner product: rows are assigned to the centroid of largest dot
product).

Why distances to the border in units of the neighbourhood radius: a neighbour is lost when the row and
the neighbour end up in different pieces, i.e. when the row's neighbourhood crosses a border. A margin
relative to the row's distance to its centroid (join cluster j where ``d_j <= (1 + eps) d_1``) was tried
first and needs a different ``eps`` for every kind of data: 56 clusters of 2M rows, the share of the
true 10 nearest neighbours that share a cluster with their row (coverage) and the clusters joined per
row were 0.989 at 1.15 (``eps=0.02``) and 0.9998 at 2.86 (``eps=0.3``) on 1,000 separate Gaussian
islands (the runner's ``synth`` set), 0.955 at 1.70 (``eps=0.2``) and 0.983 at 1.98 (``eps=0.3``) on
1,000 overlapping Gaussian clusters (``benchmarks._common.clustered(overlapping=True)``): a cluster
holding many separate modes has its rows far from its centroid, and the relative margin then takes
whole modes. The border rule with ``margin=0.2`` (and the pieces of ``clustered_build``, k=32, a
quarter of the data's memory) covered 1.000 at 1.21 rows built per row on those islands, 0.969 at 1.80
on the overlapping clusters (which overlap so much that any rule needs about 1.8 for 0.97), and 0.993
at 1.18 on 200k rows of 100 overlapping clusters.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from ._device import as_numpy, is_device_array
from .primitives.distances import DIST_COS, DIST_IP, inverse_norms

__all__ = ["features", "centroid_scores", "kmeans", "nearest_centroids", "border_threshold", "split_pieces",
           "plan_clusters", "kmeans_sample_rows", "probe_rows", "HostArrays"]

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
SPLIT_ROUNDS = 4
#: sample rows whose k-th nearest neighbour distances give the neighbourhood radius (their median): a
#: 64-column GEMM per block, about as large as the centroids' (2M x 128 rows, 2 CPU threads: the
#: assignment pass took 3.0 s with the probes and border distances for 94 clusters, 1.8 s for the 3
#: nearest of 128 clusters alone)
PROBES = 64
#: rows near a cut join the other half up to the room left there, and at least this share of the
#: halved group from each side (when the halves must be halved again anyway). The rows near the cuts on
#: both sides: 2M rows of separate clusters with 11 halvings (cluster_margin 0.15, clusters planned for 1.5
#: rows per row), the true 10 nearest neighbours in a piece with their row 0.9985 at 1.36 rows built per
#: row, against 0.9913 at 1.26 with disjoint halves
CUT_BAND_SHARE = 0.1
#: a cluster too large for a piece by at most this share of its rows drops border rows instead of
#: being halved (see split_pieces)
DROP_SHARE = 0.1
#: whether the passes over the rows (the assignment of :func:`nearest_centroids`, the projections of the
#: halvings) load their blocks through :class:`knngraph._prefetch.BlockPrefetcher`, the next block
#: gathered into page-locked memory and copied on a side stream while the current one is scored:
#: "auto": for host NumPy arrays (memory maps too) on a GPU engine, where the loads, not the GEMM, set
#: the pace of the assignment: 10M x 128 float32 rows on an H200 (16 cores), the out-of-core build's
#: assignment took 1.85 s with every block copied from pageable memory, synchronously, before its GEMM,
#: and 0.96-1.16 s loaded ahead (the loader's work, assignment and halvings together, 0.53-0.65 s, the
#: wait for it 0.03 s); the split step (2.6 s, of which 0.4 s in the halvings and the most host sorting,
#: :func:`_cluster_rows` above all) did not change measurably. True: for host
#: NumPy arrays on any engine (tests compare the two paths); False: never. Host engines read their blocks
#: directly: a range of rows is a view, a row list is gathered on numba's threads, and a worker thread
#: gathering the next block would compete for the cores the scoring's GEMM runs on. Data already on the
#: GPU is indexed there.
PREFETCH = "auto"


class HostArrays:
    """The host's array engine (NumPy): the ``xp``, ``asarray`` and ``to_host`` that the functions here
    use of an engine (:class:`knngraph.nndescent.cpu.Engine` has the same; the GPU's works on CuPy)."""

    xp = np

    @staticmethod
    def asarray(a):
        return as_numpy(a)

    @staticmethod
    def to_host(a):
        return as_numpy(a)


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


def plan_clusters(n: int, max_rows: int, copies: float) -> int:
    """Number of clusters: ``copies * n`` rows built (each row in ``copies`` clusters on average) over
    clusters of about ``FILL * max_rows`` rows."""
    return max(2, math.ceil(copies * n / (FILL * max_rows)))


def kmeans_sample_rows(n: int, n_clusters: int) -> int:
    """Rows of the k-means sample: ``SAMPLE_PER_CLUSTER`` per cluster within [MIN_SAMPLE, MAX_SAMPLE]."""
    return int(min(n, max(MIN_SAMPLE, min(MAX_SAMPLE, SAMPLE_PER_CLUSTER * n_clusters))))


def probe_rows(n: int, seed: int, count: int = PROBES):
    """Sorted indices of the seeded sample rows whose neighbour distances :func:`nearest_centroids`
    measures (all rows when there are fewer)."""
    rng = np.random.default_rng([seed, 0x5052])
    return np.sort(rng.choice(n, min(n, count), replace=False))


def _rows_on(engine, data, rows):
    """``data[rows]`` (sorted host indices) as an array of ``engine``: gathered on the GPU that holds
    device input, else on the host (memory, memory map or any object that takes index arrays) and copied."""
    if is_device_array(data) and engine.xp is not np:
        return engine.asarray(data[engine.xp.asarray(rows)])
    if is_device_array(data):
        import cupy as cp

        return cp.asnumpy(data[cp.asarray(rows)])
    from .primitives.gather import gather_rows  # numba: imported when a host gather runs

    return engine.asarray(gather_rows(data, rows))


def _block_on(engine, data, item):
    """``data``'s rows ``lo:hi`` of a ``(lo, hi)`` item, else the rows of a sorted index array, as an array
    of ``engine``."""
    if isinstance(item, tuple):
        return engine.asarray(data[item[0]:item[1]])
    return _rows_on(engine, data, item)


def _load_device(engine, data):
    """Whether ``data``'s blocks load through a :class:`~knngraph._prefetch.BlockPrefetcher` (see
    :data:`PREFETCH`), and the GPU it loads them to (None: host blocks). An engine on CuPy names its GPU
    by ``device_index`` (the NN-Descent engine), else it is the current device (the several-device
    graph's engine runs under its device's context)."""
    if PREFETCH is False or not (isinstance(data, np.ndarray) and data.ndim == 2):
        return False, None
    if engine.xp is np:
        return PREFETCH is True, None
    index = getattr(engine, "device_index", None)
    if index is None:
        import cupy

        index = cupy.cuda.runtime.getDevice()
    return True, int(index)


@contextlib.contextmanager
def _blocks(engine, data, sequence, stats=None):
    """An iterator over ``data``'s blocks of ``sequence`` (``(lo, hi)`` ranges or sorted row arrays) as
    arrays of ``engine``: loaded one step ahead (:data:`PREFETCH`), the first as soon as the ``with``
    block starts, or read as they are asked for. ``stats`` (a dict) gets the loader's ``load_seconds``
    and the caller's ``load_wait_seconds`` added (nothing where the blocks are read directly)."""
    prefetch, device = _load_device(engine, data)
    if not prefetch:
        yield (_block_on(engine, data, item) for item in sequence)
        return
    from ._prefetch import BlockPrefetcher

    fetch = BlockPrefetcher(data, sequence, device_index=device, role="partition-load")
    try:
        yield fetch  # the engine's arrays already: CuPy on its GPU, NumPy for a host engine (PREFETCH=True)
    finally:
        fetch.close()
        if stats is not None:
            stats["load_seconds"] = stats.get("load_seconds", 0.0) + fetch.load_seconds
            stats["load_wait_seconds"] = stats.get("load_wait_seconds", 0.0) + fetch.wait_seconds


def _score_rows(m: int, d: int, c: int) -> int:
    """Rows of a block of centroid scores: the ``block x c`` scores take no more room than the ``m x d``
    features they come from (at least 1,024 rows)."""
    return max(1024, (m * d) // max(c, 1))


def _nearest(xp, x, cent, kind):
    """Each feature row's nearest centroid (int32) and the distance to it (squared L2, or -dot), in blocks."""
    m, d = x.shape
    c_sq = (cent * cent).sum(1)
    lab = xp.empty(m, xp.int32)
    dist = xp.empty(m, xp.float32)
    step = _score_rows(m, d, cent.shape[0])
    for lo in range(0, m, step):
        f = x[lo:lo + step]
        sc = centroid_scores(xp, f, cent, c_sq, kind)
        best = sc.argmin(axis=1)
        lab[lo:lo + step] = best
        near = sc[xp.arange(f.shape[0]), best]
        dist[lo:lo + step] = near if kind == DIST_IP else near + (f * f).sum(1)
    return lab, dist


def _lloyd(xp, x, cent, kind, rounds):
    """``rounds`` Lloyd rounds on the feature rows ``x`` from the centroids ``cent`` (both ``xp``). The new
    centroids are the clusters' means, summed as one-hot matrix products (GEMM on either array module); an
    empty cluster is re-seeded with the row farthest from its centroid, so every centroid ends up owning
    rows."""
    m, d = x.shape
    c = cent.shape[0]
    ids = xp.arange(c, dtype=xp.int32)
    step = _score_rows(m, d, c)
    for _ in range(rounds):
        lab, dist = _nearest(xp, x, cent, kind)
        sums = xp.zeros((c, d), xp.float32)
        counts = xp.zeros(c, xp.float32)
        for lo in range(0, m, step):
            one_hot = (lab[lo:lo + step, None] == ids[None, :]).astype(xp.float32)
            # this order: 13 ms against 55 ms for one_hot.T @ x (20k x 128 rows, 92 clusters, OpenBLAS, 2 cores)
            sums += (x[lo:lo + step].T @ one_hot).T
            counts += one_hot.sum(0)
        owned = counts > 0
        cent = xp.where(owned[:, None], sums / xp.maximum(counts, 1)[:, None], cent).astype(xp.float32)
        empty = xp.flatnonzero(~owned)
        if empty.size:
            # the rows farthest from their centroids restart the empty clusters
            cent[empty] = x[xp.argsort(-dist)[:empty.size]]
        if kind == DIST_COS:
            cent /= xp.maximum(xp.sqrt((cent * cent).sum(1, keepdims=True)), xp.float32(1e-30))
    return cent


def kmeans(data, n_clusters: int, kind: int, seed: int, *, rounds: int = KMEANS_ROUNDS, sample: int | None = None,
           engine=None):
    """Centroids (float32, ``(c, d)``, arrays of ``engine``: NumPy by default, CuPy for the GPU's) of
    ``n_clusters`` clusters from a seeded sample of ``data`` (``sample`` rows, by default
    :func:`kmeans_sample_rows`).

    Lloyd's rounds (:func:`_lloyd`) on the engine's arrays: on a GPU the sample is copied there once and
    every round is GEMM there. Deterministic for a given seed and engine.
    """
    engine = engine or HostArrays
    xp = engine.xp
    n = data.shape[0]
    rng = np.random.default_rng([seed, 0x6B6D])
    m = int(min(n, sample if sample is not None else kmeans_sample_rows(n, n_clusters)))
    rows = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
    x = features(xp, _rows_on(engine, data, rows), kind)
    c = min(n_clusters, m)
    start = x[xp.asarray(np.sort(rng.choice(m, size=c, replace=False)))]
    return _lloyd(xp, x, start, kind, rounds)


def _smallest(xp, sc, w):
    """The ``w`` smallest scores of each row of ``sc`` (which is overwritten) and their columns (int32),
    smallest first: ``w`` passes of argmin (cheaper than sorting the rows for the few clusters a row
    joins)."""
    b = sc.shape[0]
    at = xp.arange(b)
    cols = xp.empty((b, w), xp.int32)
    vals = xp.empty((b, w), xp.float32)
    for j in range(w):
        best = sc.argmin(axis=1)
        cols[:, j] = best
        vals[:, j] = sc[at, best]
        if j + 1 < w:
            sc[at, best] = xp.inf
    return cols, vals


def _centroid_gaps(xp, c, c_sq, kind):
    """``(C, C)`` distances between the centroids, in the space where the border rule measures (inner
    product: the centroids padded with a coordinate that brings every norm to the largest one)."""
    gap_sq = c_sq[:, None] + c_sq[None, :] - 2 * (c @ c.T)
    if kind == DIST_IP:
        pad = xp.sqrt(xp.maximum(c_sq.max() - c_sq, 0))
        gap_sq = gap_sq + (pad[:, None] - pad[None, :]) ** 2
    return xp.sqrt(xp.maximum(gap_sq, xp.float32(1e-30)))


class _ProbeNeighbours:
    """The distance of each probe row to its k-th nearest other row (by the metric; its L2 distance for
    inner product), gathered block by block: each block's k best rows per probe, merged with the k best
    of the blocks before."""

    def __init__(self, engine, data, probes, kind, k):
        xp = self.xp = engine.xp
        self.probes = probes
        self.kind = kind
        self.k = k
        self.f = features(xp, _rows_on(engine, data, probes), kind)
        self.sq = (self.f * self.f).sum(1)
        self.score = None  # (probes, k): squared distance less the probe's squared norm, or -dot
        self.dist_sq = None

    def add(self, f, sq, lo):
        xp = self.xp
        k = min(self.k, f.shape[0])
        dots = self.f @ f.T  # (probes, block)
        score = -dots if self.kind == DIST_IP else sq[None, :] - 2 * dots
        a, b = np.searchsorted(self.probes, [lo, lo + f.shape[0]])
        if b > a:  # a probe is not its own neighbour
            score[xp.arange(a, b), xp.asarray(self.probes[a:b] - lo)] = xp.inf
        best = xp.argpartition(score, k - 1, axis=1)[:, :k] if k < f.shape[0] else xp.argsort(score, axis=1)
        score = xp.take_along_axis(score, best, 1)
        dist_sq = self.sq[:, None] + sq[best] - 2 * xp.take_along_axis(dots, best, 1)
        if self.score is not None:
            score = xp.concatenate([self.score, score], axis=1)
            dist_sq = xp.concatenate([self.dist_sq, dist_sq], axis=1)
            if score.shape[1] > self.k:
                keep = xp.argpartition(score, self.k - 1, axis=1)[:, :self.k]
                score = xp.take_along_axis(score, keep, 1)
                dist_sq = xp.take_along_axis(dist_sq, keep, 1)
        self.score, self.dist_sq = score, dist_sq

    def radii(self, engine):
        """Host float64 distances of the probes to their k-th nearest other row."""
        xp = self.xp
        worst = xp.argmax(self.score, axis=1)[:, None]
        return np.sqrt(np.maximum(engine.to_host(xp.take_along_axis(self.dist_sq, worst, 1))[:, 0], 0)
                       .astype(np.float64))


def nearest_centroids(engine, data, cent, kind: int, overlap: int, block_rows: int, *, with_border: bool = False,
                      probes=None, k: int = 0, stats=None):
    """Host int32 ``(n, overlap)``: each row's ``overlap`` nearest centroids, nearest first, computed block
    by block on the engine (GEMM of the rows against the centroids).

    ``with_border``: returns ``(labels, border, radii)``: also the host float32 ``(n, overlap)`` distance
    of each row to the border between its nearest cluster and each of the others (the hyperplane halfway
    between the two centroids, ``(d_j - d_1) / (2 |c_j - c_1|)`` with ``d`` the squared distances; 0 for
    the nearest), and, for the rows ``probes`` (sorted host indices), their distance to their ``k``-th
    nearest other row (None without probes). Cosine: distances of the normalised rows and centroids.
    Inner product, whose nearest centroid is the one of largest dot product: the same measure on the
    usual reduction of inner product to L2 (each centroid padded with a coordinate that brings its norm
    to M, the largest centroid norm, the rows padded with 0; ``d = ||f||^2 + M^2 - 2 <f, c>`` orders the
    centroids as the dot products do), and the probes' L2 distance to their k-th largest dot product.

    Host rows bound for a GPU load one block ahead (:func:`_blocks`; ``stats``: a dict that gets the
    loads' ``load_seconds`` and ``load_wait_seconds`` added).
    """
    n = data.shape[0]
    bounds = [(lo, min(n, lo + block_rows)) for lo in range(0, n, block_rows)]
    with _blocks(engine, data, bounds, stats) as blocks:  # the first block loads while the rest is set up
        return _assign(engine, data, blocks, bounds, cent, kind, overlap, with_border, probes, k)


def _assign(engine, data, blocks, bounds, cent, kind, overlap, with_border, probes, k):
    """:func:`nearest_centroids` over the ``blocks`` of rows ``bounds``."""
    xp = engine.xp
    n = data.shape[0]
    c = engine.asarray(cent)
    c_sq = (c * c).sum(1)
    out = np.empty((n, overlap), np.int32)
    border = np.zeros((n, overlap), np.float32) if with_border else None
    if with_border:
        gaps = _centroid_gaps(xp, c, c_sq, kind)
        # L2, cosine: the scores s are the squared distances less ||f||^2, so d_j - d_1 = s_j - s_1 and the
        # border distance is (s_j - s_1) / (2 gap); inner product: s = -<f, c> and the reduction's squared
        # distances are ||f||^2 + M^2 + 2 s, so the border distance is (s_j - s_1) / gap
        scale = np.float32(1.0 if kind == DIST_IP else 0.5)
    k = int(min(k, n - 1))
    near_probes = _ProbeNeighbours(engine, data, probes, kind, k) if with_border and probes is not None and k > 0 \
        else None
    for (lo, hi), block in zip(bounds, blocks):
        f = features(xp, block, kind)
        cols, near = _smallest(xp, centroid_scores(xp, f, c, c_sq, kind), overlap)
        if with_border and overlap > 1:
            gap = gaps[cols[:, 1:], cols[:, :1]]
            border[lo:hi, 1:] = engine.to_host((near[:, 1:] - near[:, :1]) * scale / gap)
        if near_probes is not None:
            near_probes.add(f, (f * f).sum(1), lo)
        out[lo:hi] = engine.to_host(cols)
    if not with_border:
        return out
    return out, border, near_probes.radii(engine) if near_probes is not None else None


def border_threshold(border, threshold: float, max_copies: float) -> float:
    """The border distance up to which a row joins a cluster other than its nearest: ``threshold``, or
    lower where that would build more than ``max_copies`` rows per row (the clusters a row joins, on
    average): data without cluster structure has nearly every row near a border, and would be built
    ``overlap`` times."""
    n = border.shape[0]
    others = border[:, 1:]
    allowed = int((max_copies - 1) * n)
    if np.count_nonzero(others <= threshold) <= allowed:
        return float(threshold)
    if allowed <= 0:
        return 0.0
    return float(np.partition(others, allowed - 1, axis=None)[allowed - 1])


def _cluster_rows(labels, n_clusters: int):
    """Each cluster's rows (sorted int64) from the ``(n, w)`` labels (-1: none): a counting sort
    (:func:`knngraph.primitives.group.rows_by_label`, numba: imported when it runs)."""
    from .primitives.group import rows_by_label

    return rows_by_label(labels, n_clusters)


def _halve(engine, data, groups, kind, seed, level, block_rows, max_rows, cut_margin, stats=None):
    """Each of ``groups`` (sorted row lists) cut into two halves (sorted) along the line between two
    sub-centroids of a sample of its rows, at the median of its rows' projections on that line. With a
    ``cut_margin``, the rows within that distance of the cut (the hyperplane through the median) join both
    halves: as many as the other half has room for within ``max_rows``, and at least ``CUT_BAND_SHARE``
    of the group from each side, the nearest to the cut first. The projections of all groups come from
    one pass over the union of their rows (a row may sit in several groups: different clusters), GEMM of
    each block against all the directions; the blocks are known before the directions, so host rows bound
    for a GPU load one block ahead from the start (:func:`_blocks`, ``stats`` as in
    :func:`nearest_centroids`), the first while the directions are found."""
    xp = engine.xp
    d = data.shape[1]
    n_groups = len(groups)
    # every (row, group) pair, ordered by row
    pair_rows = np.concatenate(groups)
    pair_group = np.repeat(np.arange(n_groups), [len(r) for r in groups])
    order = np.argsort(pair_rows, kind="stable")
    by_row = pair_rows[order]
    first = np.empty(len(by_row), bool)
    first[:1] = True
    np.not_equal(by_row[1:], by_row[:-1], out=first[1:])
    uniq = by_row[first]
    pos = np.cumsum(first) - 1  # each pair's place in uniq
    step = max(1, min(block_rows, block_rows * d // n_groups))  # the block's projections no larger than its rows
    bounds = [(lo, min(len(uniq), lo + step)) for lo in range(0, len(uniq), step)]
    proj = np.empty(len(pair_rows), np.float32)
    with _blocks(engine, data, [uniq[lo:hi] for lo, hi in bounds], stats) as blocks:
        dirs = xp.empty((n_groups, d), xp.float32)
        for g, rows in enumerate(groups):
            rng = np.random.default_rng([seed, level, g, 0x4856])
            m = min(len(rows), SPLIT_SAMPLE)
            x = features(xp, _rows_on(engine, data, rows[np.sort(rng.choice(len(rows), m, replace=False))]), kind)
            sub = _lloyd(xp, x, x[xp.asarray(np.sort(rng.choice(m, 2, replace=False)))], kind, SPLIT_ROUNDS)
            dirs[g] = sub[1] - sub[0]
        lengths = np.sqrt(engine.to_host((dirs * dirs).sum(1)).astype(np.float64))
        for (lo, hi), block in zip(bounds, blocks):
            a, b = np.searchsorted(pos, [lo, hi])
            f = features(xp, block, kind)
            p = f @ dirs.T
            mine = order[a:b]
            proj[mine] = engine.to_host(p[xp.asarray(pos[a:b] - lo), xp.asarray(pair_group[mine])])
    halves = []
    off = 0
    for g, rows in enumerate(groups):
        m = len(rows)
        p = proj[off:off + m]
        off += m
        half = m // 2
        cut = np.argpartition(p, half)  # the median's side, not a full sort
        low = np.zeros(m, bool)
        low[cut[:half]] = True
        if cut_margin is None:
            halves.append((rows[low], rows[~low]))
            continue
        to_cut = np.abs(p - p[cut[half]]) / max(lengths[g], 1e-30)
        near = to_cut <= cut_margin
        cross = []
        for side, other in ((low, m - half), (~low, half)):
            idx = np.flatnonzero(side & near)
            cap = max(int(CUT_BAND_SHARE * m), max_rows - other)
            if len(idx) > cap:
                idx = idx[np.argpartition(to_cut[idx], cap)[:cap]]
            mask = np.zeros(m, bool)
            mask[idx] = True
            cross.append(mask)
        halves.append((rows[low | cross[1]], rows[~low | cross[0]]))
    return halves


def split_pieces(data, labels, n_clusters: int, kind: int, seed: int, max_rows: int, block_rows: int, *,
                 min_rows: int = 0, engine=None, border=None, cut_margin: float | None = None, stats=None):
    """Sorted int64 row lists, one per piece: each cluster's rows (a row is in the clusters of all its
    ``labels`` that are not -1). Clusters larger than ``max_rows`` are halved until the halves fit (all
    the clusters, then all the halves, too large at one level together: :func:`_halve`, on ``engine``'s
    arrays; ``cut_margin``: the rows within that distance of a cut join both halves), except that with
    the ``border`` distances of :func:`nearest_centroids`, a cluster too large by at most ``DROP_SHARE``
    of its rows whose own rows (those that have it nearest) fit drops the border rows farthest from its
    border instead. Clusters of fewer than ``min_rows`` rows (outliers that k-means gave a centroid of
    their own) are pooled, and the pool joins the smallest piece when it is still too small on its own;
    empty clusters are dropped.

    Why drop border rows rather than halve a cluster slightly too large: a halving cuts through the middle
    of a cluster, where rows are dense, and the rows near the cut must be built on both sides; a dropped
    border row is still built in its own cluster with the neighbours on its side of the border, but a
    cluster far too large loses many of them. 200k x 128 overlapping clusters
    (``benchmarks/studies/nndescent_out_of_core.py``'s data), k=32, 64 clusters of which 6 too large (by 3
    to 36 %), all with own rows that fit (measured with the margin relative to the distance to the
    centroid that the border rule replaced, :mod:`knngraph.partition`): the true 10 nearest neighbours
    that share a piece with their row were 0.986 over the clusters, 0.9857 with every large cluster
    halved (1.316 rows built per row), 0.9785 with border rows dropped from all of them (1.235) and
    0.9853 with border rows dropped from those at most 10 % too large (1.280).

    ``stats``: a dict that gets the halvings' block loads added, as :func:`nearest_centroids`'s."""
    engine = engine or HostArrays
    labels = np.asarray(labels)
    pieces = []
    small = []
    todo = _cluster_rows(labels, n_clusters)
    level = 0
    while todo:
        large = []
        for c, rows in enumerate(todo):
            if not len(rows):
                continue
            if level == 0 and border is not None and max_rows < len(rows) <= max_rows + DROP_SHARE * len(rows):
                col = (labels[rows] == c).argmax(axis=1)
                if np.count_nonzero(col == 0) <= max_rows:
                    # the cluster's own rows (border distance 0) and its border rows nearest the border
                    keep = np.zeros(len(rows), bool)
                    keep[np.argpartition(border[rows, col], max_rows - 1)[:max_rows]] = True
                    rows = rows[keep]
            if len(rows) < min_rows:
                small.append(rows)
            elif len(rows) <= max_rows:
                pieces.append(rows)
            else:
                large.append(rows)
        todo = []
        if large:
            todo = [h for pair in _halve(engine, data, large, kind, seed, level, block_rows, max_rows, cut_margin,
                                         stats) for h in pair]
        level += 1
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
