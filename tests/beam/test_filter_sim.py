"""The fast searcher's filtered kernels (``filtered=True``: the first k allowed entries of the final list,
compacted by the warp) in the numba CUDA simulator, on tiny integer inputs, against the plain-Python walk of
``test_search_sim.py`` (the same walk: a filter changes only what is returned) and the CPU twin."""

import numpy as np
import pytest

from knngraph.beam import _kernels as bk
from knngraph.beam.cpu import search_beam
from knngraph.beam.cuda import beam_config, beam_mode, search_beam_device, square_norms
from knngraph.primitives.distances import DIST_L2SQ
from knngraph.primitives.filters import prepare_filter

from .test_search_sim import _graph, _small, reference_walk

pytestmark = pytest.mark.sim


def _allowed_walk(graph, x, q, entries, k, queue, mask, width=1):
    """The reference walk's first k allowed entries (ids, distances), -1 / inf after them, and its counts."""
    rd, ri, rn, rexp = reference_walk(graph, x, q, DIST_L2SQ, entries, queue, queue, width=width)
    keep = (ri >= 0) & mask[np.maximum(ri, 0)]
    ids = np.full(k, -1)
    dist = np.full(k, np.inf)
    got = ri[keep][:k]
    ids[:got.size], dist[:got.size] = got, rd[keep][:k]
    return dist, ids, rn, rexp


def _device_search(g, x, q, entries, k, queue, mask, width):
    mode = beam_mode(x.dtype, q.dtype, x.shape[1])
    assert mode == bk.MODE_DP4A_U8
    bits = prepare_filter(mask, x.shape[0]).bits
    return search_beam_device(g, x, q, square_norms(x, np), DIST_L2SQ, entries, k, queue, mode, xp=np, max_warps=2,
                              width=width, allowed=bits)


# every share on the warp-per-query kernel (width 1); on the block kernel (width 3) the shares that take
# _write_allowed's two endings, fewer allowed than k (padding) and more (cut at k): the compaction is the
# same device function in both kernels (only the list's offset differs), so width 3 at none, 30% and all
# allowed took the branches its other shares and width 1 take (about 5 s each in the simulator)
@pytest.mark.parametrize("width, share", [(1, 0.0), (1, 0.05), (1, 0.3), (1, 0.7), (1, 1.0), (3, 0.05), (3, 0.7)])
def test_filtered_kernel_returns_the_allowed_entries_of_the_reference_walk(width, share, rng):
    """Every selectivity: none allowed (all -1 / inf), fewer than k in the list (padding), some, all. The
    walk (distances computed, vertices expanded) is the unfiltered one; the CPU twin agrees id for id."""
    n, d = 120, 8
    x = _small(rng, np.uint8, n, d)
    q = _small(rng, np.uint8, 4, d)
    g = _graph(x, "sqeuclidean", 6).indices
    entries = np.array([0, 31, 77], np.int32)
    mask = rng.random(n) < share
    k, queue = 5, 40  # a list of 40 over 120 vertices holds about 2 allowed ones at 5%: fewer than k
    gk, gi, gn, ge = _device_search(g, x, q, entries, k, queue, mask, width)
    ck, ci, cn, ce = search_beam(g, x, q, np.zeros(1, np.float32), DIST_L2SQ, entries, k, queue,
                                 allowed=prepare_filter(mask, n).bits)
    for j in range(q.shape[0]):
        rd, ri, rn, rexp = _allowed_walk(g, x, q[j], entries, k, queue, mask, width)
        np.testing.assert_array_equal(gi[j], ri)
        np.testing.assert_array_equal(gk[j], rd.astype(np.float32))
        assert gn[j] == rn and ge[j] == rexp
        if width == 1:
            np.testing.assert_array_equal(ci[j], ri)
            np.testing.assert_array_equal(ck[j], rd.astype(np.float32))
    assert mask[gi[gi >= 0]].all()
    if share == 0.0:
        assert (gi == -1).all() and np.isinf(gk).all()
    if share == 0.05:
        assert (gi == -1).any(), "the list should hold fewer than k allowed entries somewhere"


def test_filtered_kernel_compacts_lists_longer_than_a_warp(rng):
    """A list of 100 entries is compacted in chunks of 32: the allowed entries of later chunks follow those
    of earlier ones, nearest first (allowed only from the second chunk on here)."""
    n, d = 300, 4
    x = _small(rng, np.uint8, n, d)
    q = _small(rng, np.uint8, 2, d)
    ids = np.array([[v for v in range(n) if v != u][:40] for u in range(n)], np.int32)
    entries = np.array([0], np.int32)
    for j in range(2):
        _, order, _, _ = reference_walk(ids, x, q[j], DIST_L2SQ, entries, 100, 100)
        mask = np.zeros(n, bool)
        mask[order[40:100:7]] = True  # entries 40, 47, ... of the final list
        gk, gi, _, _ = _device_search(ids, x, q[j:j + 1], entries, 6, 100, mask, 1)
        np.testing.assert_array_equal(gi[0], order[40:100:7][:6])


def test_filters_change_between_calls(rng):
    """One compiled kernel serves every filter: the bitset is an argument, read afresh by each launch."""
    n, d = 80, 8
    x = _small(rng, np.uint8, n, d)
    q = _small(rng, np.uint8, 3, d)
    g = _graph(x, "sqeuclidean", 6).indices
    entries = np.array([0], np.int32)
    first = rng.random(n) < 0.5
    second = ~first
    a = _device_search(g, x, q, entries, 4, 16, first, 1)[1]
    b = _device_search(g, x, q, entries, 4, 16, second, 1)[1]
    assert first[a[a >= 0]].all() and second[b[b >= 0]].all()
    np.testing.assert_array_equal(_device_search(g, x, q, entries, 4, 16, first, 1)[1], a)


def test_filtered_and_unfiltered_kernels_are_separate_builds():
    """The filtered kernel is its own compile-time variant; the unfiltered one keeps its configuration."""
    plain, _ = beam_config(32, 8, bk.MODE_DP4A_U8, DIST_L2SQ)
    filtered, _ = beam_config(32, 8, bk.MODE_DP4A_U8, DIST_L2SQ, filtered=True)
    assert plain is not filtered
    assert plain is beam_config(32, 8, bk.MODE_DP4A_U8, DIST_L2SQ)[0]
