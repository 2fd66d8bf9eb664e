"""Right answers on data in islands: well-separated Gaussian clusters that no k-NN edge joins.

A search graph built on such data falls into one piece per cluster unless the builders link its
components and the entry points cover them (:func:`knngraph.graphops.connect_graph`). Each default route
(``song.build``, GRNND's graph searched by SONG's searcher, ``ggnn.build``) must reach recall@10 >= 0.99 at
default parameters against brute force, on the CPU (the same kernels run on the GPU; the benchmark
``benchmarks/studies/clustered_recall.py`` measures both at 100k points).
"""

import numpy as np
import pytest

import knngraph
from knngraph import ggnn, grnnd, song

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def islands():
    """40 clusters of 150 points in 32 dimensions, centres about 80 apart against a spread of about 8 within
    a cluster (no k-NN edge crosses), and 200 held-out queries from the same clusters; exact top-10."""
    rng = np.random.default_rng(11)
    clusters, per, dim = 40, 155, 32
    centres = rng.normal(0.0, 10.0, (clusters, dim))
    x = (centres[:, None, :] + rng.normal(0.0, 1.0, (clusters, per, dim))).reshape(-1, dim).astype(np.float32)
    order = rng.permutation(len(x))
    x = x[order]
    base, queries = np.ascontiguousarray(x[:-200]), np.ascontiguousarray(x[-200:])
    true_d, true_i = knngraph.knn(base, queries, k=10, device="cpu")
    return base, queries, true_d, true_i


def _routes(base):
    yield "song.build", song, song.build(song.IndexParams(), base, device="cpu", verbose=False)
    g = grnnd.build(grnnd.IndexParams(), base, device="cpu", verbose=False).graph
    yield "grnnd+song", song, song.from_graph(g, base, device="cpu", verbose=False)
    yield "ggnn.build", ggnn, ggnn.build(ggnn.IndexParams(), base, device="cpu", verbose=False)


def test_every_default_route_reaches_recall_099_on_separated_clusters(islands):
    base, queries, true_d, true_i = islands
    for name, searcher, index in _routes(base):
        assert index.graph.components() == 1, name
        d, i = searcher.search(index, queries, 10, device="cpu")
        recall = knngraph.recall_at_k(i, true_i, k=10, distances=d, true_distances=true_d)
        assert recall >= 0.99, (name, recall)
