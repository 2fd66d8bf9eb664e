"""gather_rows: the rows of a host array by id, on numba's threads for large gathers, as data[rows]."""

import numpy as np
import pytest

from knngraph.primitives.gather import gather_rows


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the compiled kernel's runs, with the size below which NumPy gathers lowered to 20,000 bytes
    (the kernel splits over threads from SERIAL_BELOW = 8,192 rows)."""
    from knngraph.primitives import gather

    calls = []
    run = gather._GATHER.run
    monkeypatch.setattr(gather, "SERIAL_BELOW", 20)
    monkeypatch.setattr(gather._GATHER, "run", lambda *a: (calls.append(a[0]), run(*a))[1])
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
def test_gather_rows_is_fancy_indexing(tmp_path, dtype, kernel_calls):
    rng = np.random.default_rng(0)
    x = (rng.random((40_000, 33)) * 100).astype(dtype)
    rows = np.sort(rng.choice(len(x), 20_000, replace=False))  # the threaded kernel (>= 8,192 rows)
    np.testing.assert_array_equal(gather_rows(x, rows), x[rows])
    assert kernel_calls == [20_000]
    few = rng.integers(0, len(x), 5)  # small and unsorted: NumPy's own gather
    np.testing.assert_array_equal(gather_rows(x, few), x[few])
    assert kernel_calls == [20_000]
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")  # read-only memory map, into a given array
    out = np.empty((len(rows), 33), dtype)
    assert gather_rows(mm, rows, out=out) is out
    np.testing.assert_array_equal(out, x[rows])
    assert kernel_calls == [20_000, 20_000]


def test_gather_rows_bad_rows_and_out():
    x = np.zeros((30_000, 64), np.float32)
    rows = np.arange(0, 30_000, 2)
    with pytest.raises(IndexError, match="row 30000 is out of bounds for an array of 30000 rows"):
        gather_rows(x, np.append(rows, 30_000))
    with pytest.raises(IndexError, match="row -1"):
        gather_rows(x, np.append(rows, -1))
    with pytest.raises(ValueError, match="out must be a C-contiguous float32 array of shape"):
        gather_rows(x, rows, out=np.empty((len(rows), 63), np.float32))
