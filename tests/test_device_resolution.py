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


@on_input_device("index", "queries", pass_device=True)
def search_passing(index, queries, k, *, device="auto"):
    return device


def test_pass_device_hands_the_resolved_device_only_when_every_array_is_there(resolved):
    index = types.SimpleNamespace(dataset=np.zeros((4, 2), np.float32))
    q = np.zeros((1, 2), np.float32)
    assert search_passing(index, q, 1) == _device.Device("cpu")
    assert search_passing(index, q, 1, device="cpu") == _device.Device("cpu")
    # an index without a dataset (a several-device index) resolves its device itself: the value stays
    assert search_passing(types.SimpleNamespace(), q, 1, device="auto") == "auto"


def _fake_gpu(monkeypatch):
    """Calls decorated by on_input_device run 'on GPU 0' without a GPU: resolution, the device context and
    the release of the pool are stubbed."""
    import contextlib

    monkeypatch.setattr(_device, "resolve_device", lambda device="auto", *arrays: _device.Device("cuda", 0))
    monkeypatch.setattr(_device, "device_context", lambda dev: contextlib.nullcontext())
    monkeypatch.setattr(_device, "release_device_memory", lambda dev: 0)


@pytest.mark.parametrize("error", [RuntimeError("merge_sort: failed on 2nd step: cudaErrorMemoryAllocation: out of "
                                                "memory"),
                                   type("OutOfMemoryError", (MemoryError,), {})("Out of memory allocating 4 bytes")])
def test_a_gpu_out_of_memory_is_turned_once_through_nested_entry_points(monkeypatch, error):
    _fake_gpu(monkeypatch)

    @on_input_device("dataset")
    def inner(dataset):
        raise error

    @on_input_device("dataset")
    def outer(dataset):
        return inner(dataset)

    with pytest.raises(MemoryError) as caught:
        outer(np.zeros((2, 2), np.float32))
    message = str(caught.value)
    assert message.count("ran out of memory") == 1 and message.startswith(f"{__name__.split('._')[0]}.inner: GPU 0")
    assert "Pass memory_limit=" in message


def test_a_memory_error_of_the_library_passes_unchanged_on_a_gpu(monkeypatch):
    # a budget too small for the input is the library's own MemoryError, not a GPU out of memory: its message
    # (which names the budget) must reach the user as it is
    _fake_gpu(monkeypatch)

    @on_input_device("dataset")
    def build_with_budget(dataset):
        raise MemoryError("memory_limit=1MB is below the 4MB the smallest piece needs")

    with pytest.raises(MemoryError, match=r"^memory_limit=1MB is below the 4MB the smallest piece needs$"):
        build_with_budget(np.zeros((2, 2), np.float32))


def test_each_device_resolves_to_one_object_and_every_spelling_is_still_checked(monkeypatch):
    # resolve_device hands out one Device per device (so keys holding them compare by identity) and parses a
    # spelling once; whether the GPU it names is there is asked at every call, and bad spellings still fail
    cpu = _device.resolve_device("cpu")
    assert cpu == _device.Device("cpu") and _device.resolve_device(" CPU ") is cpu
    assert _device.resolve_device(cpu) is cpu
    for _ in range(2):  # a second call of a parsed spelling, and of a refused one
        with pytest.raises(ValueError, match=r"device 'cuda:x': expected 'cuda:N' with an integer N"):
            _device.resolve_device("cuda:x")
        with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"):
            _device.resolve_device("tpu")
        with pytest.raises(TypeError, match="device must be a string"):
            _device.resolve_device(0)
    monkeypatch.setattr(_device, "_gpu_probe", lambda: (False, "no GPU here (test)"))
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"device='cuda:1' was asked for but no GPU is usable: no GPU here"):
            _device.resolve_device("cuda:1")
        assert _device.resolve_device("auto", np.zeros((1, 1), np.float32)) is cpu
    monkeypatch.setattr(_device, "_gpu_probe", lambda: (True, ""))
    monkeypatch.setattr(_device, "_gpu_count", lambda: 2)
    gpu1 = _device.resolve_device("cuda:1")
    assert gpu1 == _device.Device("cuda", 1) and _device.resolve_device("cuda:1") is gpu1
    assert _device.resolve_device("cuda") == _device.Device("cuda", 0) == _device.resolve_device("auto")
    with pytest.raises(ValueError, match=r"device 'cuda:2': GPU index out of range, this machine has 2 GPU\(s\)"):
        _device.resolve_device("cuda:2")


def test_the_cpu_context_is_a_shared_no_op_and_array_kinds_are_the_same_values():
    cpu = _device.Device("cpu")
    ctx = _device.device_context(cpu)
    assert ctx is _device.device_context(cpu)
    with ctx as entered, ctx:  # reentrant: one serves every caller
        assert entered is None
    x = np.zeros((2, 2), np.float32)
    assert _device.array_kind(x) == _device.ArrayKind("numpy", False) == _device.array_kind(x.view(np.memmap))
    assert _device.return_as(_device.array_kind(x), x) is x
