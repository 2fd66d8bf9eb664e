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


def test_rows_sorted_by_distance_as_scikit_learn_consumers_expect(rng):
    import warnings

    from sklearn.manifold import Isomap
    from sklearn.neighbors._base import _is_sorted_by_data

    X = rng.standard_normal((120, 5))
    g = KNNGraphTransformer(n_neighbors=6, device="cpu").fit_transform(X)
    assert _is_sorted_by_data(g) and (g.getnnz(axis=1) == 7).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no EfficiencyWarning "not sorted by row values"
        Isomap(n_neighbors=6, metric="precomputed").fit(g)


@pytest.mark.parametrize("mode", ["distance", "connectivity"])
def test_missing_neighbours_never_reach_the_csr(rng, monkeypatch, mode):
    import knngraph

    X = rng.standard_normal((30, 3)).astype(np.float32)
    t = KNNGraphTransformer(n_neighbors=4, mode=mode, device="cpu").fit(X)
    real_knn = knngraph.knn

    def knn_with(fake_ids=None, fake_dist=None):
        def knn(*args, **kw):
            d, i = real_knn(*args, **kw)
            d, i = np.array(d), np.array(i)
            if fake_ids is not None:
                i[2, 1:] = fake_ids
                d[2, 1:] = np.inf if fake_ids == -1 else d[2, 1:]
            if fake_dist is not None:
                d[3, 0] = fake_dist
            return d, i
        return knn

    Y = X + np.float32(0.01)  # new data: its neighbours come from knngraph.knn
    monkeypatch.setattr(knngraph, "knn", knn_with(fake_ids=-1))
    width = 5 if mode == "distance" else 4
    with pytest.raises(ValueError, match=f"only 1 of the {width} neighbours of row 2 were found: its distances are "
                                         "not finite"):
        t.transform(Y)
    monkeypatch.setattr(knngraph, "knn", knn_with(fake_ids=30))
    with pytest.raises(ValueError, match=r"row 2 holds neighbour ids outside \[0, 30\)"):
        t.transform(Y)
    monkeypatch.setattr(knngraph, "knn", knn_with(fake_dist=np.nan))
    with pytest.raises(ValueError, match="row 3 has non-finite neighbour distances"):
        t.transform(Y)
    monkeypatch.setattr(knngraph, "knn", knn_with(fake_ids=7))
    with pytest.raises(ValueError, match="row 2 lists a neighbour twice"):
        t.transform(Y)


_CHILD = """
import sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import knngraph
from knngraph.sklearn import KNNGraphTransformer

if sys.argv[1] == "minus-one":  # every neighbour list is missing (-1 ids, infinite distances)
    def knn(base, queries, k, **kw):
        n = np.asarray(queries).shape[0]
        return np.full((n, k), np.inf, np.float32), np.full((n, k), -1, np.int32)
    knngraph.knn = knn
X = np.random.default_rng(0).random((50, 4)) * float(sys.argv[2])
try:
    t = KNNGraphTransformer(device="cpu")
    # new data goes through knngraph.knn; the training data through the graph built at fit
    g = t.fit(X).transform(X[:50:2] + 0.5) if sys.argv[1] == "minus-one" else t.fit_transform(X)
    a = g.toarray()
    assert g.indices.min() >= 0 and g.indices.max() < 50 and np.isfinite(g.data).all()
    print("OK", a.shape)
except ValueError as exc:
    print("ValueError", exc)
"""


@pytest.mark.parametrize("case", [("overflow", "1e20"), ("minus-one", "1")])
def test_missing_neighbours_do_not_crash_the_interpreter(case):
    """Values that overflow float32 used to put -1 ids into the CSR matrix, and ``toarray()`` aborted the
    interpreter ("double free or corruption"): run in a child process so that a regression cannot take the
    test runner down."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _CHILD, *case], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.strip()
    if case[0] == "minus-one":
        assert out.startswith("ValueError only 0 of the 6 neighbours of row 0 were found"), out
    else:  # a correct graph, or a clear error about float32
        assert out.startswith("OK (50, 50)") or (out.startswith("ValueError") and "float32" in out), out


def test_kneighbors_matches_scikit_learn(rng):
    from sklearn.neighbors import NearestNeighbors

    X = rng.standard_normal((200, 6))
    Y = rng.standard_normal((15, 6))
    ours = KNNGraphTransformer(n_neighbors=5, device="cpu").fit(X)
    ref = NearestNeighbors(n_neighbors=5).fit(X)
    for args in ((), (Y,), (None, 8), (Y, 3)):
        d, i = ours.kneighbors(*args)
        rd, ri = ref.kneighbors(*args)
        assert d.dtype == np.float32 and i.dtype == np.int64
        np.testing.assert_array_equal(i, ri)
        np.testing.assert_allclose(d, rd, rtol=1e-4, atol=1e-5)
    ids = ours.kneighbors(Y, return_distance=False)
    np.testing.assert_array_equal(ids, ref.kneighbors(Y, return_distance=False))
    with pytest.raises(ValueError, match="Expected n_neighbors <= n_samples_fit, but n_neighbors = 200"):
        ours.kneighbors(n_neighbors=200)  # the training data: at most n - 1 others
    with pytest.raises(ValueError, match="Expected n_neighbors > 0. Got 0"):
        ours.kneighbors(Y, n_neighbors=0)


def test_float64_on_request_float32_by_default(rng):
    X = rng.standard_normal((60, 4))
    assert KNNGraphTransformer(n_neighbors=3, device="cpu").fit_transform(X).dtype == np.float32
    t = KNNGraphTransformer(n_neighbors=3, device="cpu", dtype=np.float64).fit(X)
    g = t.transform(X)
    assert g.dtype == np.float64 and t.kneighbors()[0].dtype == np.float64
    np.testing.assert_allclose(g.toarray(), KNeighborsTransformer(n_neighbors=3).fit_transform(X).toarray(),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"'dtype' parameter of KNNGraphTransformer must be one of \{numpy.float32"):
        KNNGraphTransformer(dtype=np.int32).fit(X)


def test_builder_knobs_reach_the_builder(rng):
    """method_params are the builder's IndexParams fields: a bad one is the builder's error, a good one
    changes the graph (one NN-Descent iteration from random lists is worse than ten)."""
    from knngraph import datasets

    s = datasets.load_sample()
    X = np.asarray(s.base[:3000], np.float32)
    truth = KNeighborsTransformer(n_neighbors=10).fit(X).kneighbors()[1]

    def recall(**params):
        t = KNNGraphTransformer(n_neighbors=10, method="nndescent", device="cpu",
                                method_params={"init": "random", **params}).fit(X)
        ids = t.kneighbors(return_distance=False)
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth)])

    one, many = recall(max_iterations=1), recall(max_iterations=10)
    assert many >= 0.95 and one < many - 0.1, (one, many)
    with pytest.raises(ValueError, match="max_iterations"):
        KNNGraphTransformer(method="nndescent", method_params={"max_iterations": 0}, device="cpu").fit(X[:100])


def test_n_jobs_sets_numba_threads_and_restores_them(rng, monkeypatch):
    import numba

    import knngraph

    seen = []
    real = knngraph.knn_graph

    def spy(*args, **kw):
        seen.append(numba.get_num_threads())
        return real(*args, **kw)

    monkeypatch.setattr(knngraph, "knn_graph", spy)
    before = numba.get_num_threads()
    X = rng.standard_normal((40, 3))
    KNNGraphTransformer(n_neighbors=3, device="cpu", n_jobs=1).fit(X)
    KNNGraphTransformer(n_neighbors=3, device="cpu", n_jobs=-1).fit(X)
    assert seen == [1, numba.config.NUMBA_NUM_THREADS] and numba.get_num_threads() == before
    with pytest.raises(ValueError, match="'n_jobs' parameter of KNNGraphTransformer must be a non-zero int"):
        KNNGraphTransformer(n_jobs=0).fit(X)


def test_pandas_dataframe_input(rng):
    pd = pytest.importorskip("pandas")
    X = rng.standard_normal((30, 3))
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    t = KNNGraphTransformer(n_neighbors=4, device="cpu").fit(df)
    assert list(t.feature_names_in_) == ["a", "b", "c"]
    np.testing.assert_allclose(t.transform(df).toarray(), KNNGraphTransformer(n_neighbors=4, device="cpu")
                               .fit_transform(X).toarray())


def test_import_without_scikit_learn_names_the_extra():
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['sklearn'] = None\n"
            "try:\n    import knngraph.sklearn\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout
    assert "pip install 'knngraph[sklearn]'" in out, out
