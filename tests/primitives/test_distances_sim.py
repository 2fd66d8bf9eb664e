"""The warp device function of the pairwise distances (primitives.warp.warp_distance) in the numba CUDA
simulator, against float64."""

import numpy as np
import pytest
from numba import cuda

from knngraph import metrics
from knngraph.primitives.distances import distance_kind, inverse_norms, report_distances
from knngraph.primitives.warp import warp_distance

from ..support.distances import with_zero_row


@cuda.jit
def _pairwise_kernel(kind, x, inv, out):
    lane = cuda.threadIdx.x % 32
    w = cuda.blockIdx.x
    i = w // x.shape[0]
    j = w % x.shape[0]
    dist = warp_distance(kind, x, i, x, j, inv, inv, lane)
    if lane == 0:
        out[i, j] = dist


@pytest.mark.sim
@pytest.mark.parametrize("metric", ["sqeuclidean", "inner_product", "cosine"])
def test_warp_distance_in_simulator(metric, rng):
    pairwise = _pairwise_kernel

    x = with_zero_row(rng, np.uint8, n=3, d=40)
    out = np.zeros((3, 3), np.float32)
    inv = inverse_norms(x)
    pairwise[9, 32](distance_kind(metric), x, inv, out)
    np.testing.assert_allclose(report_distances(out, metric), metrics.pairwise_distances(x, x, metric),
                               rtol=1e-5, atol=1e-3)
