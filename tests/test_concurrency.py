"""One index searched from many threads at once gives, row for row, what the serial calls give.

A retrieval service (a web server's thread pool, a Dask worker's threads) calls one index from many
threads. Each searcher is searched by 8 threads (CPU) or 4 threads (GPU, each on a CUDA stream of its
own, the index built in the main thread) with different batches, sizes, k and queue sizes interleaved, and
every row is compared with the serial call of the same batch. The GPU tests are in test_concurrency_gpu.py,
the shared checks in tests/support/concurrency.py."""

from __future__ import annotations

import threading

import pytest

import knngraph
from knngraph import bruteforce, ggnn, song

from .support.concurrency import check_concurrent, concurrency_data


@pytest.fixture(scope="module")
def data(sample):
    return concurrency_data(sample)


@pytest.fixture(scope="module")
def cpu_indexes(data):
    base, _ = data
    g = knngraph.optimize_graph(knngraph.knn_graph(base, 32, method="nndescent", device="cpu", verbose=False), base,
                                graph_degree=16, device="cpu", verbose=False)
    return {"song": song.from_graph(g, base, device="cpu", verbose=False),
            "ggnn": ggnn.build(ggnn.IndexParams(graph_degree=16, refinements=0), base, device="cpu", verbose=False),
            "exact": bruteforce.build(bruteforce.IndexParams(), base, device="cpu")}


@pytest.mark.parametrize("name", ["song", "ggnn", "exact"])
def test_threads_searching_one_index_get_the_serial_rows_cpu(cpu_indexes, data, name):
    _, queries = data
    rows = check_concurrent(name, cpu_indexes[name], queries, "cpu", n_threads=8, calls_per_thread=6)
    assert rows > 0


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


def test_a_thread_keeps_a_bounded_number_of_plans_per_configuration():
    """A GPU search keeps a launch plan per configuration, stream and thread (key: ..., stream, thread ident);
    making one drops the oldest of the same configuration and thread beyond
    PLANS_PER_THREAD_AND_CONFIGURATION (a thread that makes a stream per call must not keep a plan per
    stream), and leaves other configurations, a live thread's plans and other entries alone."""
    from knngraph.beam._search import PLANS_PER_THREAD_AND_CONFIGURATION, make_room_for_plan

    me = threading.get_ident()
    config = ("cuda:0", "beam", 64, 10, 0, "B", 128, 64, 1, False, False)
    other_config = ("cuda:0", "beam", 64, 20, 0, "B", 128, 64, 1, False, False)
    cache = {("cuda:0", "arrays"): "arrays"}
    started, release = threading.Event(), threading.Event()
    other = threading.Thread(target=lambda: (started.set(), release.wait(10)))
    other.start()
    started.wait(10)
    try:
        cache[(*config, 1, other.ident)] = "the other thread's plan"
        for stream in range(1, PLANS_PER_THREAD_AND_CONFIGURATION + 3):
            key = (*config, stream, me)
            make_room_for_plan(cache, key)
            cache[key] = f"plan {stream}"
        cache[(*other_config, 1, me)] = "other configuration"
        make_room_for_plan(cache, (*config, 99, me))
        kept = sorted(key[-2] for key in cache if key[:-2] == config and key[-1] == me)
        last = PLANS_PER_THREAD_AND_CONFIGURATION + 2
        assert kept == list(range(last - PLANS_PER_THREAD_AND_CONFIGURATION + 2, last + 1))
        assert cache[(*config, 1, other.ident)] == "the other thread's plan"
        assert cache[(*other_config, 1, me)] == "other configuration"
        assert cache[("cuda:0", "arrays")] == "arrays"
    finally:
        release.set()
        other.join()
