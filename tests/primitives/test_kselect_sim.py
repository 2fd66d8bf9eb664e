"""The GPU selection kernels, run in the numba CUDA simulator on tiny inputs, against a sorted reference."""

import numpy as np
import pytest

pytestmark = pytest.mark.sim

ID_NONE = 2**31 - 1


def _reference(dots, norms, key_kind, col_offset, self_offset, k, lo=0, hi=None):
    """Sorted (key, id) top-k per row, lexicographic ties, self excluded, padded with the filler."""
    rows, cols = dots.shape
    hi = cols if hi is None else hi
    out_k = np.full((rows, k), np.inf, np.float32)
    out_i = np.full((rows, k), ID_NONE, np.int64)
    for r in range(rows):
        items = []
        for j in range(lo, hi):
            gid = col_offset + j
            if self_offset >= 0 and gid == self_offset + r:
                continue
            key = np.float32(norms[j] - np.float32(2) * dots[r, j]) if key_kind == 0 else np.float32(-dots[r, j])
            items.append((key, gid))
        items.sort()
        for t, (key, gid) in enumerate(items[:k]):
            out_k[r, t] = key
            out_i[r, t] = gid
    return out_k, out_i


def _tile(rng, rows, cols, ties):
    if ties:  # small integers: many equal keys, so the (key, id) tie rule matters
        return rng.integers(0, 6, size=(rows, cols)).astype(np.float32), rng.integers(0, 4, cols).astype(np.float32)
    return rng.standard_normal((rows, cols)).astype(np.float32), rng.random(cols).astype(np.float32)


def _run(kernel_name, dots, norms, key_kind, col_offset, self_offset, k, n_splits=1):
    """Run a kernel; key_kind 0 = ||x||^2 - 2 dot (colterm = norms, alpha = -2), 1 = -dot."""
    from knngraph.primitives import _kselect_kernels as sk

    colterm = norms if key_kind == 0 else np.zeros_like(norms)
    alpha = np.float32(-2.0 if key_kind == 0 else -1.0)

    rows, cols = dots.shape
    split_len = (cols + n_splits - 1) // n_splits
    tasks = rows * n_splits
    out_k = np.zeros((tasks, k), np.float32)
    out_i = np.zeros((tasks, k), np.int32)
    dummy_f = np.zeros((1, 1), np.float32)
    dummy_i = np.zeros((1, 1), np.int32)
    if kernel_name == "quickselect":
        bufs = [np.zeros(dots.shape, t) for t in (np.float32, np.int32, np.float32, np.int32)]
        blocks = (tasks + 1) // 2
        sk.quickselect_kernel[blocks, 64](sk.SRC_DOTS, tasks, n_splits, split_len, cols, k, dots, colterm, alpha,
                                          col_offset, self_offset, dummy_f, dummy_i, *bufs, out_k, out_i)
        # quickselect output is unsorted: sort each row by (key, id)
        for r in range(tasks):
            o = np.lexsort((out_i[r], out_k[r]))
            out_k[r] = out_k[r][o]
            out_i[r] = out_i[r][o]
    else:
        kern = sk.warp_filter_kernel(sk.list_capacity(k), sk.SRC_DOTS)
        wpb = kern.warps_per_block
        blocks = (tasks + wpb - 1) // wpb
        kern[blocks, wpb * 32](tasks, n_splits, split_len, cols, k, dots, colterm, alpha, col_offset,
                               self_offset, dummy_f, dummy_i, dummy_f, dummy_i, 0, out_k, out_i)
    return out_k, out_i


@pytest.mark.parametrize("kernel_name", ["quickselect", "warp_filter"])
@pytest.mark.parametrize("ties", [False, True])
def test_select_matches_reference(kernel_name, ties, rng):
    dots, norms = _tile(rng, 2, 90, ties)
    for key_kind, k in [(0, 5), (1, 33)]:
        got_k, got_i = _run(kernel_name, dots, norms, key_kind, 1000, -1, k)
        ref_k, ref_i = _reference(dots, norms, key_kind, 1000, -1, k)
        np.testing.assert_array_equal(got_i, ref_i)
        np.testing.assert_allclose(got_k, ref_k, rtol=1e-6)


@pytest.mark.parametrize("kernel_name", ["quickselect", "warp_filter"])
def test_select_excludes_self_and_pads(kernel_name, rng):
    # graph mode: row r is node 10 + r and columns are nodes 10.. ; the range has fewer than k elements
    dots, norms = _tile(rng, 2, 6, False)
    got_k, got_i = _run(kernel_name, dots, norms, 0, 10, 10, 8)
    ref_k, ref_i = _reference(dots, norms, 0, 10, 10, 8)
    np.testing.assert_array_equal(got_i, ref_i)
    assert (got_i[:, 5:] == ID_NONE).all() and np.isinf(got_k[:, 5:]).all()
    for r in range(2):
        assert 10 + r not in got_i[r]


@pytest.mark.parametrize("kernel_name", ["quickselect", "warp_filter"])
def test_select_column_splits(kernel_name, rng):
    dots, norms = _tile(rng, 2, 130, True)
    got_k, got_i = _run(kernel_name, dots, norms, 0, 0, -1, 4, n_splits=3)
    split_len = 44
    for r in range(2):
        for s in range(3):
            ref_k, ref_i = _reference(dots[r:r + 1], norms, 0, 0, -1, 4, lo=s * split_len,
                                      hi=min(130, (s + 1) * split_len))
            np.testing.assert_array_equal(got_i[r * 3 + s], ref_i[0])


def test_warp_filter_merges_with_running_best(rng):
    """The running best list seeds the kernel (use_init) and the result folds both together."""
    from knngraph.primitives import _kselect_kernels as sk

    dots, norms = _tile(rng, 2, 100, True)
    k = 6
    full_k, full_i = _reference(dots, norms, 0, 0, -1, k)
    first_k, first_i = _reference(dots[:, :40], norms[:40], 0, 0, -1, k)
    kern = sk.warp_filter_kernel(sk.list_capacity(k), sk.SRC_DOTS)
    best_k = first_k.copy()
    best_i = first_i.astype(np.int32)
    dummy_f = np.zeros((1, 1), np.float32)
    dummy_i = np.zeros((1, 1), np.int32)
    kern[1, kern.warps_per_block * 32](2, 1, 60, 60, k, np.ascontiguousarray(dots[:, 40:]),
                                      norms[40:].copy(), np.float32(-2), 40, -1, dummy_f, dummy_i, best_k, best_i, 1,
                                      best_k, best_i)
    np.testing.assert_array_equal(best_i, full_i)
    np.testing.assert_allclose(best_k, full_k)


@pytest.mark.parametrize("kernel_name", ["quickselect", "warp_filter"])
def test_select_from_candidate_pairs_with_fillers(kernel_name, rng):
    """Merge mode: rows of explicit (key, id) pairs, including repeated fillers."""
    from knngraph.primitives import _kselect_kernels as sk

    rows, m, k = 2, 70, 9
    ck = rng.integers(0, 5, size=(rows, m)).astype(np.float32)
    ci = np.stack([rng.permutation(1000)[:m] for _ in range(rows)]).astype(np.int32)
    ck[:, -20:] = np.inf
    ci[:, -20:] = ID_NONE
    out_k = np.zeros((rows, k), np.float32)
    out_i = np.zeros((rows, k), np.int32)
    dummy_f = np.zeros((1, 1), np.float32)
    dummy_n = np.zeros(1, np.float32)
    dummy_i = np.zeros((1, 1), np.int32)
    if kernel_name == "quickselect":
        bufs = [np.zeros((rows, m), t) for t in (np.float32, np.int32, np.float32, np.int32)]
        sk.quickselect_kernel[1, 64](sk.SRC_PAIRS, rows, 1, m, m, k, dummy_f, dummy_n, np.float32(0), 0, -1, ck, ci, *bufs,
                                     out_k, out_i)
    else:
        kern = sk.warp_filter_kernel(sk.list_capacity(k), sk.SRC_PAIRS)
        kern[1, kern.warps_per_block * 32](rows, 1, m, m, k, dummy_f, dummy_n, np.float32(0), 0, -1, ck, ci,
                                          dummy_f, dummy_i, 0, out_k, out_i)
    for r in range(rows):
        ref = sorted(zip(ck[r].tolist(), ci[r].tolist()))[:k]
        got = sorted(zip(out_k[r].tolist(), out_i[r].tolist()))
        assert got == ref


@pytest.mark.parametrize("kernel_name", ["quickselect", "warp_filter"])
def test_select_int32_dot_tiles(kernel_name, rng):
    """Tiles from the int8 tensor-core GEMM hold int32 dot products."""
    dots = rng.integers(-500, 500, size=(2, 70)).astype(np.int32)
    norms = rng.integers(0, 300, size=70).astype(np.float32)
    got_k, got_i = _run(kernel_name, dots, norms, 0, 5, -1, 6)
    ref_k, ref_i = _reference(dots.astype(np.float32), norms, 0, 5, -1, 6)
    np.testing.assert_array_equal(got_i, ref_i)
    np.testing.assert_array_equal(got_k, ref_k)


@pytest.mark.parametrize("unroll", [1, 8])
@pytest.mark.parametrize("ties", [False, True])
def test_warp_filter_streaming_steps(unroll, ties, rng):
    """Rows long enough for whole unrolled steps (the fast filter path) plus a ragged tail, in graph
    mode (each row's own id lies inside a step), with many ties at the threshold."""
    from knngraph.primitives import _kselect_kernels as sk

    rows, cols = 3, 600
    dots, norms = _tile(rng, rows, cols, ties)
    for k in (5, 70):
        kern = sk.warp_filter_kernel(sk.list_capacity(k), sk.SRC_DOTS, unroll)
        out_k = np.zeros((rows, k), np.float32)
        out_i = np.zeros((rows, k), np.int32)
        dummy_f = np.zeros((1, 1), np.float32)
        dummy_i = np.zeros((1, 1), np.int32)
        kern[1, kern.warps_per_block * 32](rows, 1, cols, cols, k, dots, norms, np.float32(-2), 0, 300,
                                          dummy_f, dummy_i, dummy_f, dummy_i, 0, out_k, out_i)
        ref_k, ref_i = _reference(dots, norms, 0, 0, 300, k)
        np.testing.assert_array_equal(out_i, ref_i)
        np.testing.assert_allclose(out_k, ref_k, rtol=1e-6)
