"""The pruning kernel of optimize_graph (graphops/prune.py, ``graphops.cuda.prune``) in the numba CUDA
simulator on tiny inputs, against the CPU path (``graphops.cpu.prune``) id for id and distance for distance."""

import numpy as np
import pytest

import knngraph
from knngraph.graphops import cpu as graphops_cpu
from knngraph.graphops import cuda as graphops_cuda
from knngraph.graphops import occlusion_factor
from knngraph.primitives.distances import distance_kind

pytestmark = pytest.mark.sim


def test_prune_kernel_matches_cpu(rng):
    # 9 nodes, input degree 5, output degree 3: both passes (without and with fill), a repeated id and
    # missing (-1) entries in the input rows, alpha > 1
    x = rng.integers(-6, 7, (9, 4)).astype(np.int8)  # small integers: exact distances on both paths
    g = knngraph.knn_graph(x, 5, device="cpu", verbose=False)
    g.indices[2, 1] = g.indices[2, 0]  # a repeated id
    g.indices[5, -2:] = -1
    kind = distance_kind("sqeuclidean")
    inv = np.zeros(1, np.float32)
    empty = np.empty((9, 0), np.int32)
    factor = occlusion_factor(kind, 1.1)  # alpha 1.1
    cf, cd = graphops_cpu.prune(x, inv, kind, factor, g.indices, empty, empty, 3, False)
    gf, gd = graphops_cuda.prune(x, inv, kind, factor, g.indices, empty, empty, 3, False, xp=np, max_warps=2)
    np.testing.assert_array_equal(gf, cf)
    np.testing.assert_array_equal(gd, cd)
    rev = np.roll(cf, 1, axis=0)
    cf2, cd2 = graphops_cpu.prune(x, inv, kind, factor, cf, rev, g.indices, 3, True)
    gf2, gd2 = graphops_cuda.prune(x, inv, kind, factor, cf, rev, g.indices, 3, True, xp=np, max_warps=2)
    np.testing.assert_array_equal(gf2, cf2)
    np.testing.assert_array_equal(gd2, cd2)
    assert (cf2 >= 0).all()  # filled to the degree from the secondary rows
