"""Data of the hand-off tests (tests/test_handoff.py, tests/test_handoff_gpu.py)."""

import numpy as np

import knngraph


def sift_with_cpu_graph():
    """3,000 real SIFT descriptors (float32) and their exact 15-NN graph, euclidean, built on the CPU."""
    from knngraph.datasets import load_sample

    x = np.asarray(load_sample().base[:3000], np.float32)
    return x, knngraph.knn_graph(x, 15, metric="euclidean", device="cpu", verbose=False)
