"""Helpers of the GPU benchmarks that decide what a figure means (they run without a GPU)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _common  # noqa: E402
import search_gpu  # noqa: E402


def test_same_distances_in_another_dtype():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (50, 16)).astype(np.uint8)
    q = rng.integers(0, 256, (5, 16)).astype(np.uint8)

    def l2(a, b):
        return ((a.astype(np.int64)[:, None, :] - b.astype(np.int64)[None]) ** 2).sum(-1)

    for dt in ("int8", "float16", "float32"):
        xs, qs = search_gpu.same_distances_as(x, dt), search_gpu.same_distances_as(q, dt)
        assert xs.dtype == np.dtype(dt)
        if dt == "int8":
            np.testing.assert_array_equal(l2(qs, xs), l2(q, x))  # the shift by -128 keeps L2 distances
        else:
            np.testing.assert_array_equal(xs.astype(np.float32), x.astype(np.float32))
    with pytest.raises(SystemExit, match="not exact in float16"):
        search_gpu.same_distances_as(np.array([[0.1, 1e-9]], np.float32), "float16")
    with pytest.raises(SystemExit, match="needs uint8"):
        search_gpu.same_distances_as(np.zeros((2, 2), np.float16), "int8")


def test_qps_at_a_recall_interpolates_between_queue_sizes():
    sweep = [(0.9822, 3.49e6), (0.991, 2.53e6), (0.9948, 1.92e6)]
    assert _common.qps_at(sweep, 0.99) == pytest.approx(3.49e6 - 0.96e6 * (0.0078 / 0.0088))
    assert _common.qps_at(sweep, 0.999) is None
    assert _common.qps_at([(0.995, 1.0e6)], 0.99) == 1.0e6  # the sweep starts past the target
