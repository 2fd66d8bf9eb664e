"""When knngraph._cuda_graphs.GraphCache captures, replays or runs a call uncaptured (no GPU: the capture is a
stand-in here; tests/bruteforce/test_cuda_graphs_gpu.py replays real graphs)."""

import threading

import pytest

from knngraph import _cuda_graphs


class _Captured:
    """Stands for CapturedCall: runs ``fn`` as a capture would, replays by calling it again."""

    made: list = []
    nbytes = 100
    busy = False

    def __init__(self, fn, inputs, device_id, keep_alive=()):
        outputs, self.extra = fn(*inputs, capturing=True)
        self.fn, self.keep_alive = fn, keep_alive
        _Captured.made.append(self)

    retired = False

    def replay(self, inputs):
        if _Captured.busy or self.retired:
            return None
        return ("replayed",) + tuple(inputs)

    def retire(self):
        self.retired = True


@pytest.fixture
def cache(monkeypatch):
    monkeypatch.setattr(_cuda_graphs, "CapturedCall", _Captured)
    baseline = threading.active_count()  # (the test runner may run threads of its own)
    monkeypatch.setattr(_cuda_graphs, "_alone", lambda: threading.active_count() == baseline)
    monkeypatch.delenv("KNNGRAPH_CUDA_GRAPHS", raising=False)
    _Captured.made, _Captured.nbytes, _Captured.busy = [], 100, False
    return _cuda_graphs.GraphCache(capacity=2, max_bytes=1000)


def _fn(log):
    def fn(x, capturing=False):
        log.append(capturing)
        return ("ran", x), {"capturing": capturing}
    return fn


def test_a_key_is_captured_at_its_second_call_and_replayed_after(cache):
    log = []
    first = cache.call("a", _fn(log), (1,), 0, keep_alive=("operand",))
    assert first == (("ran", 1), {"capturing": False}, False)
    second = cache.call("a", _fn(log), (2,), 0)
    assert second == (("replayed", 2), {"capturing": True}, True)
    third = cache.call("a", _fn(log), (3,), 0)
    assert third[0] == ("replayed", 3) and third[2] is True
    assert log == [False, True] and len(_Captured.made) == 1 and _Captured.made[0].keep_alive == ()


def test_a_failed_capture_runs_uncaptured_and_is_never_tried_again(cache):
    calls = []

    def fn(x, capturing=False):
        calls.append(capturing)
        if capturing:
            raise _cuda_graphs.NotCapturable("not one pass")
        return ("ran", x), None

    results = [cache.call("k", fn, (i,), 0) for i in range(4)]
    assert [r[2] for r in results] == [False] * 4 and [r[0] for r in results] == [("ran", i) for i in range(4)]
    assert calls == [False, True, False, False, False] and len(cache) == 0


def test_graphs_larger_than_the_cap_are_refused(cache):
    _Captured.nbytes = 1001
    results = [cache.call("big", _fn([]), (i,), 0) for i in range(3)]
    assert [r[2] for r in results] == [False, False, False] and len(cache) == 0
    assert len(_Captured.made) == 1 and _Captured.made[0].retired  # captured once, measured, dropped


def test_least_recently_used_graph_goes_first(cache, monkeypatch):
    monkeypatch.setattr(_cuda_graphs, "REPLAYS_PER_CAPTURE", 1)
    for key in ("a", "b"):
        for i in range(2):
            cache.call(key, _fn([]), (i,), 0)
    cache.call("a", _fn([]), (9,), 0)  # a is now the most recent
    for i in range(2):
        cache.call("c", _fn([]), (i,), 0)
    assert list(cache._graphs) == ["a", "c"]
    assert [g.retired for g in _Captured.made] == [False, True, False]  # b's graph let go
    log = []
    assert cache.call("b", _fn(log), (5,), 0)[2] is True  # b was seen before: captured again at once
    assert log == [True]
    cache.close()
    assert len(cache) == 0 and all(g.retired for g in _Captured.made)


def test_the_graphs_together_stay_within_the_byte_bound(monkeypatch, cache):
    big = _cuda_graphs.GraphCache(capacity=8, max_bytes=1000)
    _Captured.nbytes = 400
    for key in ("a", "b", "c"):
        for i in range(2):
            assert big.call(key, _fn([]), (i,), 0)[2] is (i == 1)
    assert list(big._graphs) == ["b", "c"] and big.nbytes == 800


def test_a_full_cache_captures_again_only_after_enough_replays(cache, monkeypatch):
    """Callers cycling through more shapes than the cache keeps would pay a capture per call: once full,
    a capture waits for REPLAYS_PER_CAPTURE replays since the last one."""
    monkeypatch.setattr(_cuda_graphs, "REPLAYS_PER_CAPTURE", 3)
    calls = ["a", "a", "b", "b", "c", "c", "a", "a", "c"]
    replayed = [cache.call(key, _fn([]), (i,), 0)[2] for i, key in enumerate(calls)]
    assert replayed == [False, True, False, True, False, False, True, True, True]
    assert list(cache._graphs) == ["a", "c"] and len(_Captured.made) == 3


def test_a_busy_graph_lets_the_call_run_uncaptured(cache):
    for i in range(2):
        cache.call("a", _fn([]), (i,), 0)
    _Captured.busy = True
    log = []
    assert cache.call("a", _fn(log), (7,), 0) == (("ran", 7), {"capturing": False}, False)
    assert log == [False]


@pytest.mark.parametrize("value,enabled", [("0", False), ("off", False), ("False", False), ("no", False),
                                           ("1", True), ("", True), ("yes", True)])
def test_the_environment_switch(value, enabled, cache, monkeypatch):
    monkeypatch.setenv("KNNGRAPH_CUDA_GRAPHS", value)
    assert _cuda_graphs.graphs_enabled() is enabled
    results = [cache.call("a", _fn([]), (i,), 0)[2] for i in range(3)]
    assert results == ([False, True, True] if enabled else [False, False, False])
    assert len(_Captured.made) == (1 if enabled else 0)


def test_no_capture_while_other_threads_run(cache):
    """A capture makes CUDA refuse other threads' device-wide synchronisation: none is made beside them;
    graphs captured before are still replayed."""
    for i in range(2):
        cache.call("kept", _fn([]), (i,), 0)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert [cache.call("new", _fn([]), (i,), 0)[2] for i in range(3)] == [False, False, False]
        assert cache.call("kept", _fn([]), (5,), 0)[2] is True
    finally:
        release.set()
        other.join()
    assert cache.call("new", _fn([]), (9,), 0)[2] is True
    assert len(_Captured.made) == 2


def test_alone_counts_python_threads():
    assert _cuda_graphs._alone() is (threading.active_count() == 1)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert _cuda_graphs._alone() is False
    finally:
        release.set()
        other.join()
