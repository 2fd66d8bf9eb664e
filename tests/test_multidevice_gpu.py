"""Several GPUs of one host in one process (marker ``gpu``; the multi-GPU tests skip on a machine with one
GPU). Two GPUs give the ids of one for exact search and the same recall for approximate search; every
entry point runs on the GPU that holds its input; bad device lists and a device out of memory are refused
naming the device. Dask on a LocalCUDACluster (dask-cuda, one worker per GPU) gives the in-process ids."""

from __future__ import annotations

import numpy as np
import pytest

import knngraph
from knngraph import bruteforce, ggnn, grnnd, song
from knngraph.multidevice import MultiDeviceIndex

pytestmark = pytest.mark.gpu


def _gpus() -> int:
    import cupy as cp

    return int(cp.cuda.runtime.getDeviceCount())


needs_two = pytest.mark.skipif("not __import__('knngraph').gpu_available() or _gpus() < 2",
                               reason="needs two GPUs")


@pytest.fixture(scope="module")
def data(sample):
    return sample.base[:20000], sample.queries[:500]


@pytest.fixture(scope="module")
def truth(data):
    base, queries = data
    return knngraph.knn(base, queries, 10, device="cpu")


@needs_two
@pytest.mark.parametrize("layout", ["sharded", "replicated"])
def test_exact_on_two_gpus_gives_the_one_gpu_ids(data, truth, layout):
    base, queries = data
    one = knngraph.knn(base, queries, 10, device="cuda:0")
    two = knngraph.knn(base, queries, 10, devices=[0, 1], layout=layout)
    np.testing.assert_array_equal(two.indices, one.indices)
    np.testing.assert_array_equal(two.indices, truth.indices)
    g1 = knngraph.knn_graph(base[:8000], 16, device="cuda:0")
    g2 = knngraph.knn_graph(base[:8000], 16, devices="all")
    np.testing.assert_array_equal(g2.indices, g1.indices)


@needs_two
@pytest.mark.parametrize("name", ["song", "ggnn"])
@pytest.mark.parametrize("layout", ["sharded", "replicated"])
def test_approximate_on_two_gpus_keeps_recall(data, truth, name, layout):
    base, queries = data
    mod = {"song": song, "ggnn": ggnn}[name]
    params = song.IndexParams() if name == "song" else ggnn.IndexParams()
    index = mod.build(params, base, devices=[0, 1], layout=layout, verbose=False)
    assert isinstance(index, MultiDeviceIndex) and index.layout == layout
    d, i = mod.search(index, queries, 10)
    one = mod.build(params, base, device="cuda:0", verbose=False)
    r1 = knngraph.recall_at_k(knngraph._device.as_numpy(mod.search(one, queries, 10).indices), truth.indices, 10)
    r2 = knngraph.recall_at_k(i, truth.indices, 10)
    assert r2 >= min(0.97, r1 - 0.02), (r1, r2)
    # replicated search of the one-GPU index: its own rows
    a = mod.search(one, queries, 10, device="cuda:0")
    b = mod.search(one, queries, 10, devices=[0, 1])
    np.testing.assert_array_equal(knngraph._device.as_numpy(b.indices), knngraph._device.as_numpy(a.indices))


@pytest.mark.parametrize("devices", [[0, 0], [0, 1]], ids=["one-gpu-twice", "two-gpus"])
def test_a_large_host_batch_replicated_in_chunks_gives_the_one_gpu_ids(data, devices):
    """20,000 host queries over two devices (two GPUs, or GPU 0 listed twice: two logical devices, the same
    queue) are searched in several chunks per device, queued in turn; every row's result is the one-GPU
    search's of the whole batch (with stats, one piece per device: the same rows)."""
    from knngraph._gpu_queue import replica_chunks

    if devices == [0, 1] and _gpus() < 2:
        pytest.skip("needs two GPUs")
    base, queries = data
    one = song.build(song.IndexParams(), base, device="cuda:0", verbose=False)
    batch = np.ascontiguousarray(np.tile(queries, (40, 1)))
    assert len(replica_chunks(len(batch), 2)) >= 4
    want = knngraph._device.as_numpy(song.search(one, batch, 10, device="cuda:0").indices)
    for stats in (None, {}):
        got = song.search(one, batch, 10, devices=devices, stats=stats)
        np.testing.assert_array_equal(got.indices, want)
    assert stats["devices"] == [f"cuda:{g}" for g in devices]
    # one device: the plain search itself
    np.testing.assert_array_equal(song.search(one, batch, 10, devices=[0]).indices, want)


@needs_two
@pytest.mark.parametrize("layout", ["sharded", "replicated"])
def test_device_queries_and_out_arrays_on_two_gpus(data, truth, layout):
    """Queries on GPU 1 searched over GPUs 0 and 1 give the host queries' ids (the searches are queued from
    one thread and their results copied between the GPUs after events); out= is filled on the GPU where
    the results are merged, and an out array on another GPU is refused naming it."""
    import cupy as cp

    base, queries = data
    index = song.build(song.IndexParams(), base, devices=[0, 1], layout=layout, verbose=False)
    want = song.search(index, queries, 10)
    with cp.cuda.Device(1):
        q1 = cp.asarray(queries)
    for _ in range(3):  # repeated: a copy that raced a later allocation would show as changed rows
        got = song.search(index, q1, 10)
        assert got.indices.device.id == 0
        np.testing.assert_array_equal(cp.asnumpy(got.indices), want.indices)
    with cp.cuda.Device(0):
        out = (cp.empty((len(queries), 10), cp.float32), cp.empty((len(queries), 10), cp.int32))
    song.search(index, q1, 10, out=out)
    np.testing.assert_array_equal(cp.asnumpy(out[1]), want.indices)
    with cp.cuda.Device(1):
        wrong = (cp.empty((len(queries), 10), cp.float32), cp.empty((len(queries), 10), cp.int32))
    with pytest.raises(ValueError, match=r"out\[0\] \(distances\) is on GPU 1, but the search's results are on "
                                         r"cuda:0"):
        song.search(index, q1, 10, out=wrong)


@needs_two
def test_every_entry_point_runs_on_the_gpu_that_holds_its_input(data):
    import cupy as cp

    base, queries = data
    with cp.cuda.Device(1):
        x = cp.asarray(base[:6000])
        q = cp.asarray(queries[:50])
    assert cp.cuda.runtime.getDevice() == 0
    d, i = knngraph.knn(x, q, 10)
    assert i.data.device_id == 1 and d.data.device_id == 1
    g = knngraph.knn_graph(x, 16, method="nndescent", verbose=False)
    assert g.indices.data.device_id == 1
    index = song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), x, verbose=False)
    assert index.graph.indices.data.device_id == 1
    d, i = song.search(index, q, 10)
    assert i.data.device_id == 1
    gg = grnnd.build(grnnd.IndexParams(graph_degree=16), x, verbose=False)
    assert gg.graph.indices.data.device_id == 1
    gi = ggnn.build(ggnn.IndexParams(graph_degree=16, refinements=0), x, verbose=False)
    d, i = ggnn.search(gi, q, 10)
    assert i.data.device_id == 1


def test_bad_gpu_ids_are_refused_naming_them(data):
    base, queries = data
    with pytest.raises(ValueError, match=r"devices: device 'cuda:99': GPU index out of range"):
        knngraph.knn(base, queries, 3, devices=[0, 99])
    with pytest.raises(ValueError, match="devices must name at least one device"):
        song.build(song.IndexParams(), base, devices=[])


@pytest.mark.fills_gpu
def test_a_gpu_out_of_memory_fails_the_build_naming_it(data):
    """A GPU that runs out of memory half-way (here: all but a few MB of it taken by another array) fails the
    several-device build with a MemoryError naming it; what it held is released, so the next build fits."""
    import cupy as cp

    base, _ = data
    with cp.cuda.Device(0):
        cp.get_default_memory_pool().free_all_blocks()  # cached blocks would hold the build (see test_faults_gpu.py)
        free, _ = cp.cuda.runtime.memGetInfo()
        hog = cp.empty(max(1, free - (8 << 20)), cp.uint8)
    try:
        with pytest.raises(MemoryError, match=r"on device cuda:0"):
            knngraph.knn_graph(np.tile(base, (4, 1)), 16, method="grnnd", devices=[0, 0], verbose=False)
    finally:
        del hog
        cp.get_default_memory_pool().free_all_blocks()
    # the next build in the same process succeeds
    g = knngraph.knn_graph(base[:3000], 16, method="grnnd", device="cuda:0", verbose=False)
    assert g.indices.shape == (3000, 16)


@needs_two
def test_dask_on_a_local_cuda_cluster_gives_the_in_process_ids(data):
    dask_cuda = pytest.importorskip("dask_cuda")
    distributed = pytest.importorskip("distributed")
    from knngraph import distributed as kd

    base, queries = data
    params = song.IndexParams(graph_degree=16, intermediate_graph_degree=32, seed=3)
    sp = song.SearchParams(queue_size=32)
    with dask_cuda.LocalCUDACluster(CUDA_VISIBLE_DEVICES="0,1", dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        index = kd.build(params, base, client=client, shards=2, device="cuda").wait()
        d, i = kd.search(index, queries, 10, sp, device="cuda", batch_size=100)
        shards = client.gather(index.futures)
    from knngraph.graphops import merge_topk

    parts = [s.search(queries, 10, sp, device="cuda:0") for s in shards]
    md, mi = merge_topk([knngraph._device.as_numpy(p[0]) for p in parts],
                        [knngraph._device.as_numpy(p[1]) + sh.offset for p, sh in zip(parts, index.shards)], 10)
    np.testing.assert_array_equal(knngraph._device.as_numpy(i), mi)
