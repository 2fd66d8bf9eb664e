"""The overlapping k-means partition of the out-of-core build (:mod:`knngraph.partition`): the distances
to the cluster borders and the neighbourhood radius of the assignment pass, the border rule and its cap,
the pieces (border rows dropped from a cluster slightly too large, halving with the rows near the cut on
both sides) and k-means itself, on the host's arrays (the GPU engine runs the same code on CuPy)."""

import numpy as np
import pytest

from knngraph import partition as P
from knngraph.primitives.distances import DIST_COS, DIST_IP, DIST_L2SQ

HOST = P.HostArrays


def _assign(x, cent, kind=DIST_L2SQ, overlap=3, block_rows=7, probes=None, k=0):
    """Labels, border distances and probe radii of ``x`` (small blocks: the block loop is tested too)."""
    return P.nearest_centroids(HOST, np.asarray(x, np.float32), np.asarray(cent, np.float32), kind, overlap,
                               block_rows, with_border=True, probes=probes, k=k)


def _joined(labels, border, threshold):
    out = labels.copy()
    out[:, 1:][border[:, 1:] > threshold] = -1
    return out


def test_border_distances_on_a_triangle():
    """Three centroids on a triangle of side 10: a row's distance to the border with another cluster is
    its distance to the perpendicular bisector of the two centroids."""
    cent = np.array([[0.0, 0.0], [10.0, 0.0], [5.0, 5.0 * np.sqrt(3)]])
    centre = cent.mean(0)
    x = np.array([[0.0, 0.0], [1.0, 0.5], [4.0, 0.0], [5.0, 0.0], centre, [6.5, 1.0]])
    lab, border, radii = _assign(x, cent)
    assert lab.shape == border.shape == (6, 3) and lab.dtype == np.int32 and border.dtype == np.float32
    assert radii is None
    assert (border[:, 0] == 0).all() and (np.diff(border, axis=1) >= -1e-5).all()
    np.testing.assert_array_equal(lab[:, 0], [0, 0, 0, 0, lab[4, 0], 1])
    # the bisector of centroids 0 and 1 is x = 5: rows at x = 0, 1, 4 are 5, 4, 1 from it
    np.testing.assert_allclose(border[[0, 1, 2], 1], [5, 4, 1], rtol=1e-5)
    assert (lab[[0, 1, 2], 1] == 1).all()
    assert border[3, 1] == pytest.approx(0, abs=1e-5) and border[4, 1:] == pytest.approx(0, abs=1e-4)
    # within 1.5 of a border: rows 2 to 5 join a second cluster, the centre all three, rows 0 and 1 one
    joined = _joined(lab, border, 1.5)
    np.testing.assert_array_equal((joined >= 0).sum(1), [1, 1, 2, 2, 3, 2])
    # margin=None's labels: the same nearest clusters, all of them
    np.testing.assert_array_equal(P.nearest_centroids(HOST, x.astype(np.float32), cent.astype(np.float32),
                                                      DIST_L2SQ, 3, 4), lab)


def test_border_distances_match_float64_geometry():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6)).astype(np.float32)
    cent = rng.normal(size=(9, 6)).astype(np.float32)
    lab, border, _ = _assign(x, cent, overlap=4, block_rows=64)
    d = ((x[:, None, :].astype(np.float64) - cent[None]) ** 2).sum(-1)
    order = np.argsort(d, axis=1)[:, :4]
    np.testing.assert_array_equal(lab, order)
    c1 = cent[order[:, :1]].astype(np.float64)
    gap = np.sqrt(((cent[order].astype(np.float64) - c1) ** 2).sum(-1))
    want = (np.take_along_axis(d, order, 1) - np.take_along_axis(d, order[:, :1], 1)) / (2 * np.maximum(gap, 1e-30))
    np.testing.assert_allclose(border[:, 1:], want[:, 1:], rtol=1e-3, atol=1e-4)


def test_border_distances_inner_product_and_cosine():
    """Inner product: the nearest cluster is the one of largest dot product, and the border distances
    are those of the reduction to L2 (centroids padded to the largest norm, rows padded with 0). Cosine:
    the rows' lengths do not matter."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 5)).astype(np.float32)
    cent = (rng.normal(size=(6, 5)) * rng.uniform(0.5, 3, size=(6, 1))).astype(np.float32)
    lab, border, _ = _assign(x, cent, kind=DIST_IP, overlap=3, block_rows=50)
    dots = x.astype(np.float64) @ cent.T.astype(np.float64)
    np.testing.assert_array_equal(lab, np.argsort(-dots, axis=1)[:, :3])
    sq = (cent.astype(np.float64) ** 2).sum(1)
    padded = np.hstack([cent, np.sqrt(sq.max() - sq)[:, None]])
    rows = np.hstack([x, np.zeros((200, 1))])
    d = ((rows[:, None, :] - padded[None]) ** 2).sum(-1)
    dl = np.take_along_axis(d, lab, 1)
    gap = np.sqrt(((padded[lab[:, 1:]] - padded[lab[:, :1]]) ** 2).sum(-1))
    np.testing.assert_allclose(border[:, 1:], (dl[:, 1:] - dl[:, :1]) / (2 * gap), rtol=1e-3, atol=1e-4)
    c = cent / np.linalg.norm(cent, axis=1, keepdims=True)
    scaled = x * rng.uniform(0.1, 50, size=(200, 1)).astype(np.float32)
    a, ba, _ = _assign(x, c, kind=DIST_COS)
    b, bb, _ = _assign(scaled, c, kind=DIST_COS)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(ba, bb, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("kind", [DIST_L2SQ, DIST_IP, DIST_COS])
def test_probe_radii_are_the_distances_to_the_kth_neighbour(kind):
    """The assignment pass also gives each probe row's distance to its k-th nearest other row by the
    metric (inner product: the L2 distance to the row of k-th largest dot product), across blocks."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 8)).astype(np.float32)
    cent = rng.normal(size=(4, 8)).astype(np.float32)
    probes = P.probe_rows(500, 7, count=40)
    assert len(probes) == 40 and (np.diff(probes) > 0).all()
    _, _, radii = _assign(x, cent, kind=kind, block_rows=64, probes=probes, k=5)
    f = x.astype(np.float64)
    if kind == DIST_COS:
        f = f / np.linalg.norm(f, axis=1, keepdims=True)
    l2 = np.sqrt(((f[probes][:, None, :] - f[None]) ** 2).sum(-1))
    score = -(f[probes] @ f.T) if kind == DIST_IP else l2
    score[np.arange(40), probes] = np.inf
    fifth = np.argsort(score, axis=1)[:, 4]
    np.testing.assert_allclose(radii, l2[np.arange(40), fifth], rtol=1e-3, atol=1e-4)
    assert P.probe_rows(30, 0).tolist() == list(range(30))


def test_border_threshold_caps_the_rows_built():
    """Rows without cluster structure are all near a border: the threshold is lowered to what builds at
    most max_copies rows per row; well-separated blobs keep the threshold asked for."""
    rng = np.random.default_rng(4)
    flat = rng.random((4000, 32), dtype=np.float32)
    cent = P.kmeans(flat, 12, DIST_L2SQ, 0)
    lab, border, _ = _assign(flat, cent, block_rows=1000)
    wide = float(border.max())
    threshold = P.border_threshold(border, wide, 1.5)
    assert threshold < wide
    assert (_joined(lab, border, threshold) >= 0).sum() / len(flat) == pytest.approx(1.5, abs=1e-3)
    assert P.border_threshold(border, wide, 3.0) == wide
    assert P.border_threshold(border, wide, 1.0) == 0.0
    centres = (rng.normal(size=(12, 32)) * 20).astype(np.float32)
    blobs = (centres[rng.integers(0, 12, 4000)] + rng.normal(size=(4000, 32))).astype(np.float32)
    lab, border, _ = _assign(blobs, centres, block_rows=1000)
    assert P.border_threshold(border, 2.0, 1.5) == 2.0
    assert (_joined(lab, border, 2.0) >= 0).sum() / len(blobs) < 1.05


def test_kmeans_finds_separated_blobs_and_is_deterministic():
    """Four blobs far apart, 12 centroids: every blob gets centroids, every centroid lies in a blob (Lloyd
    from random rows may give a blob more centroids than another, but leaves none between blobs or
    empty)."""
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(4, 16)) * 30
    x = (centres[np.repeat(np.arange(4), 1000)] + rng.normal(size=(4000, 16))).astype(np.float32)
    cent = P.kmeans(x, 12, DIST_L2SQ, 5)
    assert cent.shape == (12, 16) and cent.dtype == np.float32
    d = np.sqrt(((centres[:, None, :] - cent[None]) ** 2).sum(-1))
    assert (d.min(1) < 4.0).all() and (d.min(0) < 4.0).all(), d
    lab = P.nearest_centroids(HOST, x, cent, DIST_L2SQ, 1, 1000)
    assert len(np.unique(lab)) == 12  # no empty cluster
    np.testing.assert_array_equal(cent, P.kmeans(x, 12, DIST_L2SQ, 5))
    cos = P.kmeans(x, 8, DIST_COS, 5)
    np.testing.assert_allclose(np.linalg.norm(cos, axis=1), 1.0, rtol=1e-5)
    # more clusters than rows of the sample: one per row
    assert P.kmeans(x[:10], 50, DIST_L2SQ, 0).shape == (10, 16)


def test_split_pieces_fit_and_cover_every_row():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(1200, 8)).astype(np.float32)
    x[600:, 0] += 6
    cent = np.array([[0.0] * 8, [6.0] + [0.0] * 7], np.float32)
    lab, border, _ = _assign(x, cent, overlap=2, block_rows=256)
    lab = _joined(lab, border, 0.5)
    for cut_margin in (None, 0.5):
        pieces = P.split_pieces(x, lab, 2, DIST_L2SQ, 0, 400, 256, min_rows=10, border=border,
                                cut_margin=cut_margin)
        assert all(len(p) <= 400 for p in pieces) and len(pieces) >= 4
        assert all((np.diff(p) > 0).all() and p.dtype == np.int64 for p in pieces)  # sorted, distinct
        np.testing.assert_array_equal(np.unique(np.concatenate(pieces)), np.arange(len(x)))
        total = sum(len(p) for p in pieces)
        if cut_margin is None:
            # halves at the median: every row of a cluster is in exactly one of its pieces
            assert total == (lab >= 0).sum()
        else:
            # rows near the cuts are built on both sides
            assert total > (lab >= 0).sum()


def test_halving_puts_the_rows_near_the_cut_into_both_halves():
    """One cluster of 1,000 rows spread along the first axis, at most 600 rows per piece: the cut is at
    the median along that axis; rows within cut_margin of it join both halves, up to the room left in the
    other half (100 from each side); without a cut_margin the halves are disjoint."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(1000, 4)).astype(np.float32)
    x[:, 0] *= 10
    x[:, 1:] *= 0.1
    lab = np.zeros((1000, 1), np.int32)
    plain = P.split_pieces(x, lab, 1, DIST_L2SQ, 0, 600, 128)
    assert sorted(len(p) for p in plain) == [500, 500]
    assert len(np.intersect1d(*plain)) == 0
    median = np.median(x[:, 0])
    lo, hi = sorted(plain, key=lambda p: x[p, 0].mean())
    assert x[lo, 0].max() <= median <= x[hi, 0].min()
    dist = np.abs(x[:, 0] - median)
    band = P.split_pieces(x, lab, 1, DIST_L2SQ, 0, 600, 128, cut_margin=1.0)
    shared = np.intersect1d(*band)
    assert all(len(p) <= 600 for p in band) and 0 < len(shared) < 200
    assert dist[shared].max() <= 1.05 and (dist[np.setdiff1d(np.arange(1000), shared)] > 0.95).all()
    np.testing.assert_array_equal(np.union1d(*band), np.arange(1000))
    wide = P.split_pieces(x, lab, 1, DIST_L2SQ, 0, 600, 128, cut_margin=50.0)
    assert sorted(len(p) for p in wide) == [600, 600]
    shared = np.intersect1d(*wide)
    assert len(shared) == 200 and dist[shared].max() < np.sort(dist)[230]


def test_a_cluster_slightly_too_large_drops_the_border_rows_farthest_from_its_border():
    """A cluster of 430 rows (400 of its own, 30 border rows of another) and a piece limit of 410: the 20
    border rows farthest from the border leave it (they stay in their own cluster's piece); no halving.
    Far too large (a limit of 300), it is halved."""
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.normal(size=(400, 3)), rng.normal(size=(300, 3)) + [8, 0, 0]]).astype(np.float32)
    lab = np.full((700, 2), -1, np.int32)
    lab[:400, 0] = 0
    lab[400:, 0] = 1
    lab[400:430, 1] = 0  # 30 border rows of cluster 1 also join cluster 0
    border = np.zeros((700, 2), np.float32)
    border[:, 1] = 9.0
    border[400:430, 1] = np.linspace(0.1, 3.0, 30)
    pieces = P.split_pieces(x, lab, 2, DIST_L2SQ, 0, 410, 128, border=border, cut_margin=3.0)
    assert len(pieces) == 2
    first = next(p for p in pieces if 0 in p)
    np.testing.assert_array_equal(first, np.r_[np.arange(400), np.arange(400, 410)])
    # without the border distances the cluster is halved
    assert len(P.split_pieces(x, lab, 2, DIST_L2SQ, 0, 410, 128, cut_margin=3.0)) == 3
    assert len(P.split_pieces(x, lab, 2, DIST_L2SQ, 0, 300, 128, border=border, cut_margin=3.0)) >= 3


def test_split_pools_small_clusters_and_drops_empty_ones():
    x = np.random.default_rng(9).normal(size=(200, 4)).astype(np.float32)
    lab = np.zeros((200, 1), np.int32)
    lab[:3, 0] = 2  # an outlier cluster of 3 rows; cluster 1 is empty
    pieces = P.split_pieces(x, lab, 3, DIST_L2SQ, 0, 500, 128, min_rows=10)
    assert len(pieces) == 1
    np.testing.assert_array_equal(pieces[0], np.arange(200))


def test_plan_clusters_counts_the_rows_built():
    assert P.plan_clusters(1000, 100, 1.5) == int(np.ceil(1.5 * 1000 / (P.FILL * 100)))
    assert P.plan_clusters(1000, 100, 3) == 43
    assert P.plan_clusters(10, 100, 1) == 2
