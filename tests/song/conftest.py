"""Shared helpers of the SONG tests (the prepared sift 20k graphs, ``sift_graphs``, are in tests/conftest.py)."""

import numpy as np

import knngraph


def complete_graph(n):
    """Every node linked to every other node (degree n - 1)."""
    ids = np.array([[j for j in range(n) if j != i] for i in range(n)], dtype=np.int32)
    return knngraph.Graph(ids, np.zeros(ids.shape, np.float32))


def random_vectors(rng, n, d, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((n, d)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=(n, d), endpoint=True).astype(dtype)
