"""The build of one GGNN hierarchy (section 5, Algorithm 3), driving the kernels of :mod:`.cpu` (or of
:mod:`.cuda`, which has the same functions).

    init: bottom layer = n points in random order, g ** (L - 1) segments
    for lt = 0 .. L - 1:
        if lt > 0: select layer lt from layer lt - 1 (weighted reservoir sampling, weights nn1)
        for lm = lt .. 0: merge(lt, lm); sym(lm)          (merge(l, l): brute force in the segments)
    r times: for lm = L - 2 .. 0: merge(L - 1, lm); sym(lm)   (refinement, section 5.3, Algorithm 6)

After each merge of the bottom layer the nearest-neighbour distances are measured (stats()); the build
uses their mean in the slack (Eq. 4), the search their maximum d+_nn1 (Eq. 3); both are kept as
internal distances (squared L2), like the slack (see :mod:`.cpu`).
"""

from __future__ import annotations

import time

import numpy as np

from ..primitives.cpu_inputs import writable_view
from ..primitives.distances import DIST_IP
from ._hierarchy import bottom_segment, plan, select_layer
from ._layout import SYM_CANDIDATES

__all__ = ["build_hierarchy", "build_device_bytes", "kept_scratch_bytes", "plain", "BUILD_MAX_POPS", "SYM_WAVES",
           "BUILD_QUEUE", "BUILD_VISITED"]

#: cap on the vertices one merge query expands per layer
BUILD_MAX_POPS = 100
#: sizes of the build caches (priority queue, visited ring): on sift 20k, 32 / 64 with 64 pops gave the
#: recall of 64 / 128 with 200 pops (recall@10 0.984 at tau 0.5) for 2/3 of the CPU time
BUILD_QUEUE = 32
BUILD_VISITED = 64
#: inverse links are placed in this many waves of rows: a wave's path searches see the links placed by
#: the waves before it (the paper's GPU code places them with atomics as it goes, section 5.2; waves
#: with placement in row order make CPU and GPU builds place the same links)
SYM_WAVES = 8
_SYM_QUEUE = 32
_SYM_VISITED = 64


def plain(d, kind, xp=np):
    """Plain distances from internal ones (the weights of the top-layer selection): sqrt for squared L2
    and cosine, |d| for inner product."""
    if kind == DIST_IP:
        return xp.abs(d)
    return xp.sqrt(xp.maximum(d, 0))


def _finite_stats(v):
    f = v[np.isfinite(v)]
    if f.size == 0:
        return 0.0, 0.0
    return float(f.mean()), float(f.max())


def _host(a):
    """A host copy of a (small) device array; NumPy arrays as they are."""
    return a if isinstance(a, np.ndarray) else a.get()


def build_hierarchy(impl, base, inv, kind, params, *, verbose=False, timings=None):
    """The GGNN hierarchy of ``base`` (``inv`` inverse norms for cosine). ``impl`` is :mod:`.cpu` or a
    namespace with the same functions whose attribute ``xp`` is its array module: the state of the build
    (rows, distances, inverse links, translations, the vectors) lives in ``xp`` arrays from start to end
    (on the device for the GPU: no upload per step; the host reads one column of distances per
    bottom-layer merge and per selection, for the statistics and the selection weights).
    Returns a dict: ``graph`` / ``dist`` (bottom graph, dataset ids, internal distances, rows in NN |
    inverse | further NN layout; ``xp`` arrays), ``top`` (dataset ids of the top layer), ``nn1_mean``,
    ``nn1_max``, ``inverse`` ([n, k_sym] inverse links, dataset ids, -1 padded), ``plan`` and the raw
    layer arrays (``rows_graph``, ``trans``, ``sel``; these and ``top`` / ``inverse`` on the host).
    ``timings`` gets seconds per phase (the device synchronised at each phase's end)."""
    xp = getattr(impl, "xp", np)
    sync = getattr(impl, "sync", None) or (lambda: None)
    n = base.shape[0]
    k = params.graph_degree
    ksym = params.k_sym
    knn = k - ksym
    pl = plan(n, params.segment_size, params.layers)
    L, g, s, off = pl.layers, pl.g, pl.s, pl.offsets
    rows = pl.rows
    t = {"select": 0.0, "merge": 0.0, "sym": 0.0, "refine": 0.0}
    perm_h = np.random.default_rng(params.seed).permutation(n).astype(np.int32)
    base = writable_view(xp.asarray(base))  # a read-only host input: one compiled CPU kernel for both
    inv = xp.asarray(inv)
    perm = xp.asarray(perm_h)
    trans = xp.empty(rows, np.int32)
    trans[:n] = perm
    sel = xp.full(rows, -1, np.int32)
    graph = xp.full((rows, k), -1, np.int32)
    gdist = xp.full((rows, k), np.inf, np.float32)
    sym = xp.full((rows, max(ksym, 1)), -1, np.int32)
    sym_d = xp.full((rows, max(ksym, 1)), np.inf, np.float32)
    cnt = xp.zeros(rows, np.int32)
    off_h = np.asarray(off, np.int64)
    # the temporaries of every step, allocated once: merge results (the largest layer is the bottom one)
    # and the link requests of the largest wave
    out_i = xp.empty((n, k), np.int32)
    out_d = xp.empty((n, k), np.float32)
    C = SYM_CANDIDATES
    wave_rows = _wave_rows(pl)
    req_i = xp.empty((wave_rows, max(knn, 1), C), np.int32)
    req_d = xp.empty((wave_rows, max(knn, 1), C), np.float32)
    req_n = xp.zeros((wave_rows, max(knn, 1)), np.int32)
    state = {"nn1_mean": 0.0, "nn1_max": 0.0}
    tau_b = np.float32(params.tau_build)
    starts = {lm: xp.asarray((np.arange(pl.n_seg0 + 1, dtype=np.int64) * n // pl.n_seg0).astype(np.int32)
                             if lm == 0 else np.arange(0, pl.sizes[lm] + 1, s, dtype=np.int32)) for lm in range(L)}

    def seg_of(layer):
        local = np.arange(pl.sizes[layer], dtype=np.int64)
        return bottom_segment(local, n, pl.n_seg0) if layer == 0 else local // s

    def merge(lt, lm, phase):
        t0 = time.perf_counter()
        lo, hi = off[lm], off[lm + 1]
        oi, od = out_i[:hi - lo], out_d[:hi - lo]
        if lt == lm:
            impl.brute_segments(base, inv, kind, trans, lo, starts[lm], k, oi, od)
        else:
            top_seg = xp.asarray((seg_of(lm) // g ** (lt - lm)).astype(np.int32))
            impl.merge_queries(base, inv, kind, graph, trans, sel, off_h, top_seg, lt, lm, s, k,
                               BUILD_QUEUE, BUILD_VISITED, tau_b, np.float32(state["nn1_mean"]), BUILD_MAX_POPS,
                               oi, od)
        graph[lo:hi] = oi
        gdist[lo:hi] = od
        if lm == 0:  # stats(): nearest-neighbour distances of the bottom layer (on the host: the same
            # float32 mean on every device)
            state["nn1_mean"], state["nn1_max"] = _finite_stats(np.abs(_host(od[:, 0])))
        sync()
        t[phase] += time.perf_counter() - t0

    def symmetric(lm, phase):
        if ksym == 0:
            return
        t0 = time.perf_counter()
        lo, hi = off[lm], off[lm + 1]
        cnt[lo:hi] = 0
        m = hi - lo
        for w in range(_waves(m)):
            z0, z1 = _wave(m, w), _wave(m, w + 1)
            ri, rd, rn = req_i[:z1 - z0], req_d[:z1 - z0], req_n[:z1 - z0]
            impl.sym_requests(base, inv, kind, graph, trans, lo, z0, z1, knn, sym, cnt, _SYM_QUEUE, _SYM_VISITED,
                              tau_b, np.float32(state["nn1_mean"]), ri, rd, rn)
            impl.sym_place(graph, lo, z0, z1, knn, ksym, sym, sym_d, cnt, ri, rd, rn)
        impl.sym_write(graph, gdist, lo, m, knn, sym, sym_d, cnt)
        sync()
        t[phase] += time.perf_counter() - t0

    for lt in range(L):
        if lt > 0:
            t0 = time.perf_counter()
            picked = select_layer(pl, lt, plain(_host(gdist[off[lt - 1]:off[lt], 0]), kind), params.seed, xp)
            rows_below = off[lt - 1] + picked
            sel[off[lt]:off[lt + 1]] = rows_below
            trans[off[lt]:off[lt + 1]] = trans[rows_below]
            sync()
            t["select"] += time.perf_counter() - t0
        for lm in range(lt, -1, -1):
            merge(lt, lm, "merge")
            symmetric(lm, "sym")
    for _ in range(params.refinements):
        for lm in range(L - 2, -1, -1):
            merge(L - 1, lm, "refine")
            symmetric(lm, "refine")
    if timings is not None:
        timings.update(t)
    # the bottom layer in dataset ids
    bottom = graph[:n]
    out = xp.full((n, k), -1, np.int32)
    dist = xp.full((n, k), np.inf, np.float32)
    out[perm] = xp.where(bottom >= 0, trans[xp.maximum(bottom, 0)], -1)
    dist[perm] = gdist[:n]
    inverse = xp.full((n, max(ksym, 1)), -1, np.int32)
    if ksym:
        links = sym[:n, :ksym]
        valid = xp.arange(ksym)[None, :] < cnt[:n, None]
        inverse[perm] = xp.where(valid & (links >= 0), trans[xp.maximum(links, 0)], -1)
    nn1 = _host(xp.where(out >= 0, dist, np.float32(np.inf)).min(axis=1))
    nn1_mean, nn1_max = _finite_stats(np.abs(nn1))
    trans_h = _host(trans)
    return {"graph": out, "dist": dist, "top": trans_h[off[L - 1]:off[L]].copy(), "nn1_mean": nn1_mean,
            "nn1_max": nn1_max, "inverse": _host(inverse[:, :ksym]), "plan": pl, "rows_graph": _host(graph),
            "trans": trans_h, "sel": _host(sel)}


def _wave_rows(pl) -> int:
    """Rows of the largest wave of the symmetric linking over every layer of plan ``pl``."""
    return max(_wave(pl.sizes[lm], w + 1) - _wave(pl.sizes[lm], w) for lm in range(pl.layers)
               for w in range(_waves(pl.sizes[lm])))


def kept_scratch_bytes(n: int, params) -> int:
    """Device bytes of the scratch :mod:`.cuda` keeps from the first use until the build releases it
    (``release_build_data``): a merge's segment ids, and the link placement's requests with candidates,
    their static words and fates (three) for the largest wave and its lists (three, k_sym per row of
    every layer)."""
    pl = plan(int(n), params.segment_size, params.layers)
    return int(4 * n + _wave_rows(pl) * max(params.graph_degree - params.k_sym, 1) * (4 + 4 + 3 * 4)
               + 3 * 4 * pl.rows * max(params.k_sym, 1))


def build_device_bytes(n: int, dim: int, params, *, cosine: bool = False) -> int:
    """Device bytes :func:`build_hierarchy` allocates at its peak for n vectors of ``dim`` dimensions (the
    build reads float32), counted from its arrays: the state that lives through the build (vectors, rows
    and distances of every layer, inverse links, translations, the merge results, the link requests of
    the largest wave), the scratch kept between steps (:func:`kept_scratch_bytes`), and the larger of a
    step's temporaries (a merge's segment search) and those of the last
    step (the bottom layer in dataset ids). An upper bound: GPU tests compare it with the CuPy pool's
    peak."""
    pl = plan(int(n), params.segment_size, params.layers)
    rows = pl.rows
    k = params.graph_degree
    ksym = params.k_sym
    ks1, kn1 = max(ksym, 1), max(k - ksym, 1)
    wave = _wave_rows(pl)
    state = (4 * n * dim + (4 * n if cosine else 4) + 4 * n  # vectors, inverse norms, permutation
             + rows * (4 + 4 + 4)  # trans, sel, cnt
             + rows * k * 8 + rows * ks1 * 8  # rows and distances, inverse links and their distances
             + n * k * 8  # merge results
             + wave * kn1 * (SYM_CANDIDATES * 8 + 4))  # link requests
    steps = rows * 24  # arange, int64 searchsorted and its - 1, top segments
    final = n * k * 8 + n * ks1 * 4 + n * k * 12  # bottom layer in dataset ids, inverse links, temporaries
    return int(state + kept_scratch_bytes(n, params) + max(steps, final))


def _waves(m):
    """Waves of the symmetric linking of a layer of m rows."""
    return max(1, min(SYM_WAVES, m // 256))


def _wave(m, w):
    """First row of wave w (of :func:`_waves`) of a layer of m rows."""
    return w * m // _waves(m)
