"""gather_rows: the rows of a host array by id, on numba's threads for large gathers, as data[rows]."""

import numpy as np
import pytest

from knngraph.primitives.gather import gather_rows


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
def test_gather_rows_is_fancy_indexing(tmp_path, dtype):
    rng = np.random.default_rng(0)
    x = (rng.random((40_000, 33)) * 100).astype(dtype)
    rows = np.sort(rng.choice(len(x), 20_000, replace=False))  # large enough for the threaded kernel
    np.testing.assert_array_equal(gather_rows(x, rows), x[rows])
    few = rng.integers(0, len(x), 5)  # small and unsorted: NumPy's own gather
    np.testing.assert_array_equal(gather_rows(x, few), x[few])
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")  # read-only memory map
    out = np.empty((len(rows), 33), dtype)
    assert gather_rows(mm, rows, out=out) is out
    np.testing.assert_array_equal(out, x[rows])


def test_gather_rows_bad_rows_and_out():
    x = np.zeros((30_000, 64), np.float32)
    rows = np.arange(0, 30_000, 2)
    with pytest.raises(IndexError, match="row 30000 is out of bounds for an array of 30000 rows"):
        gather_rows(x, np.append(rows, 30_000))
    with pytest.raises(IndexError, match="row -1"):
        gather_rows(x, np.append(rows, -1))
    with pytest.raises(ValueError, match="out must be a C-contiguous float32 array of shape"):
        gather_rows(x, rows, out=np.empty((len(rows), 63), np.float32))
