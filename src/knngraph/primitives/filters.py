"""Filtered search: which ids a search may return, as a bitset every search path reads the same way.

A user passes ``filter=`` either as a boolean mask over the index's ids (``True``: may be returned) or
as a bitset of ``ceil(n / 32)`` uint32 words, id ``i`` being bit ``i % 32`` (least significant first) of
word ``i // 32``; bits past ``n`` are ignored. Deleted vectors are expressed the same way (their bits
cleared). :func:`prepare_filter` validates either form and returns an :class:`AllowedIds` holding the
bitset; kernels test an id with :func:`is_allowed` (written once, CPU and GPU).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numba import uint32

from .compile import host_and_device

__all__ = ["AllowedIds", "prepare_filter", "is_allowed", "bitset_words"]


def bitset_words(n: int) -> int:
    """uint32 words of a bitset over ``n`` ids."""
    return (int(n) + 31) // 32


@host_and_device
def is_allowed(bits, v):
    """Whether id ``v`` (0 <= v < n) is set in the uint32 bitset ``bits``."""
    return ((uint32(bits[v >> 5]) >> uint32(v & 31)) & uint32(1)) != 0


@dataclasses.dataclass(frozen=True)
class AllowedIds:
    """A validated filter over ``n`` ids: ``bits`` (host uint32 words, bits past ``n`` cleared) and the
    number of ids it allows."""

    bits: np.ndarray
    n: int
    n_allowed: int

    @property
    def fraction(self) -> float:
        """Share of the ids that are allowed."""
        return self.n_allowed / self.n

    def ids(self) -> np.ndarray:
        """The allowed ids, ascending (int64)."""
        return np.flatnonzero(self.mask())

    def mask(self) -> np.ndarray:
        """The filter as a boolean mask of length ``n``."""
        return np.unpackbits(self.bits.view(np.uint8), count=self.n, bitorder="little").astype(bool)


def prepare_filter(filter, n: int, name: str = "filter") -> AllowedIds | None:
    """Validate ``filter`` (None, a boolean mask of length ``n`` or a uint32 bitset of ``ceil(n / 32)``
    words; NumPy, CuPy, PyTorch or a list) for an index of ``n`` ids. None stays None.

    Raises TypeError for other dtypes (with how to turn a list of ids into a mask) and ValueError for a
    wrong length or shape, or a filter that allows no id at all."""
    if filter is None:
        return None
    from .._device import as_numpy

    try:
        a = as_numpy(filter)
    except Exception as exc:  # an object NumPy cannot hold as an array
        raise TypeError(f"{name} must be a boolean mask or a uint32 bitset, got {type(filter).__name__}") from exc
    if a.dtype == object or a.dtype.kind not in "bu" or (a.dtype.kind == "u" and a.dtype != np.uint32):
        raise TypeError(
            f"{name} must be a boolean mask of length {n} (True: the id may be returned) or a uint32 bitset "
            f"of {bitset_words(n)} words, got dtype {a.dtype}; to allow a list of ids, pass "
            f"mask = np.zeros({n}, bool); mask[ids] = True")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype == np.bool_:
        if a.shape[0] != n:
            raise ValueError(f"{name} is a boolean mask of length {a.shape[0]}, but the index holds {n} vectors")
        bits = np.zeros(bitset_words(n) * 4, np.uint8)
        packed = np.packbits(a, bitorder="little")
        bits[:packed.size] = packed
        bits = bits.view("<u4").astype(np.uint32, copy=False)
    else:
        if a.shape[0] != bitset_words(n):
            raise ValueError(f"{name} is a bitset of {a.shape[0]} uint32 words, but {n} vectors need "
                             f"{bitset_words(n)} (ceil(n / 32))")
        bits = np.array(a, dtype=np.uint32, copy=True)
        if n % 32:
            bits[-1] &= np.uint32((1 << (n % 32)) - 1)
    n_allowed = int(np.unpackbits(bits.view(np.uint8)).sum())
    if n_allowed == 0:
        raise ValueError(f"{name} allows no id: every result would be empty")
    return AllowedIds(np.ascontiguousarray(bits), int(n), n_allowed)
