"""Helpers shared by the CPU and GPU NN-Descent engines, written once as ``numba.njit`` functions that
CUDA kernels call too (numba-cuda compiles them as device functions).

* A small integer hash (``hash32``/``mix``) is the only source of randomness, so the CPU and GPU paths
  draw the same random initial graph for the same seed.
* :func:`progression` gives each node a random arithmetic progression modulo the size of its candidate
  range, with a step coprime to that size: its first ``k`` terms are distinct ids, so the random initial
  lists need no duplicate check (GNND Alg. 1 l.1-5 leaves self-loops and duplicates unspecified).
* List order is (distance, id) lexicographic everywhere (:func:`less`).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["NEW", "OLD", "hash32", "mix", "progression", "candidate_range", "less", "auto_sample_size"]

#: entry flags of a k-NN list (GNND section 4): NEW entries have not taken part in a local join yet
NEW = 1
OLD = 0


@numba.njit(inline="always")
def hash32(x):
    """A 32-bit integer mixer on int64 values (result in [0, 2**32))."""
    x = x & 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    return (x >> 16) ^ x


@numba.njit(inline="always")
def mix(seed, a, b):
    """Hash of three integers."""
    return hash32(hash32(hash32(seed + 0x9E3779B9) ^ (a & 0xFFFFFFFF)) + (b & 0xFFFFFFFF) + (a >> 32))


@numba.njit(inline="always")
def _gcd(a, b):
    while b != 0:
        t = a % b
        a = b
        b = t
    return a


@numba.njit(inline="always")
def progression(seed, s, m):
    """(start, step) of node ``s``'s random progression modulo ``m`` (step coprime to m)."""
    h = mix(seed, s, 12345)
    start = h % m
    if m <= 2:
        return start, 1
    step = 1 + hash32(h + 7) % (m - 1)
    while _gcd(step, m) != 1:
        step += 1
        if step >= m:
            step = 1
    return start, step


@numba.njit(inline="always")
def candidate_range(s, n, split):
    """Where node ``s`` draws random neighbours from: ids ``lo + x`` for x in [0, m), shifted past ``skip``
    (``s`` itself) when ``skip >= 0``. A build (split == 0) draws from every other node; a merge
    (GGM, paper section 5.1) draws from the other subset: [split, n) for s < split, else [0, split)."""
    if split > 0:
        if s < split:
            return split, n - split, -1
        return 0, split, -1
    return 0, n - 1, s


@numba.njit(inline="always")
def less(da, ia, db, ib):
    """(distance, id) lexicographic order."""
    return da < db or (da == db and ia < ib)


def auto_sample_size(k: int, selective: bool) -> int:
    """Default sample count p. Selective update (GPU) inserts only each sample's nearest partners, so it
    needs more samples: p = k up to 32 (the GNND authors used k=64, p=32); inserting every improving pair
    (CPU) converges with p = k/2. At least 4, at most 32 and k."""
    p = k if selective else k // 2
    return int(min(32, k, max(4, p)))

