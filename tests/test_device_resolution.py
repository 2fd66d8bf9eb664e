"""``knngraph._device.on_input_device``: the decorator of public entry points resolves the device from the
arguments it names, passed by position or by name (an ``index`` stands for its ``dataset``), leaves calls
with ``devices=`` and calls whose arguments do not resolve to the function, and keeps the function's
signature, name and errors."""

import types

import numpy as np
import pytest

from knngraph import _device
from knngraph._device import on_input_device


@pytest.fixture
def resolved(monkeypatch):
    """The (device, arrays) of each resolve_device call the decorator makes."""
    calls = []
    real = _device.resolve_device

    def recording(device="auto", *arrays):
        calls.append((device, arrays))
        return real("cpu" if device == "auto" else device, *arrays)

    monkeypatch.setattr(_device, "resolve_device", recording)
    return calls


@on_input_device("index", "queries")
def search(index, queries, k, *, device="auto", devices=None):
    """Return what it was given."""
    return index, queries, k, device, devices


@on_input_device("dataset")
def build(params, dataset, device="auto"):
    return params, dataset, device


def test_arrays_by_position_and_by_name_reach_the_resolution(resolved):
    base, q = np.zeros((3, 2), np.float32), np.ones((1, 2), np.float32)
    index = types.SimpleNamespace(dataset=base)
    assert search(index, q, 5) == (index, q, 5, "auto", None)
    assert search(queries=q, index=index, k=5, device="cpu")[3] == "cpu"
    assert search(index, queries=q, k=5)[1] is q
    devices = [entry[0] for entry in resolved]
    arrays = [entry[1] for entry in resolved]
    assert devices == ["auto", "cpu", "auto"]
    for got in arrays:  # the index's dataset, then the queries
        assert len(got) == 2 and got[0] is base and got[1] is q


def test_a_device_passed_by_position_is_the_one_resolved(resolved):
    x = np.zeros((2, 2), np.float32)
    assert build(None, x, "cpu") == (None, x, "cpu")
    assert resolved == [("cpu", (x,))]


def test_missing_arrays_are_left_out_and_devices_skips_the_resolution(resolved):
    x = np.zeros((2, 2), np.float32)
    assert build(None, dataset=x)[1] is x
    search(types.SimpleNamespace(), None, 1)  # an index without a dataset, no queries
    assert resolved[-1] == ("auto", ())
    n = len(resolved)
    assert search(None, None, 1, devices=[0, 1])[4] == [0, 1]
    assert len(resolved) == n  # a several-device call resolves its devices itself


def test_arguments_that_do_not_resolve_reach_the_function_and_its_errors():
    with pytest.raises(TypeError, match="device must be a string"):
        _device.resolve_device(3)
    # the decorator hands a device it cannot resolve to the function, whose own checks raise the clear error
    assert search(None, None, 1, device=3)[3] == 3
    with pytest.raises(TypeError):
        search(None)  # missing arguments: Python's own error, not the decorator's


def test_the_decorated_function_keeps_its_name_and_docs():
    assert search.__name__ == "search" and search.__doc__ == "Return what it was given."
    assert search.__wrapped__(None, None, 1) == (None, None, 1, "auto", None)
