"""Reachability of a graph held on a GPU (marker ``gpu``): the level-by-level pass on the device gives the
host pass's mask, and a chain longer than its levels is finished on the host."""

import numpy as np
import pytest

from knngraph.primitives import components

from .test_components import _random_graph, _reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("seed", range(3))
def test_reachable_on_the_gpu_matches_a_plain_breadth_first_search(seed):
    import cupy as cp

    ids = _random_graph(5000, 3, seed, holes=0.55)
    entries = np.array([0, 7, 7, -3, 10_000])
    want = _reference(ids, entries)
    assert 0 < want.sum() < 5000
    got = components.reachable(cp.asarray(ids), entries)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, want)


def test_a_chain_longer_than_the_gpu_levels_is_finished_on_the_host(monkeypatch):
    import cupy as cp

    monkeypatch.setattr(components, "_DEVICE_LEVELS", 50)
    n = 203
    ids = np.full((n, 2), -1, np.int32)
    ids[:-1, 0] = np.arange(1, n)
    got = components.reachable(cp.asarray(ids), [0])
    assert got.all()
    np.testing.assert_array_equal(components.reachable(cp.asarray(ids), [n - 10]), np.arange(n) >= n - 10)
