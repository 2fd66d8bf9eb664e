"""Recall definitions: recall@k = |returned top-k ∩ true top-k| / k averaged over queries; R@k = share of
queries whose true nearest neighbour is in the returned top k; graph recall@k = recall@k of each node's
list against its true k-NN, self excluded. With distances, a returned id at <= the true k-th distance
counts (ties); -1 never counts; an id repeated in a row counts once."""

import numpy as np
import pytest

import knngraph
from knngraph.evaluate import graph_recall, r_at_k, recall_at_k


def test_recall_counts_intersection():
    assert recall_at_k([[1, 2, 3], [4, 5, 6]], [[3, 2, 1], [4, 9, 8]], k=3) == pytest.approx((3 / 3 + 1 / 3) / 2)


def test_recall_ignores_minus_one_and_repeats():
    assert recall_at_k([[1, 1, -1]], [[1, 2, -1]], k=3) == pytest.approx(1 / 3)


def test_recall_ties_count_with_distances():
    # id 7 is not in the true list but sits exactly at the true k-th distance
    ids, true = [[1, 7]], [[1, 2]]
    assert recall_at_k(ids, true, 2) == 0.5
    assert recall_at_k(ids, true, 2, distances=[[0.0, 4.0]], true_distances=[[0.0, 4.0]]) == 1.0
    assert recall_at_k(ids, true, 2, distances=[[0.0, 4.1]], true_distances=[[0.0, 4.0]]) == 0.5


def test_recall_uses_only_first_k_columns():
    assert recall_at_k([[1, 2, 3]], [[1, 9, 2]], k=1) == 1.0


def test_recall_bad_shapes():
    with pytest.raises(ValueError, match="k=4 but indices has only 3 columns"):
        recall_at_k([[1, 2, 3]], [[1, 2, 3, 4]], k=4)
    with pytest.raises(ValueError, match="indices has 1 rows but true_indices has 2"):
        recall_at_k([[1]], [[1], [2]], k=1)
    with pytest.raises(ValueError, match="give both distances and true_distances"):
        recall_at_k([[1]], [[1]], k=1, distances=[[0.0]])


def test_r_at_k():
    assert r_at_k([[5, 1], [2, 3]], [[1, 9], [7, 2]], k=1) == 0.0
    assert r_at_k([[5, 1], [2, 3]], [[1, 9], [7, 2]], k=2) == 0.5
    # tie with the true nearest distance counts
    assert r_at_k([[5, 1]], [[8, 9]], k=1, distances=[[2.0, 3.0]], true_distances=[[2.0, 2.5]]) == 1.0


def test_graph_recall_against_true_graph_and_by_sampling(sample):
    base = sample.base[:2000]
    exact = knngraph.knn_graph(base, 10, device="cpu", verbose=False)
    assert graph_recall(exact, 10, true_graph=exact) == 1.0
    assert graph_recall(exact, 10, base=base, sample=300) == 1.0
    # damage half of each row: recall drops to about one half
    bad_idx = exact.indices.copy()
    bad_idx[:, 5:] = (bad_idx[:, 5:] + 1) % len(base)
    bad_dist = exact.distances.copy()
    bad_dist[:, 5:] = np.float32(1e9)
    damaged = knngraph.Graph(bad_idx, bad_dist, exact.metric)
    r = graph_recall(damaged, 10, true_graph=exact)
    assert 0.45 <= r <= 0.6
    assert graph_recall(damaged, 10, base=base) == pytest.approx(r)


def test_graph_recall_needs_a_reference(sample):
    g = knngraph.knn_graph(sample.base[:100], 3, device="cpu")
    with pytest.raises(ValueError, match="needs true_graph= or base="):
        graph_recall(g, 3)


# ------------------------------------------------------------------------------------------- bad input


def test_float_ids_must_be_whole_numbers():
    with pytest.raises(ValueError, match="indices must hold integer ids, got 1.7 .*fractional"):
        recall_at_k([[1.7, 2.2]], [[1, 2]], 2)
    with pytest.raises(ValueError, match="true_indices must hold integer ids, got 2.5"):
        recall_at_k([[1, 2]], [[1.0, 2.5]], 2)
    with pytest.raises(ValueError, match="indices must hold integer ids, got nan .*non-finite"):
        recall_at_k([[np.nan, 2.0]], [[1, 2]], 2)
    with pytest.raises(ValueError, match="true_indices must hold integer ids, got inf"):
        r_at_k([[1, 2]], [[np.inf, 2.0]], 1)
    # whole numbers in a float array are ids
    assert recall_at_k(np.array([[1.0, 2.0]]), [[2, 1]], 2) == 1.0
    assert recall_at_k(np.array([[1.0, 3.0]], np.float32), [[2, 1]], 2) == 0.5


def test_ids_type_and_range():
    with pytest.raises(TypeError, match="indices must be an array of integer ids, got dtype <U1"):
        recall_at_k([["a"]], [[1]], 1)
    with pytest.raises(ValueError, match="indices holds the id -2; ids are >= 0, or -1"):
        recall_at_k([[-2, 1]], [[1, 2]], 2)
    with pytest.raises(ValueError, match="indices and true_indices have no rows"):
        recall_at_k(np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64), 1)
    with pytest.raises(ValueError, match="indices must be 2-D"):
        recall_at_k([1, 2], [[1, 2]], 1)


def test_distances_must_match_their_ids_exactly():
    ids = [[1, 2], [3, 4]]
    with pytest.raises(ValueError, match=r"distances has shape \(1, 2\) but indices has shape \(2, 2\)"):
        r_at_k(ids, ids, 2, distances=[[0.0, 1.0]], true_distances=[[0.0, 1.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match=r"true_distances has shape \(1, 2\) but true_indices has shape \(2, 2\)"):
        recall_at_k(ids, ids, 2, distances=[[0.0, 1.0], [0.0, 1.0]], true_distances=[[0.0, 1.0]])
    with pytest.raises(ValueError, match=r"distances has shape \(2, 3\) but indices has shape \(2, 2\)"):
        recall_at_k(ids, ids, 2, distances=np.zeros((2, 3)), true_distances=np.zeros((2, 2)))
    with pytest.raises(TypeError, match="distances must be an array of real distances"):
        recall_at_k(ids, ids, 2, distances=[["a", "b"], ["c", "d"]], true_distances=np.zeros((2, 2)))


def test_r_at_k_minus_one_never_counts():
    # a true list padded with -1 does not make a returned -1 a hit
    assert r_at_k([[-1, 5]], [[-1, 3]], 2) == 0.0


@pytest.fixture(scope="module")
def small_graphs(sample):
    base = np.ascontiguousarray(sample.base[:600])
    sq = knngraph.knn_graph(base, 10, metric="sqeuclidean", device="cpu", verbose=False)
    eu = knngraph.knn_graph(base, 10, metric="euclidean", device="cpu", verbose=False)
    return base, sq, eu


def _damaged(g):
    """``g`` with the last half of each row replaced by wrong ids at the largest real distance (ties of
    that distance must not count them)."""
    idx = g.indices.copy()
    idx[:, 5:] = (idx[:, 5:] + 1) % g.n
    dist = g.distances.copy()
    dist[:, 5:] = dist[:, 9:10] * 1.5
    return knngraph.Graph(idx, dist, g.metric)


def test_graph_recall_base_rows_must_match(small_graphs):
    base, sq, _ = small_graphs
    bigger = np.concatenate([base, base[:50]])
    with pytest.raises(ValueError, match="base has 650 rows but graph has 600 nodes"):
        graph_recall(sq, 5, base=bigger)
    with pytest.raises(ValueError, match="base has 300 rows but graph has 600 nodes"):
        graph_recall(sq, 5, base=base[:300])
    with pytest.raises(ValueError, match="base must be 2-D"):
        graph_recall(sq, 5, base=base[0])


def test_graph_recall_across_euclidean_and_sqeuclidean(small_graphs):
    _, sq, eu = small_graphs
    np.testing.assert_array_equal(sq.indices, eu.indices)
    bad_eu, bad_sq = _damaged(eu), _damaged(sq)
    r = graph_recall(bad_eu, 10, true_graph=eu)
    assert r == pytest.approx(0.5, abs=0.05)
    # the true graph's distances are converted to the graph's metric (sqrt / square): the same answer
    assert graph_recall(bad_eu, 10, true_graph=sq) == pytest.approx(r)
    assert graph_recall(bad_sq, 10, true_graph=eu) == pytest.approx(graph_recall(bad_sq, 10, true_graph=sq))
    cos = knngraph.Graph(sq.indices, sq.distances, "cosine")
    with pytest.raises(ValueError, match="graph is in metric 'euclidean' but true_graph is in 'cosine'"):
        graph_recall(bad_eu, 10, true_graph=cos)


def test_graph_recall_reference_sample_and_k(small_graphs):
    base, sq, _ = small_graphs
    with pytest.raises(ValueError, match="takes true_graph= or base=.*not both"):
        graph_recall(sq, 5, true_graph=sq, base=base)
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(ValueError, match=f"sample must be a positive integer .*got {bad!r}"):
            graph_recall(sq, 5, true_graph=sq, sample=bad)
    with pytest.raises(ValueError, match="k=11 but graph has only 10 columns"):
        graph_recall(sq, 11, true_graph=sq)
    with pytest.raises(ValueError, match="k must be a positive integer, got 0"):
        graph_recall(sq, 0, base=base)
    with pytest.raises(TypeError, match="true_graph must be a knngraph.Graph, got ndarray"):
        graph_recall(sq, 5, true_graph=sq.indices)
    # a sample of nodes, against a true graph too
    assert graph_recall(_damaged(sq), 10, true_graph=sq, sample=100) == pytest.approx(0.5, abs=0.1)
    assert graph_recall(sq, 10, base=base, sample=50) == 1.0
