"""SONG search on the CPU: exactness where the answer is known, recall floors on real data, bad input."""

import numpy as np
import pytest

import knngraph
from knngraph.graphops import UnreachableVerticesWarning
from knngraph import metrics, song
from knngraph.evaluate import recall_at_k

from .conftest import complete_graph, random_vectors

#: documented operating point: prepared exact graph (degree 32), queue_size=32 -> recall@10 >= 0.95
QUEUE_SIZE_FOR_095 = 32


def _exact(base, queries, k, metric):
    d = metrics.pairwise_distances(queries, base, metric)
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(d, order, 1), order


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
@pytest.mark.parametrize("metric", metrics.METRICS)
def test_complete_graph_gives_exact_results(dtype, metric, rng):
    base = random_vectors(rng, 40, 12, dtype)
    queries = random_vectors(rng, 7, 12, dtype)
    g = complete_graph(40)
    g.metric = metric
    d, i = song.search(song.from_graph(g, base, device="cpu"), queries, k=5, params=song.SearchParams(queue_size=8),
                       device="cpu", verbose=False)
    assert d.dtype == np.float32 and i.dtype == np.int32 and i.shape == (7, 5)
    ref_d, ref_i = _exact(base, queries, 5, metric)
    full = metrics.pairwise_distances(queries, base, metric)
    got = np.take_along_axis(full, i.astype(np.int64), 1)
    assert recall_at_k(i, ref_i, 5, distances=got, true_distances=ref_d) == 1.0
    np.testing.assert_allclose(d, ref_d, rtol=1e-4, atol=1e-3 * max(1.0, float(np.abs(ref_d).max())))


def test_single_entry_point_and_bloom_on_complete_graph(rng):
    base = rng.standard_normal((30, 5)).astype(np.float32)
    queries = rng.standard_normal((4, 5)).astype(np.float32)
    ref_d, ref_i = _exact(base, queries, 3, "sqeuclidean")
    for visited in ("hash", "bloom"):
        index = song.from_graph(complete_graph(30), base, entry_points=np.array([7]), device="cpu")
        d, i = song.search(index, queries, 3, song.SearchParams(queue_size=4, visited=visited), device="cpu",
                           verbose=False)
        np.testing.assert_array_equal(i, ref_i)


@pytest.mark.parametrize("visited", ["hash", "bloom"])
def test_recall_floor_on_sift20k_prepared_exact_graph(sample, sift_graphs, visited):
    _, prepared = sift_graphs
    stats = {}
    d, i = song.search(song.from_graph(prepared, sample.base, device="cpu"), sample.queries, 10,
                       song.SearchParams(queue_size=QUEUE_SIZE_FOR_095, visited=visited), device="cpu", verbose=False,
                       stats=stats)
    r = recall_at_k(i, sample.gt_indices, 10, distances=d, true_distances=sample.gt_distances)
    assert r >= 0.95, r
    assert 0 < stats["distances_per_query"] < len(sample.base)
    # distances reported are the exact squared L2 of the returned ids (integers here)
    full = metrics.pairwise_distances(sample.queries[:50], sample.base, "sqeuclidean")
    np.testing.assert_array_equal(d[:50], np.take_along_axis(full, i[:50].astype(np.int64), 1).astype(np.float32))


def test_larger_queue_raises_recall_and_preparation_helps(sample, sift_graphs):
    raw, prepared = sift_graphs
    q = sample.queries[:300]
    gt, gtd = sample.gt_indices[:300], sample.gt_distances[:300]

    def rec(g, qs):
        d, i = song.search(song.from_graph(g, sample.base, device="cpu"), q, 10, song.SearchParams(queue_size=qs),
                           device="cpu", verbose=False)
        return recall_at_k(i, gt, 10, distances=d, true_distances=gtd)

    r16, r64 = rec(prepared, 16), rec(prepared, 64)
    assert r64 > r16 and r64 >= 0.98
    raw32 = knngraph.Graph(np.ascontiguousarray(raw.indices[:, :32]), np.ascontiguousarray(raw.distances[:, :32]))
    with pytest.warns(UnreachableVerticesWarning, match="song.from_graph: .* vertices .* cannot be reached"):
        recall_raw = rec(raw32, 16)  # a raw k-NN graph leaves islands that no search from the entries reaches
    assert rec(prepared, 16) > recall_raw + 0.03  # same degree: preparation is what helps


def test_deterministic_and_k_up_to_queue_size(sample, sift_graphs):
    _, prepared = sift_graphs
    sp = song.SearchParams(queue_size=16)
    a = song.search(song.from_graph(prepared, sample.base, device="cpu"), sample.queries[:50], 16, sp, device="cpu",
                    verbose=False)
    b = song.search(song.from_graph(prepared, sample.base, device="cpu"), sample.queries[:50], 16, sp, device="cpu",
                    verbose=False)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert (np.diff(a.distances, axis=1) >= 0).all()
    assert all(len(set(row)) == 16 for row in a.indices.tolist())


def test_unreachable_vertices_give_padding(rng):
    base = rng.standard_normal((10, 3)).astype(np.float32)
    ids = np.full((10, 2), -1, np.int32)
    ids[0] = [1, 2]  # from entry 0 only 0, 1, 2 are reachable
    g = knngraph.Graph(ids, np.zeros((10, 2), np.float32))
    with pytest.warns(UnreachableVerticesWarning, match=r"song.from_graph: 7 of 10 vertices \(70%\) cannot be reached"):
        index = song.from_graph(g, base, entry_points=[0], device="cpu")
    d, i = song.search(index, base[:1], 5, song.SearchParams(queue_size=5), device="cpu", verbose=False)
    assert sorted(i[0, :3].tolist()) == [0, 1, 2]
    assert i[0, 3:].tolist() == [-1, -1] and np.isinf(d[0, 3:]).all()


def test_bad_input(sample, sift_graphs, rng):
    _, g = sift_graphs
    base, q = sample.base, sample.queries[:2]
    index = song.from_graph(g, base, device="cpu")
    with pytest.raises(ValueError, match="larger than queue_size"):
        song.search(index, q, 20, song.SearchParams(queue_size=16), device="cpu")
    with pytest.raises(ValueError, match="graph has 20000 rows but dataset has 19999"):
        song.search(song.from_graph(g, base[:-1], device="cpu"), q, 5, device="cpu")
    bad = knngraph.Graph(g.indices.copy(), g.distances.copy())
    bad.indices[123, 4] = 20000
    with pytest.raises(ValueError, match="row 123"):
        song.search(song.from_graph(bad, base, device="cpu"), q, 5, device="cpu")
    with pytest.raises(ValueError, match="entry_points must be ids in"):
        song.search(song.from_graph(g, base, entry_points=[0, 20000], device="cpu"), q, 5, device="cpu")
    with pytest.raises(ValueError, match="entry_points must be a non-empty 1-D"):
        song.search(song.from_graph(g, base, entry_points=[], device="cpu"), q, 5, device="cpu")
    with pytest.raises(ValueError, match="'queue_size' parameter"):
        song.search(index, q, 5, song.SearchParams(queue_size=0), device="cpu")
    with pytest.raises(ValueError, match="'queue_size' parameter"):
        song.SearchParams(queue_size=song.MAX_QUEUE_SIZE + 1)
    with pytest.raises(ValueError, match="'visited' parameter"):
        song.search(index, q, 5, song.SearchParams(visited="cuckoo"), device="cpu")
    with pytest.raises(ValueError, match="dimensions"):
        song.search(index, q[:, :10], 5, device="cpu")
    with pytest.raises(ValueError, match="k must be at least 1"):
        song.search(index, q, 0, device="cpu")
    with pytest.raises(TypeError, match="knngraph.Graph"):
        song.search(song.from_graph(g.indices, base, device="cpu"), q, 5, device="cpu")
    with pytest.raises(TypeError, match="dtype"):
        song.search(song.from_graph(g, base.astype(np.int64), device="cpu"), q, 5, device="cpu")
    f = rng.standard_normal((20000, 128)).astype(np.float32)
    qf = f[:2].copy()
    qf[1, 3] = np.nan
    with pytest.raises(ValueError, match="queries row 1 contains NaN"):
        song.search(song.from_graph(g, f, device="cpu"), qf, 5, device="cpu")
