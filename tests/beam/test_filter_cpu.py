"""``knngraph.beam.search(..., filter=...)`` on the CPU: the first k allowed entries of the walk's list,
which grows by the allowed share; on a graph where every vertex links to every other the walk computes
every distance, so the result must be brute force over the allowed vertices, at every selectivity."""

import numpy as np
import pytest

from knngraph import beam
from knngraph.primitives.filters import bitset_words, prepare_filter


def _brute_force(x, q, k, mask):
    """(squared L2, ids) of the k nearest allowed rows, ties by lower id, -1 / inf past the allowed ones."""
    ids = np.flatnonzero(mask)
    d = ((q[:, None, :].astype(np.int64) - x[ids][None].astype(np.int64)) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(ids, d.shape), d), axis=1)[:, :k]
    out_d = np.full((q.shape[0], k), np.inf)
    out_i = np.full((q.shape[0], k), -1)
    out_d[:, :order.shape[1]] = np.take_along_axis(d, order, 1)
    out_i[:, :order.shape[1]] = ids[order]
    return out_d, out_i


@pytest.fixture(scope="module")
def complete():
    rng = np.random.default_rng(3)
    n = 200
    x = rng.integers(0, 40, (n, 8)).astype(np.uint8)
    q = rng.integers(0, 40, (30, 8)).astype(np.uint8)
    ids = np.array([[v for v in range(n) if v != u] for u in range(n)], np.int32)
    return x, q, beam.GraphView(ids, x, [0], "sqeuclidean")


@pytest.mark.parametrize("share", [0.0, 0.02, 0.1, 0.5, 0.9, 1.0])
def test_filtered_search_is_brute_force_over_the_allowed(complete, share):
    x, q, view = complete
    mask = np.random.default_rng(int(share * 100)).random(len(x)) < share
    st = {}
    d, i = beam.search(view, q, 10, 16, device="cpu", filter=mask, stats=st)
    want_d, want_i = _brute_force(x, q, 10, mask)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(d, want_d.astype(np.float32))
    if 0 < share < 1:  # the list grows by the allowed share
        assert st["queue_size"] == beam.filtered_queue_size(16, mask.mean()) > 16
        assert st["allowed_fraction"] == mask.mean()
    if share == 0.02:
        assert (i == -1).any(), "fewer than k allowed: -1 / inf padding"


def test_bitset_and_mask_are_one_filter_and_filters_change_between_calls(complete):
    x, q, view = complete
    rng = np.random.default_rng(9)
    for _ in range(3):  # one view, a new filter each call
        mask = rng.random(len(x)) < 0.4
        bits = prepare_filter(mask, len(x)).bits
        a = beam.search(view, q, 5, 16, device="cpu", filter=mask)
        b = beam.search(view, q, 5, 16, device="cpu", filter=bits)
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(b[1], _brute_force(x, q, 5, mask)[1])


def test_all_allowed_is_the_unfiltered_search_and_out_is_filled(complete):
    x, q, view = complete
    plain = beam.search(view, q, 5, 16, device="cpu")
    st = {}
    every = beam.search(view, q, 5, 16, device="cpu", filter=np.ones(len(x), bool), stats=st)
    np.testing.assert_array_equal(every[1], plain[1])
    assert "queue_size" not in st  # the unfiltered search ran
    out = (np.empty((len(q), 5), np.float32), np.empty((len(q), 5), np.int32))
    for mask in (np.arange(len(x)) % 4 == 1, np.zeros(len(x), bool)):
        d, i = beam.search(view, q, 5, 16, device="cpu", filter=mask, out=out)
        assert d is out[0] and i is out[1]
        np.testing.assert_array_equal(i, _brute_force(x, q, 5, mask)[1])


def test_slack_stop_grows_with_the_filter(complete):
    """GGNN's slack stop under a filter: its kb-th entry is kb / share deep (at most the list)."""
    assert beam.filtered_kb(10, 0.5, 64) == 20
    assert beam.filtered_kb(10, 0.01, 300) == 300
    assert beam.filtered_queue_size(64, 0.5) == 128 and beam.filtered_queue_size(64, 0.9) == 72
    assert beam.filtered_queue_size(64, 0.01) == beam.MAX_QUEUE_SIZE
    x, q, view = complete
    mask = np.arange(len(x)) % 2 == 0
    d, i = beam.search(view, q, 5, 16, device="cpu", filter=mask, slack=(10, 4.0, 1e9, 1000))
    np.testing.assert_array_equal(i, _brute_force(x, q, 5, mask)[1])


@pytest.mark.parametrize("bad, exc, fragment", [
    (np.ones(199, bool), ValueError, "boolean mask of length 199, but the index holds 200 vectors"),
    (np.ones(bitset_words(200) - 1, np.uint32), ValueError, "bitset of 6 uint32 words, but 200 vectors need 7"),
    (np.ones(200, np.int64), TypeError, "got dtype int64"),
    (np.ones(7, np.uint64), TypeError, "got dtype uint64"),
    (np.ones((10, 20), bool), ValueError, "must be 1-D, got shape (10, 20)"),
])
def test_bad_filters_are_refused(complete, bad, exc, fragment):
    x, q, view = complete
    with pytest.raises(exc, match="filter") as info:
        beam.search(view, q, 5, 16, device="cpu", filter=bad)
    assert fragment in str(info.value)
