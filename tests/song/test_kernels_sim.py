"""SONG's CUDA kernels in the numba CUDA simulator on tiny inputs, against the CPU path id for id.

Inputs are small integers, so every distance is exact in float32 on both paths and the searches must
agree exactly (ids, distances and the number of distance computations)."""

import numpy as np
import pytest

import knngraph
from knngraph.primitives.distances import distance_kind, inverse_norms
from knngraph.primitives.cpu_inputs import cpu_vectors
from knngraph.song import _kernels as kn
from knngraph.primitives.distances import DIST_HAMMING
from knngraph.song.cpu import search_cpu
from knngraph.song.cuda import distance_mode, search_device

pytestmark = pytest.mark.sim


def _small(rng, dtype, n, d, lo=-6, hi=7):
    if np.dtype(dtype) == np.uint8:
        lo, hi = 0, 13
    return rng.integers(lo, hi, (n, d)).astype(dtype)


def _graph(x, metric, degree=6):
    g = knngraph.knn_graph(x, 10, metric=metric, device="cpu", verbose=False)
    return knngraph.optimize_graph(g, x, degree, device="cpu")


@pytest.mark.parametrize("dtype,dim,metric,visited,mode", [
    (np.uint8, 12, "sqeuclidean", "hash", kn.MODE_PACKED_U8),
    (np.int8, 8, "inner_product", "bloom", kn.MODE_PACKED_I8),
    (np.float32, 7, "cosine", "hash", kn.MODE_GENERIC),
    (np.float16, 9, "euclidean", "hash", kn.MODE_GENERIC),
])
def test_search_kernel_matches_cpu(dtype, dim, metric, visited, mode, rng):
    x = _small(rng, dtype, 40, dim)
    q = _small(rng, np.float32, 3, dim)
    g = _graph(x, metric)
    kind = distance_kind(metric)
    xc = cpu_vectors(x)
    inv_b = inverse_norms(xc) if metric == "cosine" else np.zeros(1, np.float32)
    inv_q = inverse_norms(q) if metric == "cosine" else np.zeros(1, np.float32)
    entries = np.array([3, 0, 17, 3], np.int32)  # a repeated entry point is visited once
    assert distance_mode(x.dtype, dim, False) == mode
    ck, ci, cn, ce = search_cpu(g.indices, xc, q, inv_b, inv_q, kind, entries, 4, 6, visited)
    gk, gi, gn, ge = search_device(g.indices, x, q, inv_b, inv_q, kind, entries, 4, 6, visited, mode, xp=np,
                               max_warps=2)
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_array_equal(gn, cn)
    np.testing.assert_array_equal(ge, ce)
    if metric == "cosine":
        np.testing.assert_allclose(gk, ck, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(gk, ck)


def test_hamming_kernel_matches_cpu(rng):
    codes = rng.integers(0, 2**32, (40, 2), dtype=np.uint64).astype(np.uint32)
    qcodes = rng.integers(0, 2**32, (3, 2), dtype=np.uint64).astype(np.uint32)
    g = _graph(rng.standard_normal((40, 5)).astype(np.float32), "sqeuclidean")
    z = np.zeros(1, np.float32)
    entries = np.array([5, 9], np.int32)
    ck, ci, cn, ce = search_cpu(g.indices, codes, qcodes, z, z, DIST_HAMMING, entries, 3, 5, "hash")
    gk, gi, gn, ge = search_device(g.indices, codes, qcodes, z, z, DIST_HAMMING, entries, 3, 5, "hash",
                               kn.MODE_HAMMING, xp=np, max_warps=1)
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_array_equal(gk, ck)
    np.testing.assert_array_equal(gn, cn)
    np.testing.assert_array_equal(ge, ce)


def test_kernel_rows_and_entries_longer_than_a_warp(rng):
    # rows of 40 slots (two 32-id chunks) and 35 entry points (two chunks). The entries are nodes 0..34;
    # nodes 35..39 appear only in the second chunk of every row (slots 32..36, the rest of each row is
    # -1 but slot 0), so the result can be exact only if both chunks of rows and of entries are read
    x = _small(rng, np.float32, 40, 4)
    q = x[[37]] + 0.5  # the true nearest node is reachable only through a row's second chunk
    ids = np.full((40, 40), -1, np.int32)
    ids[:, 0] = (np.arange(40) + 1) % 40
    ids[:, 32:37] = np.arange(35, 40)
    g = knngraph.Graph(ids, np.zeros(ids.shape, np.float32))
    entries = np.arange(35, dtype=np.int32)[::-1].copy()
    z = np.zeros(1, np.float32)
    gk, gi, gn, ge = search_device(g.indices, x, q, z, z, 0, entries, 5, 8, "hash", kn.MODE_GENERIC, xp=np,
                               max_warps=1)
    full = ((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(40), full.shape), full), axis=1)[:, :5]
    assert gi[0, 0] == 37
    np.testing.assert_array_equal(gi, order)
    ck, ci, cn, ce = search_cpu(g.indices, x, q, z, z, 0, entries, 5, 8, "hash")
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_array_equal(gn, cn)
    np.testing.assert_array_equal(ge, ce)


@pytest.mark.parametrize("dtype,dim,metric,visited,mode", [
    (np.uint8, 12, "sqeuclidean", "hash", kn.MODE_PACKED_U8),
    (np.float32, 7, "cosine", "bloom", kn.MODE_GENERIC),
])
def test_filtered_search_kernel_matches_cpu(dtype, dim, metric, visited, mode, rng):
    """The filtered kernel returns the CPU path's allowed ids, id for id, with -1 / inf padding where
    fewer than k allowed ids were met; a repeated entry point is offered once."""
    from knngraph.primitives.filters import prepare_filter

    x = _small(rng, dtype, 40, dim)
    q = _small(rng, np.float32, 5, dim)
    g = _graph(x, metric)
    kind = distance_kind(metric)
    xc = cpu_vectors(x)
    inv_b = inverse_norms(xc) if metric == "cosine" else np.zeros(1, np.float32)
    inv_q = inverse_norms(q) if metric == "cosine" else np.zeros(1, np.float32)
    entries = np.array([3, 0, 17, 3], np.int32)
    for allowed_ids in ([1, 5, 8, 13, 21, 22, 30, 31, 39], [7, 12]):
        mask = np.zeros(40, bool)
        mask[allowed_ids] = True
        bits = prepare_filter(mask, 40).bits
        ck, ci, cn, ce = search_cpu(g.indices, xc, q, inv_b, inv_q, kind, entries, 4, 6, visited, bits)
        gk, gi, gn, ge = search_device(g.indices, x, q, inv_b, inv_q, kind, entries, 4, 6, visited, mode, xp=np,
                                       max_warps=2, allowed=bits)
        np.testing.assert_array_equal(gi, ci)
        np.testing.assert_array_equal(gn, cn)
        np.testing.assert_allclose(gk, ck, rtol=1e-5, atol=1e-6)
        assert mask[ci[ci >= 0]].all()
        assert np.isinf(ck[ci < 0]).all()
        for row in ci:  # each id once
            found = row[row >= 0]
            assert len(set(found.tolist())) == len(found)
        if len(allowed_ids) == 2:
            assert (ci[:, 2:] == -1).all()
