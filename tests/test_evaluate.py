"""Recall definitions (DESIGN.md): recall@k, R@k, graph recall@k, with ties, -1 and repeated ids."""

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
