"""Exact k-NN on the CPU: results against a float64 brute-force reference and the shared ground truth."""

import numpy as np
import pytest

import knngraph
from knngraph import bruteforce, metrics
from knngraph.evaluate import recall_at_k


def _reference(base, queries, k, metric, graph=False):
    d = metrics.pairwise_distances(queries, base, metric)
    if graph:
        np.fill_diagonal(d, np.inf)
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(d, order, 1), order


def _vectors(rng, dtype, shape):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("metric", metrics.METRICS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8, np.float64])
def test_knn_matches_reference(metric, dtype, rng):
    base = _vectors(rng, dtype, (1500, 24))
    base[7] = 0  # a zero vector (cosine distance 1 to everything)
    base[8] = base[9]  # an exact duplicate: ties broken by lower id
    queries = _vectors(rng, dtype, (40, 24))
    k = 13
    d, i = knngraph.knn(base, queries, k, metric=metric, device="cpu", verbose=False)
    assert d.shape == (40, k) and i.shape == (40, k) and d.dtype == np.float32 and i.dtype == np.int32
    ref_d, ref_i = _reference(base, queries, k, metric)
    got_d = np.take_along_axis(metrics.pairwise_distances(queries, base, metric), i.astype(np.int64), 1)
    assert recall_at_k(i, ref_i, k, distances=got_d, true_distances=ref_d) == 1.0
    scale = max(1.0, float(np.abs(ref_d).max()))
    np.testing.assert_allclose(d, ref_d, rtol=1e-4, atol=1e-5 * scale)
    assert (np.diff(d, axis=1) >= -1e-6 * scale).all()  # nearest first


def test_sample_matches_shared_ground_truth_exactly(sample):
    d, i = knngraph.knn(sample.base, sample.queries, 100, device="cpu", verbose=False)
    np.testing.assert_array_equal(d, sample.gt_distances)  # squared L2 of uint8: exact integers
    assert recall_at_k(i, sample.gt_indices, 100, distances=d, true_distances=sample.gt_distances) == 1.0


def test_ties_lower_id_first():
    base = np.array([[1, 0], [0, 1], [-1, 0], [0, -1], [5, 5]], dtype=np.float32)
    d, i = knngraph.knn(base, np.zeros((1, 2), np.float32), 4, device="cpu")
    assert i.tolist() == [[0, 1, 2, 3]]
    assert d.tolist() == [[1, 1, 1, 1]]


def test_graph_excludes_self_even_with_duplicates():
    x = np.array([[0, 0], [0, 0], [0, 0], [3, 3]], dtype=np.float32)
    g = knngraph.knn_graph(x, 2, device="cpu")
    assert g.indices.tolist() == [[1, 2], [0, 2], [0, 1], [0, 1]]
    assert g.distances[:3].tolist() == [[0, 0], [0, 0], [0, 0]]
    assert g.info["method"] == "exact"


def test_graph_matches_reference(sample):
    base = sample.base[:3000]
    g = knngraph.knn_graph(base, 10, device="cpu", verbose=False)
    ref_d, ref_i = _reference(base, base, 10, "sqeuclidean", graph=True)
    np.testing.assert_array_equal(g.distances, ref_d.astype(np.float32))
    assert recall_at_k(g.indices, ref_i, 10, distances=g.distances, true_distances=ref_d) == 1.0


def test_tiling_and_memmap_give_the_same_answer(sample, tmp_path):
    from knngraph import io

    path = tmp_path / "base.u8bin"
    io.write(path, sample.base)
    mm = io.read(path)  # memory-mapped
    assert isinstance(mm, np.memmap)
    d1, i1 = knngraph.knn(mm, sample.queries[:50], 10, device="cpu", memory_limit="2MB", verbose=False)
    d2, i2 = knngraph.knn(sample.base, sample.queries[:50], 10, device="cpu", verbose=False)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(d1, d2)


def test_non_contiguous_and_negative_strides(rng):
    base = rng.standard_normal((400, 20)).astype(np.float32)
    q = rng.standard_normal((30, 20)).astype(np.float32)
    d_ref, i_ref = knngraph.knn(base, q, 5, device="cpu")
    d, i = knngraph.knn(base[::-1][::-1], np.asfortranarray(q), 5, device="cpu")
    np.testing.assert_array_equal(i, i_ref)
    rev = base[::-1]  # negative stride: ids refer to the reversed order
    d2, i2 = knngraph.knn(rev, q, 5, device="cpu")
    np.testing.assert_array_equal(len(base) - 1 - i2, i_ref)


def test_torch_cpu_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    base = rng.standard_normal((300, 8)).astype(np.float32)
    d, i = knngraph.knn(torch.from_numpy(base), torch.from_numpy(base[:5]), 3, device="cpu")
    assert isinstance(i, torch.Tensor) and i[:, 0].tolist() == [0, 1, 2, 3, 4]


def test_index_build_search_save_load(sample, tmp_path):
    index = bruteforce.build(bruteforce.IndexParams(metric="euclidean"), sample.base, device="cpu")
    d, i = bruteforce.search(index, sample.queries[:20], 5, device="cpu")
    np.testing.assert_allclose(d, np.sqrt(sample.gt_distances[:20, :5]), rtol=1e-6)
    bruteforce.save(tmp_path / "idx.knng", index)
    loaded = bruteforce.load(tmp_path / "idx.knng")
    assert loaded.metric == "euclidean"
    d2, i2 = loaded.search(sample.queries[:20], 5, device="cpu")
    np.testing.assert_array_equal(i2, i)
    with pytest.raises(ValueError, match="saved with metric 'euclidean', not 'cosine'"):
        bruteforce.load(tmp_path / "idx.knng", metric="cosine")


def test_graph_save_load_roundtrip(tmp_path, rng):
    x = rng.standard_normal((200, 6)).astype(np.float32)
    g = knngraph.knn_graph(x, 5, metric="cosine", device="cpu")
    g.save(tmp_path / "g.knng")
    g2 = knngraph.Graph.load(tmp_path / "g.knng")
    np.testing.assert_array_equal(g2.indices, g.indices)
    np.testing.assert_array_equal(g2.distances, g.distances)
    assert g2.metric == "cosine" and g2.info["graph_degree"] == 5


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
def test_duplicates_are_at_distance_zero(metric, rng):
    """Reported L2 distances are computed directly, so a vector's duplicate is at exactly 0."""
    base = (rng.standard_normal((500, 64)) * 100 + 1000).astype(np.float32)
    d, i = knngraph.knn(base, base[:20], 3, metric=metric, device="cpu")
    assert (d[:, 0] == 0).all() and (i[:, 0] == np.arange(20)).all()
    g = knngraph.knn_graph(np.concatenate([base, base[:5]]), 1, metric=metric, device="cpu")
    assert (g.distances[:5, 0] == 0).all() and (g.indices[:5, 0] == np.arange(500, 505)).all()


def test_index_keeps_its_numeric_plan_until_released(monkeypatch, rng):
    """The first search computes the base's numeric plan and keeps it with the index: later searches give
    the same answers without recomputing it; release() drops it and a pickled index carries none."""
    import pickle

    from knngraph.bruteforce import _index

    base = (rng.standard_normal((500, 12)) + 1e3).astype(np.float32)  # far from the origin: a centred plan
    queries = base[:20] + np.float32(0.01)
    index = bruteforce.build(bruteforce.IndexParams(metric="euclidean"), base, device="cpu")
    plans = []
    real = _index.plan_numerics
    monkeypatch.setattr(_index, "plan_numerics", lambda *a, **kw: plans.append(1) or real(*a, **kw))
    first = bruteforce.search(index, queries, 5, device="cpu", verbose=False)
    second = bruteforce.search(index, queries, 5, device="cpu", verbose=False)
    assert len(plans) == 1
    np.testing.assert_array_equal(first[1], second[1])
    np.testing.assert_array_equal(first[0], second[0])
    ref_d, ref_i = _reference(base, queries, 5, "euclidean")
    np.testing.assert_array_equal(second[1], ref_i)
    assert pickle.loads(pickle.dumps(index))._prepared == {}
    index.release()
    bruteforce.search(index, queries, 5, device="cpu", verbose=False)
    assert len(plans) == 2
