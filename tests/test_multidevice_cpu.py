"""Several devices in one process (``devices=``), on logical CPU devices: the splitting of rows and queries,
the merge of per-device top-k lists, the choice sharded / replicated, persistence, and the refusals of bad
device lists. The same code drives several GPUs (``tests/test_multidevice_gpu.py``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import knngraph
from knngraph import bruteforce, ggnn, multidevice, song
from knngraph.multidevice import MultiDeviceIndex

CPUS = ["cpu", "cpu"]


@pytest.fixture(scope="module")
def data(sample):
    return sample.base[:4000], sample.queries[:150]


@pytest.fixture(scope="module")
def truth(data):
    base, queries = data
    return knngraph.knn(base, queries, 10, device="cpu")


@pytest.mark.parametrize("layout", ["sharded", "replicated"])
def test_exact_search_on_several_devices_gives_the_one_device_ids(data, truth, layout):
    base, queries = data
    r = knngraph.knn(base, queries, 10, devices=CPUS + ["cpu"], layout=layout)
    np.testing.assert_array_equal(r.indices, truth.indices)
    np.testing.assert_array_equal(r.distances, truth.distances)
    index = bruteforce.build(bruteforce.IndexParams(), base, devices=CPUS, layout=layout)
    assert isinstance(index, MultiDeviceIndex) and index.layout == layout and len(index) == len(base)
    if layout == "sharded":
        assert [len(p) for p in index.parts] == [2000, 2000] and index.bounds.tolist() == [0, 2000, 4000]
    np.testing.assert_array_equal(bruteforce.search(index, queries, 10).indices, truth.indices)


def test_exact_graph_on_several_devices_is_the_one_device_graph(data):
    base, _ = data
    one = knngraph.knn_graph(base[:1500], 8, device="cpu")
    three = knngraph.knn_graph(base[:1500], 8, devices=["cpu"] * 3)
    np.testing.assert_array_equal(three.indices, one.indices)
    np.testing.assert_allclose(three.distances, one.distances)
    assert three.info["devices"] == ["cpu"] * 3


@pytest.mark.parametrize("name", ["song", "ggnn"])
@pytest.mark.parametrize("layout", ["sharded", "replicated"])
def test_approximate_search_on_several_devices_keeps_recall(data, truth, name, layout):
    base, queries = data
    mod = {"song": song, "ggnn": ggnn}[name]
    params = (song.IndexParams(graph_degree=16, intermediate_graph_degree=32) if name == "song"
              else ggnn.IndexParams(graph_degree=16, refinements=0))
    index = mod.build(params, base, devices=CPUS, layout=layout, verbose=False)
    d, i = mod.search(index, queries, 10)
    assert knngraph.recall_at_k(i, truth.indices, 10) >= 0.95
    assert (np.diff(d, axis=1) >= 0).all()
    one = mod.build(params, base, device="cpu", verbose=False)
    base_recall = knngraph.recall_at_k(mod.search(one, queries, 10, device="cpu").indices, truth.indices, 10)
    assert knngraph.recall_at_k(i, truth.indices, 10) >= base_recall - 0.03


@pytest.mark.parametrize("name", ["song", "ggnn", "exact"])
def test_replicated_search_of_a_one_device_index_returns_its_rows(data, name):
    base, queries = data
    if name == "song":
        index = song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), base, device="cpu",
                           verbose=False)
        mod = song
    elif name == "ggnn":
        index, mod = ggnn.build(ggnn.IndexParams(graph_degree=16, refinements=0), base, device="cpu",
                                verbose=False), ggnn
    else:
        index, mod = bruteforce.build(bruteforce.IndexParams(), base, device="cpu"), bruteforce
    one = mod.search(index, queries, 10, device="cpu")
    stats: dict = {}
    spread = mod.search(index, queries, 10, devices=["cpu"] * 3, stats=stats)
    np.testing.assert_array_equal(spread.indices, one.indices)
    np.testing.assert_array_equal(spread.distances, one.distances)
    assert stats["layout"] == "replicated" and stats["devices"] == ["cpu"] * 3
    # a query count smaller than the devices, and out=
    out = (np.empty((2, 10), np.float32), np.empty((2, 10), np.int32))
    r = mod.search(index, queries[:2], 10, devices=["cpu"] * 3, out=out)
    assert r.indices is out[1]
    np.testing.assert_array_equal(out[1], one.indices[:2])


def test_sharded_filter_is_cut_per_shard(data):
    base, queries = data
    allowed = np.zeros(len(base), bool)
    allowed[1500:2600] = True  # across the shard boundary at 2000
    index = bruteforce.build(bruteforce.IndexParams(), base, devices=CPUS, layout="sharded")
    got = bruteforce.search(index, queries, 5, filter=allowed)
    want = knngraph.knn(base, queries, 5, device="cpu", filter=allowed)
    np.testing.assert_array_equal(got.indices, want.indices)
    assert ((got.indices >= 1500) & (got.indices < 2600)).all()


def test_layout_auto_replicates_what_fits_and_shards_what_does_not(data):
    base, _ = data
    nbytes = base.nbytes
    assert multidevice.choose_layout("auto", base, multidevice.resolve_devices(CPUS), 4 * nbytes) == "replicated"
    assert multidevice.choose_layout("auto", base, multidevice.resolve_devices(CPUS), 4 * nbytes - 1) == "sharded"
    index = bruteforce.build(bruteforce.IndexParams(), base, devices=CPUS, memory_limit=2 * nbytes)
    assert index.layout == "sharded"


def test_sharded_index_saves_and_loads(data, tmp_path):
    base, queries = data
    index = song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), base, devices=CPUS,
                       layout="sharded", verbose=False)
    song.save(tmp_path / "spread", index)
    back = song.load(tmp_path / "spread")
    assert isinstance(back, MultiDeviceIndex) and back.layout == "sharded" and back.bounds.tolist() == [0, 2000, 4000]
    np.testing.assert_array_equal(song.search(back, queries, 10).indices, song.search(index, queries, 10).indices)
    with pytest.raises(ValueError, match="a sharded index of 2 parts needs 2 devices, got 3"):
        multidevice.load(tmp_path / "spread", devices=["cpu"] * 3)


def test_clustered_graph_over_devices_when_the_graph_does_not_fit_one(data):
    base, _ = data
    g = knngraph.knn_graph(base, 16, method="nndescent", devices=CPUS, memory_limit=600_000, verbose=False)
    assert g.info["pieces"] > 2 and sum(g.info["pieces_per_device"]) == g.info["pieces"]
    assert min(g.info["pieces_per_device"]) >= 1  # both devices took pieces
    # where the time went: the partition, then per device the gathers, builds and merges
    assert 0 < g.info["partition_seconds"] < g.info["seconds"]
    for clock in g.info["seconds_per_device"]:
        assert set(clock) == {"gather_s", "build_s", "merge_wait_s", "merge_s"} and clock["build_s"] > 0
    assert knngraph.graph_recall(g, base=base, k=10, sample=300) >= 0.9
    small = knngraph.knn_graph(base, 16, method="nndescent", devices=CPUS, verbose=False)
    assert small.info["devices"] == ["cpu"]  # it fits one device: built there
    # a budget below the smallest piece is refused, naming memory_limit, as the one-device build does
    with pytest.raises(MemoryError, match=r"memory_limit allows 4\.0 KiB per device, but a k-NN graph of k=16 built "
                                          r"in pieces needs at least .* \(pieces of 68 rows of 128 dimensions\)"):
        knngraph.knn_graph(base, 16, method="grnnd", devices=CPUS, memory_limit=4096, verbose=False)


@pytest.mark.parametrize("devices, error, match", [
    ([], ValueError, "devices must name at least one device, got an empty list"),
    ([-1], ValueError, "GPU id -1 is negative"),
    (["cpu", "cuda:0"], ValueError, "no GPU is usable|mixes CPU and GPU"),
    ([True], TypeError, "is not a device"),
    (["auto"], ValueError, "'auto' is not a device"),
    ([7], ValueError, "devices: .*(no GPU is usable|GPU index out of range)"),
    (3.5, TypeError, "devices must be a list"),
])
def test_bad_device_lists_are_refused_naming_the_device(data, devices, error, match):
    base, queries = data
    with pytest.raises(error, match=match):
        knngraph.knn(base, queries, 3, devices=devices)


def test_a_failing_device_fails_the_build_naming_it(data, monkeypatch):
    base, _ = data
    calls = []
    real = bruteforce.build

    def flaky(params, dataset, **kw):
        calls.append(len(dataset))
        if len(calls) == 2:
            raise MemoryError("out of memory for this shard")
        return real(params, dataset, **kw)

    monkeypatch.setattr(bruteforce, "build", flaky)
    with pytest.raises(MemoryError, match=r"on device cpu: MemoryError: out of memory for this shard"):
        multidevice.build(bruteforce, bruteforce.IndexParams(), base, CPUS, layout="sharded")


def test_a_device_failing_in_the_partition_fails_the_graph_naming_it(data, monkeypatch):
    # the rows' nearest centroids are found on the input's device (or the first one) before any piece is
    # built: an error there (a GPU out of memory) names that device, as an error in a piece's build does
    from knngraph import partition

    def full(*args, **kw):
        raise MemoryError("out of memory for the centroid distances")

    base, _ = data
    monkeypatch.setattr(partition, "nearest_centroids", full)
    with pytest.raises(MemoryError, match=r"on device cpu: MemoryError: out of memory for the centroid distances"):
        knngraph.knn_graph(base, 16, method="nndescent", devices=CPUS, memory_limit=600_000, verbose=False)


class CUBLASError(RuntimeError):
    """Stands for CuPy's cuBLAS error, which carries the status in its message."""


@pytest.mark.parametrize("error", [
    RuntimeError("merge_sort: failed on 2nd step: cudaErrorMemoryAllocation: out of memory"),  # thrust's sort
    CUBLASError("CUBLAS_STATUS_ALLOC_FAILED"),  # a new cuBLAS handle
    RuntimeError("[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY"),  # the driver's
])
def test_every_out_of_memory_error_of_the_gpu_stack_is_a_memory_error_naming_the_device(data, monkeypatch, error):
    # on a full GPU the first thing to fail may be a sort or a cuBLAS handle, not CuPy's allocator: the user
    # must still get a MemoryError naming the device, not a RuntimeError of the library underneath
    from knngraph import partition

    def full(*args, **kw):
        raise error

    base, _ = data
    monkeypatch.setattr(partition, "nearest_centroids", full)
    with pytest.raises(MemoryError, match=r"on device cpu: .*" + re.escape(str(error))):
        knngraph.knn_graph(base, 16, method="nndescent", devices=CPUS, memory_limit=600_000, verbose=False)


def test_other_runtime_errors_are_not_taken_for_out_of_memory():
    from knngraph._device import is_out_of_memory

    assert not is_out_of_memory(RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert not is_out_of_memory(ValueError("k must be positive"))
    assert is_out_of_memory(MemoryError())


@pytest.mark.parametrize("name", ["song", "exact"])
def test_an_index_searched_on_several_devices_is_freed_with_its_copies_and_threads(data, name):
    """``search(index, ..., devices=...)`` keeps the devices' copies and worker threads with the index, made
    once and reused by later calls, and drops them with it: nothing it keeps may hold the index (which kept
    every such index, its copies and its threads alive for the life of the process)."""
    import gc
    import weakref

    base, queries = data
    if name == "song":
        index, mod = song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=24), base[:1500],
                                device="cpu", verbose=False), song
    else:
        index, mod = bruteforce.build(bruteforce.IndexParams(), base[:1500], device="cpu"), bruteforce
    first = mod.search(index, queries[:20], 5, devices=CPUS)
    again = mod.search(index, queries[:20], 5, devices=CPUS)
    np.testing.assert_array_equal(first.indices, again.indices)
    one, two = multidevice.replicate(index, CPUS), multidevice.replicate(index, CPUS)
    assert one.executor() is two.executor()  # the worker threads are made once
    assert all(a is b for a, b in zip(one.parts, two.parts))  # and the devices' copies
    alive, pool, kept = weakref.ref(index), weakref.ref(one.executor()), len(multidevice._REPLICAS)
    del index, one, two
    gc.collect()
    assert alive() is None and pool() is None and len(multidevice._REPLICAS) <= kept - 1


@pytest.mark.parametrize("nq, n_devices", [(100_000, 1), (100_000, 2), (100_000, 4), (1000, 2), (3, 4), (0, 2)])
def test_replica_chunks_cover_every_query_once_device_by_device_in_round_robin(nq, n_devices):
    from knngraph._gpu_queue import MAX_CHUNK_ROWS, MIN_CHUNK_ROWS, replica_chunks

    chunks = replica_chunks(nq, n_devices)
    covered = np.zeros(nq, np.int64)
    owner = np.full(nq, -1)
    for j, a, b in chunks:
        covered[a:b] += 1
        owner[a:b] = j
        assert b - a <= MAX_CHUNK_ROWS
    assert (covered == 1).all()
    cuts = multidevice.shard_bounds(nq, n_devices)
    for j in range(n_devices):  # each device's chunks are exactly its share
        assert (owner[cuts[j]:cuts[j + 1]] == j).all()
    if nq >= 4 * MIN_CHUNK_ROWS * n_devices:  # large batches: several chunks per device, queued in turn
        assert [j for j, _, _ in chunks[:n_devices]] == list(range(n_devices))
        assert all(sum(1 for j, _, _ in chunks if j == dev) >= 2 for dev in range(n_devices))
    if nq == 0:
        assert chunks == [(0, 0, 0)]
    # with stats every device searches its share in one piece
    whole = replica_chunks(nq, n_devices, max_rows=max(nq, 1), min_rows=max(nq, 1))
    assert len(whole) == max(1, min(nq, n_devices))
