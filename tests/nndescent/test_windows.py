"""The cluster-window initial graph of GPU NN-Descent (``nndescent/_windows.py``), run here on NumPy
through the engine methods it needs: exact lists inside each window, the orderings, and the graph it
starts from on real data."""

import numpy as np
import pytest

import knngraph
from knngraph.nndescent import _windows
from knngraph.nndescent.cpu import Engine
from knngraph.primitives.distances import DIST_COS, DIST_L2SQ
from knngraph.primitives.kselect import smallest_per_row_host

K = 16


class HostEngine:
    """The engine methods the window initialisation uses, on NumPy (the GPU engine's are CuPy and kernels)."""

    xp = np

    def to_host(self, a):
        return np.asarray(a)

    def smallest_per_row(self, tile, k):
        return smallest_per_row_host(tile, k)

    def merge_lists(self, ad, ai, bd, bi, k):
        return Engine().merge_lists(ad, ai, bd, bi, k)


@pytest.fixture(scope="module")
def sift():
    from knngraph.datasets import load_sample

    return np.ascontiguousarray(load_sample().base)


@pytest.fixture(scope="module")
def exact(sift):
    return knngraph.knn_graph(sift, K, method="exact", device="cpu", verbose=False)


def _window_keys_graph(x, orderings, seed=0):
    eng = HostEngine()
    n = x.shape[0]
    w = _windows.window_size(n, K)
    f = x.astype(np.float32)
    sq = (f * f).sum(1)
    best, orders = None, []
    for t in range(orderings):
        order = _windows._ordering(eng, f, DIST_L2SQ, w, np.random.default_rng([seed, t]))
        orders.append(order)
        lists = _windows._window_lists(eng, f, sq, DIST_L2SQ, order, w, K)
        best = lists if best is None else eng.merge_lists(*best, *lists, K)
    return best, orders, sq


def test_smallest_per_row_host_sorted_by_value_then_column():
    tile = np.array([[3, 1, 2, 1, 0], [5, 5, 5, 4, 9]], np.float32)
    vals, cols = smallest_per_row_host(tile, 3)
    assert cols.tolist() == [[4, 1, 3], [3, 0, 1]]
    assert vals.tolist() == [[0, 1, 1], [4, 5, 5]]


def test_each_list_is_the_exact_knn_of_its_window(sift):
    x = sift[:5000]
    (keys, ids), (order,), sq = _window_keys_graph(x, 1)
    n, w = len(x), _windows.window_size(len(x), K)
    assert sorted(order.tolist()) == list(range(n)), "an ordering is a permutation"
    starts = np.minimum(np.arange(-(-n // w)) * w, n - w)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    xf = x.astype(np.float64)
    for u in range(0, n, 97):
        b = pos[u] // w  # each row keeps its first window (the last one, aligned to the end, overlaps)
        members = order[starts[b]:starts[b] + w]
        members = members[members != u]
        true = np.sort(((xf[members] - xf[u]) ** 2).sum(1))[:K]
        got = np.sort(keys[u] + sq[u])
        np.testing.assert_allclose(got, true, rtol=1e-6, atol=1e-3)
        assert set(ids[u].tolist()) <= set(members.tolist())
        assert len(set(ids[u].tolist())) == K


def test_windows_start_far_above_random_and_orderings_add_up(sift, exact):
    """Sample of sift-photos (20k, k=16, windows of 1,024): one ordering alone, three merged."""
    def recall(keys, ids, sq):
        g = knngraph.Graph(ids, keys + sq[:, None], "sqeuclidean")
        return knngraph.graph_recall(g, 10, true_graph=exact)

    one, _, sq = _window_keys_graph(sift, 1)
    three, _, _ = _window_keys_graph(sift, 3)
    r1, r3 = recall(*one, sq), recall(*three, sq)
    assert r1 >= 0.5
    assert r3 >= r1 + 0.15 and r3 >= 0.8  # measured 0.62 and 0.89


def _window_graph(x, seed=0, kind=DIST_L2SQ):
    eng = HostEngine()
    gd = np.empty((len(x), K), np.float32)
    gi = np.empty((len(x), K), np.int32)
    gf = np.zeros((len(x), K), np.uint8)
    _windows.window_graph(eng, x, kind, gd, gi, gf, seed)
    return gd, gi, gf


def test_window_graph_lists_are_sound_and_deterministic(sift):
    """The whole initialisation (3 orderings, merges, exact distances) on 3,000 points: no self or
    duplicate ids, exact sorted distances, every entry NEW, the same lists for the same seed."""
    x = sift[:3000]
    gd, gi, gf = _window_graph(x)
    assert (gi >= 0).all() and not (gi == np.arange(len(x))[:, None]).any()
    assert all(len(set(row.tolist())) == K for row in gi)
    assert (np.diff(gd, axis=1) >= 0).all() and (gf == 1).all()
    xf = x.astype(np.float64)
    np.testing.assert_allclose(gd[:50], ((xf[:50, None, :] - xf[gi[:50]]) ** 2).sum(-1), rtol=1e-6)
    gd2, gi2, _ = _window_graph(x)
    assert np.array_equal(gi, gi2) and np.array_equal(gd, gd2)


def test_window_graph_of_one_window_is_exact(sift):
    """n <= the window: a single window holding every point gives the exact k-NN graph."""
    x = sift[:600]
    gd, gi, _ = _window_graph(x)
    exact = knngraph.knn_graph(x, K, method="exact", device="cpu", verbose=False)
    np.testing.assert_allclose(gd, exact.distances, rtol=1e-6)


@pytest.mark.parametrize("n", [3000, 600])
def test_window_graph_cosine_distances_from_keys(sift, n):
    """Cosine takes its distances from the window keys (1 - cos of normalised rows), rows sorted by
    (distance, id), with several orderings (3,000 points) and with one window (600)."""
    x = sift[:n].astype(np.float32)
    gd, gi, gf = _window_graph(x, kind=DIST_COS)
    assert not (gi == np.arange(n)[:, None]).any() and all(len(set(r.tolist())) == K for r in gi)
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    want = 1.0 - np.einsum("id,ikd->ik", xn[:60], xn[gi[:60]])
    np.testing.assert_allclose(gd[:60], want, atol=1e-5)
    assert (np.diff(gd, axis=1) >= 0).all() and (gf == 1).all()
