"""The GRNND index: :class:`Index`, :func:`build`, :func:`extend`, :func:`save`, :func:`load`, and the
driver of the rounds (:func:`run_rounds`), written once over the CPU and GPU implementations."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from .._device import (Device, as_numpy, default_memory_limit, device_context, format_bytes, implementation,
                       is_device_array, parse_memory, resolve_device)
from .._device import on_input_device
from .._progress import progress
from .._typing import Array, DeviceLike, FileTarget, MemoryLimit
from .._validate import check_finite, check_new_vectors, check_vectors
from ..graph import Graph
from ..graphops import connect_graph
from ..graphops.prune import occlusion_factor
from ..index import Index as IndexBase
from ..index import load_graph_index, runtime_docs, save_graph_index
from ..primitives.distances import distance_kind, inverse_norms, report_distances
from ._layout import MAX_N
from ._params import AUTO_INITIAL_DEGREE, IndexParams

__all__ = ["Index", "build", "extend", "save", "load", "run_rounds"]


@dataclasses.dataclass(eq=False)
class Index(IndexBase):
    """A GRNND search graph with the vectors it was built on.

    Attributes
    ----------
    dataset : array
        The vectors (as given: NumPy or CuPy).
    params : IndexParams
    graph : Graph
        The search graph: rows of up to ``graph_degree`` neighbours, nearest first, -1 / inf padded.
    """

    dataset: Array
    params: IndexParams
    graph: Graph

    algorithm = "grnnd"
    _module = "knngraph.grnnd"
    _file_kind = "grnnd-index"
    _params_class = IndexParams


def _initial_degree(params: IndexParams, n: int) -> int:
    s = params.initial_degree
    if s == 0:
        return min(params.graph_degree, AUTO_INITIAL_DEGREE, n - 1)
    if s >= n:
        raise ValueError(f"initial_degree={s} must be smaller than the number of vectors n={n} (S random "
                         "neighbours other than the vertex itself)")
    return s


def _check_sizes(params: IndexParams, n: int) -> None:
    if n < 2:
        raise ValueError(f"dataset must have at least 2 vectors to build a graph, got {n}")
    if n > MAX_N:
        raise ValueError(f"dataset has {n} vectors; GRNND builds take at most {MAX_N}")
    _initial_degree(params, n)
    if params.graph_degree >= n:
        raise ValueError(f"graph_degree={params.graph_degree} must be smaller than the number of vectors n={n} "
                         "(a vertex is never its own neighbour)")


def bytes_per_vertex(r: int, rho: float, alpha: float = 1.0) -> int:
    """Working bytes per vertex of a build: the pool (code + distance), the round's and the reverse
    step's proposal arrays (target + code + distance) and the grouped copies (a round's proposals have
    2R columns when ``alpha`` > 1)."""
    rnd = 2 * r if alpha > 1.0 else r
    cols = r + math.ceil(rho * r)
    return 8 * r + 4 + 12 * rnd + 12 * cols + 16 * max(cols, rnd)


def run_rounds(impl, xp, x, inv, kind: int, params: IndexParams, n: int, *, rows=None, s: int = 0, lo: int = 0,
               stats: dict | None = None, verbose: bool = False):
    """The GRNND iteration (Alg. 3) on prepared vectors ``x`` (``impl``: the cpu or cuda module, ``xp``: the
    array module of the arrays). Initial pools: ``rows`` (int32 [n, w], -1 padded; the candidate lists of
    existing rows, e.g. a graph being extended) and ``s`` random neighbours for rows lo..n-1. Returns the
    final pools (codes, distances, counts), each pool sorted by (distance, code)."""
    p = params
    r = p.graph_degree
    factor = occlusion_factor(kind, p.prune_alpha)
    rc = math.ceil(p.reverse_ratio * r)
    pool_c = xp.full((n, r), -1, xp.int32)
    pool_d = xp.full((n, r), np.inf, xp.float32)
    cnt = xp.zeros(n, xp.int32)
    # initialisation (Alg. 3 l.3-5): S random neighbours per vertex, plus the given rows
    w = max(s, rows.shape[1] if rows is not None else 0, 1)
    init = xp.full((n, w), -1, xp.int32)
    if rows is not None:
        init[:, :rows.shape[1]] = rows
    if s and lo < n:
        rnd_rows = xp.empty((n - lo, s), xp.int32)
        impl.random_rows(n, s, p.seed, lo, rnd_rows)
        init[lo:, :s] = rnd_rows  # rows lo.. have no given candidates
    pt = xp.empty((n, w), xp.int32)
    pc = xp.empty((n, w), xp.int32)
    pd = xp.empty((n, w), xp.float32)
    impl.row_proposals(x, inv, kind, init, 0, pt, pc, pd)
    impl.merge(impl.group(pt, pc, pd, n), pool_c, pool_d, cnt)
    del init, pt, pc, pd
    # a round's proposals: one per pool slot, plus (relaxed test) one offer per slot of an entry kept
    width = r if factor == 1.0 else 2 * r
    pt = xp.empty((n, width), xp.int32)
    pc = xp.empty((n, width), xp.int32)
    pd = xp.empty((n, width), xp.float32)
    redirects = []
    reverse_edges = []
    with progress(p.outer_iterations * p.inner_iterations, "grnnd", disable=not verbose) as bar:
        for t1 in range(p.outer_iterations):
            for t2 in range(p.inner_iterations):
                rnd = t1 * p.inner_iterations + t2
                redirects.append(impl.propose(x, inv, kind, p.seed, rnd, pool_c, pool_d, cnt, pt, pc, pd,
                                              factor))
                impl.merge(impl.group(pt, pc, pd, n), pool_c, pool_d, cnt)
                bar.update(1)
            if t1 != p.outer_iterations - 1 and rc > 0:
                # reverse-edge sampling after every outer iteration but the last (section 3.6)
                rt = xp.empty((n, r + rc), xp.int32)
                rcode = xp.empty((n, r + rc), xp.int32)
                rd = xp.empty((n, r + rc), xp.float32)
                reverse_edges.append(impl.reverse(p.reverse_ratio, pool_c, pool_d, cnt, rt, rcode, rd))
                impl.merge(impl.group(rt, rcode, rd, n), pool_c, pool_d, cnt)
                del rt, rcode, rd
    if stats is not None:  # counts may be device scalars until here
        stats.update(redirects=[int(v) for v in redirects], reverse_edges=[int(v) for v in reverse_edges])
    return pool_c, pool_d, cnt


def _prepare(x, metric: str, dev: Device):
    """(vectors the kernels read, inverse norms, xp)."""
    if dev.is_cuda:
        import cupy as cp

        xv = cp.ascontiguousarray(cp.asarray(x))
        inv = inverse_norms(xv, cp) if metric == "cosine" else cp.zeros(1, cp.float32)
        return xv, inv, cp
    # float32 for every dtype: one compiled build of each CPU kernel (8-bit values are exact in float32,
    # and the rounds read each vector many times from cache, where the width costs little)
    xv = np.ascontiguousarray(as_numpy(x), dtype=np.float32)
    if not xv.flags.writeable:  # a read-only memory map: the kernels are compiled for writeable arrays
        xv = xv.copy()
    inv = inverse_norms(xv) if metric == "cosine" else np.zeros(1, np.float32)
    return xv, inv, np


def _finish(impl_graphops, xp, xv, inv, kind, metric, pools, r, alpha=1.0):
    """The search graph of final pools: ids decoded, then each row RNG-pruned in ascending order
    (:func:`knngraph.graphops.optimize_graph`'s rule with the build's ``prune_alpha``, no fill), so that the
    rows keep the (relaxed) RNG property although the last round's redirected entries were not tested yet."""
    pool_c, _, _ = pools
    ids = xp.where(pool_c >= 0, pool_c >> 1, -1).astype(xp.int32)
    empty = xp.empty((ids.shape[0], 0), xp.int32)
    out, out_d = impl_graphops.prune(xv, inv, kind, occlusion_factor(kind, alpha), ids, empty, empty, r, False)
    dist = report_distances(out_d, metric, xp)
    dist = xp.where(out < 0, xp.float32(np.inf), dist)
    return out, dist


def _check_memory(n: int, p: IndexParams, dev: Device, memory_limit) -> None:
    budget = parse_memory(memory_limit) or default_memory_limit(dev)
    need = n * bytes_per_vertex(p.graph_degree, p.reverse_ratio, p.prune_alpha)
    if need > budget:
        raise MemoryError(f"grnnd needs about {format_bytes(need)} of working memory for {n} vectors at "
                          f"graph_degree={p.graph_degree}; memory_limit allows {format_bytes(budget)}")


def _build_graph(x, p: IndexParams, dev: Device, memory_limit, verbose, *, rows=None, s=None, lo=0):
    n = x.shape[0]
    _check_sizes(p, n)
    s = _initial_degree(p, n) if s is None else s
    _check_memory(n, p, dev, memory_limit)
    kind = distance_kind(p.metric)
    t0 = time.perf_counter()
    impl = implementation("knngraph.grnnd", dev)
    with device_context(dev):
        xv, inv, xp = _prepare(x, p.metric, dev)
        if rows is not None:
            rows = xp.asarray(rows)
        stats: dict = {}
        pools = run_rounds(impl, xp, xv, inv, kind, p, n, rows=rows, s=s, lo=lo, stats=stats, verbose=verbose)
        ids, dist = _finish(implementation("knngraph.graphops", dev), xp, xv, inv, kind, p.metric, pools,
                            p.graph_degree, p.prune_alpha)
        if dev.is_cuda:
            xp.cuda.get_current_stream().synchronize()
            if not is_device_array(x):
                ids, dist = ids.get(), dist.get()
        degree = float((ids >= 0).sum()) / n
    info = {"method": "grnnd", "graph_degree": p.graph_degree, "initial_degree": s,
            "outer_iterations": p.outer_iterations, "inner_iterations": p.inner_iterations,
            "reverse_ratio": p.reverse_ratio, "prune_alpha": p.prune_alpha,
            "device": "cuda" if dev.is_cuda else "cpu",
            "mean_degree": degree, "redirects": [int(v) for v in stats["redirects"]],
            "reverse_edges": [int(v) for v in stats["reverse_edges"]]}
    # the RNG of the points is connected, but the rounds approximate it: link what the medoid cannot reach,
    # by edges that keep the rows' RNG rule
    graph = connect_graph(Graph(ids, dist, p.metric, info), x, device=dev, rng_rule=True)
    graph.info["build_seconds"] = time.perf_counter() - t0
    return graph


def _validated(dataset, name: str, dev: Device):
    x = check_vectors(dataset, name, on_gpu=dev.is_cuda and is_device_array(dataset))
    check_finite(x, name)
    return x


@runtime_docs
@on_input_device('dataset')
def build(params: IndexParams, dataset: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
          verbose: bool = True) -> Index:
    """Build a GRNND search graph of ``dataset`` (see the package docs for the algorithm).

    Parameters
    ----------
    params : IndexParams
    dataset : array of shape (n, d)
        float32, float16, uint8 or int8 vectors (NumPy, CuPy, PyTorch, DLPack); 2 <= n < 2**30.
    {device}
    {memory_limit}
    {verbose}

    Returns
    -------
    Index
        ``index.graph``: int32 ids / float32 distances of shape (n, graph_degree), nearest first, -1 / inf
        after each row's last neighbour. Search it with a graph searcher, e.g.
        ``knngraph.song.from_graph(index.graph, index.dataset)``.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import grnnd
    >>> x = np.random.default_rng(0).random((500, 8), dtype=np.float32)
    >>> index = grnnd.build(grnnd.IndexParams(graph_degree=16), x, device="cpu", verbose=False)
    >>> index.graph.indices.shape, bool((index.graph.indices[:, 0] >= 0).all())
    ((500, 16), True)
    """
    if not isinstance(params, IndexParams):
        raise TypeError(f"params must be a knngraph.grnnd.IndexParams, got {type(params).__name__}")
    dev = resolve_device(device, dataset)
    x = _validated(dataset, "dataset", dev)
    graph = _build_graph(x, params, dev, memory_limit, verbose)
    return Index(x, params, graph)


@runtime_docs
@on_input_device('index', 'new_vectors')
def extend(index: Index, new_vectors: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
           verbose: bool = True) -> Index:
    """A new index with ``new_vectors`` added (ids ``len(index) + i``); ``index`` is unchanged.

    The rounds run again over all vertices, starting from the index's graph (old rows, as NEW entries so
    that they are tested against what arrives) and S random neighbours for each new vertex, with the
    build's rounds (at least two outer iterations, so that a reverse step lets old vertices learn of the
    new ones that point at them). Costs about a build of all n + m vertices; on 1,000 + 200 sift-photos
    vectors 97-98% of the new vectors find themselves by search against 99.5% after a rebuild
    (``tests/grnnd/test_grnnd.py``).

    Parameters
    ----------
    index : Index
    new_vectors : array of shape (m, d)
        Same dtype as the index's vectors.
    {device}
    {memory_limit}
    {verbose}
    """
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.grnnd.Index, got {type(index).__name__}")
    dev, new = check_new_vectors(index.dataset, new_vectors, device)
    n_old = index.shape[0]
    if dev.is_cuda and is_device_array(index.dataset):
        import cupy as cp

        data = cp.concatenate([cp.asarray(index.dataset), cp.asarray(new)])
    else:
        data = np.concatenate([as_numpy(index.dataset), as_numpy(new)])
    n = data.shape[0]
    p = index.params
    rows = np.full((n, p.graph_degree), -1, np.int32)
    rows[:n_old] = as_numpy(index.graph.indices)
    # one outer iteration with a reverse step: extend's params
    q = dataclasses.replace(p, outer_iterations=max(2, p.outer_iterations), seed=p.seed + 1)
    _check_sizes(q, n)
    s = min(_initial_degree(p, n), p.graph_degree)
    graph = _build_graph(data, q, dev, memory_limit, verbose, rows=rows, s=s, lo=n_old)
    graph.info["added"] = int(new.shape[0])
    return Index(data, p, graph)


def save(path: FileTarget, index: Index) -> None:
    """Write the index (graph, vectors, params) to ``path`` (versioned, atomic, checksummed)."""
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.grnnd.Index, got {type(index).__name__}")
    save_graph_index(path, index)


def load(path: FileTarget, *, metric: str | None = None) -> Index:
    """Read an index written by :func:`save` (host arrays); ``metric``, when given, must match."""
    return load_graph_index(path, Index, metric=metric)
