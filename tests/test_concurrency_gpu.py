"""One GPU index searched from many threads at once gives, row for row, what the serial calls give (4 threads,
each on a CUDA stream of its own, the index built in the main thread), and repeated searches leave CuPy's
memory pool where it was (marker ``gpu``; the CPU tests are in test_concurrency.py)."""

from __future__ import annotations

import threading

import pytest

from knngraph import bruteforce, ggnn, song

from .support.concurrency import check_concurrent, concurrency_data

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def data(sample):
    return concurrency_data(sample)


def _gpu_index(name, base, device="cuda"):
    """A small index of searcher ``name`` built on ``device`` (the GPU by default) in the calling thread."""
    if name == "song":
        return song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), base, device=device)
    if name == "ggnn":
        return ggnn.build(ggnn.IndexParams(graph_degree=16, refinements=0), base, device=device)
    return bruteforce.build(bruteforce.IndexParams(), base, device=device)


@pytest.mark.parametrize("name", ["song", "ggnn", "exact"])
def test_threads_with_own_streams_searching_one_gpu_index_get_the_serial_rows(data, name):
    """The index is built in the main thread; 4 threads, each with a CUDA stream of its own, search it."""
    base, queries = data
    index = _gpu_index(name, base)
    rows = check_concurrent(name, index, queries, "cuda", n_threads=4, calls_per_thread=8, streams=True)
    assert rows > 0


@pytest.mark.parametrize("name", ["song", "ggnn", "exact"])
def test_repeated_gpu_searches_do_not_grow_the_memory_pool(data, name):
    """CuPy's pool keeps the blocks freed on a stream for that stream: a search that made streams per call
    stranded its blocks, and the pool of a long-running service grew by gigabytes. After warm-up, 60 more
    calls (host and device queries, the main thread and a second one) leave the pool where it was."""
    import cupy as cp

    base, queries = data
    index = _gpu_index(name, base)
    module = {"song": song, "ggnn": ggnn, "exact": bruteforce}[name]
    q_dev = cp.asarray(queries)

    def calls(n):
        for j in range(n):
            module.search(index, queries if j % 2 else q_dev, 10, device="cuda")
        cp.cuda.get_current_stream().synchronize()

    pool = cp.get_default_memory_pool()
    calls(10)
    worker = threading.Thread(target=calls, args=(10,))
    worker.start()
    worker.join()
    before = pool.total_bytes()
    calls(30)
    worker = threading.Thread(target=calls, args=(30,))
    worker.start()
    worker.join()
    grown = pool.total_bytes() - before
    assert grown <= 4 << 20, f"{name}: the pool grew by {grown} bytes over 60 calls"


_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


@pytest.mark.parametrize("name", ["song", "ggnn"])
def test_one_thread_queueing_searches_on_two_streams_gets_the_serial_rows(data, name, monkeypatch):
    """One thread queues searches on two streams without waiting between them (what a replicated search does
    on each GPU). The launch plans keep a ring of query counters (two here): call i takes counter i and the
    ring is cleared on the calling stream once it is used up. After one search on each stream, stream 0 runs
    a kernel that spins for milliseconds, then four searches are queued in turn: with one plan for both
    streams, stream 1's first search would take the counter its warm-up used, whose clearing waits behind
    the spin on stream 0, and would search none of its rows. Each stream has its own plan. The index is
    built on the CPU, so the warm-up on stream 0 makes the device copies that stream 1 reads next. (GGNN
    checks device queries for NaN or inf before it searches, a wait for its stream, so its first queued
    search waits for the spin; SONG's searches of device queries never wait.)"""
    import cupy as cp
    import numpy as np

    from knngraph.beam import cuda as beam_cuda

    monkeypatch.setattr(beam_cuda, "COUNTER_RING", 2)
    base, queries = data
    index = _gpu_index(name, base, device="cpu")
    module = song if name == "song" else ggnn
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    batches = [cp.asarray(np.tile(queries[j::4], (8, 1))) for j in range(4)]
    for j in range(2):
        with streams[j]:
            module.search(index, batches[j], 10, device="cuda")
            streams[j].synchronize()
    with streams[0]:
        cp.RawKernel(_SPIN, "spin")((1,), (1,), (np.int64(20_000_000),))
    queued = []
    for j, batch in enumerate(batches):
        with streams[j % 2]:
            queued.append(module.search(index, batch, 10, device="cuda"))
    for s in streams:
        s.synchronize()
    for batch, got in zip(batches, queued):
        want = module.search(index, cp.asnumpy(batch), 10, device="cuda")
        np.testing.assert_array_equal(cp.asnumpy(got.indices), np.asarray(want.indices))
        np.testing.assert_array_equal(cp.asnumpy(got.distances), np.asarray(want.distances))
    if name == "song":
        plans = [key for key in index._cache if isinstance(key, tuple) and len(key) > 2 and key[1] == "beam"]
        assert {streams[0].ptr, streams[1].ptr} <= {key[-2] for key in plans}


def test_a_cached_device_copy_dropped_under_a_queued_read_is_not_reused_before_the_read():
    """An index that compacted keeps its users' ids on the GPU (results_as_user_ids, in the index's cache)
    and replaces that copy when the rows change (a compaction, an extend). Here a second stream's search
    converts its rows to ids behind a kernel that spins for tens of milliseconds; meanwhile the main
    thread's search under new rows replaces the copy, and the main thread then allocates and fills a
    block of the same size. In CuPy's pool that block would be the dropped copy (the pool gives a freed
    block to the next allocation on the stream that made it, without waiting for other streams), and the
    queued conversion would read the fill. Freeing a cached copy waits for the device's queued work."""
    import cupy as cp
    import numpy as np

    from knngraph.primitives.filters import RowIds, results_as_user_ids

    n = 1 << 20
    before = RowIds(n, ids=np.arange(n, dtype=np.int32) * 2, id_bound=2 * n)
    after = RowIds(n, ids=np.arange(n, dtype=np.int32) * 2 + 1, id_bound=2 * n)
    cache = {}
    rows = cp.arange(n, dtype=cp.int32).reshape(-1, 16)
    results_as_user_ids(rows, before, cache)  # the copy, made on the main thread's stream
    reader = cp.cuda.Stream(non_blocking=True)
    with reader:
        cp.RawKernel(_SPIN, "spin")((1,), (1,), (np.int64(200_000_000),))
        queued = results_as_user_ids(rows, before, cache)
    assert not reader.done, "the conversion must still be queued behind the spin for this test to mean anything"
    np.testing.assert_array_equal(cp.asnumpy(results_as_user_ids(rows, after, cache)), cp.asnumpy(rows) * 2 + 1)
    fill = cp.full(n, -7, cp.int32)  # the dropped copy's size, on the stream that made it
    reader.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(queued), cp.asnumpy(rows) * 2)
    assert int(fill[0]) == -7
