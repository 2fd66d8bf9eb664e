"""The arrays CPU kernels take, made on the host without importing a compiler.

numba compiles a kernel per argument type: a read-only array (a memory map) and a writable one are two
types, and numba's CPU target has no float16. :func:`cpu_vectors` gives the one form the CPU kernels are
compiled for; :func:`writable_view` the writable flag alone.
"""

from __future__ import annotations

import numpy as np

__all__ = ["writable_view", "cpu_vectors"]


class _ArrayInterface:
    """An ``__array_interface__`` holder that keeps the array it describes alive."""

    def __init__(self, interface: dict, owner):
        self.__array_interface__ = interface
        self.owner = owner


def writable_view(x):
    """``x`` as CPU kernels take it: a read-only NumPy array (a memory-mapped file, ``np.load(...,
    mmap_mode='r')``) as a view of the same memory flagged writable, any other array as it is.

    numba compiles a kernel per argument type and a read-only array is a type of its own, so without this
    every kernel that reads the vectors would be compiled (and cached) twice, once per kind of input. The
    kernels never write their input vectors (a write through the view would fault on a read-only mapping);
    the view is for passing to them only, never handed back to the caller."""
    if not isinstance(x, np.ndarray) or x.flags.writeable:
        return x
    interface = dict(x.__array_interface__)
    interface["data"] = (interface["data"][0], False)
    return np.asarray(_ArrayInterface(interface, x))


def cpu_vectors(x: np.ndarray) -> np.ndarray:
    """The array CPU kernels can read: float16 is widened to float32, a read-only array (a memory map) is
    passed as a writable view (:func:`writable_view`: one compiled kernel for both kinds of input),
    everything else is returned as is."""
    return x.astype(np.float32) if x.dtype == np.float16 else writable_view(x)
