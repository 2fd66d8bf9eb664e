"""The pairwise distance helpers (CPU njit and the warp device function in the simulator) against float64."""

import numpy as np
import pytest
from numba import cuda

from knngraph import metrics
from knngraph.primitives.distances import cpu_distance, cpu_vectors, distance_kind, inverse_norms, report_distances
from knngraph.primitives.warp import warp_distance

DTYPES = [np.float32, np.float16, np.uint8, np.int8]


def _data(rng, dtype, n=6, d=45):
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal((n, d)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=(n, d), endpoint=True).astype(dtype)
    x[0] = 0  # a zero vector: cosine distance 1 to everything
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("metric", metrics.METRICS)
def test_cpu_distance_matches_reference(dtype, metric, rng):
    x = cpu_vectors(_data(rng, dtype))
    inv = inverse_norms(x)
    kind = distance_kind(metric)
    got = np.array([[cpu_distance(kind, x, i, x, j, inv, inv) for j in range(len(x))] for i in range(len(x))])
    ref = metrics.pairwise_distances(x, x, metric)
    np.testing.assert_allclose(report_distances(got, metric), ref, rtol=2e-5, atol=2e-3)


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

    x = _data(rng, np.uint8, n=3, d=40)
    out = np.zeros((3, 3), np.float32)
    inv = inverse_norms(x)
    pairwise[9, 32](distance_kind(metric), x, inv, out)
    np.testing.assert_allclose(report_distances(out, metric), metrics.pairwise_distances(x, x, metric),
                               rtol=1e-5, atol=1e-3)
