"""Hand-off of a graph built on the GPU (marker ``gpu``): the same CSR matrix, UMAP lists and scikit-learn
neighbours as the CPU's graph (the CPU tests are in test_handoff.py)."""

import numpy as np
import pytest

import knngraph
from knngraph.handoff import umap_knn

from .support.handoff import sift_with_cpu_graph

pytest.importorskip("scipy.sparse")  # Graph.to_csr makes a SciPy matrix

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def sift():
    return sift_with_cpu_graph()


def test_gpu_graph_hands_off_like_the_cpu_one(sift):
    """A graph built on the GPU from device input (CuPy arrays in, CuPy arrays out) gives the same CSR matrix
    and UMAP lists as the CPU's."""
    import cupy

    from knngraph.sklearn import KNNGraphTransformer

    x, cpu = sift
    gpu = knngraph.knn_graph(cupy.asarray(x), 15, metric="euclidean", device="cuda", verbose=False)
    assert type(gpu.indices).__module__.startswith("cupy")
    a, b = gpu.to_csr(symmetrize=True), cpu.to_csr(symmetrize=True)
    np.testing.assert_allclose(np.sort(a.data), np.sort(b.data), rtol=1e-4, atol=1e-3)
    ids, dists = umap_knn(gpu)
    ref_ids, ref_dists = umap_knn(cpu)
    np.testing.assert_allclose(dists, ref_dists, rtol=1e-4, atol=1e-3)
    assert (ids == ref_ids).mean() > 0.99  # ties of integer SIFT distances may order differently
    t = KNNGraphTransformer(n_neighbors=15, device="cuda", method="nndescent").fit(x)
    found = t.kneighbors(return_distance=False)
    assert np.mean([len(set(f) & set(r)) / 15 for f, r in zip(found, cpu.indices)]) >= 0.95
