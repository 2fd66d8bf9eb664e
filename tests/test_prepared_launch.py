"""The raw launch's packed arguments (``_cuda_launch.PreparedLaunch``), on the host with a stand-in for the
compiled kernel and for CuPy's driver call (no GPU needed): rewriting an array argument's changing values in
place must give the 8-byte values a fresh flattening gives, and the launch must hand the driver a pointer to
each value in turn."""

import sys
import types

import numpy as np
import pytest

from knngraph import _cuda_launch
from knngraph._cuda_launch import PreparedLaunch, flatten


class DeviceArray:
    """Just what flattening and typing read from a C-contiguous CuPy array."""

    class _Flags:
        c_contiguous = True

    class _Data:
        def __init__(self, ptr):
            self.ptr = ptr

    def __init__(self, ptr, shape, dtype):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.ndim = len(shape)
        self.size = int(np.prod(shape))
        self.itemsize = self.dtype.itemsize
        self.strides = tuple(int(s) * self.itemsize for s in np.cumprod((1,) + self.shape[:0:-1])[::-1])
        self.data = self._Data(ptr)
        self.flags = self._Flags()
        self.__cuda_array_interface__ = {}


@pytest.fixture
def launches(monkeypatch):
    """PreparedLaunch without compiling; the driver calls it makes, recorded."""
    fn = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0xF00D))
    monkeypatch.setattr(_cuda_launch, "_compiled", lambda kernel, signature, dev, regs: (fn, None))
    calls = []
    driver = types.ModuleType("driver")
    driver.launchKernel = lambda *args: calls.append(args)
    api = types.ModuleType("cupy_backends.cuda.api")
    api.driver = driver
    for name, mod in (("cupy_backends", types.ModuleType("cupy_backends")),
                      ("cupy_backends.cuda", types.ModuleType("cupy_backends.cuda")),
                      ("cupy_backends.cuda.api", api), ("cupy_backends.cuda.api.driver", driver)):
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


def test_rewritten_slots_match_a_fresh_flattening(launches):
    example = (DeviceArray(0x1000, (1, 32), np.float32), 10, -3, DeviceArray(0x2000, (1,), np.int32), 0.5)
    launch = PreparedLaunch(object(), example, device_id=0)
    slots = np.array(launch.array_slots(0) + launch.array_slots(3), np.intp)
    launch.values[slots] = (777 * 32, 0xDEAD00, 777, 777, 0xBEEF00, 777)
    fresh = (DeviceArray(0xDEAD00, (777, 32), np.float32), 10, -3, DeviceArray(0xBEEF00, (777,), np.int32), 0.5)
    want = [v for a in fresh for v in flatten(a)]
    assert launch.values.tolist() == [int(np.asarray(v).view(np.uint64)) for v in want]
    # the driver gets the kernel, the launch shape and an array pointing at each value in turn
    launch(6, 128, types.SimpleNamespace(ptr=0))
    (call,) = launches
    assert call[:9] == (0xF00D, 6, 1, 1, 128, 1, 1, 0, 0)
    assert call[9] == launch.pointers.ctypes.data
    assert (launch.pointers - launch.values.ctypes.data).tolist() == [8 * i for i in range(len(want))]


def test_float32_scalars_are_refused(launches):
    with pytest.raises(TypeError, match="8-byte"):
        PreparedLaunch(object(), (1, np.float32(2.0)), device_id=0)


def test_packed_launch_hands_the_driver_each_flattened_value(launches):
    """A plain launch (``launch`` without a prepared kernel) packs every argument into 8-byte slots: the
    driver must find numba's data model of each array, int64 patterns of integers (negative strides and
    offsets as two's complement), float64 floats, and a float32 scalar in the low 4 bytes of its slot."""
    import ctypes

    seen = []

    def record(*call):
        n = len(want)
        ptrs = (ctypes.c_uint64 * n).from_address(call[9])
        seen.append((call[:9], [ctypes.c_uint64.from_address(p).value for p in ptrs]))

    launches_driver = sys.modules["cupy_backends.cuda.api"].driver
    launches_driver.launchKernel = record
    _cuda_launch._driver_launch.cache_clear()
    try:
        view = DeviceArray(0x3000, (4, 8), np.float32)
        view.strides = (32, -4)  # a reversed view
        args = (view, 7, -2, np.float32(1.5), 0.25, np.int32(-9), DeviceArray(0x4000, (5,), np.int64))
        want = []
        for a in args:
            for v in flatten(a):
                v = np.asarray(v)
                want.append(int(v.view(np.uint32)) if v.dtype == np.float32 else int(v.view(np.uint64)))
        fn = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0xCAFE))
        _cuda_launch._launch_packed(fn, 3, 64, args, types.SimpleNamespace(ptr=0x55))
    finally:
        _cuda_launch._driver_launch.cache_clear()
    ((head, values),) = seen
    assert head == (0xCAFE, 3, 1, 1, 64, 1, 1, 0, 0x55)
    assert values == want
    assert values[:9] == [0, 0, 32, 4, 0x3000, 4, 8, 32, (1 << 64) - 4]
    assert np.array(values[10], np.uint64).view(np.int64) == -2
    assert np.uint32(values[11]).view(np.float32) == np.float32(1.5)
