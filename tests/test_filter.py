"""Filtered search (``filter=``): a boolean mask or a uint32 bitset of the ids that may be returned.

Exact search with a filter equals a float64 brute force over the allowed vectors; SONG never returns a
disallowed id, pads with -1 / inf when fewer than k ids are allowed, and keeps recall floors on
sift-photos 20k at 1%, 10%, 50% and 90% of the ids allowed (the 1% case takes the exact path)."""

import numpy as np
import pytest

import knngraph
from knngraph import bruteforce, song
from knngraph.primitives.filters import bitset_words, is_allowed, prepare_filter


def _reference(base, queries, k, mask):
    """float64 brute force over the allowed rows: (sqeuclidean distances, ids), ties by lower id."""
    ids = np.flatnonzero(mask)
    diff = queries[:, None, :].astype(np.float64) - base[ids][None].astype(np.float64)
    d = (diff * diff).sum(-1)
    order = np.lexsort((np.broadcast_to(ids, d.shape), d), axis=1)[:, :k]
    return np.take_along_axis(d, order, 1), ids[order]


# --------------------------------------------------------------------------------------------------
# the filter argument


def test_mask_and_bitset_are_the_same_filter(rng):
    mask = rng.random(77) < 0.3
    a = prepare_filter(mask, 77)
    words = np.zeros(bitset_words(77), np.uint32)
    for v in np.flatnonzero(mask):
        words[v // 32] |= np.uint32(1 << (v % 32))
    words[-1] |= np.uint32(1 << 31)  # a bit past n is ignored
    b = prepare_filter(words, 77)
    np.testing.assert_array_equal(a.bits, b.bits)
    assert a.n_allowed == b.n_allowed == mask.sum()
    np.testing.assert_array_equal(a.mask(), mask)
    assert [bool(is_allowed(a.bits, v)) for v in range(77)] == mask.tolist()


@pytest.mark.parametrize("bad, exc, fragment", [
    (np.ones(19, bool), ValueError, "boolean mask of length 19, but the index holds 20 vectors"),
    (np.ones(2, np.uint32), ValueError, "bitset of 2 uint32 words, but 20 vectors need 1"),
    (np.arange(5), TypeError, "to allow a list of ids, pass mask = np.zeros(20, bool); mask[ids] = True"),
    (np.ones(20, np.float32), TypeError, "got dtype float32"),
    (np.ones(1, np.uint64), TypeError, "got dtype uint64"),
    (np.ones((4, 5), bool), ValueError, "must be 1-D, got shape (4, 5)"),
    (np.zeros(20, bool), ValueError, "allows no id"),
    (np.zeros(1, np.uint32), ValueError, "allows no id"),
    (np.array(["a"] * 20), TypeError, "got dtype <U1"),
])
@pytest.mark.parametrize("search", ["exact", "song"])
def test_bad_filters_are_refused(rng, bad, exc, fragment, search):
    x = rng.standard_normal((20, 4)).astype(np.float32)
    if search == "exact":
        index = bruteforce.build(bruteforce.IndexParams(), x, device="cpu", verbose=False)
        call = lambda: bruteforce.search(index, x[:2], 3, device="cpu", verbose=False, filter=bad)  # noqa: E731
    else:
        index = song.build(song.IndexParams(graph_degree=4, intermediate_graph_degree=8), x, device="cpu",
                           verbose=False)
        call = lambda: song.search(index, x[:2], 3, device="cpu", verbose=False, filter=bad)  # noqa: E731
    with pytest.raises(exc, match="filter") as info:
        call()
    assert fragment in str(info.value)


# --------------------------------------------------------------------------------------------------
# exact search


@pytest.mark.parametrize("share", [0.01, 0.3, 1.0])
def test_exact_search_with_filter_is_brute_force_over_the_allowed(rng, share):
    base = rng.standard_normal((3000, 16)).astype(np.float32)
    queries = rng.standard_normal((40, 16)).astype(np.float32)
    mask = rng.random(3000) < share
    index = bruteforce.build(bruteforce.IndexParams(), base, device="cpu", verbose=False)
    d, i = index.search(queries, 10, device="cpu", verbose=False, filter=mask)
    rd, ri = _reference(base, queries, min(10, mask.sum()), mask)
    np.testing.assert_array_equal(i[:, :ri.shape[1]], ri)
    np.testing.assert_allclose(d[:, :rd.shape[1]], rd, rtol=1e-5)
    # the same through knngraph.knn
    d2, i2 = knngraph.knn(base, queries, 10, device="cpu", verbose=False, filter=mask)
    np.testing.assert_array_equal(i2, i)


def test_fewer_allowed_than_k_pads_with_missing(rng):
    base = rng.standard_normal((500, 8)).astype(np.float32)
    mask = np.zeros(500, bool)
    mask[[4, 99, 321]] = True
    for search in ("exact", "song"):
        if search == "exact":
            d, i = knngraph.knn(base, base[:6], 5, device="cpu", verbose=False, filter=mask)
        else:
            index = song.build(song.IndexParams(graph_degree=8, intermediate_graph_degree=16), base, device="cpu",
                               verbose=False)
            # a walk (no exact shortcut) must also pad
            d, i = song.search(index, base[:6], 5, song.SearchParams(filtered_exact_ratio=0), device="cpu",
                               verbose=False, filter=mask)
        assert (np.sort(i[:, :3], axis=1) == [4, 99, 321]).all(), search
        assert (i[:, 3:] == -1).all() and np.isinf(d[:, 3:]).all(), search
        assert np.isfinite(d[:, :3]).all() and (np.diff(d[:, :3], axis=1) >= 0).all(), search


# --------------------------------------------------------------------------------------------------
# SONG on real data


@pytest.fixture(scope="module")
def sift20k_index(sample):
    return song.build(song.IndexParams(), sample.base, device="cpu", verbose=False)


@pytest.mark.parametrize("share, floor, path", [
    (0.01, 1.0, "exact"),   # 200 allowed ids: the exact search over them
    (0.10, 0.99, "graph"),  # the walk with a grown queue (measured 0.999)
    (0.50, 0.99, "graph"),  # measured 0.999
    (0.90, 0.99, "graph"),  # measured 0.998
])
def test_song_filtered_recall_on_sift20k(sample, sift20k_index, share, floor, path):
    base, queries = sample.base, sample.queries[:300]
    mask = np.random.default_rng(7).random(len(base)) < share
    ratio = 100.0 if path == "exact" else 0.0
    stats = {}
    d, i = song.search(sift20k_index, queries, 10, song.SearchParams(filtered_exact_ratio=ratio), device="cpu",
                       verbose=False, stats=stats, filter=mask)
    assert stats["filtered_path"] == path
    assert mask[i[i >= 0]].all(), "a disallowed id was returned"
    _, ri = _reference(base, queries, 10, mask)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i.tolist(), ri.tolist())])
    assert recall >= floor, recall


def test_song_default_picks_exact_for_few_allowed_and_walk_for_many(sample, sift20k_index):
    rng = np.random.default_rng(3)
    q = sample.queries[:20]
    for share, path in ((0.05, "exact"), (0.9, "graph")):
        stats = {}
        song.search(sift20k_index, q, 10, device="cpu", verbose=False, stats=stats,
                    filter=rng.random(len(sample.base)) < share)
        assert stats["filtered_path"] == path, share


def test_song_hashed_index_with_filter(sample):
    base = sample.base[:5000]
    index = song.build(song.IndexParams(hash_bits=128), base, device="cpu", verbose=False)
    mask = np.random.default_rng(1).random(5000) < 0.5
    d, i = song.search(index, sample.queries[:100], 10, song.SearchParams(queue_size=128, filtered_exact_ratio=0),
                       device="cpu", verbose=False, filter=mask)
    assert mask[i[i >= 0]].all()
    _, ri = _reference(base, sample.queries[:100], 10, mask)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i.tolist(), ri.tolist())])
    assert recall >= 0.8, recall


def test_all_allowed_is_the_unfiltered_search(sample, sift20k_index):
    q = sample.queries[:100]
    d0, i0 = song.search(sift20k_index, q, 10, device="cpu", verbose=False)
    d1, i1 = song.search(sift20k_index, q, 10, song.SearchParams(filtered_exact_ratio=0), device="cpu",
                         verbose=False, filter=np.ones(len(sample.base), bool))
    np.testing.assert_array_equal(i1, i0)
    np.testing.assert_array_equal(d1, d0)
