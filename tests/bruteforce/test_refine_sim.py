"""The GPU refine kernel (exact L2 of the selected ids, then re-sort) in the simulator, against NumPy."""

import numpy as np
import pytest

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("euclidean", [0, 1])
def test_refine_kernel_matches_numpy(euclidean, rng):
    from knngraph.primitives._rescore_kernel import refine_rows_kernel
    from knngraph.primitives.rescore import refine_l2

    base = rng.integers(0, 4, size=(40, 37)).astype(np.float32)  # small integers: many equal distances
    base[7] = base[3]  # a duplicate pair: equal distance, the lower id must come first
    queries = rng.integers(0, 4, size=(5, 37)).astype(np.float32)
    k = 12
    ids = np.stack([rng.permutation(40)[:k] for _ in range(5)]).astype(np.int32)
    ids[:, 3] = 7
    ids[:, 4] = 3
    ids[1, -2:] = -1  # missing neighbours stay last at inf
    metric = "euclidean" if euclidean else "sqeuclidean"
    ref_d, ref_i = refine_l2(queries, base, ids, metric, np)

    out_d = np.zeros((5, k), np.float32)
    out_i = np.zeros((5, k), np.int32)
    refine_rows_kernel[3, 64](queries, base, ids, out_d, out_i, euclidean)
    np.testing.assert_array_equal(out_i, ref_i)
    np.testing.assert_allclose(out_d, ref_d, rtol=1e-6)
    assert (out_i[1, -2:] == -1).all() and np.isinf(out_d[1, -2:]).all()
    pos3, pos7 = list(out_i[0]).index(3), list(out_i[0]).index(7)
    assert pos3 < pos7
