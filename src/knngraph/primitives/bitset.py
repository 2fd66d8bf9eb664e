"""The test of one id against a uint32 bitset inside a kernel, written once for the CPU and the GPU.

The bitsets are the allowed ids of a filtered search and the deleted rows of an index, made on the host
by :mod:`knngraph.primitives.filters`: id ``i`` is bit ``i % 32`` (least significant first) of word
``i // 32``.
"""

from __future__ import annotations

from numba import uint32

from .compile import host_and_device

__all__ = ["is_allowed"]


@host_and_device
def is_allowed(bits, v):
    """Whether id ``v`` (0 <= v < n) is set in the uint32 bitset ``bits``."""
    return ((uint32(bits[v >> 5]) >> uint32(v & 31)) & uint32(1)) != 0
