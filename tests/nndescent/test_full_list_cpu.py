"""Full-list quality of NN-Descent graphs: recall@k of each node's whole list of k neighbours (not only the
first 10) against the exact k-NN graph, for k = 32, 64 and 100 (graph recall, ``knngraph.graph_recall``,
on a fixed sample of nodes). Users of k=64 graphs (UMAP with large n_neighbors, search-graph preparation)
get the whole list."""

import pytest

import knngraph


@pytest.mark.parametrize("k", [32, 64, 100])
def test_whole_list_recall_on_sift_20k(sample, k):
    g = knngraph.knn_graph(sample.base, k, method="nndescent", device="cpu", verbose=False)
    assert knngraph.graph_recall(g, base=sample.base, k=k, sample=500) >= 0.99
    assert knngraph.graph_recall(g, base=sample.base, k=10, sample=500) >= 0.995
