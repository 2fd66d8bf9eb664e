"""GGNN's CUDA search kernel in the numba CUDA simulator on tiny inputs, against the CPU path id for id.

Inputs are small integers, so every distance is exact in float32 on both paths and the searches must
agree exactly (ids, distances, distances computed, vertices expanded)."""

import numpy as np
import pytest

import knngraph
from knngraph.ggnn import cpu as ggnn_cpu
from knngraph.ggnn import cuda as ggnn_cuda
from knngraph.primitives.distances import cpu_vectors, distance_kind, inverse_norms

from .conftest import complete_graph

pytestmark = pytest.mark.sim


def _small(rng, dtype, n, d, lo=-6, hi=7):
    if np.dtype(dtype) == np.uint8:
        lo, hi = 0, 13
    return rng.integers(lo, hi, (n, d)).astype(dtype)


@pytest.mark.parametrize("dtype,metric,complete", [
    (np.uint8, "sqeuclidean", False),
    (np.int8, "inner_product", False),
    (np.float32, "cosine", True),
    (np.float16, "euclidean", False),
])
def test_search_kernel_matches_cpu(dtype, metric, complete, rng):
    x = _small(rng, dtype, 40, 9)
    q = _small(rng, np.float32, 2, 9)
    g = complete_graph(40) if complete else knngraph.knn_graph(x, 6, metric=metric, device="cpu", verbose=False)
    ids = np.ascontiguousarray(g.indices)
    if not complete:
        ids[::5, -1] = -1  # rows with "no neighbour" slots
    kind = distance_kind(metric)
    xc = cpu_vectors(x)
    inv_b = inverse_norms(xc) if metric == "cosine" else np.zeros(1, np.float32)
    inv_q = inverse_norms(q) if metric == "cosine" else np.zeros(1, np.float32)
    entries = np.array([3, 0, 17, 3], np.int32)  # a repeated entry point is fetched once
    args = (kind, entries, 4, 0.5, 20.0, 6, 8, 40)
    cd, ci, cn, ce = ggnn_cpu.search(ids, xc, q, inv_b, inv_q, *args)
    gd, gi, gn, ge = ggnn_cuda.search(ids, x, q, inv_b, inv_q, *args, xp=np)
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_array_equal(gn, cn)
    np.testing.assert_array_equal(ge, ce)
    if metric == "cosine":
        np.testing.assert_allclose(gd, cd, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(gd, cd)
    assert (ci[:, 0] >= 0).all() and ce.min() >= 1


def _hierarchy(rng):
    """A small hierarchy state (3 layers, s=8) of integer vectors, built on the CPU without refinement."""
    from knngraph.ggnn import IndexParams
    from knngraph.ggnn._build import build_hierarchy

    x = _small(rng, np.uint8, 70, 6).astype(np.float32)
    params = IndexParams(graph_degree=6, segment_size=8, layers=3, refinements=0)
    h = build_hierarchy(ggnn_cpu, x, np.zeros(1, np.float32), 0, params)
    return x, h


def test_merge_kernels_match_cpu(rng):
    from knngraph.ggnn._hierarchy import bottom_segment

    x, h = _hierarchy(rng)
    p = h["plan"]
    assert p.layers == 3 and p.sizes == (70, 16, 8)
    inv = np.zeros(1, np.float32)
    off = np.asarray(p.offsets, np.int64)
    # brute force in the bottom segments
    starts = (np.arange(p.n_seg0 + 1) * 70 // p.n_seg0).astype(np.int32)
    ci, cd = np.empty((70, 6), np.int32), np.empty((70, 6), np.float32)
    gi, gd = np.empty((70, 6), np.int32), np.empty((70, 6), np.float32)
    ggnn_cpu.brute_segments(x, inv, 0, h["trans"], 0, starts, 6, ci, cd)
    ggnn_cuda.brute_segments(x, inv, 0, h["trans"], 0, starts, 6, gi, gd, xp=np)
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_array_equal(gd, cd)
    # merge(2, 0) of the first 5 bottom rows: two layer translations
    few = off.copy()
    few[1] = 5
    top = (bottom_segment(np.arange(5), 70, p.n_seg0) // p.g ** 2).astype(np.int32)
    args = (x, inv, 0, h["rows_graph"], h["trans"], h["sel"], few, top, 2, 0, p.s, 6, 8, 16, np.float32(0.5),
            np.float32(h["nn1_mean"]), 10)
    ci, cd = np.empty((5, 6), np.int32), np.empty((5, 6), np.float32)
    gi, gd = np.empty((5, 6), np.int32), np.empty((5, 6), np.float32)
    ggnn_cpu.merge_queries(*args, ci, cd)
    ggnn_cuda.merge_queries(*args, gi, gd, xp=np)
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_array_equal(gd, cd)
    assert (ci >= 0).all() and not (h["trans"][ci] == h["trans"][np.arange(5)][:, None]).any()


def test_sym_kernel_finds_the_cpu_candidates_and_places_valid_inverse_links(rng):
    """The GPU's path searches of the symmetric linking return, row for row, the CPU's candidates (then
    placed on the host in row order, the same links); every link is a new edge p -> z into a row with a
    free slot, with its distance."""
    from knngraph.ggnn._build import _SYM_QUEUE, _SYM_VISITED

    x, h = _hierarchy(rng)
    g = h["rows_graph"][:70].copy()
    trans = h["trans"]
    knn, ksym = 3, 3
    C = ggnn_cpu.SYM_CANDIDATES
    state = {}
    for name, impl, kw in (("gpu", ggnn_cuda, {"xp": np}), ("cpu", ggnn_cpu, {})):
        sym = np.full((g.shape[0], ksym), -1, np.int32)
        sym_d = np.full((g.shape[0], ksym), np.inf, np.float32)
        cnt = np.zeros(g.shape[0], np.int32)
        args = (x, np.zeros(1, np.float32), 0, g, trans, 0)
        reqs = []
        for z0, z1 in ((0, 20), (20, 40)):  # two waves: the second sees the first's links
            req_i, req_d = np.full((z1 - z0, knn, C), -7, np.int32), np.full((z1 - z0, knn, C), -7, np.float32)
            req_n = np.full((z1 - z0, knn), -7, np.int32)
            impl.sym_requests(*args, z0, z1, knn, sym, cnt, _SYM_QUEUE, _SYM_VISITED, np.float32(0.5),
                              np.float32(h["nn1_mean"]), req_i, req_d, req_n, **kw)
            ggnn_cpu.sym_place(g, 0, z0, z1, knn, ksym, sym, sym_d, cnt, req_i, req_d, req_n)
            reqs.append((req_i, req_d, req_n))
        state[name] = (sym, sym_d, cnt, reqs)
    for (gi, gd, gn), (ci, cd, cn) in zip(state["gpu"][3], state["cpu"][3]):
        np.testing.assert_array_equal(gn, cn)
        assert gn.sum() > 0
        for r, i in zip(*np.nonzero(cn)):
            np.testing.assert_array_equal(gi[r, i, :cn[r, i]], ci[r, i, :cn[r, i]])
            np.testing.assert_array_equal(gd[r, i, :cn[r, i]], cd[r, i, :cn[r, i]])
    sym, sym_d, cnt, _ = state["gpu"]
    for a, b in zip(state["gpu"][:3], state["cpu"][:3]):
        np.testing.assert_array_equal(a, b)
    assert (cnt <= ksym).all() and cnt.sum() > 0
    for p in range(70):
        links = sym[p, :cnt[p]]
        assert (links >= 0).all() and np.unique(links).size == links.size and p not in links
        assert not np.isin(links, g[p, :knn]).any()                      # a new edge, not an NN slot
        want = ((x[trans[p]] - x[trans[links]]) ** 2).sum(axis=1)
        np.testing.assert_array_equal(sym_d[p, :cnt[p]], want)           # distance of the link
        assert (sym[p, cnt[p]:] == -1).all()
