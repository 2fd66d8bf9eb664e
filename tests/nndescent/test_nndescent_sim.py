"""Whole NN-Descent builds through the GPU engine in the numba CUDA simulator on tiny inputs: the plain
build, the cluster-windows start and the clustered out-of-core driver (the same lists as the CPU engine)."""

import numpy as np
import pytest

import knngraph
from knngraph import nndescent
from knngraph.nndescent import _index as nd_index

pytestmark = pytest.mark.sim


def test_whole_gpu_path_in_simulator():
    """init -> (sample, join, merge) x iterations -> lists, through the GPU engine on the simulator."""
    rng = np.random.default_rng(2)
    x = rng.random((20, 4), dtype=np.float32)
    ex = knngraph.knn_graph(x, 4, method="exact", device="cpu", verbose=False)
    index = nndescent.build(nndescent.IndexParams(graph_degree=4, sample_size=2, max_iterations=2), x, verbose=False,
                            _simulate=True)
    g = index.graph
    assert g.info["update"] == "selective" and 1 <= g.info["iterations"] <= 2
    assert not (g.indices == np.arange(20)[:, None]).any()
    assert (np.diff(g.distances, axis=1) >= 0).all()
    np.testing.assert_allclose(g.distances, np.take_along_axis(
        knngraph.metrics.pairwise_distances(x, x), g.indices.astype(np.int64), 1), rtol=1e-5, atol=1e-6)
    assert knngraph.graph_recall(g, 4, true_graph=ex) >= 0.7


def test_two_phase_build_through_gpu_engine_in_simulator():
    """The two-phase schedule on the GPU engine (simulator): lists of 32, the two-hop fill kernel, lists of
    40; the lists are true distances, sorted, without the node, and recall as the CPU engine's."""
    rng = np.random.default_rng(4)
    x = rng.random((70, 3), dtype=np.float32)
    params = nndescent.IndexParams(graph_degree=4, intermediate_graph_degree=40, sample_size=2, max_iterations=3)
    g = nndescent.build(params, x, verbose=False, _simulate=True).graph
    assert g.info["phase_list_degrees"] == [32, 40] and sum(g.info["phase_iterations"]) <= 3
    assert g.info["phase_iterations"][1] >= 1
    assert not (g.indices == np.arange(70)[:, None]).any()
    assert (np.diff(g.distances, axis=1) >= 0).all()
    np.testing.assert_allclose(g.distances, np.take_along_axis(
        knngraph.metrics.pairwise_distances(x, x), g.indices.astype(np.int64), 1), rtol=1e-5, atol=1e-6)
    ex = knngraph.knn_graph(x, 4, method="exact", device="cpu", verbose=False)
    assert knngraph.graph_recall(g, 4, true_graph=ex) == 1.0


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_cluster_windows_start_through_gpu_engine_in_simulator(metric):
    """init='cluster_windows' through the GPU engine on the simulator: 40 points fit one window, so the
    start is the exact graph (L2: refined distances; cosine: from the keys) and stays so."""
    x = np.random.default_rng(3).random((40, 4), dtype=np.float32)
    ex = knngraph.knn_graph(x, 4, method="exact", metric=metric, device="cpu", verbose=False)
    index = nndescent.build(nndescent.IndexParams(graph_degree=4, sample_size=2, max_iterations=1, metric=metric,
                                                  init="cluster_windows"), x, verbose=False, _simulate=True)
    g = index.graph
    assert g.info["init"] == "cluster_windows"
    assert knngraph.graph_recall(g, 4, true_graph=ex) == 1.0
    np.testing.assert_allclose(g.distances, ex.distances, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("margin", [None, 0.3])
def test_clustered_out_of_core_through_gpu_engine_in_simulator(monkeypatch, margin):
    """The clustered driver on the GPU engine (simulator): every piece takes its exact graph (threshold
    raised here), so the GPU work is the partition on the engine's arrays and the merge of each piece into
    the running lists; same lists as the CPU engine, with every row in its 3 nearest clusters
    (``margin=None``) or by the border rule."""
    from knngraph._device import Device
    from knngraph.nndescent import _build
    from knngraph.nndescent import cuda as nd_cuda

    rng = np.random.default_rng(3)
    x = (rng.normal(size=(6, 5)) * 4)[rng.integers(0, 6, 90)] + rng.normal(size=(90, 5))
    x = x.astype(np.float32)
    monkeypatch.setattr(_build, "SMALL_PIECE_PER_K", 100)
    cfg = nd_index._config(nndescent.IndexParams(graph_degree=4), 4, Device("cpu"), False)
    out = {}
    for name, engine in (("cpu", _build.make_engine(Device("cpu"))), ("sim", nd_cuda.Engine(simulate=True))):
        st = {}
        with engine:
            out[name] = _build.clustered_build(engine, x, cfg, 30, metric="sqeuclidean", margin=margin, stats=st)
        assert st["pieces"] >= 4 and st["piece_rows_max"] <= 30 and st["piece_iterations"] == []
    np.testing.assert_array_equal(out["sim"][1], out["cpu"][1])
    np.testing.assert_array_equal(out["sim"][0], out["cpu"][0])
    ex = knngraph.knn_graph(x, 4, method="exact", device="cpu", verbose=False)
    assert (out["cpu"][1] >= 0).all()
    assert knngraph.graph_recall(knngraph.Graph(out["cpu"][1], out["cpu"][0]), 4, true_graph=ex) >= 0.8
