"""GGNN's CUDA search kernel in the numba CUDA simulator on tiny inputs, against the CPU path id for id.

Inputs are small integers, so every distance is exact in float32 on both paths and the searches must
agree exactly (ids, distances, distances computed, vertices expanded)."""

import numpy as np
import pytest
from numba import cuda, float32, int32  # the simulator's (a kernel's global ``cuda`` is swapped for the fake one)

import knngraph
from knngraph.ggnn import _layout as ggnn_layout
from knngraph.ggnn import cpu as ggnn_cpu
from knngraph.ggnn import cuda as ggnn_cuda
from knngraph.primitives.distances import distance_kind, inverse_norms
from knngraph.primitives.cpu_inputs import cpu_vectors

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
    placed on the device in the CPU's row order, the same links); every link is a new edge p -> z into a row with a
    free slot, with its distance."""
    from knngraph.ggnn._build import _SYM_QUEUE, _SYM_VISITED

    x, h = _hierarchy(rng)
    g = h["rows_graph"][:70].copy()
    trans = h["trans"]
    knn, ksym = 3, 3
    C = ggnn_layout.SYM_CANDIDATES
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
            impl.sym_place(g, 0, z0, z1, knn, ksym, sym, sym_d, cnt, req_i, req_d, req_n, **kw)
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


def _random_requests(rng, rows, z0, z1, knn, C, pool):
    """Link requests of rows z0 .. z1 whose candidates come from a few popular rows ``pool`` (distinct per
    request, never z itself): most targets get more requests than they have free slots. Beyond
    ``req_n`` the entries hold rows too, as the build's reused arrays hold an earlier wave's."""
    nz = z1 - z0
    req_i = np.full((nz, knn, C), -7, np.int32)
    req_d = np.full((nz, knn, C), -7, np.float32)
    req_n = rng.integers(0, C + 1, (nz, knn)).astype(np.int32)
    req_n[rng.random((nz, knn)) < 0.2] = 0
    for zz in range(nz):
        others = pool[pool != z0 + zz]
        for i in range(knn):
            req_i[zz, i] = rng.choice(others, C, replace=False)
            req_d[zz, i] = np.sort(rng.integers(1, 50, C)).astype(np.float32)
    return req_i, req_d, req_n


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_device_sym_place_and_write_match_cpu(seed):
    """The device placement of the inverse links (fixed-point rounds over the requests, links written by
    rank) gives the host's sequential placement slot for slot, over several waves, with targets asked
    far more often than they have room, requests dropped because the target already links to z (an NN
    slot, an earlier wave's link or an earlier request of the same z in this wave), and the rows
    rewritten by sym_write as on the host."""
    rng = np.random.default_rng(seed)
    rows, k, knn, ksym, C = 60, 7, 3, 3, 4
    graph = rng.integers(0, rows, (rows, k)).astype(np.int32)
    graph[rng.random((rows, k)) < 0.1] = -1
    gdist = rng.integers(0, 40, (rows, k)).astype(np.float32)
    sym = np.full((rows, ksym), -1, np.int32)
    sym_d = np.full((rows, ksym), np.inf, np.float32)
    cnt = np.zeros(rows, np.int32)
    # an earlier layer's links in some rows
    for p in rng.choice(rows, 10, replace=False):
        c = int(rng.integers(1, ksym + 1))
        sym[p, :c] = rng.choice(rows, c, replace=False)
        sym_d[p, :c] = rng.integers(1, 40, c)
        cnt[p] = c
    pool = rng.choice(rows, 9, replace=False).astype(np.int32)
    for z in range(rows):  # some popular targets link to z already (NN slot)
        if rng.random() < 0.15:
            graph[pool[z % pool.size], z % knn] = z
    cpu_state = [a.copy() for a in (graph, gdist, sym, sym_d, cnt)]
    dev_state = [a.copy() for a in (graph, gdist, sym, sym_d, cnt)]
    total = 0
    for z0, z1 in ((0, 25), (25, 26), (26, 43), (43, 60)):  # later waves reuse the first one's scratch
        req = _random_requests(rng, rows, z0, z1, knn, C, pool)
        g, _, s, sd, c = cpu_state
        placed = ggnn_cpu.sym_place(g, 0, z0, z1, knn, ksym, s, sd, c, *req)
        g, _, s, sd, c = dev_state
        rounds = ggnn_cuda.sym_place(g, 0, z0, z1, knn, ksym, s, sd, c, *req, xp=np)
        assert rounds >= 1
        total += placed
        for a, b in zip(dev_state, cpu_state):
            np.testing.assert_array_equal(a, b)
    assert total > 10 and (cpu_state[4] == ksym).sum() >= 5  # full targets: requests passed over
    g, gd, s, sd, c = cpu_state
    ggnn_cpu.sym_write(g, gd, 0, rows, knn, s, sd, c)
    g, gd, s, sd, c = dev_state
    ggnn_cuda.sym_write(g, gd, 0, rows, knn, s, sd, c, xp=np)
    for a, b in zip(dev_state, cpu_state):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # simulator: about 35 s on 2 cores
def test_simulated_build_is_the_cpu_build(rng):
    """The whole build with the device functions (every array resident, the links placed on the device)
    returns the CPU build's hierarchy entry for entry on integer data."""
    from knngraph._device import Device
    from knngraph.ggnn import IndexParams
    from knngraph.ggnn._build import build_hierarchy
    from knngraph.ggnn._index import build_ops

    x = _small(rng, np.uint8, 40, 5).astype(np.float32)
    params = IndexParams(graph_degree=6, segment_size=8, layers=3, refinements=0)
    inv = np.zeros(1, np.float32)
    cpu = build_hierarchy(ggnn_cpu, x, inv, 0, params)
    timings = {}
    dev = build_hierarchy(build_ops(Device("cuda"), xp=np), x, inv, 0, params, timings=timings)
    assert cpu["plan"].layers == 3 and set(timings) == {"select", "merge", "sym", "refine"}
    for key in ("graph", "dist", "top", "inverse", "rows_graph", "trans", "sel"):
        np.testing.assert_array_equal(dev[key], cpu[key], err_msg=key)
    assert (cpu["inverse"] >= 0).any()
    assert dev["nn1_mean"] == cpu["nn1_mean"] and dev["nn1_max"] == cpu["nn1_max"]


# --------------------------------------------------------------------------------------------------
# the warp-parallel cache operations against the CPU's serial ones


def _push_chunks_kernel():
    from knngraph.ggnn import _kernels as kn

    @cuda.jit
    def kernel(bd, bi, pd, pi, sizes, ds, vs, ms, tau, nn1, out):
        cand = cuda.shared.array(32, int32)
        candd = cuda.shared.array(32, float32)
        st = cuda.shared.array(8, int32)
        hk = cuda.shared.array(1, int32)
        hc = cuda.shared.array(1, int32)
        lane = cuda.threadIdx.x
        kb, P, path = sizes[1], sizes[3], sizes[4] == 1
        if lane == 0:
            st[0] = sizes[0]
            st[1] = sizes[2]
        cuda.syncwarp(0xFFFFFFFF)
        for c in range(ds.shape[0]):
            m = ms[c]
            myd = float32(0.0)
            if lane < m:
                myd = ds[c, lane]
                cand[lane] = vs[c, lane]
            cuda.syncwarp(0xFFFFFFFF)
            kn._push_kept(myd, m, lane, tau, nn1, bd, bi, kb, path, pd, pi, P, st, cand, candd, hk, hc, 0)
        if lane == 0:
            out[0] = st[0]
            out[1] = st[1]

    return kernel


@pytest.mark.parametrize("kb,P,nb0,pn0,tau", [
    (5, 4, 0, 0, 0.5),       # empty lists filling up and overflowing within a chunk
    (10, 7, 10, 7, 0.5),     # full lists: truncation of best, the prioq's worst pushed out
    (40, 70, 33, 64, 0.3),   # more than one slice of 32 in both lists (entries moving up and down)
    (12, 9, 6, 9, 0.0),
    (10, 64, 10, 40, 2.0),   # the search's default sizes, a loose criterion
])
@pytest.mark.parametrize("shift", [0, -3])
@pytest.mark.parametrize("path", [False, True])
def test_warp_push_matches_the_cpu_entry_for_entry(kb, P, nb0, pn0, tau, shift, path, rng):
    """Chunks of up to 32 proposals (distance ties, new ids) pushed by the warp at once leave the same
    best / prioq arrays and counts as the CPU's push_sorted (sorted, pushed one by one while they meet
    the criterion at their turn, into best_insert / push_prioq), the warp's first cut at d_k + tau^2 nn1
    included; also with negative distances (``shift``: inner product, and a cosine 1 - cos a rounding
    below 0), where the bound can rise as d_1 falls; and with the criterion of sym's path searches
    (``path``: d_1 + tau^2 nn1)."""
    ids = rng.permutation(8000).astype(np.int32)
    bd = np.sort(rng.integers(0, 30, kb) + shift).astype(np.float32)
    bi = ids[:kb].copy()
    pd = np.sort(rng.integers(0, 30, P) + shift)[::-1].astype(np.float32)
    pi = ids[kb:kb + P].copy()
    o = np.lexsort((bi, bd))
    bd, bi = bd[o], bi[o]
    o = np.lexsort((pi, pd))[::-1]
    pd, pi = pd[o], pi[o]
    n_chunks = 48
    ds = np.zeros((n_chunks, 32), np.float32)
    vs = ids[kb + P:kb + P + n_chunks * 32].reshape(n_chunks, 32).copy()
    ms = rng.integers(0, 33, n_chunks).astype(np.int32)
    want = [bd.copy(), bi.copy(), pd.copy(), pi.copy()]
    st = np.array([nb0, pn0, 0, 0], np.int64)
    nn1 = np.float32(9.0)
    pushed = 0
    for c in range(n_chunks):
        # chunks spread over the lists, chunks nearer than them, and a few proposals right at the best list's
        # end (there the criterion after each push decides: the prefix can stop inside the chunk)
        if c % 3 == 0:
            ds[c] = rng.integers(0, 40, 32) + shift
        elif c % 3 == 1:
            ds[c] = rng.integers(0, 8, 32) + shift
        else:
            end = want[0][st[0] - 1] if st[0] > 0 else 20 + shift
            ds[c] = end + rng.integers(-3, 4, 32)
            ms[c] = rng.integers(1, 7)
        before = [a.copy() for a in want]
        ggnn_cpu.push_sorted(vs[c].copy(), ds[c].copy(), ms[c], want[0], want[1], kb, path, want[2], want[3], P,
                             st, np.float32(tau), nn1)
        pushed += any((a != b).any() for a, b in zip(want, before))
    assert pushed >= 3  # chunks that changed the lists
    got = [bd.copy(), bi.copy(), pd.copy(), pi.copy()]
    out = np.zeros(2, np.int32)
    _push_chunks_kernel()[1, 32](*got, np.array([nb0, kb, pn0, P, int(path)], np.int32), ds, vs, ms, np.float32(tau),
                                 nn1, out)
    assert tuple(out) == (st[0], st[1])
    for g, w, n in zip(got, want, (st[0], st[0], st[1], st[1])):
        np.testing.assert_array_equal(g[:n], w[:n])


def test_warp_push_criterion_after_each_push():
    """Within one chunk the criterion moves with every push: best [1, 5, 9] (kb 3), tau 1, proposals 8, 7,
    10: sorted, 7 is pushed, then the bound is 7 + min(1, nn1) = 8, so 8 is pushed too and 10 is not (with
    the bound of the lists before the chunk, 9 + 1, 10 would be; with best's second entry in place of the
    new end, 5 + 1, 8 would not). The CPU's push_sorted gives the same lists."""
    bd = np.array([1, 5, 9], np.float32)
    bi = np.array([100, 101, 102], np.int32)
    pd = np.array([9, 5, 1, 0], np.float32)
    pi = np.array([102, 101, 100, 0], np.int32)
    ds = np.zeros((2, 32), np.float32)
    ds[0, :3] = [8, 7, 10]
    ds[1, :1] = [8.5]  # above the bound 7 + 1 of the next chunk: not pushed
    vs = np.arange(64, dtype=np.int32).reshape(2, 32) + 200
    out = np.zeros(2, np.int32)
    _push_chunks_kernel()[1, 32](bd, bi, pd, pi, np.array([3, 3, 3, 4, 0], np.int32), ds, vs,
                                 np.array([3, 1], np.int32), np.float32(1.0), np.float32(9.0), out)
    assert tuple(out) == (3, 4)
    cpu = [np.array([1, 5, 9], np.float32), np.array([100, 101, 102], np.int32), np.array([9, 5, 1, 0], np.float32),
           np.array([102, 101, 100, 0], np.int32)]
    st = np.array([3, 3, 0, 0], np.int64)
    for c, m in enumerate((3, 1)):
        ggnn_cpu.push_sorted(vs[c].copy(), ds[c].copy(), m, cpu[0], cpu[1], 3, False, cpu[2], cpu[3], 4, st,
                             np.float32(1.0), np.float32(9.0))
    assert tuple(st[:2]) == (3, 4)
    for g, w in zip((bd, bi, pd, pi), cpu):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(bd, [1, 5, 7])
    np.testing.assert_array_equal(bi, [100, 101, 201])
    np.testing.assert_array_equal(pd, [8, 7, 5, 1])  # 9 pushed out of the queue, full after 7
    np.testing.assert_array_equal(pi, [200, 201, 101, 100])


def test_warp_push_bound_rising_with_a_negative_nearest():
    """The bound can rise inside a chunk when d_1 is negative (inner product; a cosine 1 - cos rounding
    below 0): best [0, 2, 2], tau 1, nn1 9, bound 2 + min(0, 9) = 2; proposals -1 and 2.5: -1 is pushed,
    the bound becomes 2 + min(1, 9) = 3 and 2.5 is pushed into prioq too, on the CPU and on the warp (a
    first cut at the chunk's starting bound 2 would drop it)."""
    lists = [np.array([0, 2, 2], np.float32), np.array([100, 101, 102], np.int32),
             np.array([2, 2, 0, 0, 0], np.float32), np.array([102, 101, 100, 0, 0], np.int32)]
    ds = np.zeros((1, 32), np.float32)
    ds[0, :2] = [2.5, -1]
    vs = (np.arange(32, dtype=np.int32) + 200).reshape(1, 32)
    cpu = [a.copy() for a in lists]
    st = np.array([3, 3, 0, 0], np.int64)
    ggnn_cpu.push_sorted(vs[0].copy(), ds[0].copy(), 2, cpu[0], cpu[1], 3, False, cpu[2], cpu[3], 5, st, np.float32(1.0),
                         np.float32(9.0))
    assert tuple(st[:2]) == (3, 5) and 200 in cpu[3][:5]
    got = [a.copy() for a in lists]
    out = np.zeros(2, np.int32)
    _push_chunks_kernel()[1, 32](*got, np.array([3, 3, 3, 5, 0], np.int32), ds, vs, np.array([2], np.int32),
                                 np.float32(1.0), np.float32(9.0), out)
    assert tuple(out) == (3, 5)
    for g, w in zip(got, cpu):
        np.testing.assert_array_equal(g, w)


def _tie_heavy(rng, n, d, hi=3):
    return rng.integers(0, hi, (n, d)).astype(np.uint8)


@pytest.mark.parametrize("n,k,queue,cache,max_it,deg", [
    (90, 4, 3, 17, 40, 40),    # kb 10, prioq 3, ring 4: every part overflows; rows of 40 (two chunks)
    pytest.param(400, 4, 3, 17, 50, 40, marks=pytest.mark.slow),  # more distinct ids than the hash table of 128
    # takes before a rebuild (simulator: about 16 s on 2 cores)
    (90, 40, 40, 100, 12, 40),  # best and prioq longer than a warp; ring 20
    (90, 10, 64, 256, 200, 7),  # the library's default layout
    (90, 10, 40, 1100, 30, 7),  # a cache too large for a hash table: scanned
])
def test_search_kernel_small_caches_ties_and_repeats_match_cpu(n, k, queue, cache, max_it, deg, rng):
    """Searches on data full of distance ties, over graph rows that repeat ids (within a chunk of 32
    and across chunks) and hold -1, with caches that overflow (the hash table of the cache's ids then
    loses ids to evictions and ring overwrites and is rebuilt as its slots fill): ids, distances,
    distances computed and vertices expanded equal the CPU's."""
    from knngraph.ggnn._kernels import hash_bits

    assert (hash_bits(*ggnn_layout.cache_layout(k, queue, cache)) > 0) == (cache <= 1024)
    x = _tie_heavy(rng, n, 5)
    q = rng.integers(0, 3, (3, 5)).astype(np.float32)
    ids = rng.integers(0, n, (n, deg)).astype(np.int32)
    if n > 90:
        x = _tie_heavy(rng, n, 8, hi=6)  # fewer ties: more pushes
        q = rng.integers(0, 6, (3, 8)).astype(np.float32)
    ids[:, 1] = ids[:, 0]                  # a repeat inside the first chunk
    ids[::3, deg // 2] = -1
    if deg > 32:
        ids[:, 35] = ids[:, 2]             # a repeat across chunks
    kind = distance_kind("sqeuclidean")
    inv = np.zeros(1, np.float32)
    entries = np.array([5, 7, 5, 60, 7, 61], np.int32)
    args = (kind, entries, k, 3.0 if n > 90 else 0.8, 2.0, max_it, queue, cache)
    cd, ci, cn, ce = ggnn_cpu.search(ids, x, q, inv, inv, *args)
    gd, gi, gn, ge = ggnn_cuda.search(ids, x, q, inv, inv, *args, xp=np)
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_array_equal(gd, cd)
    np.testing.assert_array_equal(gn, cn)
    np.testing.assert_array_equal(ge, ce)
    assert ce.min() > 1


def test_merge_kernel_ties_long_best_and_small_caches_match_cpu(rng):
    """merge(2, 0) on a tie-heavy hierarchy (layer translation leaves equal-distance runs in best whose
    ids are no longer in order), with a best list of 40 (two slices) and with tiny queue / ring."""
    from knngraph.ggnn import IndexParams
    from knngraph.ggnn._build import build_hierarchy
    from knngraph.ggnn._hierarchy import bottom_segment

    x = _tie_heavy(rng, 70, 4).astype(np.float32)
    params = IndexParams(graph_degree=6, segment_size=8, layers=3, refinements=0)
    h = build_hierarchy(ggnn_cpu, x, np.zeros(1, np.float32), 0, params)
    p = h["plan"]
    inv = np.zeros(1, np.float32)
    few = np.asarray(p.offsets, np.int64).copy()
    few[1] = 6
    top = (bottom_segment(np.arange(6), 70, p.n_seg0) // p.g ** 2).astype(np.int32)
    for k, P, V in ((40, 40, 8), (6, 3, 4)):
        args = (x, inv, 0, h["rows_graph"], h["trans"], h["sel"], few, top, 2, 0, p.s, k, P, V, np.float32(0.9),
                np.float32(h["nn1_mean"]), 10)
        ci, cd = np.empty((6, k), np.int32), np.empty((6, k), np.float32)
        gi, gd = np.empty((6, k), np.int32), np.empty((6, k), np.float32)
        ggnn_cpu.merge_queries(*args, ci, cd)
        ggnn_cuda.merge_queries(*args, gi, gd, xp=np)
        np.testing.assert_array_equal(gi, ci)
        np.testing.assert_array_equal(gd, cd)


def test_sym_kernel_ties_and_tiny_caches_match_cpu(rng):
    """The symmetric linking's path searches on tie-heavy data with a prioq of 3 and a ring of 4 (the
    ring wraps within the 20 pops): the same candidates as the CPU, row for row."""
    from knngraph.ggnn import IndexParams
    from knngraph.ggnn._build import build_hierarchy

    x = _tie_heavy(rng, 70, 4).astype(np.float32)
    params = IndexParams(graph_degree=6, segment_size=8, layers=3, refinements=0)
    h = build_hierarchy(ggnn_cpu, x, np.zeros(1, np.float32), 0, params)
    g = h["rows_graph"][:70].copy()
    knn, ksym, C = 3, 3, ggnn_layout.SYM_CANDIDATES
    out = {}
    for name, impl, kw in (("gpu", ggnn_cuda, {"xp": np}), ("cpu", ggnn_cpu, {})):
        sym = np.full((70, ksym), -1, np.int32)
        cnt = np.zeros(70, np.int32)
        sym[::4, 0] = (np.arange(0, 70, 4) + 9) % 70  # some links placed already (proposals past knn)
        cnt[::4] = 1
        req_i, req_d = np.full((30, knn, C), -7, np.int32), np.full((30, knn, C), -7, np.float32)
        req_n = np.full((30, knn), -7, np.int32)
        impl.sym_requests(x, np.zeros(1, np.float32), 0, g, h["trans"], 0, 0, 30, knn, sym, cnt, 3, 4,
                          np.float32(0.9), np.float32(h["nn1_mean"]), req_i, req_d, req_n, **kw)
        out[name] = (req_i, req_d, req_n)
    (gi, gd, gn), (ci, cd, cn) = out["gpu"], out["cpu"]
    np.testing.assert_array_equal(gn, cn)
    assert cn.sum() > 0
    for r, i in zip(*np.nonzero(cn)):
        np.testing.assert_array_equal(gi[r, i, :cn[r, i]], ci[r, i, :cn[r, i]])
        np.testing.assert_array_equal(gd[r, i, :cn[r, i]], cd[r, i, :cn[r, i]])
