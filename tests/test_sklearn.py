"""KNNGraphTransformer against scikit-learn's KNeighborsTransformer and its estimator checks."""

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")

from sklearn.neighbors import KNeighborsTransformer  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

from knngraph.sklearn import KNNGraphTransformer  # noqa: E402


def test_same_graph_as_scikit_learn(rng):
    X = rng.standard_normal((300, 10)).astype(np.float32)
    Y = rng.standard_normal((20, 10)).astype(np.float32)
    ours = KNNGraphTransformer(n_neighbors=7, device="cpu").fit(X)
    ref = KNeighborsTransformer(n_neighbors=7, mode="distance").fit(X)
    for data in (X, Y):
        a = ours.transform(data).toarray()
        b = ref.transform(data).toarray()
        np.testing.assert_array_equal(a != 0, b != 0)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_connectivity_mode(rng):
    X = rng.standard_normal((50, 4))
    g = KNNGraphTransformer(n_neighbors=3, mode="connectivity", device="cpu").fit_transform(X)
    assert g.shape == (50, 50) and (g.getnnz(axis=1) == 3).all() and set(g.data.tolist()) == {1.0}


def test_bad_params(rng):
    with pytest.raises(ValueError, match="'n_neighbors' parameter of KNNGraphTransformer must be an int"):
        KNNGraphTransformer(n_neighbors=0).fit(rng.standard_normal((10, 2)))
    with pytest.raises(ValueError, match="'mode' parameter"):
        KNNGraphTransformer(mode="weights").fit(rng.standard_normal((10, 2)))


@pytest.mark.slow
def test_passes_check_estimator():
    check_estimator(KNNGraphTransformer(device="cpu"), on_skip=None)
