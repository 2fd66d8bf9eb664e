"""The concurrent-search check of tests/test_concurrency.py (CPU) and tests/test_concurrency_gpu.py: one index
searched by several threads at once, every row compared with the serial call of the same batch."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np

import knngraph
from knngraph import bruteforce, ggnn, song


def concurrency_data(sample):
    """(base, queries): the first 4,000 vectors and 400 queries of the bundled sample."""
    base = sample.base[:4000]
    queries = sample.queries[:400]
    return base, queries


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


def check_concurrent(name, index, queries, device, n_threads, calls_per_thread, *, streams=False):
    """Search ``index`` (searcher ``name``: "song", "ggnn" or "exact") from ``n_threads`` threads at once,
    ``calls_per_thread`` random calls each (``streams``: each thread on a CUDA stream of its own), and assert
    every row equals the serial call's; returns the number of rows compared."""
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
