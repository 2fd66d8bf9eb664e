"""One index searched from many threads at once gives, row for row, what the serial calls give.

A retrieval service (a web server's thread pool, a Dask worker's threads) calls one index from many
threads. Each searcher is searched by 8 threads (CPU) or 4 threads (GPU, each on a CUDA stream of its
own, the index built in the main thread) with different batches, sizes, k and queue sizes interleaved, and
every row is compared with the serial call of the same batch."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest

import knngraph
from knngraph import bruteforce, ggnn, song


@pytest.fixture(scope="module")
def data(sample):
    base = sample.base[:4000]
    queries = sample.queries[:400]
    return base, queries


@pytest.fixture(scope="module")
def cpu_indexes(data):
    base, _ = data
    g = knngraph.optimize_graph(knngraph.knn_graph(base, 32, method="nndescent", device="cpu", verbose=False), base,
                                graph_degree=16, device="cpu", verbose=False)
    return {"song": song.from_graph(g, base, device="cpu", verbose=False),
            "ggnn": ggnn.build(ggnn.IndexParams(graph_degree=16, refinements=0), base, device="cpu", verbose=False),
            "exact": bruteforce.build(bruteforce.IndexParams(), base, device="cpu")}


def _calls(queries, n_calls, seed):
    """(name, batch, k, params-maker key) of ``n_calls`` calls with random batches, k and queue sizes."""
    rng = np.random.default_rng(seed)
    out = []
    for c in range(n_calls):
        size = int(rng.choice([1, 3, 17, 64, 200]))
        start = int(rng.integers(0, queries.shape[0] - size + 1))
        k = int(rng.choice([1, 5, 10]))
        queue = int(rng.choice([16, 32, 48]))
        filtered = bool(rng.random() < 0.3)
        out.append((c, slice(start, start + size), k, queue, filtered))
    return out


def _search(name, index, queries, k, queue, filtered, device, mask):
    flt = {"filter": mask} if filtered and name == "song" else {}
    if name == "song":
        return song.search(index, queries, k, song.SearchParams(queue_size=queue), device=device, verbose=False,
                           **flt)
    if name == "ggnn":
        cache = "rings" if queue == 48 else "sorted"
        return ggnn.search(index, queries, k, ggnn.SearchParams(queue_size=queue, cache=cache), device=device,
                           verbose=False)
    return bruteforce.search(index, queries, k, device=device, verbose=False)


def _check_concurrent(name, index, queries, device, n_threads, calls_per_thread, *, streams=False):
    mask = np.random.default_rng(5).random(len(index)) < 0.5
    plans = [_calls(queries, calls_per_thread, seed) for seed in range(n_threads)]
    serial = {}
    for plan in plans:
        for c, sl, k, queue, filtered in plan:
            serial[(sl.start, sl.stop, k, queue, filtered)] = _search(name, index, queries[sl], k, queue, filtered,
                                                                      device, mask)
    barrier = threading.Barrier(n_threads)

    def work(plan):
        results = []
        stream = None
        if streams:
            import cupy as cp

            stream = cp.cuda.Stream(non_blocking=True)
        barrier.wait()
        for c, sl, k, queue, filtered in plan:
            if stream is not None:
                with stream:
                    d, i = _search(name, index, queries[sl], k, queue, filtered, device, mask)
                    stream.synchronize()
            else:
                d, i = _search(name, index, queries[sl], k, queue, filtered, device, mask)
            results.append(((sl.start, sl.stop, k, queue, filtered), knngraph._device.as_numpy(i),
                            knngraph._device.as_numpy(d)))
        return results

    with concurrent.futures.ThreadPoolExecutor(n_threads) as pool:
        done = list(pool.map(work, plans))
    rows = 0
    for results in done:
        for key, i, d in results:
            want_d, want_i = (knngraph._device.as_numpy(a) for a in serial[key])
            np.testing.assert_array_equal(i, want_i, err_msg=f"{name} {key}")
            np.testing.assert_array_equal(d, want_d, err_msg=f"{name} {key}")
            rows += i.shape[0]
    return rows


@pytest.mark.parametrize("name", ["song", "ggnn", "exact"])
def test_threads_searching_one_index_get_the_serial_rows_cpu(cpu_indexes, data, name):
    _, queries = data
    rows = _check_concurrent(name, cpu_indexes[name], queries, "cpu", n_threads=8, calls_per_thread=6)
    assert rows > 0


def _gpu_index(name, base):
    """A small index of searcher ``name`` built on the GPU in the calling thread."""
    if name == "song":
        return song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), base, device="cuda")
    if name == "ggnn":
        return ggnn.build(ggnn.IndexParams(graph_degree=16, refinements=0), base, device="cuda")
    return bruteforce.build(bruteforce.IndexParams(), base, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["song", "ggnn", "exact"])
def test_threads_with_own_streams_searching_one_gpu_index_get_the_serial_rows(data, name):
    """The index is built in the main thread; 4 threads, each with a CUDA stream of its own, search it."""
    base, queries = data
    index = _gpu_index(name, base)
    rows = _check_concurrent(name, index, queries, "cuda", n_threads=4, calls_per_thread=8, streams=True)
    assert rows > 0


@pytest.mark.gpu
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


def test_launch_plans_of_ended_threads_are_dropped():
    """A GPU search keeps a launch plan per calling thread (key ending in the thread's ident); making a plan
    first drops those of threads that have ended, so a thread-per-request service does not keep one per
    thread it ever ran. The other entries of the cache stay."""
    from knngraph.beam._search import drop_plans_of_ended_threads

    cache = {("cuda:0", "arrays"): "arrays", ("cuda:0", "square_norms"): "norms"}
    idents = []

    def plan_of_this_thread():
        idents.append(threading.get_ident())
        cache[("cuda:0", "beam", 64, 10, 0, "B", 128, 64, 1, False, False, threading.get_ident())] = "plan"

    ended = threading.Thread(target=plan_of_this_thread)
    ended.start()
    ended.join()
    done = threading.Event()
    release = threading.Event()
    alive = threading.Thread(target=lambda: (plan_of_this_thread(), done.set(), release.wait(10)))
    alive.start()
    done.wait(10)
    try:
        mine = ("cuda:0", "beam", 64, 10, 0, "B", 128, 64, 1, False, False, threading.get_ident())
        cache[mine] = "plan"
        assert drop_plans_of_ended_threads(cache) == (0 if idents[0] == idents[1] else 1)
        left = {key[-1] for key in cache if key[1] == "beam"}
        assert left == {idents[1], threading.get_ident()}
        assert cache[("cuda:0", "arrays")] == "arrays" and cache[("cuda:0", "square_norms")] == "norms"
    finally:
        release.set()
        alive.join()
