"""When knngraph._cuda_graphs.GraphCache captures, replays or runs a call uncaptured (no GPU: the capture is a
stand-in here; tests/bruteforce/test_cuda_graphs_gpu.py replays real graphs)."""

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

    def replay(self, inputs):
        if _Captured.busy:
            return None
        return ("replayed",) + tuple(inputs)


@pytest.fixture
def cache(monkeypatch):
    monkeypatch.setattr(_cuda_graphs, "CapturedCall", _Captured)
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
    assert len(_Captured.made) == 1  # captured once, measured, dropped, never again


def test_least_recently_used_graph_goes_first(cache):
    for key in ("a", "b"):
        for i in range(2):
            cache.call(key, _fn([]), (i,), 0)
    cache.call("a", _fn([]), (9,), 0)  # a is now the most recent
    for i in range(2):
        cache.call("c", _fn([]), (i,), 0)
    assert list(cache._graphs) == ["a", "c"]
    log = []
    assert cache.call("b", _fn(log), (5,), 0)[2] is True  # b was seen before: captured again at once
    assert log == [True]


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
