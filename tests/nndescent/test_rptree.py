"""The random projection forest that starts CPU NN-Descent (``nndescent/_rptree.py``): its graph alone,
determinism across thread counts, every metric and a few dtypes, degenerate data, and the ``init``
parameter's rules."""

import numba
import numpy as np
import pytest

import knngraph
from knngraph import nndescent
from knngraph._device import Device
from knngraph.nndescent import _rptree
from knngraph.nndescent._index import _config
from knngraph.nndescent.cpu import SERIAL_BELOW, Engine
from knngraph.primitives.distances import distance_kind, report_distances

K = 16


@pytest.fixture(scope="module")
def sift():
    from knngraph.datasets import load_sample

    return load_sample().base


def _forest_graph(x, k, metric="sqeuclidean", n_trees=6, leaf_size=64, seed=0):
    """The forest's initial lists alone (ids of x), as build_in_memory starts them."""
    eng = Engine()
    kind = distance_kind(metric)
    xc, inv = eng.prepare(x, kind)
    gd, gi, gf = eng.new_graph(x.shape[0], k)
    _, _, order = eng.init_forest(xc, inv, kind, gd, gi, gf, seed, n_trees, leaf_size)
    assert (gf == 1).all(), "every initial entry is NEW"
    d, i = eng.unpermute(gd, gi, order)
    return knngraph.Graph(i, report_distances(d, metric), metric)


def _check_lists(g, x, metric):
    n = g.n
    assert (g.indices >= 0).all(), "the forest fills every list"
    assert not (g.indices == np.arange(n)[:, None]).any(), "no self-loops"
    for row in g.indices[:: max(1, n // 97)]:
        assert len(set(row.tolist())) == len(row), "no duplicates"
    assert (np.diff(g.distances, axis=1) >= 0).all(), "sorted by distance"
    ref = knngraph.metrics.pairwise_distances(x[:20].astype(np.float64), x.astype(np.float64), metric)
    np.testing.assert_allclose(g.distances[:20], np.take_along_axis(ref, g.indices[:20].astype(np.int64), 1),
                               rtol=2e-3, atol=2e-3)


def test_forest_graph_alone_beats_random(sift):
    """6 trees with leaves of at most 64 points on the bundled 20k SIFT sample give graph recall@10 0.55
    (measured); a random graph gives about 10/20000."""
    x = sift
    exact = knngraph.knn_graph(x, K, method="exact", device="cpu", verbose=False)
    g = _forest_graph(x, K)
    _check_lists(g, x, "sqeuclidean")
    r = knngraph.graph_recall(g, 10, true_graph=exact)
    assert r >= 0.45
    # more trees, better lists
    assert knngraph.graph_recall(_forest_graph(x, K, n_trees=2), 10, true_graph=exact) < r - 0.1


def test_forest_leaves_partition_the_points(sift):
    x = np.ascontiguousarray(sift[:12000])
    perm, starts = _rptree.forest_leaves(x, distance_kind("sqeuclidean"), 3, 40, 5)
    for t in range(3):
        np.testing.assert_array_equal(np.sort(perm[t]), np.arange(len(x)))
        sizes = np.diff(starts[t])
        assert sizes.min() >= 1 and sizes.max() <= 40 and starts[t][-1] == len(x)
    assert not np.array_equal(perm[0], perm[1]), "trees differ"


def test_same_seed_same_graph_on_any_thread_count(sift):
    """Forest + iterations, threaded kernels (n >= SERIAL_BELOW): 1 thread and all threads agree."""
    x = sift[:SERIAL_BELOW + 1000]
    params = nndescent.IndexParams(graph_degree=10, seed=3, init="rp_forest")
    a = nndescent.build(params, x, device="cpu", verbose=False).graph
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        b = nndescent.build(params, x, device="cpu", verbose=False).graph
    finally:
        numba.set_num_threads(old)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)
    c = nndescent.build(nndescent.IndexParams(graph_degree=10, seed=4, init="rp_forest"), x, device="cpu",
                        verbose=False).graph
    assert not np.array_equal(_forest_graph(x, 10, seed=3).indices, _forest_graph(x, 10, seed=4).indices)
    assert a.info["init"] == "rp_forest" and c.info["init"] == "rp_forest"


def _clustered(dtype, n=1500, d=12, seed=5):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(10, d)) * 4
    xf = centers[rng.integers(0, 10, n)] + rng.normal(size=(n, d))
    if dtype in (np.uint8, np.int8):
        xf = np.clip(xf * 8 + (128 if dtype == np.uint8 else 0), *(0, 255) if dtype == np.uint8 else (-128, 127))
    return xf.astype(dtype)


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean", "inner_product", "cosine"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
def test_metrics_and_dtypes(metric, dtype):
    """The forest alone is far above random; with the iterations the graph matches brute force."""
    x = _clustered(dtype)
    exact = knngraph.knn_graph(x, 10, method="exact", metric=metric, device="cpu", verbose=False)
    forest = _forest_graph(x, 10, metric, n_trees=4, leaf_size=32)
    _check_lists(forest, x, metric)
    assert knngraph.graph_recall(forest, 10, true_graph=exact) >= 0.3
    g = knngraph.knn_graph(x, 10, method="nndescent", metric=metric, device="cpu", verbose=False, init="rp_forest")
    assert g.info["init"] == "rp_forest"
    # inner product is no metric: NN-Descent stalls lower (as with random init, test_nndescent.py)
    assert knngraph.graph_recall(g, 10, true_graph=exact) >= (0.8 if metric == "inner_product" else 0.95)


def test_duplicates_and_zero_vectors():
    """Identical points give degenerate splits (cut in halves), zero vectors have no direction (cosine)."""
    rng = np.random.default_rng(0)
    x = np.repeat(rng.integers(0, 4, size=(3, 8)).astype(np.uint8), 1800, axis=0)  # > LOCAL_ROWS of one value
    x[::7] = 0
    for metric in ("sqeuclidean", "cosine"):
        g = knngraph.knn_graph(x, 6, method="nndescent", metric=metric, device="cpu", verbose=False)
        assert (g.indices >= 0).all() and not (g.indices == np.arange(len(x))[:, None]).any()
        for row in g.indices[::301]:
            assert len(set(row.tolist())) == 6


@pytest.mark.parametrize("n,k", [(11, 10), (40, 5), (300, 20)])
def test_small_inputs(n, k):
    """Fewer points than a leaf: one leaf, all pairs; lists with fewer leaf-mates than k get random nodes."""
    x = np.random.default_rng(n).random((n, 5), dtype=np.float32)
    exact = knngraph.knn_graph(x, k, method="exact", device="cpu", verbose=False)
    g = _forest_graph(x, k, n_trees=2, leaf_size=64)
    _check_lists(g, x, "sqeuclidean")
    if n <= 64:
        assert knngraph.graph_recall(g, k, true_graph=exact) == 1.0
    g = knngraph.knn_graph(x, k, method="nndescent", device="cpu", verbose=False)
    assert knngraph.graph_recall(g, k, true_graph=exact) >= 0.95


def test_init_resolution_and_gpu_check():
    cpu, cuda = Device("cpu"), Device("cuda")
    assert _config(nndescent.IndexParams(), 8, cpu, False).init == "rp_forest"
    assert _config(nndescent.IndexParams(), 8, cuda, False).init == "random"
    assert _config(nndescent.IndexParams(init="cluster_windows"), 8, cuda, False).init == "cluster_windows"
    assert _config(nndescent.IndexParams(init="random"), 8, cpu, False).init == "random"
    with pytest.raises(ValueError, match="init='rp_forest' is only implemented on the CPU"):
        _config(nndescent.IndexParams(init="rp_forest"), 8, cuda, False)
    with pytest.raises(ValueError, match="init='cluster_windows' is only implemented on the GPU"):
        _config(nndescent.IndexParams(init="cluster_windows"), 8, cpu, False)


def test_bad_init_value():
    with pytest.raises(ValueError, match="'init'"):
        nndescent.IndexParams(init="forest")
    with pytest.raises(ValueError, match="'init'"):
        knngraph.knn_graph(np.zeros((20, 3), np.float32), 4, method="nndescent", device="cpu", init=None)


def test_random_init_still_available(sift):
    x = sift[:3000]
    exact = knngraph.knn_graph(x, K, method="exact", device="cpu", verbose=False)
    g = knngraph.knn_graph(x, K, method="nndescent", device="cpu", verbose=False, init="random")
    assert g.info["init"] == "random"
    assert knngraph.graph_recall(g, 10, true_graph=exact) >= 0.95
