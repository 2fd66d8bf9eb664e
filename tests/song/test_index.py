"""SONG Index: build / search / save / load, hashed (1-bit) mode with exact re-ranking."""

import numpy as np
import pytest

from knngraph import metrics, song
from knngraph.evaluate import recall_at_k
from knngraph.song.hashing import RandomProjectionHasher

from .conftest import complete_graph


def test_build_search_save_load(sample, sift_graphs, tmp_path):
    _, g = sift_graphs
    index = song.from_graph(g, sample.base, song.IndexParams(), device="cpu")
    assert index.entry_points.shape == (32,) and len(set(index.entry_points.tolist())) == 32
    d, i = index.search(sample.queries[:200], 10, song.SearchParams(queue_size=32), device="cpu", verbose=False)
    assert recall_at_k(i, sample.gt_indices[:200], 10, distances=d, true_distances=sample.gt_distances[:200]) >= 0.95
    path = tmp_path / "sift.song"
    song.save(path, index)
    loaded = song.load(path)
    assert loaded.metric == "sqeuclidean" and loaded.graph.n == 20000
    d2, i2 = loaded.search(sample.queries[:200], 10, song.SearchParams(queue_size=32), device="cpu", verbose=False)
    np.testing.assert_array_equal(i, i2)
    with pytest.raises(ValueError, match="saved with metric 'sqeuclidean', not 'cosine'"):
        song.load(path, metric="cosine")
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match="truncated|corrupt"):
        song.load(path)


def test_build_from_scratch_small(rng):
    x = rng.standard_normal((300, 10)).astype(np.float32)
    index = song.build(song.IndexParams(metric="cosine", graph_degree=12, intermediate_graph_degree=24), x,
                       device="cpu", verbose=False)
    assert index.graph.degree == 12 and index.graph.metric == "cosine"
    d, i = index.search(x[:20], 5, song.SearchParams(queue_size=24), device="cpu", verbose=False)
    assert (i[:, 0] == np.arange(20)).all()
    with pytest.raises(ValueError, match="graph was built with metric"):
        song.from_graph(index.graph, x, song.IndexParams(metric="euclidean"), device="cpu")
    with pytest.raises(ValueError, match="'hash_bits' parameter"):
        song.IndexParams(hash_bits=100)


def test_hasher_codes_and_collision_rate(rng):
    x = rng.standard_normal((400, 32)).astype(np.float32)
    h = RandomProjectionHasher(bits=256, seed=3).fit(x, "cosine")
    codes = h.encode(x)
    assert codes.shape == (400, 8) and codes.dtype == np.uint32
    np.testing.assert_array_equal(codes, RandomProjectionHasher(bits=256, seed=3).fit(x, "cosine").encode(x))
    bits = np.unpackbits(codes.view(np.uint8), axis=1, bitorder="little")
    np.testing.assert_array_equal(bits[:, :256], ((x @ h.projections_) > 0).astype(np.uint8))
    # Pr[bit differs] = angle / pi (section VII)
    ham = (bits[:200] != bits[200:]).mean(axis=1)
    cos = (x[:200] * x[200:]).sum(1) / np.linalg.norm(x[:200], axis=1) / np.linalg.norm(x[200:], axis=1)
    assert abs(float(np.mean(ham - np.arccos(np.clip(cos, -1, 1)) / np.pi))) < 0.01
    with pytest.raises(ValueError, match="bits must be one of"):
        RandomProjectionHasher(bits=100)


def test_hashed_search_reranks_to_exact_ids(rng):
    # complete graph + a queue holding every vertex: the Hamming search returns all of them and the
    # exact re-ranking must then give exactly the true top-k
    base = rng.integers(0, 255, (48, 16)).astype(np.uint8)
    queries = rng.integers(0, 255, (6, 16)).astype(np.uint8)
    g = complete_graph(48)
    index = song.from_graph(g, base, song.IndexParams(hash_bits=64), device="cpu")
    d, i = index.search(queries, 5, song.SearchParams(queue_size=48), device="cpu", verbose=False)
    full = metrics.pairwise_distances(queries, base, "sqeuclidean")
    ref = np.argsort(full, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(i, ref)
    np.testing.assert_array_equal(d, np.take_along_axis(full, ref, 1).astype(np.float32))
    with pytest.raises(ValueError, match="rerank=3 must be at least k=5"):
        index.search(queries, 5, song.SearchParams(queue_size=48, rerank=3), device="cpu")


def test_hashed_index_recall_and_save_load(sample, sift_graphs, tmp_path):
    _, g = sift_graphs
    index = song.from_graph(g, sample.base, song.IndexParams(hash_bits=512), device="cpu")
    assert index.codes.shape == (20000, 16)
    d, i = index.search(sample.queries[:300], 10, song.SearchParams(queue_size=128), device="cpu", verbose=False)
    r = recall_at_k(i, sample.gt_indices[:300], 10, distances=d, true_distances=sample.gt_distances[:300])
    assert r >= 0.9, r
    full = metrics.pairwise_distances(sample.queries[:20], sample.base, "sqeuclidean")
    np.testing.assert_array_equal(d[:20], np.take_along_axis(full, i[:20].astype(np.int64), 1).astype(np.float32))
    song.save(tmp_path / "h.song", index)
    loaded = song.load(tmp_path / "h.song")
    np.testing.assert_array_equal(loaded.codes, index.codes)
    d2, i2 = loaded.search(sample.queries[:300], 10, song.SearchParams(queue_size=128), device="cpu", verbose=False)
    np.testing.assert_array_equal(i, i2)


def test_extend_reaches_the_recall_of_a_rebuild(sample):
    """15,000 vectors indexed, 5,000 added: the extended index searches the whole 20,000 about as well as
    an index built on all of them, the added vectors are found, and old rows that took no new vertex
    stay as they were."""
    params = song.IndexParams(graph_degree=24, intermediate_graph_degree=48)
    base = sample.base
    old = song.build(params, base[:15000], device="cpu", verbose=False)
    grown = song.extend(old, base[15000:], device="cpu", verbose=False)
    assert grown.shape == (20000, 128) and old.shape == (15000, 128)
    assert grown.graph.degree == 24 and not (grown.graph.indices == np.arange(20000)[:, None]).any()
    rebuilt = song.build(params, base, device="cpu", verbose=False)
    sp = song.SearchParams(queue_size=48)
    q, gt, gd = sample.queries, sample.gt_indices, sample.gt_distances
    def recall(index):
        d, i = index.search(q, 10, sp, device="cpu", verbose=False)
        return recall_at_k(i, gt, 10, distances=d, true_distances=gd)

    r_grown, r_rebuilt = recall(grown), recall(rebuilt)
    assert r_grown >= r_rebuilt - 0.02 and r_grown >= 0.9, (r_grown, r_rebuilt)
    # every added vector finds itself
    _, i = grown.search(base[15000:15500], 1, sp, device="cpu", verbose=False)
    assert (i[:, 0] == np.arange(15000, 15500)).mean() >= 0.99
    # rows of old vertices that took no new vertex are unchanged
    untouched = np.where((grown.graph.indices[:15000] < 15000).all(axis=1))[0]
    assert len(untouched) > 100
    np.testing.assert_array_equal(np.sort(grown.graph.indices[untouched], 1), np.sort(old.graph.indices[untouched], 1))
