"""CPU query paths of ``song.search``: the fast searcher behind it on the CPU (its own tests are in
tests/beam/test_search_cpu.py), its single-query and batch paths, ``n_threads``, any builder's graph
(NN-Descent), filters, and the few-query exact path of ``knngraph.knn``. Results are checked against brute
force and the GEMM exact path."""

import numpy as np
import pytest

import knngraph
from knngraph import metrics, song
from knngraph.evaluate import recall_at_k

from .song.conftest import complete_graph, random_vectors


def _brute(base, queries, k, metric):
    full = metrics.pairwise_distances(queries, base, metric)
    order = np.array([np.lexsort((np.arange(base.shape[0]), row))[:k] for row in full])
    return np.take_along_axis(full, order, 1), order


@pytest.mark.parametrize("algo", ["beam", "song"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
@pytest.mark.parametrize("metric", metrics.METRICS)
def test_complete_graph_is_exact(algo, dtype, metric, rng):
    base = random_vectors(rng, 40, 12, dtype)
    queries = random_vectors(rng, 6, 12, dtype)
    g = complete_graph(40)
    g.metric = metric
    index = song.from_graph(g, base, device="cpu")
    st = {}
    d, i = song.search(index, queries, 5, song.SearchParams(queue_size=8, algo=algo), device="cpu", verbose=False,
                       stats=st)
    assert st.get("algo", "song") == algo
    ref_d, ref_i = _brute(base, queries, 5, metric)
    got = np.take_along_axis(metrics.pairwise_distances(queries, base, metric), i.astype(np.int64), 1)
    assert recall_at_k(i, ref_i, 5, distances=got, true_distances=ref_d) == 1.0
    np.testing.assert_allclose(d, ref_d, rtol=1e-4, atol=1e-3 * max(1.0, float(np.abs(ref_d).max())))


def test_recall_floor_on_nndescent_graph(sample, nnd_index):
    """query()-style search on an NN-Descent graph: recall@10 on sift 20k at two operating points."""
    for queue, floor in ((16, 0.93), (48, 0.98)):
        st = {}
        d, i = song.search(nnd_index, sample.queries, 10, song.SearchParams(queue_size=queue), device="cpu",
                           verbose=False, stats=st)
        r = recall_at_k(i, sample.gt_indices, 10, distances=d, true_distances=sample.gt_distances)
        assert r >= floor, (queue, r)
        assert st["algo"] == "beam" and 0 < st["distances_per_query"] < 0.2 * len(sample.base)


def test_single_query_and_batch_paths_agree(sample, nnd_index):
    """One query per call (serial kernel) and batches on 1 and 2 threads give identical results."""
    q = sample.queries[:40]
    sp = song.SearchParams(queue_size=24)
    one = [song.search(nnd_index, q[j:j + 1], 10, sp, device="cpu", verbose=False) for j in range(len(q))]
    d1 = np.concatenate([r.distances for r in one])
    i1 = np.concatenate([r.indices for r in one])
    for threads in (1, 2):
        d, i = song.search(nnd_index, q, 10, sp, device="cpu", verbose=False, n_threads=threads)
        np.testing.assert_array_equal(i, i1)
        np.testing.assert_array_equal(d, d1)
    # the reported distances are the exact squared L2 of the returned ids (integers here)
    full = metrics.pairwise_distances(q, sample.base, "sqeuclidean")
    np.testing.assert_array_equal(d1, np.take_along_axis(full, i1.astype(np.int64), 1).astype(np.float32))


def test_out_and_padding_and_bad_arguments(sample, nnd_index, rng):
    q = sample.queries[:3]
    out = (np.empty((3, 5), np.float32), np.empty((3, 5), np.int32))
    r = song.search(nnd_index, q, 5, song.SearchParams(queue_size=16), device="cpu", verbose=False, out=out)
    assert r.indices is out[1] and r.distances is out[0]
    ref = song.search(nnd_index, q, 5, song.SearchParams(queue_size=16), device="cpu", verbose=False)
    np.testing.assert_array_equal(out[1], ref.indices)
    # fewer than k vertices reachable: -1 / inf, as the SONG path pads
    base = rng.standard_normal((10, 3)).astype(np.float32)
    ids = np.full((10, 2), -1, np.int32)
    ids[0] = [1, 2]
    with pytest.warns(knngraph.graphops.UnreachableVerticesWarning, match="7 of 10 vertices"):
        small = song.from_graph(knngraph.Graph(ids, np.zeros((10, 2), np.float32)), base, entry_points=[0],
                                device="cpu")
    d, i = song.search(small, base[:1], 5, song.SearchParams(queue_size=5), device="cpu", verbose=False)
    assert sorted(i[0, :3].tolist()) == [0, 1, 2] and i[0, 3:].tolist() == [-1, -1] and np.isinf(d[0, 3:]).all()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n_threads must be a positive integer"):
            song.search(nnd_index, q, 5, device="cpu", n_threads=bad)
    with pytest.raises(ValueError, match="algo='beam' does not support visited='bloom'"):
        song.search(nnd_index, q, 5, song.SearchParams(algo="beam", visited="bloom"), device="cpu")


def test_filter_walks_with_the_fast_searcher(sample, nnd_index):
    """A filtered walk runs the fast searcher (algo='auto'); only allowed ids come back, near the exact answer."""
    mask = np.zeros(len(sample.base), bool)
    mask[::3] = True
    st = {}
    d, i = song.search(nnd_index, sample.queries[:100], 10, song.SearchParams(queue_size=32, filtered_path="graph"),
                       device="cpu", verbose=False, filter=mask, stats=st)
    assert st["filtered_path"] == "graph" and st["algo"] == "beam" and st["queue_size"] == 96
    assert mask[i[i >= 0]].all()
    ref_d, ref_i = knngraph.knn(sample.base, sample.queries[:100], 10, device="cpu", verbose=False, filter=mask)
    assert recall_at_k(i, ref_i, 10, distances=d, true_distances=ref_d) >= 0.95


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float32])
@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
def test_few_query_exact_path_matches_gemm_path(dtype, metric, rng):
    """knn with at most FEW_QUERIES queries takes the direct pass; it must equal the GEMM path and brute
    force (ties by lower id), also far from the origin and with many ties (where its proof fails and
    it falls back)."""
    from knngraph.bruteforce.cpu import FEW_QUERIES, exact_few_l2

    n, d = 3000, 16
    if dtype == np.float32:
        base = (rng.standard_normal((n, d)) + 1000).astype(dtype)
        q = (rng.standard_normal((3, d)) + 1000).astype(dtype)
    else:
        lo, hi = (0, 4) if dtype == np.uint8 else (-2, 2)
        base = rng.integers(lo, hi, (n, d)).astype(dtype)
        q = rng.integers(lo, hi, (3, d)).astype(dtype)
    assert len(q) <= FEW_QUERIES
    d1, i1 = knngraph.knn(base, q, 7, metric=metric, device="cpu", verbose=False)
    d2, i2 = knngraph.knn(base, np.concatenate([q] * 3), 7, metric=metric, device="cpu", verbose=False)
    ref_d, ref_i = _brute(base, q, 7, metric)
    np.testing.assert_array_equal(i1, ref_i)
    np.testing.assert_array_equal(i1, i2[:3])
    np.testing.assert_array_equal(d1, d2[:3])
    np.testing.assert_allclose(d1, ref_d, rtol=1e-6)
    few = exact_few_l2(base, q, 7, metric)
    if dtype == np.float32:
        assert few is not None  # distinct distances: proven in one pass
    if few is not None:
        np.testing.assert_array_equal(few[1], ref_i)


