"""optimize_graph (graphops/prune.py) on a real GPU (marker ``gpu``; scripts/gpu_check.sh runs these with
KNNGRAPH_GPU_TESTS=1): the same graph as the CPU's, id for id and distance for distance."""

import numpy as np
import pytest

import knngraph

pytestmark = pytest.mark.gpu


def test_prepare_on_gpu_matches_cpu(sample):
    raw = knngraph.knn_graph(sample.base, 64, device="cpu", verbose=False)
    gg = knngraph.optimize_graph(raw, sample.base, graph_degree=32, device="cuda")
    gc = knngraph.optimize_graph(raw, sample.base, graph_degree=32, device="cpu")
    np.testing.assert_array_equal(gg.indices, gc.indices)
    np.testing.assert_array_equal(gg.distances, gc.distances)
