"""The fast GPU searcher (``beam/_kernels.py``) in the numba CUDA simulator, on tiny inputs, against
a plain-Python walk of the same search (best-first over a sorted list of queue_size entries, expand the
first unexpanded, stop when there is none; a visited set that never forgets).

Inputs are small integers, so distances are exact in float32 and int32: ids, distances and the numbers
of distance computations and expansions must agree exactly. The kernel's visited table is reset when
half full; small tables force many resets here, which must not change any result."""

import numpy as np
import pytest

import knngraph
from knngraph.primitives.distances import DIST_COS, DIST_IP, DIST_L2SQ, distance_kind, inverse_norms
from knngraph.primitives.cpu_inputs import cpu_vectors
from knngraph.beam import _kernels as bk
from knngraph.beam.cuda import beam_mode, search_beam_device, square_norms

pytestmark = pytest.mark.sim


def reference_walk(graph, x, q, kind, entries, k, queue_size, inv_b=None, inv_q=None, width=1, slack=None):
    """(distances, ids, distance computations, expansions) of one query, in plain Python; ``width``
    vertices (the list's first unexpanded ones) are expanded together per step. ``slack``: (kb, tau,
    nn1, max_exp), GGNN's stop: only entries within d_kb + tau^2 min(|d_1|, nn1) are expanded (any while
    the list holds fewer than kb), at most max_exp in all."""
    xf = x.astype(np.float64)
    qf = q.astype(np.float64)

    def dist(v):
        dot = float(xf[v] @ qf)
        if kind == DIST_L2SQ:
            return float(((xf[v] - qf) ** 2).sum())
        if kind == DIST_IP:
            return -dot
        return 1.0 - dot * float(inv_b[v]) * float(inv_q)

    seen = set()
    lst = []  # (distance, id, expanded)
    nd = 0
    ne = 0

    def offer(ids):
        nonlocal lst, nd
        for v in ids:
            if v < 0 or v in seen:
                continue
            seen.add(v)
            nd += 1
            lst.append((dist(v), v, False))
        lst = sorted(lst, key=lambda e: (e[0], e[1]))[:queue_size]

    offer([int(e) for e in entries])
    while True:
        picked = [p for p, e in enumerate(lst) if not e[2]][:width]
        if slack is not None:
            kb, tau, nn1, max_exp = slack
            bound = lst[kb - 1][0] + tau * tau * min(abs(lst[0][0]), nn1) if len(lst) >= kb else np.inf
            picked = [p for p in picked if lst[p][0] <= bound][:max(0, max_exp - ne)]
        if not picked:
            break
        rows = []
        for pos in picked:
            d, u, _ = lst[pos]
            lst[pos] = (d, u, True)
            ne += 1
            rows += [int(v) for v in graph[u]]
        offer(rows)
    out_d = np.full(k, np.inf)
    out_i = np.full(k, -1)
    for t, (d, v, _) in enumerate(lst[:k]):
        out_d[t], out_i[t] = d, v
    return out_d, out_i, nd, ne


def _small(rng, dtype, n, d):
    if np.dtype(dtype) == np.uint8:
        return rng.integers(0, 13, (n, d)).astype(dtype)
    return rng.integers(-6, 7, (n, d)).astype(dtype)


def _graph(x, metric, degree):
    g = knngraph.knn_graph(x, 12, metric=metric, device="cpu", verbose=False)
    return knngraph.optimize_graph(g, x, degree, device="cpu")


def _run(graph_ids, x, q, metric, entries, k, queue_size, max_warps=2, width=1, slack=None):
    kind = distance_kind(metric)
    mode = beam_mode(x.dtype, q.dtype, x.shape[1])
    if mode in (bk.MODE_DP4A_U8, bk.MODE_DP4A_I8):
        norms = square_norms(x, np) if kind == DIST_L2SQ else (
            inverse_norms(cpu_vectors(x)) if kind == DIST_COS else np.zeros(1, np.float32))
        qq = np.ascontiguousarray(q)
    else:
        norms = inverse_norms(cpu_vectors(x)) if kind == DIST_COS else np.zeros(1, np.float32)
        # as the library: float16 queries are read in place, other dtypes as float32
        qq = np.ascontiguousarray(q, dtype=np.float16 if q.dtype == np.float16 else np.float32)
    return mode, search_beam_device(graph_ids, x, qq, norms, kind, entries, k, queue_size, mode, xp=np,
                                    max_warps=max_warps, width=width, slack=slack)


@pytest.mark.parametrize("dtype,qdtype,dim,metric,degree,mode", [
    (np.uint8, np.uint8, 12, "sqeuclidean", 6, bk.MODE_DP4A_U8),
    (np.int8, np.int8, 8, "inner_product", 5, bk.MODE_DP4A_I8),
    (np.uint8, np.uint8, 8, "cosine", 6, bk.MODE_DP4A_U8),
    (np.uint8, np.float32, 12, "sqeuclidean", 6, bk.MODE_GENERIC),  # float queries: element loads
    (np.float32, np.float32, 7, "cosine", 6, bk.MODE_GENERIC),  # odd dimension: element loads
    (np.float32, np.float32, 14, "sqeuclidean", 6, bk.MODE_F32X2),
    (np.float32, np.float32, 8, "sqeuclidean", 6, bk.MODE_F32X4),
    (np.float32, np.float16, 12, "cosine", 40, bk.MODE_F32X4),  # rows longer than one chunk
    (np.float32, np.float32, 16, "inner_product", 6, bk.MODE_F32X4),
    (np.float32, np.float16, 10, "cosine", 6, bk.MODE_F32X2),
    (np.float32, np.float32, 6, "inner_product", 40, bk.MODE_F32X2),
    (np.float16, np.float32, 9, "euclidean", 40, bk.MODE_GENERIC),  # rows longer than one chunk
    (np.float16, np.float32, 10, "sqeuclidean", 6, bk.MODE_HALF2),
    (np.float16, np.float16, 12, "cosine", 6, bk.MODE_HALF4),
    (np.float16, np.float32, 8, "inner_product", 6, bk.MODE_HALF4),
])
def test_beam_kernel_matches_reference_walk(dtype, qdtype, dim, metric, degree, mode, rng):
    x = _small(rng, dtype, 48, dim)
    q = _small(rng, qdtype if qdtype != np.float32 else np.int8, 3, dim).astype(qdtype)
    g = _graph(x, metric, degree)
    kind = distance_kind(metric)
    entries = np.array([3, 0, 17, 3], np.int32)  # a repeated entry point is computed once
    k, queue = 4, 6
    got_mode, (gk, gi, gn, ge) = _run(g.indices, x, q, metric, entries, k, queue)
    assert got_mode == mode
    inv_b = inverse_norms(cpu_vectors(x).astype(np.float32))
    inv_q = inverse_norms(q.astype(np.float32))
    for j in range(q.shape[0]):
        rd, ri, rn, rexp = reference_walk(g.indices, x, q[j], kind, entries, k, queue, inv_b, inv_q[j])
        np.testing.assert_array_equal(gi[j], ri)
        assert gn[j] == rn and ge[j] == rexp
        if metric == "cosine":
            np.testing.assert_allclose(gk[j], rd, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(gk[j], rd.astype(np.float32))


def test_beam_kernel_on_complete_graph_is_exact(rng):
    # every vertex links to every other: the walk computes every distance, so the result is exact
    n, d = 40, 8
    x = _small(rng, np.uint8, n, d)
    q = _small(rng, np.uint8, 2, d)
    ids = np.array([[v for v in range(n) if v != u] for u in range(n)], np.int32)
    _, (gk, gi, gn, _) = _run(ids, x, q, "sqeuclidean", np.array([0], np.int32), 5, 8, max_warps=1)
    dist = ((x[None].astype(np.int64) - q[:, None].astype(np.int64)) ** 2).sum(-1)
    for j in range(2):
        order = np.lexsort((np.arange(n), dist[j]))[:5]
        np.testing.assert_array_equal(gi[j], order)
        np.testing.assert_array_equal(gk[j], dist[j][order])
        assert gn[j] == n


def test_beam_kernel_gives_no_neighbours_to_non_finite_queries(rng):
    x = _small(rng, np.float32, 30, 4)
    g = _graph(x, "sqeuclidean", 6)
    q = _small(rng, np.int8, 3, 4).astype(np.float32)
    q[1, 2] = np.nan
    q[2, 0] = np.inf
    _, (gk, gi, gn, _) = _run(g.indices, x, q, "sqeuclidean", np.array([0], np.int32), 3, 6, max_warps=1)
    assert (gi[1:] == -1).all() and np.isnan(gk[1:]).all() and (gn[1:] == 0).all()
    rd, ri, _, _ = reference_walk(g.indices, x, q[0], DIST_L2SQ, np.array([0]), 3, 6)
    np.testing.assert_array_equal(gi[0], ri)


def test_beam_kernel_pads_when_few_vertices_reachable():
    # two vertices linked to each other only: k=4 gets two results and -1 / inf after them
    x = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [9, 9, 9, 9]], np.uint8)
    ids = np.array([[1, -1], [0, -1], [-1, -1]], np.int32)
    q = np.array([[0, 0, 0, 1]], np.uint8)
    _, (gk, gi, _, ge) = _run(ids, x, q, "sqeuclidean", np.array([0], np.int32), 4, 4, max_warps=1)
    np.testing.assert_array_equal(gi[0], [0, 1, -1, -1])
    np.testing.assert_array_equal(gk[0], [1, 3, np.inf, np.inf])
    assert ge[0] == 2


def test_visited_table_resets_do_not_change_results(rng):
    # queue 32 gets a 512-slot table, reset after 224 claims; a walk on a random 32-regular graph of 600
    # vertices claims several hundred ids, so the table is reset several times during each search
    n, d = 600, 4
    x = _small(rng, np.uint8, n, d)
    q = _small(rng, np.uint8, 2, d)
    ids = np.stack([rng.choice(np.delete(np.arange(n), u), 32, replace=False) for u in range(n)]).astype(np.int32)
    _, (gk, gi, gn, ge) = _run(ids, x, q, "sqeuclidean", np.array([5], np.int32), 3, 32, max_warps=1)
    for j in range(2):
        rd, ri, rn, rexp = reference_walk(ids, x, q[j], DIST_L2SQ, np.array([5]), 3, 32)
        assert rn > 2 * (512 // 2 - 32)  # the table was reset at least twice
        np.testing.assert_array_equal(gi[j], ri)
        np.testing.assert_array_equal(gk[j], rd.astype(np.float32))
        assert ge[j] == rexp
        assert gn[j] >= rn  # ids that fell off the list may be computed again after a reset


@pytest.mark.parametrize("dtype,metric,width,degree", [
    (np.uint8, "sqeuclidean", 2, 6),
    (np.float32, "cosine", 3, 6),
    (np.float16, "inner_product", 4, 40),  # rows longer than one chunk
])
def test_block_kernel_matches_reference_walk_of_that_width(dtype, metric, width, degree, rng):
    # the block-per-query kernel (search_width warps per query) walks as the reference with that width;
    # 70 entry points take several rounds of chunks
    x = _small(rng, dtype, 90, 8)
    q = _small(rng, dtype, 3, 8)
    g = _graph(x, metric, degree)
    kind = distance_kind(metric)
    entries = np.arange(0, 90, 1, dtype=np.int32)[:70][::-1].copy()
    _, (gk, gi, gn, ge) = _run(g.indices, x, q, metric, entries, 4, 8, width=width)
    inv_b = inverse_norms(cpu_vectors(x).astype(np.float32))
    inv_q = inverse_norms(q.astype(np.float32))
    for j in range(q.shape[0]):
        rd, ri, rn, rexp = reference_walk(g.indices, x, q[j], kind, entries, 4, 8, inv_b, inv_q[j], width=width)
        np.testing.assert_array_equal(gi[j], ri)
        assert gn[j] == rn and ge[j] == rexp
        np.testing.assert_allclose(gk[j], rd, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width,tau,max_exp", [(1, 0.5, 100), (1, 0.0, 100), (1, 2.0, 5),
                                                # several warps per query: about 7 s each on 2 cores
                                                pytest.param(2, 0.5, 100, marks=pytest.mark.slow),
                                                pytest.param(3, 1.0, 7, marks=pytest.mark.slow)])
def test_slack_stop_matches_reference_walk_and_cpu(width, tau, max_exp, rng):
    """GGNN's slack stop (``ggnn.search`` with cache='sorted'): the kernel (one warp, or ``width`` warps
    per query) stops where the reference walk does, by the bound d_kb + tau^2 min(|d_1|, nn1) or the
    expansion cap, and the CPU's beam search (width 1) with the same stop returns the same walk; the
    stop is real (fewer expansions than without it)."""
    from knngraph.beam.cpu import search_beam

    n, d = 300, 8
    x = _small(rng, np.uint8, n, d)
    q = _small(rng, np.uint8, 4, d)
    g = _graph(x, "sqeuclidean", 8)
    entries = np.array([0, 7, 11, 250], np.int32)
    k, queue, kb, nn1 = 4, 24, 10, 6.0
    slack = (kb, tau, nn1, max_exp)
    _, (gk, gi, gn, ge) = _run(g.indices, x, q, "sqeuclidean", entries, k, queue, width=width, slack=slack)
    _, (_, _, _, ge_plain) = _run(g.indices, x, q, "sqeuclidean", entries, k, queue, width=width)
    if width == 1:
        ck, ci, cn, ce = search_beam(g.indices, x, q, np.zeros(1, np.float32), DIST_L2SQ, entries, k, queue,
                                     slack=slack)
    for j in range(q.shape[0]):
        rd, ri, rn, rexp = reference_walk(g.indices, x, q[j], DIST_L2SQ, entries, k, queue, width=width,
                                          slack=slack)
        np.testing.assert_array_equal(gi[j], ri)
        np.testing.assert_array_equal(gk[j], rd.astype(np.float32))
        assert gn[j] == rn and ge[j] == rexp and rexp <= max_exp
        if width == 1:
            np.testing.assert_array_equal(ci[j], ri)
            np.testing.assert_array_equal(ck[j], rd.astype(np.float32))
            assert cn[j] == rn and ce[j] == rexp
    assert (ge < ge_plain).all()


def test_automatic_search_width_by_batch_size():
    """Warps per query for 0 (auto) on 132 SMs: 8 for a few queries, 4 for 1000 (measured faster than 2
    at equal recall on an H100), 1 once the batch fills 32 warps per SM, but at least 2 / 4 for queues of
    128 / 512; a requested width is kept."""
    from knngraph.beam.cuda import search_width

    assert [search_width(nq, 132) for nq in (1, 100, 300, 1000, 2000, 3000, 10_000)] == [8, 8, 8, 4, 2, 1, 1]
    assert search_width(10_000, 132, requested=3) == 3
    # long queues: at least 2 warps per query from 128, 4 from 512, whatever the batch; never narrower
    assert [search_width(10_000, 132, queue_size=q) for q in (64, 127, 128, 511, 512, 1024)] == [1, 1, 2, 2, 4, 4]
    assert search_width(100, 132, queue_size=512) == 8 and search_width(10_000, 132, 1, queue_size=512) == 1


def test_automatic_width_fits_the_blocks_shared_memory():
    """An automatic search width is narrowed (halving) until the block-per-query kernel, whose warps each
    keep a copy of the query, fits a block's shared memory: 1536-d float32 queries take fewer than 8
    warps, 128-d ones 8; what is chosen fits (beam_config accepts it) and twice it would not."""
    from knngraph.beam.cuda import beam_config, fitting_width

    assert fitting_width(8, 128, 128, bk.MODE_F32X4) == 8
    for dim, queue in ((1536, 128), (3072, 64), (128, 1000)):
        w = fitting_width(8, queue, dim, bk.MODE_F32X4)
        assert 1 <= w < 8
        beam_config(queue, dim, bk.MODE_F32X4, DIST_L2SQ, width=w)  # fits: no error
        with pytest.raises(ValueError, match="shared memory"):
            beam_config(queue, dim, bk.MODE_F32X4, DIST_L2SQ, width=2 * w)


def test_word_modes_need_aligned_addresses():
    # 16-byte loads (four floats), 8-byte words (two floats, four halves) and 4-byte words (two halves,
    # four 8-bit values) are read only from addresses aligned to them; an offset view falls back to
    # narrower loads or element loads
    assert beam_mode(np.float32, np.float32, 8, 256, 4) == bk.MODE_F32X4
    assert beam_mode(np.float32, np.float32, 8, 264, 4) == bk.MODE_F32X2  # 8- but not 16-byte aligned
    assert beam_mode(np.float32, np.float32, 6, 264, 4) == bk.MODE_F32X2
    assert beam_mode(np.float32, np.float16, 8, 260, 0) == bk.MODE_GENERIC
    assert beam_mode(np.float16, np.float16, 8, 4, 0) == bk.MODE_GENERIC
    assert beam_mode(np.float16, np.float32, 6, 4, 0) == bk.MODE_HALF2
    assert beam_mode(np.float16, np.float32, 6, 2, 0) == bk.MODE_GENERIC
    assert beam_mode(np.uint8, np.uint8, 8, 4, 8) == bk.MODE_DP4A_U8
    assert beam_mode(np.uint8, np.uint8, 8, 0, 2) == bk.MODE_GENERIC  # the queries are read as words too
    assert beam_mode(np.int8, np.int8, 8, 1, 0) == bk.MODE_GENERIC


def test_word_modes_are_kept_per_dtypes_and_dimension_and_the_alignment_tested_per_call():
    # beam_mode keeps the word mode of (vectors' dtype, queries' dtype, dim % 4); the addresses' alignment is
    # tested at every call, so a misaligned view asked first does not decide for an aligned one, nor the reverse
    for _ in range(2):
        assert beam_mode(np.float32, np.float32, 12, 8, 0) == bk.MODE_F32X2
        assert beam_mode(np.float32, np.float32, 12, 16, 0) == bk.MODE_F32X4
        assert beam_mode(np.dtype(np.float32), np.dtype(np.float32), 20, 16, 0) == bk.MODE_F32X4
        assert beam_mode(np.float32, np.float32, 13, 16, 0) == bk.MODE_GENERIC
        assert beam_mode(np.uint8, np.float32, 12, 16, 0) == bk.MODE_GENERIC  # 8-bit vectors, float queries
        assert beam_mode(np.uint8, np.uint8, 12, 16, 4) == bk.MODE_DP4A_U8
        assert beam_mode(np.uint8, np.uint8, 12, 16, 2) == bk.MODE_GENERIC
        assert beam_mode(np.uint8, np.uint8, 10, 16, 4) == bk.MODE_GENERIC
        assert beam_mode(np.int8, np.int8, 16, 32, 0) == bk.MODE_DP4A_I8
        assert beam_mode(np.float16, np.float16, 16, 8, 0) == bk.MODE_HALF4
        assert beam_mode(np.dtype(">f4"), np.float32, 16, 16, 0) == bk.MODE_GENERIC  # not native float32


def test_the_gpu_path_reads_the_environment_once_until_told_to_read_it_again(monkeypatch):
    from knngraph.beam import cuda as gpu

    monkeypatch.setenv("KNNGRAPH_RAW_LAUNCH", "0")
    monkeypatch.setenv("KNNGRAPH_BEAM_MAX_REGISTERS", "96")
    gpu.reread_environment()
    try:
        assert gpu.launch_environment() == (False, "96")
        assert gpu.beam_max_registers(bk.MODE_F32X4) == gpu.beam_max_registers(bk.MODE_GENERIC) == 96
        monkeypatch.setenv("KNNGRAPH_RAW_LAUNCH", "1")
        monkeypatch.delenv("KNNGRAPH_BEAM_MAX_REGISTERS")
        assert gpu.launch_environment() == (False, "96")  # kept
        gpu.reread_environment()
        assert gpu.launch_environment() == (True, None)
        assert gpu.beam_max_registers(bk.MODE_F32X4) == 80 and gpu.beam_max_registers(bk.MODE_GENERIC) == 64
        monkeypatch.setenv("KNNGRAPH_BEAM_MAX_REGISTERS", "0")
        gpu.reread_environment()
        assert gpu.beam_max_registers(bk.MODE_F32X4) == 0  # 0: uncapped
        monkeypatch.setenv("KNNGRAPH_BEAM_MAX_REGISTERS", "many")
        gpu.reread_environment()
        with pytest.raises(ValueError):
            gpu.beam_max_registers(bk.MODE_F32X4)
    finally:
        monkeypatch.undo()
        gpu.reread_environment()
