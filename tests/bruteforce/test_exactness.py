"""Exact means exact: the exact k-NN against a float64 brute force (ties allowed) on data that breaks
float32 GEMM keys: far from the origin, huge and tiny magnitudes, near-duplicates; cosine distances in
[0, 2] with a point at exactly 0 from itself. CPU here; tests/bruteforce/test_exact_gpu.py runs the same
cases on a GPU."""

import numpy as np
import pytest

import knngraph
from knngraph.evaluate import recall_at_k
from knngraph.metrics import pairwise_distances


def exact_answer(base, queries, k, metric):
    ref = pairwise_distances(queries.astype(np.float64), base.astype(np.float64), metric)
    ids = np.argsort(ref, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(ref, ids, 1), ids


def assert_exact(base, queries, k, metric="sqeuclidean", device="cpu"):
    d, i = knngraph.knn(base, queries, k, metric=metric, device=device)
    d, i = np.asarray(d), np.asarray(i)
    td, ti = exact_answer(base, queries, k, metric)
    assert recall_at_k(i, ti, k, distances=d, true_distances=td) == 1.0
    np.testing.assert_allclose(d, td, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(td).max())))
    return d, i


CASES = {
    "gps": lambda rng: (np.array([45, 7]) + 0.05 * rng.random((5000, 2)), np.array([45, 7]) + 0.05 * rng.random((80, 2))),
    "offset_100": lambda rng: (100 + rng.standard_normal((3000, 16)), 100 + rng.standard_normal((40, 16))),
    "offset_1e3": lambda rng: (1e3 + rng.standard_normal((3000, 16)), 1e3 + rng.standard_normal((40, 16))),
    "offset_1e4": lambda rng: (1e4 + rng.standard_normal((3000, 16)), 1e4 + rng.standard_normal((40, 16))),
    "two_far_clusters": lambda rng: (np.concatenate([1e4 + 1e-2 * rng.random((400, 3)), -1e4 + 1e-2 * rng.random((400, 3))]),
                                     np.concatenate([1e4 + 1e-2 * rng.random((20, 3)), -1e4 + 1e-2 * rng.random((20, 3))])),
    "tiny": lambda rng: (1e-25 * rng.random((500, 8)), 1e-25 * rng.random((20, 8))),
    "huge_spread": lambda rng: (1e15 * rng.standard_normal((500, 8)), 1e15 * rng.standard_normal((20, 8))),
}


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_l2_exact_on_data_that_breaks_gemm_keys(case, metric, rng):
    base, queries = CASES[case](rng)
    assert_exact(base.astype(np.float32), queries.astype(np.float32), 10, metric)


def test_the_retry_path_proves_every_answer(rng):
    """Two clusters far apart: the mean is near 0 (no centering), so keys are off by far more than the
    gaps inside a cluster; the first candidates cannot prove the answer and the search widens."""
    base = np.concatenate([1e4 + 1e-2 * rng.random((300, 3)), -1e4 + 1e-2 * rng.random((300, 3))]).astype(np.float32)
    g = knngraph.knn_graph(base, 5, device="cpu")
    assert g.info["exactness_retries"] >= 1 and not g.info["centered"]
    assert knngraph.graph_recall(g, 5, base=base) == 1.0


@pytest.mark.parametrize("metric", ["sqeuclidean", "inner_product"])
def test_distances_beyond_float32_are_an_error_not_inf(metric, rng):
    x = (rng.random((50, 4)) * 1e20).astype(np.float32)
    with pytest.raises(ValueError, match="distances of this data exceed the float32 range"):
        knngraph.knn(x, x[:5], 3, metric=metric, device="cpu")


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_huge_magnitudes_that_fit_are_exact(metric, rng):
    x = (rng.random((60, 4)) * 1e20).astype(np.float32)
    assert_exact(x, x[5:15] * np.float32(1.01), 3, metric)


def test_cosine_distances_lie_in_0_2_and_self_is_exactly_0(rng):
    x = rng.standard_normal((2000, 48)).astype(np.float32)
    x[10] = 0  # a zero vector: distance 1 to everything
    x[20] = x[21] = 3 * x[22]  # same direction
    d, i = knngraph.knn(x, x, 5, metric="cosine", device="cpu")
    assert (d >= 0).all() and (d <= 2).all()
    rows = np.arange(2000) != 10
    assert (d[rows, 0] == 0).all()
    assert (d[10] == 1).all()
    assert set(i[20, :3]) == {20, 21, 22} and (d[20, :2] == 0).all()  # 20 and 21 are identical
    assert d[20, 2] < 1e-12  # 22 points the same way (its unit vector differs by rounding)
    g = knngraph.knn_graph(x, 8, metric="cosine", device="cpu")
    assert (g.distances >= 0).all() and (g.distances <= 2).all()


@pytest.mark.parametrize("method", ["exact", "nndescent"])
def test_graph_cosine_distances_are_never_negative(method, sample):
    from knngraph.datasets import load_minilm_words

    try:
        words = load_minilm_words()
    except FileNotFoundError:
        words = None
    x = np.asarray(words.base[:5000]) if words is not None else np.repeat(np.asarray(sample.base[:1000]), 2, 0)
    g = knngraph.knn_graph(x, 10, method=method, metric="cosine", device="cpu", verbose=False)
    assert (g.distances >= 0).all() and (g.distances <= 2).all()


def test_integer_data_keeps_exact_keys_and_no_margin(sample):
    """uint8 vectors: GEMM keys are exact integers, so no candidates beyond k, no recomputation."""
    g = knngraph.knn_graph(sample.base[:3000], 10, device="cpu")
    assert g.info["candidates"] == 10 and g.info["exactness_retries"] == 0
    td, ti = exact_answer(sample.base[:3000], sample.base[:3000], 11, "sqeuclidean")
    assert recall_at_k(g.indices, ti[:, 1:], 10, distances=g.distances, true_distances=td[:, 1:]) == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float_vectors_of_small_integers_take_exact_keys(dtype, sample):
    """SIFT-like descriptors stored as floats: every key is an integer below 2^24, exact in float32, so
    the search takes k candidates and no recomputation, and answers exactly as the uint8 vectors do."""
    base, queries = sample.base[:3000], sample.base[3000:3100]
    d, i = knngraph.knn(base.astype(dtype), queries.astype(dtype), 10, device="cpu")
    du, iu = knngraph.knn(base, queries, 10, device="cpu")
    np.testing.assert_array_equal(i, iu)
    np.testing.assert_array_equal(d, du)
    g = knngraph.knn_graph(base.astype(dtype), 10, device="cpu")
    assert g.info["candidates"] == 10 and g.info["exactness_retries"] == 0
    assert_exact(base.astype(np.float32), queries.astype(np.float32), 10)


def test_which_float_data_counts_as_small_integers(sample):
    from knngraph.bruteforce._exact import plan_numerics

    base = sample.base[:2000].astype(np.float32)
    plan = plan_numerics(base, "sqeuclidean", np)
    assert plan.integer_top == float(base.max()) and plan.gamma > 0
    assert plan.for_queries(base[:50]).gamma == 0.0
    # queries with a fraction, or large enough to push a key past 2^24, keep the error bound
    assert plan.for_queries(base[:50] + np.float32(0.5)).gamma == plan.gamma
    big = np.full((3, base.shape[1]), 600, np.float32)      # 128 * 228 * 2 * 600 > 2^24
    assert plan.for_queries(big).gamma == plan.gamma
    # a fraction anywhere in the base, integers beyond float16's exact range, cosine: no integer plan
    frac = base.copy()
    frac[7, 3] += 0.25
    assert plan_numerics(frac, "sqeuclidean", np).integer_top is None
    assert plan_numerics(base * 16, "sqeuclidean", np).integer_top is None
    assert plan_numerics(base, "cosine", np).integer_top is None
    # integers far from the origin are centered first: their keys are no longer integers
    assert plan_numerics(base + 1000, "sqeuclidean", np).integer_top is None
    ip = plan_numerics(base, "inner_product", np)
    assert ip.for_queries(base[:50]).gamma == 0.0
