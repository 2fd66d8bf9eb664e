"""GPU faults (marker ``gpu``): a build that runs out of device memory half-way raises a MemoryError that
says what to do, gives the memory back and returns nothing half-built (the next build in the process
succeeds); device queries of another dtype, strides or GPU are refused clearly or searched correctly."""

from __future__ import annotations

import numpy as np
import pytest

import knngraph
from knngraph import song

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def data(sample):
    return sample.base[:20000], sample.queries[:200]


@pytest.mark.fills_gpu
def test_out_of_memory_half_way_is_a_clear_error_and_the_next_build_succeeds(data):
    import cupy as cp

    base, _ = data
    # blocks cached by CuPy's pool from earlier tests count as used for the driver but are free for a
    # build: give them back first, or the build fits in them and nothing runs out
    cp.get_default_memory_pool().free_all_blocks()
    free, _ = cp.cuda.runtime.memGetInfo()
    hog = cp.empty(int(free - (96 << 20)), dtype=cp.uint8)  # all but 96 MiB of the card
    try:
        with pytest.raises(MemoryError, match=r"(ran out of memory .*memory_limit=|needs about|needs at least)"):
            song.build(song.IndexParams(), np.tile(base, (10, 1)), device="cuda", verbose=False)
    finally:
        del hog
        cp.get_default_memory_pool().free_all_blocks()
    index = song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), base, device="cuda",
                       verbose=False)
    d, i = song.search(index, base[:5], 1)
    assert (knngraph._device.as_numpy(i)[:, 0] == np.arange(5)).all()


def test_device_queries_of_other_dtypes_and_strides(data):
    import cupy as cp

    base, queries = data
    index = song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), base, device="cuda",
                       verbose=False)
    want = knngraph._device.as_numpy(song.search(index, queries, 10).indices)
    q64 = cp.asarray(queries, dtype=cp.float64)
    got = song.search(index, q64, 10)
    assert isinstance(got.indices, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got.indices), want)
    strided = cp.asarray(np.repeat(queries, 2, axis=1))[:, ::2]  # not contiguous
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(cp.asnumpy(song.search(index, strided, 10).indices), want)
    with pytest.raises(TypeError, match="queries has dtype int32"):
        song.search(index, cp.asarray(queries, dtype=cp.int32), 10)


@pytest.mark.skipif("not __import__('knngraph').gpu_available() or __import__('cupy').cuda.runtime.getDeviceCount() < 2",
                    reason="needs two GPUs")
def test_queries_on_another_gpu_are_searched_where_the_index_is(data):
    import cupy as cp

    base, queries = data
    index = song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), base, device="cuda:0",
                       verbose=False)
    want = knngraph._device.as_numpy(song.search(index, queries, 10, device="cuda:0").indices)
    with cp.cuda.Device(1):
        q1 = cp.asarray(queries)
    got = song.search(index, q1, 10, device="cuda:0")
    np.testing.assert_array_equal(knngraph._device.as_numpy(got.indices), want)
