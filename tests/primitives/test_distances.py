"""The pairwise distance helpers of primitives.distances (CPU njit) against float64; the warp device function
has tests/primitives/test_distances_sim.py."""

import numpy as np
import pytest

from knngraph import metrics
from knngraph.primitives.distances import distance_kind, inverse_norms, report_distances
from knngraph.primitives.pair_distance import cpu_distance
from knngraph.primitives.cpu_inputs import cpu_vectors

from ..support.distances import with_zero_row

DTYPES = [np.float32, np.float16, np.uint8, np.int8]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("metric", metrics.METRICS)
def test_cpu_distance_matches_reference(dtype, metric, rng):
    x = cpu_vectors(with_zero_row(rng, dtype))
    inv = inverse_norms(x)
    kind = distance_kind(metric)
    got = np.array([[cpu_distance(kind, x, i, x, j, inv, inv) for j in range(len(x))] for i in range(len(x))])
    ref = metrics.pairwise_distances(x, x, metric)
    np.testing.assert_allclose(report_distances(got, metric), ref, rtol=2e-5, atol=2e-3)
