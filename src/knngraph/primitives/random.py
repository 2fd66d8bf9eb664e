"""Randomness of the kernels, written once for the CPU and the GPU (see the package docs).

A small integer hash (:func:`hash32`, :func:`mix`) is the only source of randomness, so CPU and GPU
paths draw the same random choices for the same seed. :func:`progression` gives each node a random
arithmetic progression modulo the size of its candidate range, with a step coprime to that size: its
first terms are distinct, so random lists of ids need no duplicate check.
"""

from __future__ import annotations

from .compile import host_and_device

__all__ = ["hash32", "mix", "progression"]


@host_and_device
def hash32(x):
    """A 32-bit integer mixer on int64 values (result in [0, 2**32))."""
    x = x & 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    return (x >> 16) ^ x


@host_and_device
def mix(seed, a, b):
    """Hash of three integers."""
    return hash32(hash32(hash32(seed + 0x9E3779B9) ^ (a & 0xFFFFFFFF)) + (b & 0xFFFFFFFF) + (a >> 32))


@host_and_device
def _gcd(a, b):
    while b != 0:
        t = a % b
        a = b
        b = t
    return a


@host_and_device
def progression(seed, s, m):
    """(start, step) of a random progression modulo ``m`` for item ``s`` (step coprime to m): the terms
    ``(start + j * step) % m`` for j < m are distinct."""
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
