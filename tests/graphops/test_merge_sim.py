"""The top-k merge kernel of graphops (``graphops._kernels.merge_lists_kernel``: the distinct best k of two sorted
rows) in the numba CUDA simulator on tiny inputs, against the CPU's ``graphops.cpu.merge_sorted_lists``."""

import numpy as np
import pytest

from knngraph.graphops import _kernels as graphops_kernels
from knngraph.graphops import cpu as graphops_cpu
from knngraph.primitives.constants import pow2_at_least

pytestmark = pytest.mark.sim


def test_merge_lists_kernel_matches_cpu(rng):
    n, ka, kb, k = 7, 10, 6, 9
    ad = np.sort(rng.integers(0, 30, size=(n, ka)).astype(np.float32), axis=1)
    bd = np.sort(rng.integers(0, 30, size=(n, kb)).astype(np.float32), axis=1)
    ai = rng.integers(0, 25, size=(n, ka)).astype(np.int32)
    bi = rng.integers(0, 25, size=(n, kb)).astype(np.int32)
    for a_d, a_i in ((ad, ai), (bd, bi)):
        for r in range(n):
            o = np.lexsort((a_i[r], a_d[r]))
            a_d[r], a_i[r] = a_d[r][o], a_i[r][o]
    ai[1, -2:], ad[1, -2:] = -1, np.inf
    ref_d, ref_i = graphops_cpu.merge_sorted_lists(ad, ai, bd, bi, k)
    out_d = np.zeros((n, k), np.float32)
    out_i = np.zeros((n, k), np.int32)
    kernel = graphops_kernels.merge_lists_kernel(pow2_at_least(ka + kb, 32))
    kernel[1, graphops_kernels.WPB * 32](ad, ai, bd, bi, out_d, out_i)
    np.testing.assert_array_equal(out_i, ref_i)
    np.testing.assert_array_equal(out_d, ref_d)
    for r in range(n):
        valid = out_i[r][out_i[r] >= 0]
        assert len(set(valid.tolist())) == len(valid)
