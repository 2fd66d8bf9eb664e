"""Hand-off to the tools that consume neighbour graphs: Graph.to_csr, handoff.umap_knn, and the tools
themselves (UMAP, scanpy, HDBSCAN, t-SNE) run on small real or clustered data, on the CPU (a GPU-built
graph's hand-off: test_handoff_gpu.py)."""

import warnings

import numpy as np
import pytest

import knngraph
from knngraph import Graph
from knngraph.handoff import distances_in, umap_knn

from .support.handoff import sift_with_cpu_graph

sparse = pytest.importorskip("scipy.sparse")

# UMAP warns that a precomputed k-NN without an NNDescent search index cannot transform new data
UMAP_NO_INDEX = "ignore:precomputed_knn.2. .knn_search_index. is not an NNDescent object"


@pytest.fixture(scope="module")
def sift():
    return sift_with_cpu_graph()


def _blobs(rng, n_per=150, centers=((0, 0), (12, 0), (0, 12))):
    x = np.concatenate([rng.normal(c, 1.0, (n_per, len(c))) for c in centers]).astype(np.float32)
    return x, np.repeat(np.arange(len(centers)), n_per)


# ------------------------------------------------------------------------------------------- to_csr


def test_to_csr_is_scikit_learns_kneighbors_graph(rng):
    from sklearn.neighbors import kneighbors_graph

    x = rng.standard_normal((200, 5)).astype(np.float32)
    g = knngraph.knn_graph(x, 6, device="cpu", verbose=False)  # sqeuclidean
    m = g.to_csr(metric="euclidean")
    ref = kneighbors_graph(x, 6, mode="distance")
    assert isinstance(m, sparse.csr_matrix) and m.shape == (200, 200) and m.dtype == np.float32
    np.testing.assert_array_equal(m.toarray() != 0, ref.toarray() != 0)
    np.testing.assert_allclose(m.toarray(), ref.toarray(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g.to_csr().data, m.data ** 2, rtol=1e-4)  # default: the graph's own metric
    conn = g.to_csr(mode="connectivity", dtype=np.float64)
    assert conn.dtype == np.float64 and set(conn.data.tolist()) == {1.0}
    np.testing.assert_array_equal(conn.toarray() != 0, ref.toarray() != 0)


def test_to_csr_include_self_and_symmetrize(rng):
    from sklearn.neighbors import KNeighborsTransformer
    from sklearn.neighbors._base import _is_sorted_by_data

    x = rng.standard_normal((150, 4))
    g = knngraph.knn_graph(x, 5, metric="euclidean", device="cpu", verbose=False)
    with_self = g.to_csr(include_self=True)
    ref = KNeighborsTransformer(n_neighbors=5).fit_transform(x)  # self as an explicit 0, then 5 others
    assert (with_self.getnnz(axis=1) == 6).all() and (with_self.diagonal() == 0).all()
    np.testing.assert_array_equal(with_self.indices, ref.indices)
    np.testing.assert_allclose(with_self.data, ref.data, rtol=1e-4, atol=1e-5)
    sym = g.to_csr(symmetrize=True)
    a = g.to_csr().toarray()
    np.testing.assert_array_equal(sym.toarray() != 0, (a != 0) | (a.T != 0))
    np.testing.assert_allclose(sym.toarray(), sym.toarray().T, rtol=1e-5)
    assert (sym.getnnz(axis=1) >= 5).all() and sym.nnz > g.to_csr().nnz
    for m in (with_self, sym, g.to_csr(symmetrize=True, include_self=True)):
        assert _is_sorted_by_data(m)  # rows nearest first: no EfficiencyWarning in scikit-learn


def test_to_csr_keeps_zero_distances_and_drops_missing_neighbours():
    ids = np.array([[1, -1], [0, 2], [1, -1]], np.int32)  # row 0 and 2: one neighbour each
    dist = np.array([[0.0, np.inf], [0.0, 4.0], [4.0, np.inf]], np.float32)  # 0 and 1 are duplicates
    m = Graph(ids, dist).to_csr()
    assert m.getnnz(axis=1).tolist() == [1, 2, 1] and m.nnz == 4
    assert m[0, 1] == 0 and m.indices[:1].tolist() == [1]  # an explicit zero, not a missing edge
    assert m.toarray()[1].tolist() == [0.0, 0.0, 4.0]
    s = Graph(ids, dist).to_csr(symmetrize=True, include_self=True)
    assert s.getnnz(axis=1).tolist() == [2, 3, 2]


def test_to_csr_bad_arguments(rng):
    g = knngraph.knn_graph(rng.standard_normal((20, 3)), 3, metric="cosine", device="cpu", verbose=False)
    with pytest.raises(ValueError, match="metric: distances in 'cosine' cannot be converted to 'euclidean'"):
        g.to_csr(metric="euclidean")
    with pytest.raises(ValueError, match="mode must be 'distance' or 'connectivity', got 'weights'"):
        g.to_csr(mode="weights")
    with pytest.raises(TypeError, match="symmetrize must be True or False, got 'yes'"):
        g.to_csr(symmetrize="yes")
    with pytest.raises(TypeError, match="dtype must be float32 or float64, got int32"):
        g.to_csr(dtype=np.int32)


def test_distances_in():
    d = np.array([[0.0, 2.0, np.inf]], np.float32)
    np.testing.assert_array_equal(distances_in(d, "euclidean", "sqeuclidean"), [[0.0, 4.0, np.inf]])
    assert distances_in(d, "cosine", None) is d or np.array_equal(distances_in(d, "cosine", None), d)
    with pytest.raises(ValueError, match="unknown metric"):
        distances_in(d, "euclidean", "manhattan")


# ---------------------------------------------------------------------------------------------- UMAP


def test_umap_knn_layout(rng):
    x = rng.standard_normal((100, 4)).astype(np.float32)
    g = knngraph.knn_graph(x, 9, device="cpu", verbose=False)
    ids, dists = umap_knn(g)
    assert ids.shape == dists.shape == (100, 10) and ids.dtype == np.int32 and dists.dtype == np.float32
    np.testing.assert_array_equal(ids[:, 0], np.arange(100))
    np.testing.assert_array_equal(dists[:, 0], 0)
    np.testing.assert_array_equal(ids[:, 1:], g.indices)
    np.testing.assert_allclose(dists[:, 1:], np.sqrt(g.distances), rtol=1e-6)  # 'auto': euclidean for UMAP
    ids5, d5 = umap_knn(g, 5, metric=None)
    np.testing.assert_array_equal(ids5, ids[:, :5])
    np.testing.assert_allclose(d5[:, 1:], g.distances[:, :4])
    with pytest.raises(ValueError, match="n_neighbors=11 needs a graph of degree >= 10"):
        umap_knn(g, 11)
    with pytest.raises(ValueError, match="n_neighbors"):
        umap_knn(g, 1)


@pytest.mark.slow
@pytest.mark.filterwarnings(UMAP_NO_INDEX)
def test_umap_uses_the_handed_graph_and_embeds_as_well(sift):
    """UMAP on knngraph's k-NN: it takes the lists as given, and its embedding is as trustworthy as
    UMAP's own (which runs pynndescent)."""
    umap = pytest.importorskip("umap")
    from sklearn.manifold import trustworthiness

    x, g = sift
    x, g = x[:1000], knngraph.knn_graph(x[:1000], 14, metric="euclidean", method="nndescent", device="cpu",
                                        verbose=False)
    knn = umap_knn(g)
    ours = umap.UMAP(n_neighbors=15, precomputed_knn=knn, n_epochs=100, random_state=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="n_jobs value .* overridden")
        emb = ours.fit_transform(x)
        own = umap.UMAP(n_neighbors=15, n_epochs=100, random_state=0).fit_transform(x)
    np.testing.assert_array_equal(ours.knn_indices, knn[0])
    t_ours, t_own = trustworthiness(x, emb, n_neighbors=10), trustworthiness(x, own, n_neighbors=10)
    assert t_ours >= 0.85 and t_ours >= t_own - 0.02, (t_ours, t_own)


# -------------------------------------------------------------------------------------------- scanpy


@pytest.mark.slow
def test_scanpy_neighbors_with_the_transformer_equal_scikit_learns(sift):
    """scanpy's ``pp.neighbors(transformer=...)``: knngraph's transformer gives what scikit-learn's
    KNeighborsTransformer gives (distances and UMAP connectivities), and its NN-Descent graph nearly so."""
    sc = pytest.importorskip("scanpy")
    anndata = pytest.importorskip("anndata")
    from sklearn.neighbors import KNeighborsTransformer

    from knngraph.sklearn import KNNGraphTransformer

    x = sift[0][:1000]
    ours, ref = anndata.AnnData(x), anndata.AnnData(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # scanpy / anndata deprecations
        sc.pp.neighbors(ours, use_rep="X", transformer=KNNGraphTransformer(n_neighbors=15, device="cpu"))
        sc.pp.neighbors(ref, use_rep="X", transformer=KNeighborsTransformer(n_neighbors=15))
        approx = anndata.AnnData(x)
        sc.pp.neighbors(approx, use_rep="X",
                        transformer=KNNGraphTransformer(n_neighbors=15, method="nndescent", device="cpu"))
    a, b = ours.obsp["distances"], ref.obsp["distances"]
    assert (a.getnnz(axis=1) == 16).all() and (b.getnnz(axis=1) == 16).all()  # self (explicit 0) + 15
    # the same distances per row (SIFT values are integers: which of two tied neighbours comes may differ)
    np.testing.assert_allclose(np.sort(a.data.reshape(-1, 16), 1), np.sort(b.data.reshape(-1, 16), 1), rtol=1e-5)
    assert ((a.toarray() != 0) == (b.toarray() != 0)).all(axis=1).mean() >= 0.99
    ca, cb = ours.obsp["connectivities"].toarray(), ref.obsp["connectivities"].toarray()
    assert (np.abs(ca - cb) > 1e-3).sum() <= 0.01 * (cb != 0).sum()  # UMAP weights: equal but for the ties
    same = (approx.obsp["distances"].toarray() != 0) & (b.toarray() != 0)
    assert same.sum() / (b.toarray() != 0).sum() >= 0.95  # NN-Descent: graph recall >= 0.95


# ------------------------------------------------------------------------------------ HDBSCAN, t-SNE


def test_hdbscan_on_the_sparse_graph_finds_the_clusters(rng):
    from sklearn.cluster import HDBSCAN
    from sklearn.metrics import adjusted_rand_score

    # scikit-learn's HDBSCAN needs a connected sparse graph: clusters close enough for k=15 to link them
    x, labels = _blobs(rng, centers=((0, 0), (6, 0), (0, 6)))
    g = knngraph.knn_graph(x, 15, metric="euclidean", method="nndescent", device="cpu", verbose=False)
    assert sparse.csgraph.connected_components(g.to_csr(symmetrize=True))[0] == 1
    found = HDBSCAN(min_cluster_size=20, min_samples=5, metric="precomputed", copy=False).fit_predict(
        g.to_csr(symmetrize=True))
    assert adjusted_rand_score(labels, found) >= 0.95
    assert (found == -1).mean() < 0.1


@pytest.mark.slow
def test_tsne_at_the_default_perplexity_needs_3_perplexity_plus_1_neighbours_and_self(rng):
    """scikit-learn's TSNE (perplexity 30) on the sparse graph: each row must hold the point itself and
    3 * 30 + 1 = 91 neighbours, so a k=91 graph with include_self=True embeds as well as TSNE's own
    neighbour search and keeps the clusters apart, and a k=90 one is refused by scikit-learn."""
    from sklearn.manifold import TSNE, trustworthiness

    x, labels = _blobs(rng, n_per=100, centers=((0, 0, 0), (8, 0, 0), (0, 8, 0)))
    tsne = TSNE(perplexity=30, metric="precomputed", init="random", max_iter=500, random_state=0)
    g = knngraph.knn_graph(x, 91, device="cpu", verbose=False)  # sqeuclidean: t-SNE's affinities use it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rows sorted by distance: no EfficiencyWarning
        emb = tsne.fit_transform(g.to_csr(include_self=True))
    own = TSNE(perplexity=30, init="random", max_iter=500, random_state=0).fit_transform(x)
    t_ours, t_own = trustworthiness(x, emb, n_neighbors=5), trustworthiness(x, own, n_neighbors=5)
    assert t_ours >= 0.95 and t_ours >= t_own - 0.01, (t_ours, t_own)
    centroids = np.array([emb[labels == c].mean(0) for c in range(3)])
    spread = max(np.linalg.norm(emb[labels == c] - centroids[c], axis=1).mean() for c in range(3))
    gaps = min(np.linalg.norm(centroids[a] - centroids[b]) for a in range(3) for b in range(a + 1, 3))
    assert gaps > 2 * spread  # three separate groups
    short = knngraph.knn_graph(x, 90, device="cpu", verbose=False)
    with pytest.raises(ValueError, match="92 neighbors per samples are required, but some samples have only 91"):
        tsne.fit_transform(short.to_csr(include_self=True))
