"""Small exact searches replayed as CUDA graphs (knngraph._cuda_graphs) on a real GPU: the same answers as
every launch issued from Python, for new query values each call; errors, retries, threads, release.
(Marker ``gpu``; run by scripts/gpu_check.sh with KNNGRAPH_GPU_TESTS=1.)"""

import threading

import numpy as np
import pytest

from knngraph import bruteforce
from tests.bruteforce.test_exactness import exact_answer

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _alone_but_the_runner(monkeypatch):
    """Captures happen only in a process's only Python thread; the test runner may run threads of its own."""
    from knngraph import _cuda_graphs

    baseline = threading.active_count()
    monkeypatch.setattr(_cuda_graphs, "_alone", lambda: threading.active_count() == baseline)

CASES = [("sqeuclidean", np.float32, 128), ("inner_product", np.float32, 64), ("cosine", np.float16, 384),
         ("euclidean", np.uint8, 96), ("cosine", np.float32, 32)]


def _vectors(rng, shape, dtype):
    import cupy as cp

    if np.dtype(dtype).kind == "u":
        return cp.asarray(rng.integers(0, 256, shape).astype(dtype))
    return cp.asarray(rng.standard_normal(shape).astype(dtype))


def _search(index, q, k, graphs, monkeypatch, stats=None):
    monkeypatch.setenv("KNNGRAPH_CUDA_GRAPHS", "1" if graphs else "0")
    return bruteforce.search(index, q, k, verbose=False, stats=stats)


@pytest.mark.parametrize("metric,dtype,d", CASES)
def test_replayed_search_equals_uncaptured_for_new_queries(metric, dtype, d, rng, monkeypatch):
    """From the second call with the same shapes the search is a graph replay; each call has new query
    values (copied in), and its ids and distances equal those of the uncaptured search bit for bit."""
    import cupy as cp

    base = _vectors(rng, (3000, d), dtype)
    index = bruteforce.build(bruteforce.IndexParams(metric=metric), base, device="cuda", verbose=False)
    replayed = []
    for _ in range(4):
        q = _vectors(rng, (400, d), dtype)
        stats: dict = {}
        dg, ig = _search(index, q, 10, True, monkeypatch, stats)
        replayed.append(stats["cuda_graph"])
        du, iu = _search(index, q, 10, False, monkeypatch)
        cp.testing.assert_array_equal(ig, iu)
        cp.testing.assert_array_equal(dg, du)
    assert replayed == [False, True, True, True]
    td, ti = exact_answer(cp.asnumpy(base), cp.asnumpy(q), 10, metric)
    np.testing.assert_allclose(cp.asnumpy(dg), td, rtol=1e-5, atol=1e-5)


def test_replayed_search_raises_for_nan_queries_and_then_answers(rng, monkeypatch):
    import cupy as cp

    base = _vectors(rng, (2000, 64), np.float16)
    index = bruteforce.build(bruteforce.IndexParams(metric="cosine"), base, device="cuda", verbose=False)
    q = _vectors(rng, (300, 64), np.float16)
    want = _search(index, q, 5, False, monkeypatch)
    for _ in range(2):
        _search(index, q, 5, True, monkeypatch)
    bad = q.copy()
    bad[123, 7] = np.inf
    stats: dict = {}
    with pytest.raises(ValueError, match="queries row 123 contains NaN or inf"):
        _search(index, bad, 5, True, monkeypatch, stats)
    assert stats["cuda_graph"] is True
    got = _search(index, q, 5, True, monkeypatch)
    cp.testing.assert_array_equal(got[1], want[1])


def test_replayed_search_retries_unproven_answers(rng, monkeypatch):
    """Two far clusters: float32 keys cannot prove the answers, so the replayed first round's unsure rows
    are searched again with more candidates (uncaptured) and every answer is exact."""
    import cupy as cp

    base = np.concatenate([1e4 + 1e-2 * rng.random((300, 3)), -1e4 + 1e-2 * rng.random((300, 3))]).astype(np.float32)
    index = bruteforce.build(bruteforce.IndexParams(), cp.asarray(base), device="cuda", verbose=False)
    q = cp.asarray(base[::7])
    for _ in range(2):
        _search(index, q, 5, True, monkeypatch)
    stats: dict = {}
    d, i = _search(index, q, 5, True, monkeypatch, stats)
    assert stats["cuda_graph"] is True and stats["exactness_retries"] >= 1
    td, ti = exact_answer(base, base[::7], 5, "sqeuclidean")
    np.testing.assert_allclose(cp.asnumpy(d), td, rtol=1e-6, atol=1e-9)


def test_threads_searching_one_index_with_replays_get_their_own_rows(rng, monkeypatch):
    """Eight threads, each on its own stream, search one index with one of eight query sets: a replay
    holds the graph for its own copies (others run uncaptured meanwhile) and every answer is its own.
    Another shape searched beside the threads is not captured."""
    import cupy as cp

    base = _vectors(rng, (4000, 96), np.float16)
    index = bruteforce.build(bruteforce.IndexParams(metric="cosine"), base, device="cuda", verbose=False)
    sets = [_vectors(rng, (500, 96), np.float16) for _ in range(8)]
    want = [cp.asnumpy(_search(index, q, 10, False, monkeypatch)[1]) for q in sets]
    for _ in range(2):  # captured before the threads start (no capture is made beside other threads)
        _search(index, sets[0], 10, True, monkeypatch)
    wrong, replays = [], []
    go = threading.Event()

    def work(t):
        go.wait()
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            for rep in range(20):
                j = (t + rep) % 8
                stats: dict = {}
                ids = bruteforce.search(index, sets[j], 10, verbose=False, stats=stats)[1]
                replays.append(stats["cuda_graph"])
                if not np.array_equal(cp.asnumpy(ids), want[j]):
                    wrong.append((t, rep))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    other = _vectors(rng, (300, 96), np.float16)
    beside = []
    for _ in range(3):  # (the threads are alive, waiting)
        stats: dict = {}
        bruteforce.search(index, other, 10, verbose=False, stats=stats)
        beside.append(stats["cuda_graph"])
    go.set()
    for t in threads:
        t.join()
    assert wrong == [] and len(replays) == 160 and any(replays)
    assert beside == [False, False, False]


def test_release_drops_graphs_and_later_searches_capture_again(rng, monkeypatch):
    import cupy as cp

    base = _vectors(rng, (2000, 32), np.float32)
    index = bruteforce.build(bruteforce.IndexParams(), base, device="cuda", verbose=False)
    q = _vectors(rng, (200, 32), np.float32)
    want = _search(index, q, 7, False, monkeypatch)
    for _ in range(2):
        _search(index, q, 7, True, monkeypatch)
    assert len(index._prepared[("cuda graphs", 0)]) == 1
    index.release()
    assert index._prepared == {}
    flags = []
    for _ in range(3):
        stats: dict = {}
        got = _search(index, q, 7, True, monkeypatch, stats)
        flags.append(stats["cuda_graph"])
        cp.testing.assert_array_equal(got[1], want[1])
    assert flags == [False, True, True]


def test_graphs_over_the_memory_cap_run_uncaptured_and_strided_queries_replay(rng, monkeypatch):
    import cupy as cp

    from knngraph import _cuda_graphs

    base = _vectors(rng, (2000, 32), np.float32)
    index = bruteforce.build(bruteforce.IndexParams(), base, device="cuda", verbose=False)
    q = _vectors(rng, (200, 32), np.float32)
    monkeypatch.setattr(_cuda_graphs, "MAX_GRAPH_BYTES", 1024)
    for _ in range(3):
        stats: dict = {}
        _search(index, q, 7, True, monkeypatch, stats)
        assert stats["cuda_graph"] is False
    assert len(index._prepared[("cuda graphs", 0)]) == 0
    monkeypatch.undo()
    # strided device queries are copied C-contiguous by the search's validation: that copy is replayed
    other = bruteforce.build(bruteforce.IndexParams(), base, device="cuda", verbose=False)
    wide = _vectors(rng, (200, 64), np.float32)
    for rep in range(3):
        if rep:
            wide[:] = _vectors(rng, (200, 64), np.float32)  # new values in the same strided view
        want = _search(other, cp.ascontiguousarray(wide[:, ::2]), 3, False, monkeypatch)
        stats = {}
        got = _search(other, wide[:, ::2], 3, True, monkeypatch, stats)
        assert stats["cuda_graph"] is (rep > 0)
        cp.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("case", ["gps", "offset_1e4", "huge_spread"])
def test_replayed_search_of_centred_and_scaled_l2_data(case, rng, monkeypatch):
    """Data that the numeric plan centres (its mean on the device, made once) or scales: the replay equals
    the uncaptured search and the exact answer."""
    import cupy as cp

    from tests.bruteforce.test_exactness import CASES

    base, queries = (a.astype(np.float32) for a in CASES[case](rng))
    index = bruteforce.build(bruteforce.IndexParams(metric="euclidean"), cp.asarray(base), device="cuda",
                             verbose=False)
    q = cp.asarray(queries)
    flags = []
    for _ in range(3):
        stats: dict = {}
        d, i = _search(index, q, 10, True, monkeypatch, stats)
        flags.append(stats["cuda_graph"])
    assert flags == [False, True, True]
    du, iu = _search(index, q, 10, False, monkeypatch)
    cp.testing.assert_array_equal(i, iu)
    cp.testing.assert_array_equal(d, du)
    td, ti = exact_answer(base, queries, 10, "euclidean")
    np.testing.assert_allclose(cp.asnumpy(d), td, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(td).max())))
