"""Shared fixtures of the GGNN tests: one GGNN index of the bundled sift 20k sample, built once."""

import numpy as np
import pytest

from knngraph import ggnn


@pytest.fixture(scope="session")
def sift_ggnn(sample):
    """GGNN index of sift 20k with the default parameters (k=24, s=32, L=4, tau_b=0.5) but one refinement
    pass instead of two (a third less build time in CI; benchmarks/studies/ggnn_cpu.py measures the defaults), CPU."""
    return ggnn.build(ggnn.IndexParams(refinements=1), sample.base, device="cpu", verbose=False)


@pytest.fixture(scope="session")
def small(sample):
    """The first 3000 vectors of sift 20k (uint8, 128-d: real data)."""
    return sample.base[:3000]


def complete_graph(n):
    """Every node linked to every other node (degree n - 1)."""
    import knngraph

    ids = np.array([[j for j in range(n) if j != i] for i in range(n)], dtype=np.int32)
    return knngraph.Graph(ids, np.zeros(ids.shape, np.float32))


def recall_at(ids, truth, k):
    """recall@k of returned ids against true ids (per row overlap of the first k)."""
    return float(np.mean([len(set(a[:k].tolist()) & set(b[:k].tolist())) / k for a, b in zip(ids, truth)]))
