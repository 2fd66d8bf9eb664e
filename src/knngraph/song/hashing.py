"""1-bit random-projection codes for data larger than GPU memory (SONG, section VII).

Draw h random vectors r with iid N(0, 1) entries; a vector x gets the h bits sgn(<x - c, r>), stored as
h/32 uint32 words (bit j of the code is bit j % 32 of word j // 32). For two vectors the probability
that a bit agrees is 1 - angle(x - c, y - c) / pi (Goemans-Williamson / Charikar), so the Hamming
distance between codes estimates the angle. The codes of n vectors take n * h / 8 bytes: 128 bits
are 16 bytes per vector against 128 for uint8 SIFT and 1536 for 384-d float32.

The centre c: the paper projects the raw vectors, which estimates angular (cosine) similarity. That is
the right target for ``cosine`` and a reasonable one for ``inner_product``, so c = 0 there. For
(squared) euclidean data we project x - mean(base): around the data's mean, small angles go with small
distances, while raw non-negative data (SIFT) would all sit in one orthant and look alike.

Codes only rank candidates approximately; :class:`knngraph.song.Index` with ``hash_bits > 0`` searches
the graph with Hamming distances on the GPU and re-ranks the final ``rerank`` candidates with exact
distances against the full vectors, which stay in host memory.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .._typing import Array

__all__ = ["RandomProjectionHasher", "HASH_BITS"]

#: code lengths accepted (multiples of 32; the paper tested 32 to 512)
HASH_BITS = (32, 64, 128, 256, 512, 1024)
_ENCODE_ROWS = 1 << 16


def _xp_of(x):
    return __import__("cupy") if type(x).__module__.split(".")[0] == "cupy" else np


class RandomProjectionHasher:
    """Sign random projections: ``encode(x)`` gives uint32 codes of shape (n, bits // 32).

    Parameters
    ----------
    bits : int, default=128
        Code length h, one of 32, 64, 128, 256, 512, 1024.
    seed : int, default=0
        Seed of the projection matrix (same seed, same codes).

    Attributes
    ----------
    projections_ : ndarray of float32, shape (dim, bits)
        The projection matrix, drawn by :meth:`fit` (None before).
    center_ : ndarray of float32, shape (dim,)
        Subtracted before projecting (the base mean for euclidean metrics, zeros otherwise); set by
        :meth:`fit`.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph.song.hashing import RandomProjectionHasher
    >>> x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    >>> h = RandomProjectionHasher(bits=64, seed=1).fit(x, metric="cosine")
    >>> h.encode(x).shape, h.encode(x).dtype
    ((5, 2), dtype('uint32'))
    """

    def __init__(self, bits: int = 128, *, seed: int = 0) -> None:
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or int(bits) not in HASH_BITS:
            raise ValueError(f"bits must be one of {HASH_BITS}, got {bits!r}")
        self.bits = int(bits)
        self.seed = int(seed)
        self.projections_ = None
        self.center_ = None

    @property
    def words(self) -> int:
        """32-bit words per code (``bits // 32``)."""
        return self.bits // 32

    def fit(self, base: Array, metric: str = "sqeuclidean") -> RandomProjectionHasher:
        """Draw the projections for vectors like ``base`` (host or device array); returns self."""
        xp = _xp_of(base)
        d = int(base.shape[1])
        rng = np.random.default_rng(self.seed)
        self.projections_ = rng.standard_normal((d, self.bits)).astype(np.float32)
        if metric in ("sqeuclidean", "euclidean"):
            total = np.zeros(d, np.float64)
            for s in range(0, base.shape[0], _ENCODE_ROWS):
                blk = base[s:s + _ENCODE_ROWS]
                total += np.asarray(_host(xp, blk.astype(xp.float32).sum(axis=0, dtype=xp.float64)))
            self.center_ = (total / base.shape[0]).astype(np.float32)
        else:
            self.center_ = np.zeros(d, np.float32)
        return self

    def set_state(self, projections: ArrayLike, center: ArrayLike) -> RandomProjectionHasher:
        """Restore a fitted state (``projections_`` of shape (d, bits), ``center_`` of shape (d,)), as a saved
        index does; returns self."""
        self.projections_ = np.ascontiguousarray(projections, dtype=np.float32)
        self.center_ = np.ascontiguousarray(center, dtype=np.float32)
        if self.projections_.shape[1] != self.bits:
            raise ValueError(f"projections have {self.projections_.shape[1]} columns, expected {self.bits}")
        return self

    def encode(self, x: Array) -> Array:
        """uint32 codes [n, bits // 32] of the rows of ``x`` (NumPy in, NumPy out; CuPy in, CuPy out)."""
        if self.projections_ is None:
            raise RuntimeError("RandomProjectionHasher.encode called before fit")
        xp = _xp_of(x)
        if x.shape[1] != self.projections_.shape[0]:
            raise ValueError(f"vectors have {x.shape[1]} dimensions but the hasher was fitted on "
                             f"{self.projections_.shape[0]}")
        proj = xp.asarray(self.projections_)
        center = xp.asarray(self.center_)
        weights = xp.asarray((np.uint64(1) << np.arange(32, dtype=np.uint64)).astype(np.uint32))
        n = x.shape[0]
        out = xp.empty((n, self.words), xp.uint32)
        for s in range(0, n, _ENCODE_ROWS):
            blk = x[s:s + _ENCODE_ROWS]
            blk = xp.asarray(blk).astype(xp.float32) - center
            bits = (blk @ proj) > 0
            bits = bits.reshape(bits.shape[0], self.words, 32).astype(xp.uint32)
            # distinct powers of two: their sum is their bitwise OR
            out[s:s + blk.shape[0]] = (bits * weights).sum(axis=2, dtype=xp.uint32)
        return out


def _host(xp, a):
    return a.get() if xp is not np else a
