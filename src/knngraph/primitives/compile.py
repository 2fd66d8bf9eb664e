"""The one idiom for helpers written once and compiled for the CPU and the GPU (see the package docs).

* :func:`host_and_device` turns a plain Python function into a ``numba.njit`` dispatcher: CPU code calls
  it, and so may CUDA kernels (numba-cuda compiles a called ``njit`` function as a device function).
* :func:`cuda_version` gives the same source compiled with ``cuda.jit(device=True, inline=True)``, for
  kernels that want the helper forced inline; a kernel module binds it once at import.
* :func:`threaded_and_serial` compiles a ``prange`` CPU kernel twice, with threads and without: a
  threaded call costs a thread wake-up (milliseconds on a busy machine), which dominates small inputs.
"""

from __future__ import annotations

import types

import numba

__all__ = ["host_and_device", "cuda_version", "threaded_and_serial", "SERIAL_BELOW"]

#: rows of work below which :func:`threaded_and_serial` kernels run their serial build
SERIAL_BELOW = 8192

_CUDA_VERSIONS: dict = {}


def host_and_device(fn=None, *, inline: bool = True, cache: bool = False):
    """Decorator: ``numba.njit`` the function (``inline="always"`` unless ``inline=False``) and remember
    its source for :func:`cuda_version`. Use as ``@host_and_device`` or ``@host_and_device(inline=False)``.
    The function must call only other ``host_and_device`` helpers (or numba built-ins)."""

    def wrap(f):
        dispatcher = numba.njit(inline="always" if inline else "never", cache=cache)(f)
        dispatcher.__knngraph_source__ = f
        return dispatcher

    return wrap(fn) if fn is not None else wrap


def cuda_version(helper):
    """The CUDA device function (``cuda.jit(device=True, inline=True)``) of a :func:`host_and_device`
    helper, compiled from the same Python source; cached. Imports numba.cuda: call it from kernel
    modules only."""
    from numba import cuda

    source = getattr(helper, "__knngraph_source__", None)
    if source is None:
        raise TypeError(f"{helper!r} is not a host_and_device helper")
    if source not in _CUDA_VERSIONS:
        _CUDA_VERSIONS[source] = cuda.jit(device=True, inline=True)(source)
    return _CUDA_VERSIONS[source]


def threaded_and_serial(fn, *, fastmath: bool = False):
    """(threaded, serial) ``numba.njit`` builds of one ``prange`` kernel; pick with :func:`pick`."""
    threaded = numba.njit(parallel=True, fastmath=fastmath, cache=True)(fn)
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__,
                              fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_serial"
    twin.__doc__ = fn.__doc__
    serial = numba.njit(parallel=False, fastmath=fastmath, cache=True)(twin)
    return threaded, serial


def pick(builds, rows: int):
    """The threaded build of a :func:`threaded_and_serial` pair for at least ``SERIAL_BELOW`` rows of
    work, else the serial one."""
    return builds[0] if rows >= SERIAL_BELOW else builds[1]
