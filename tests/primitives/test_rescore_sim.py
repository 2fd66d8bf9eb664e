"""The GPU rescore kernel (exact float64 distances of chosen ids, re-sorted) in the simulator, against the
NumPy path and a float64 reference."""

import numpy as np
import pytest

from knngraph.metrics import normalize_rows
from knngraph.primitives.constants import ID_NONE

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("k", [12, 45])  # a lane per candidate sorted in registers; longer rows sorted by lane 0
@pytest.mark.parametrize("kind", [0, 1, 2])
def test_rescore_kernel_matches_numpy(kind, k, rng):
    from knngraph.primitives._rescore_kernel import rescore_rows_kernel
    from knngraph.primitives.rescore import rescore

    base = rng.integers(0, 4, size=(60, 37)).astype(np.float32)  # small integers: many equal distances
    base[7] = base[3]  # a duplicate pair: equal distance, the lower id must come first
    queries = rng.integers(0, 4, size=(5, 37)).astype(np.float32)
    if kind == 2:  # cosine works on unit rows; a zero vector is at distance 1 from everything
        base[11] = 0
        base, queries = normalize_rows(base), normalize_rows(queries)
        queries[2] = base[5]
    ids = np.stack([rng.permutation(60)[:k] for _ in range(5)]).astype(np.int32)
    ids[:, 3], ids[:, 4], ids[:, 5] = 7, 3, 11
    ids[2, 6] = 5
    ids[1, -2:] = -1  # missing neighbours stay last at inf
    ids[3, -1] = ID_NONE  # the selection's "no candidate": the same, and -1 out
    ids[4, 0] = 60  # any id past the base is none too (never read)
    ref_d, ref_i = rescore(queries, base, ids, kind, np)

    out_d = np.zeros((5, k), np.float64)
    out_i = np.zeros((5, k), np.int32)
    rescore_rows_kernel[3, 64](queries, base, ids, out_d, out_i, kind)
    np.testing.assert_array_equal(out_i, ref_i)
    np.testing.assert_allclose(out_d, ref_d, rtol=1e-12)
    assert (out_i[1, -2:] == -1).all() and np.isinf(out_d[1, -2:]).all()
    assert out_i[3, -1] == -1 and np.isinf(out_d[3, -1])
    assert out_i[4, -1] == -1 and np.isinf(out_d[4, -1]) and (out_i[4, :-1] >= 0).all()
    pos3, pos7 = list(out_i[0]).index(3), list(out_i[0]).index(7)
    assert pos3 < pos7
    q64, b64 = queries.astype(np.float64), base.astype(np.float64)
    for r in range(5):
        for d, i in zip(out_d[r], out_i[r]):
            if i < 0:
                continue
            if kind == 0:
                want = ((q64[r] - b64[i]) ** 2).sum()
            elif kind == 1:
                want = -(q64[r] * b64[i]).sum()
            else:
                want = 1.0 if not b64[i].any() else ((q64[r] - b64[i]) ** 2).sum() / 2
            assert d == pytest.approx(want, rel=1e-12, abs=1e-12)
    if kind == 2:
        assert out_d[2, 0] == 0.0 and out_i[2, 0] == 5  # a vector is at exactly 0 from itself
