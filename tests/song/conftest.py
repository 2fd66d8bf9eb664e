"""Shared fixtures for the SONG tests: the bundled sift 20k sample with a prepared exact graph."""

import numpy as np
import pytest

import knngraph


@pytest.fixture(scope="session")
def sift_graphs(sample):
    """(exact k-NN graph of degree 64, the same prepared to degree 32), built once on the CPU."""
    raw = knngraph.knn_graph(sample.base, 64, device="cpu", verbose=False)
    prepared = knngraph.optimize_graph(raw, sample.base, graph_degree=32, device="cpu", verbose=False)
    return raw, prepared


def complete_graph(n):
    """Every node linked to every other node (degree n - 1)."""
    ids = np.array([[j for j in range(n) if j != i] for i in range(n)], dtype=np.int32)
    return knngraph.Graph(ids, np.zeros(ids.shape, np.float32))


def random_vectors(rng, n, d, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((n, d)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=(n, d), endpoint=True).astype(dtype)
