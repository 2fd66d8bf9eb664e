"""The GGNN index: :class:`Index`, :func:`build`, :func:`from_graph`, :func:`search`, :func:`extend`,
:func:`delete`, :func:`compact`, :func:`save`, :func:`load`.

An index holds the vectors, the bottom layer of each shard's hierarchy as one :class:`~knngraph.Graph`
(global ids; shards never link to each other), the entry points of each shard (its top layer) and each
shard's d+_nn1 (the largest nearest-neighbour distance, Eq. 3), which the stopping rule needs.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import overload

import numpy as np
from numpy.typing import ArrayLike

from .. import beam, multidevice, registry
from .._device import (Device, array_kind, as_numpy, default_memory_limit, device_context, implementation,
                       is_device_array, is_on, parse_memory, resolve_device, return_as)
from .._deletion import compact_rows, delete_rows
from .._device import on_input_device
from .._typing import Array, DeviceLike, Devices, FileTarget, MemoryLimit
from .._validate import check_finite, check_k, check_same_dim, check_vectors
from ..graph import Graph
from ..graphops import connect_graph, default_entry_points, medoid, warn_unreachable
from ..index import Index as IndexBase
from ..index import (KNNResult, assembling, check_out, cpu_threads, fill_out, load_index, runtime_docs,
                     save_index)
from ..primitives.distances import distance_kind, inverse_norms, report_distances
from ..primitives.filters import RowIds, allowed_rows, results_as_user_ids
from ._build import build_device_bytes, build_hierarchy, kept_scratch_bytes
from ._params import MAX_SORTED_SIZE, MIN_VISITED, IndexParams, SearchParams
from ._shards import search_shards, shard_bounds

__all__ = ["Index", "build", "from_graph", "search", "extend", "delete", "compact", "save", "load",
           "shard_build_bytes", "shards_for_memory"]


@dataclasses.dataclass(eq=False)
class Index(IndexBase):
    """A GGNN index: vectors, the bottom-layer graph (global ids), per shard its rows
    (``shard_bounds``), entry points (``entry_points[entry_bounds[s]:entry_bounds[s + 1]]``, global ids)
    and d+_nn1 (``nn1``). ``hierarchy`` holds the whole build of an unsharded index (layer sizes, the
    rows of every layer, the inverse links, build timings); it is not saved. ``row_ids``
    (:class:`~knngraph.primitives.filters.RowIds`), once vectors were deleted (:func:`delete`): the
    deleted rows and, after a compaction, each row's id."""

    dataset: Array
    params: IndexParams
    graph: Graph
    entry_points: np.ndarray
    entry_bounds: np.ndarray
    shard_bounds: np.ndarray
    nn1: np.ndarray
    hierarchy: dict | None = None
    row_ids: RowIds | None = None
    _cache: dict = dataclasses.field(default_factory=dict, repr=False)

    algorithm = "ggnn"
    _module = "knngraph.ggnn"
    _file_kind = "ggnn-index"
    _params_class = IndexParams

    @property
    def n_shards(self) -> int:
        return int(self.shard_bounds.shape[0] - 1)

    def release(self) -> None:
        """Drop the cached device copies."""
        self._cache.clear()


def _check_params(params, cls, what):
    if not isinstance(params, cls):
        raise TypeError(f"params must be a knngraph.ggnn.{cls.__name__}, got {type(params).__name__}")
    return params


def _internal(graph: Graph, metric: str) -> np.ndarray:
    d = np.asarray(as_numpy(graph.distances), np.float32)
    return d * d if metric == "euclidean" else d


def _nn1_max(ids, dist_internal, kind) -> float:
    d = np.where(ids >= 0, dist_internal, np.inf).min(axis=1) if ids.shape[1] else np.full(ids.shape[0], np.inf)
    d = np.abs(d[np.isfinite(d)])
    return float(d.max()) if d.size else 0.0


def _sort_rows_by_key(ids, dist, xp):
    """(ids, internal distances) of every row sorted by (distance, id), -1 / inf last, as host arrays,
    sorting with ``xp`` (CuPy: on the device; the CPU build passes NumPy): one 64-bit key per entry, the
    distance's bits mapped to an unsigned order-preserving integer above the id (ties by id, as the
    host's lexsort; -0.0 taken as 0.0)."""
    key_d = xp.where(ids >= 0, dist, np.float32(np.inf)).astype(np.float32) + np.float32(0.0)  # -0 -> +0
    u = key_d.view(np.uint32).astype(np.uint64)
    u = xp.where(u >= np.uint64(1 << 31), np.uint64(0xFFFFFFFF) - u, u | np.uint64(1 << 31))
    key_i = xp.where(ids >= 0, ids, np.iinfo(np.int32).max).astype(np.uint64)
    key = xp.sort((u << np.uint64(32)) | key_i, axis=1)
    lo = (key & np.uint64(0xFFFFFFFF)).astype(np.int64)
    hi = key >> np.uint64(32)
    bits = xp.where(hi >= np.uint64(1 << 31), hi ^ np.uint64(1 << 31), np.uint64(0xFFFFFFFF) - hi)
    dist = as_numpy(bits.astype(np.uint32).view(np.float32))
    ids = as_numpy(xp.where(lo == np.iinfo(np.int32).max, -1, lo).astype(np.int32))
    return ids, dist


def _graph_of_sorted(ids, dist, metric) -> Graph:
    """The Graph of host rows already sorted (internal distances in, reported distances out)."""
    rep = report_distances(dist, metric, np)
    rep[ids < 0] = np.inf
    return Graph(np.ascontiguousarray(ids, np.int32), np.ascontiguousarray(rep, np.float32), metric)


#: device bytes per graph entry of the row sort (:func:`_sort_rows_by_key`: its 64-bit keys, CuPy's sort of
#: them, the unpacked ids and distances), and the most a build spends on it at once (rows sorted in chunks)
SORT_BYTES_PER_ENTRY = 96
SORT_CHUNK_BYTES = 256 << 20


def _sort_chunk_rows(k: int) -> int:
    return max(1, SORT_CHUNK_BYTES // (max(k, 1) * SORT_BYTES_PER_ENTRY))


def shard_build_bytes(n_rows: int, dim: int, params: IndexParams) -> int:
    """Device bytes of the GPU build of one shard of ``n_rows`` vectors: the larger of its hierarchy's
    peak (:func:`knngraph.ggnn._build.build_device_bytes`) and what the sort of its rows holds afterwards
    (the bottom rows and distances, the scratch kept until the build ends, one chunk of the sort), plus
    10% and 32 MiB for the rounding and fragmentation of CuPy's memory pool."""
    k = params.graph_degree
    after = (n_rows * k * 8 + kept_scratch_bytes(n_rows, params)
             + min(n_rows, _sort_chunk_rows(k)) * k * SORT_BYTES_PER_ENTRY)
    peak = max(build_device_bytes(n_rows, dim, params, cosine=params.metric == "cosine"), after)
    return int(1.1 * peak) + (32 << 20)


def shards_for_memory(n: int, dim: int, params: IndexParams, budget: int, limit: str | None = None) -> int:
    """The fewest shards, at least ``params.n_shards``, whose largest one builds within ``budget`` bytes of
    device memory (the shards are built one after another, the graph assembled in host memory; the
    estimate steps down where a layer gets more linking waves, so a count above the fewest may come back
    in rare cases, never one that does not fit). ValueError naming ``memory_limit`` (``limit``: how the
    budget was given) when even shards of two vectors do not fit."""
    def fits(m):
        return shard_build_bytes(-(-n // m), dim, params) <= budget

    m = params.n_shards
    if fits(m):
        return m
    most = max(n // 2, m)
    if not fits(most):
        given = limit or f"memory_limit={budget} bytes"
        raise ValueError(f"{given} is too small for a GGNN build of {dim}-dimensional vectors: "
                         f"even shards of {-(-n // most)} vectors need {shard_build_bytes(-(-n // most), dim, params)} "
                         f"bytes of device memory")
    lo, hi = m, m  # fits(hi) after the doubling; the search keeps that invariant
    while not fits(hi):
        lo, hi = hi, min(most, 2 * hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------------------------------------------
# build


def build_ops(dev: Device, xp=None):
    """The build kernels for ``dev``: all CPU ones (NumPy arrays), or on a GPU those of :mod:`.cuda` on
    device arrays (CuPy; ``xp=np``: NumPy arrays in the simulator), attribute ``xp`` the array module."""
    import types

    if not dev.is_cuda and xp is None:
        return implementation(__package__, Device("cpu"))
    from . import cuda

    if xp is None:
        import cupy as xp
    kw = {"xp": xp}
    names = ("brute_segments", "merge_queries", "sym_requests", "sym_place", "sym_write")
    ops = {name: (lambda f: lambda *a: f(*a, **kw))(getattr(cuda, name)) for name in names}
    return types.SimpleNamespace(**ops, xp=xp, sync=lambda: cuda.sync(xp), release=cuda.release_build_data)


@overload
def build(params: IndexParams, dataset: Array, *, device: DeviceLike = ..., memory_limit: MemoryLimit = ...,
          verbose: bool = ..., devices: None = ..., layout: str = ...) -> Index: ...


@overload
def build(params: IndexParams, dataset: Array, *, device: DeviceLike = ..., memory_limit: MemoryLimit = ...,
          verbose: bool = ..., devices: Devices, layout: str = ...) -> multidevice.MultiDeviceIndex: ...


@runtime_docs
@on_input_device('dataset')
def build(params: IndexParams, dataset: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
          verbose: bool = True, devices: Devices | None = None,
          layout: str = "auto") -> Index | multidevice.MultiDeviceIndex:
    """Build a GGNN index: per shard (``params.n_shards``) the hierarchy of section 5, whose bottom layer
    is the search graph and whose top layer gives the entry points.

    Parameters
    ----------
    params : IndexParams
    dataset : array of shape (n, d)
        float32, float16, uint8 or int8 vectors (NumPy, CuPy, PyTorch, DLPack).
    {device}
        On a GPU the whole build runs on the device (merges, the symmetric linking's path searches, the
        placing of the inverse links in the CPU's row order, the final row sort), so a GPU build gives
        the CPU build's graph (exactly on integer data, where distances are exact).
    {memory_limit}
        On a GPU the shards are built one after another and the graph is assembled in host memory, so
        the device holds one shard's build at a time (:func:`shard_build_bytes`); when a shard of
        ``params.n_shards`` would not fit, the build uses the fewest shards that do, with a
        ``UserWarning`` (``index.params.n_shards``, ``graph.info['n_shards']``;
        ``graph.info['n_shards_requested']`` is what was asked): shards are separate graphs, so for one
        k-NN graph of data larger than the device prefer NN-Descent's out-of-core build. The CPU build
        does not cut its work.
    {verbose}
    {devices}
        Each device's part is a GGNN index of its own (with ``params.n_shards`` shards of its own).
    {layout}

    Returns
    -------
    Index
        ``index.hierarchy['timings']`` holds the seconds of each build phase (select, merge, sym,
        refine) of an unsharded index.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import ggnn
    >>> x = np.random.default_rng(0).random((500, 8), dtype=np.float32)
    >>> index = ggnn.build(ggnn.IndexParams(graph_degree=12), x, device="cpu")
    >>> d, i = ggnn.search(index, x[:2], k=3, device="cpu")
    >>> i[:, 0].tolist()
    [0, 1]
    """
    t0 = time.perf_counter()
    params = _check_params(params, IndexParams, "build")
    if devices is not None:
        return multidevice.build(__package__, params, dataset, devices, layout=layout, memory_limit=memory_limit,
                                 verbose=verbose)
    dev = resolve_device(device, dataset)
    # vectors on the build's GPU stay there (no round trip through host memory); others go through the host,
    # a shard at a time
    x = check_vectors(dataset, "dataset", on_gpu=is_on(dataset, dev))
    check_finite(x, "dataset")
    n = x.shape[0]
    if n < 2:
        raise ValueError("a GGNN index needs at least 2 vectors")
    if params.n_shards > n // 2:
        raise ValueError(f"n_shards={params.n_shards} is too many for {n} vectors: every shard needs at least 2 "
                         f"vectors (n_shards <= {n // 2})")
    kind = distance_kind(params.metric)
    requested_shards = params.n_shards
    if dev.is_cuda:  # work cut to fit: as many shards as one shard's build needs to fit the device memory
        budget = parse_memory(memory_limit) if memory_limit is not None else default_memory_limit(dev)
        shards = shards_for_memory(n, x.shape[1], params, budget, None if memory_limit is not None else
                                   f"the free device memory ({budget} bytes; memory_limit=None)")
        if shards != params.n_shards:
            warnings.warn(f"GGNN build: {params.n_shards} shard(s) of {x.shape[1]}-dimensional vectors do not fit "
                          f"{budget} bytes of device memory (memory_limit); building {shards} shards instead "
                          "(separate graphs, each searched: graph rows link only within their shard)",
                          UserWarning, stacklevel=2)
            params = dataclasses.replace(params, n_shards=shards)
    bounds = shard_bounds(n, params.n_shards)
    # the build reads float32 (one compiled specialisation of each build kernel instead of four), made shard
    # by shard (on the device: within the memory one shard's build is budgeted)
    xv = np if isinstance(x, np.ndarray) else __import__("cupy")
    impl = build_ops(dev)
    k = params.graph_degree
    chunk = _sort_chunk_rows(k)
    # the graph is assembled in host memory, shard by shard and chunk by chunk of rows sorted on the
    # device: what the device holds at once is one shard's build (see shard_build_bytes)
    ids = np.empty((n, k), np.int32)
    dist = np.empty((n, k), np.float32)
    entries, e_bounds, nn1 = [], [0], []
    hierarchy = None
    try:
        with device_context(dev):  # the build's arrays and kernels on the index's GPU
            xp = getattr(impl, "xp", np)
            for s in range(params.n_shards):
                a, b = int(bounds[s]), int(bounds[s + 1])
                part = xv.ascontiguousarray(x[a:b]).astype(xv.float32, copy=False)
                inv_p = inverse_norms(part, xv) if params.metric == "cosine" else xv.zeros(1, xv.float32)
                timings = {}
                h = build_hierarchy(impl, part, inv_p, kind, params, verbose=verbose, timings=timings)
                for r0 in range(0, b - a, chunk):
                    r1 = min(b - a, r0 + chunk)
                    gi = h["graph"][r0:r1]
                    ids[a + r0:a + r1], dist[a + r0:a + r1] = _sort_rows_by_key(
                        xp.where(gi >= 0, gi + a, -1), h["dist"][r0:r1], xp)
                entries.append(h["top"] + a)
                e_bounds.append(e_bounds[-1] + h["top"].shape[0])
                nn1.append(h["nn1_max"])
                if params.n_shards == 1:
                    h["timings"] = timings
                    h["graph"], h["dist"] = as_numpy(h["graph"]), as_numpy(h["dist"])
                    hierarchy = h
                del h, gi  # the next shard's build reuses their device memory
    finally:
        if dev.is_cuda:
            impl.release()  # the link placement's scratch, also when the build fails
    graph = _graph_of_sorted(ids, dist, params.metric)
    linked = _connect_shards(graph, x, bounds, entries, dev)
    e_bounds = np.concatenate([[0], np.cumsum([e.shape[0] for e in entries])])
    mean_degree = float((graph.indices >= 0).sum(1).mean())
    graph.info.update(connect=linked, method="ggnn", graph_degree=params.graph_degree, n_shards=params.n_shards,
                      n_shards_requested=requested_shards,
                      refinements=params.refinements, device="cuda" if dev.is_cuda else "cpu",
                      mean_degree=mean_degree, build_seconds=time.perf_counter() - t0)
    return Index(x, params, graph, np.concatenate(entries).astype(np.int32), np.asarray(e_bounds, np.int64),
                 bounds, np.asarray(nn1, np.float32), hierarchy)


def _connect_shards(graph: Graph, x, bounds, entries, dev) -> list:
    """Link each shard's bottom layer (in place) so that every vertex is reachable from the shard's medoid
    (:func:`knngraph.graphops.connect_graph`), where other searchers of the graph start, and add the medoid
    to the shard's entry points (its top layer, where GGNN's search starts), so that GGNN's search reaches
    every vertex too: the k nearest neighbours and symmetric links of section 5 join nothing across
    separated clusters. A shard whose graph had several components adds a vertex of
    each to its entry points (``entries[s]``, changed in place), so that a search starts in every
    cluster. Returns what the linking reported, summed over the shards (``links`` with global ids, and
    ``shards``: each shard's own report)."""
    ids, dist = graph.indices, graph.distances
    reports = []
    total = {"components": 0, "unreached_before": 0, "unreached_after": 0, "links": [], "shards": reports}
    for s in range(len(bounds) - 1):
        a, b = int(bounds[s]), int(bounds[s + 1])
        local = Graph(np.where(ids[a:b] >= 0, ids[a:b] - a, -1).astype(np.int32), np.array(dist[a:b]), graph.metric)
        xs = x[a:b]
        centre = int(medoid(xs, graph.metric))
        linked = connect_graph(local, xs, entry_points=[centre], device=dev)
        report = linked.info.get("connect", {"unreached_before": 0})
        reports.append({key: v for key, v in report.items() if key not in ("entry_points", "links")})
        for key in ("components", "unreached_before", "unreached_after"):
            total[key] += int(report.get(key, 0))
        total["links"] += [[u + a, r + a] for u, r in report.get("links", [])]
        top = as_numpy(entries[s]).astype(np.int64)
        extra = np.asarray([centre] + list(report.get("entry_points", [])), np.int64) + a
        entries[s] = np.concatenate([top, extra[~np.isin(extra, top)]]).astype(np.int32)
        if linked is not local:
            ids[a:b] = np.where(linked.indices >= 0, linked.indices + a, -1)
            dist[a:b] = linked.distances
    return total


@runtime_docs
@on_input_device('dataset')
def from_graph(graph: Graph, dataset: Array, params: IndexParams | None = None, *,
               entry_points: ArrayLike | None = None, device: DeviceLike = "auto", verbose: bool = True) -> Index:
    """A GGNN index over any builder's graph (GGNN search on an NN-Descent, SONG-prepared or GRNND
    graph): one shard, entry points ``entry_points`` or the medoid and ``segment_size - 1`` random
    vertices, d+_nn1 from the graph's rows.

    Parameters
    ----------
    graph : Graph
        A graph over ``dataset`` (ids in [-1, n)); its metric is the index's.
    dataset : array of shape (n, d)
    params : IndexParams, optional
        Used for ``segment_size`` and ``seed``; its ``metric`` must be the graph's.
    entry_points : 1-D array of int, optional
    {device}
    {verbose}
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a knngraph.Graph, got {type(graph).__name__}")
    params = IndexParams(metric=graph.metric) if params is None else _check_params(params, IndexParams, "")
    if params.metric != graph.metric:
        raise ValueError(f"params.metric={params.metric!r} differs from the graph's metric {graph.metric!r}")
    x = check_vectors(dataset, "dataset", on_gpu=False)
    n = x.shape[0]
    if graph.n != n:
        raise ValueError(f"graph has {graph.n} rows but dataset has {n} vectors; they must match")
    g = graph.to_host()
    g.validate_ids(n)  # against the vectors, not the graph's own bound (a block of a larger graph)
    if entry_points is None:
        e = default_entry_points(as_numpy(x), params.metric, n_points=min(n, params.segment_size), seed=params.seed,
                                 graph=graph)
    else:
        e = as_numpy(entry_points)
        if e.ndim != 1 or e.shape[0] == 0:
            raise ValueError(f"entry_points must be a non-empty 1-D array of vertex ids, got shape {e.shape}")
        if e.dtype.kind not in "iu":
            raise TypeError(f"entry_points must hold integer ids, got dtype {e.dtype}")
        if int(e.min()) < 0 or int(e.max()) >= n:
            raise ValueError(f"entry_points must be ids in [0, {n}), got values from {int(e.min())} to {int(e.max())}")
    e = np.ascontiguousarray(e, np.int32)
    warn_unreachable(g.indices, e, "ggnn.from_graph")
    kind = distance_kind(params.metric)
    nn1 = _nn1_max(np.asarray(g.indices), _internal(g, params.metric), kind)
    return Index(x, params, g, e, np.array([0, e.shape[0]], np.int64), np.array([0, n], np.int64),
                 np.array([nn1], np.float32))


# --------------------------------------------------------------------------------------------------
# search


def _check_k_cache(k, n, sp: SearchParams) -> int:
    k = check_k(k, n)
    if sp.cache == "sorted":
        if sp.queue > MAX_SORTED_SIZE:
            raise ValueError(f"queue_size={sp.queue} is too large for cache='sorted': its buffer holds at most "
                             f"{MAX_SORTED_SIZE} entries; lower queue_size or use cache='rings'")
        if max(k, 10) > sp.queue:
            raise ValueError(f"k={k} does not fit the search cache: cache='sorted' holds the best list (max(k, 10) = "
                             f"{max(k, 10)}) at the head of its buffer of queue_size={sp.queue} entries; raise "
                             f"SearchParams.queue_size to at least {max(k, 10)} (at most {MAX_SORTED_SIZE}) or lower k")
        return k
    need = max(k, 10) + sp.queue + MIN_VISITED
    if need > sp.cache_size:
        raise ValueError(f"k={k} does not fit the search cache: cache_size={sp.cache_size} must hold the best list "
                         f"(max(k, 10) = {max(k, 10)}), the queue (queue_size={sp.queue}) and a visited ring of "
                         f"at least {MIN_VISITED}; raise SearchParams.cache_size to {need} or lower k")
    return k


#: the parameters of a search called without any: made once (frozen, so one serves every call; building and
#: checking a SearchParams is several microseconds of a small search's host time)
_DEFAULT_SEARCH = SearchParams()


@runtime_docs
@on_input_device('index', 'queries', pass_device=True)
def search(index: Index | multidevice.MultiDeviceIndex, queries: Array, k: int, params: SearchParams | None = None,
           *, device: DeviceLike = "auto", verbose: bool = True, filter: Array | None = None,
           stats: dict | None = None, memory_limit: MemoryLimit = None, out: tuple[Array, Array] | None = None,
           n_threads: int | None = None, devices: Devices | None = None) -> KNNResult:
    """Approximate top-``k`` of each query by GGNN search (section 4.1): from the entry points (the top
    layer), on the bottom-layer graph, with the slack stopping rule; every shard is searched and the
    per-shard top-k merged.

    Parameters
    ----------
    index : Index
        From :func:`build` or :func:`from_graph`.
    queries : array of shape (n_queries, d)
    k : int
        Neighbours per query; max(k, 10) <= queue_size (``cache='sorted'``) or max(k, 10) + queue_size + 32 <=
        cache_size (``cache='rings'``).
    params : SearchParams, optional
        ``tau`` (the speed/recall knob), ``max_iterations``, ``queue_size``, ``cache`` (the cache's layout),
        ``cache_size``, ``search_width``, ``filtered_path``.
    {device}
    {verbose}
    {filter}
        Over the index's ids (those of a compacted index too, see :func:`delete`); deleted vectors are
        never returned either. ``cache='sorted'`` only (``'rings'`` refuses filters and indexes with
        deleted vectors): each shard's walk passes through vertices that are not allowed, with its list
        and the slack stop's d_k entry grown by the allowed share (:func:`knngraph.beam.search`), and
        returns the first k allowed entries; or the search is the exact one over the allowed vectors, as
        the cost model of :func:`knngraph.beam.filtered_path` (or ``params.filtered_path``) says.
    {stats}
        With a filter (or deleted vectors) also ``filtered_path`` ('graph' or 'exact') and
        ``allowed_fraction``.
    {memory_limit}
        On a GPU, shards that do not fit it together are uploaded, searched and dropped one at a time.
    {out}
    {n_threads}
    {devices_search}

    Returns
    -------
    KNNResult
        ``(distances, indices)``, float32 / int32 of shape (n_queries, k), nearest first, -1 / inf
        where fewer than k vertices were reached; in the framework of ``queries`` (``out`` itself when
        given).
    """
    if isinstance(index, multidevice.MultiDeviceIndex) or (devices is not None and isinstance(index, Index)):
        spread = index if isinstance(index, multidevice.MultiDeviceIndex) else multidevice.replicate(index, devices)
        return multidevice.search(spread, queries, k, params, device=device, verbose=verbose, filter=filter,
                                  stats=stats, memory_limit=memory_limit, out=out, n_threads=n_threads)
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.ggnn.Index (ggnn.build or ggnn.from_graph), got "
                        f"{type(index).__name__}")
    sp = _DEFAULT_SEARCH if params is None else _check_params(params, SearchParams, "search")
    allowed = allowed_rows(index.row_ids, index.shape[0], filter)
    if allowed is not None and sp.cache == "rings":
        raise ValueError("ggnn.search with cache='rings' does not support filter= (nor an index with deleted "
                         "vectors: they are filtered out); use SearchParams(cache='sorted'), the default")
    qkind = array_kind(queries)
    dev = resolve_device(device, index.dataset, queries)
    q = check_vectors(queries, "queries", on_gpu=dev.is_cuda and is_device_array(queries))
    check_same_dim(index.dataset, q, "the index's vectors")
    k = _check_k_cache(k, index.shape[0], sp)
    parse_memory(memory_limit)  # a bad limit is an error on the CPU too, where nothing is cut to it
    if out is not None:
        check_out(out, q.shape[0], k, dev)
    check_finite(q, "queries")
    t0 = time.perf_counter()
    path = None
    if allowed is not None:
        path, _ = beam.filtered_path(allowed.n_allowed, allowed.n, q.shape[0], q.shape[1], sp.queue,
                                     "cuda" if dev.is_cuda else "cpu", sp.filtered_path)
    with cpu_threads(n_threads):
        if path == "exact":
            exact_search = registry.get("exact").load()  # through the registry: algorithms never import each other
            exact = exact_search.Index(index.dataset, exact_search.IndexParams(metric=index.metric))
            d, i = exact_search.search(exact, q, k, device=dev, memory_limit=memory_limit, verbose=verbose,
                                       filter=allowed)
            nd = ne = 0.0
        else:
            d, i, nd, ne = search_shards(index, q, k, sp, dev, memory_limit=memory_limit, verbose=verbose,
                                         allowed=allowed, counts=stats is not None)
    i = results_as_user_ids(i, index.row_ids, index._cache)
    if stats is not None:
        stats.update(distances_per_query=float(nd), expansions_per_query=float(ne),
                     seconds=time.perf_counter() - t0)
        if path is not None:
            stats.update(filtered_path=path, allowed_fraction=allowed.fraction)
    if out is not None:
        return fill_out(out, d, i)
    return KNNResult(return_as(qkind, d), return_as(qkind, i))


# --------------------------------------------------------------------------------------------------
# extend, persistence


@runtime_docs
@on_input_device('index', 'new_vectors')
def extend(index: Index, new_vectors: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
           verbose: bool = True) -> Index:
    """A new index over the index's vectors and ``new_vectors`` (ids ``len(index) + i``), built anew with
    the index's params: GGNN's hierarchy is built bottom-up over fixed segments and has no insertion
    step in the paper. ``index`` is unchanged. Deleted vectors (:func:`delete`) are left out of the
    rebuild (a compaction for free): their ids stay deleted, the others keep theirs, and the new vectors
    take the next ids (after every id given so far).

    Parameters
    ----------
    index : Index
    new_vectors : array of shape (m, d)
        Same dtype as the index's vectors.
    {device}
        The build runs there (:func:`build`); an index that holds its vectors on the GPU keeps all of
        them there when extended on a GPU.
    {memory_limit}
    {verbose}
    """
    from .._validate import check_new_vectors

    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.ggnn.Index, got {type(index).__name__}")
    dev, new = check_new_vectors(index.dataset, new_vectors, device)
    old, rows = index.dataset, None
    if index.row_ids is not None:
        live, kept = index.row_ids.compacted()
        rows = kept.extended(new.shape[0])
        old = old[__import__("cupy").asarray(live) if is_device_array(old) else live]
    if is_device_array(index.dataset) and dev.is_cuda:  # device vectors stay on the device
        import cupy as cp

        with device_context(dev):
            data = cp.concatenate([cp.asarray(old), cp.asarray(new)])
    else:
        data = np.concatenate([as_numpy(old), as_numpy(new)])
    params = dataclasses.replace(index.params, n_shards=min(index.params.n_shards, max(1, data.shape[0] // 2)))
    out = build(params, data, device=dev, memory_limit=memory_limit, verbose=verbose)
    out.row_ids = rows
    return out


@runtime_docs
def delete(index: Index | multidevice.MultiDeviceIndex, ids: ArrayLike, *, compact_above: float = 0.5,
           device: DeviceLike = "auto", memory_limit: MemoryLimit = None, verbose: bool = True
           ) -> Index | multidevice.MultiDeviceIndex:
    """Delete the vectors with the ids ``ids``: searches never return them again.

    As :func:`knngraph.song.delete`: the vectors stay in the graph and still guide the walks, the index
    keeps a bitset of its deleted rows (:class:`~knngraph.primitives.filters.RowIds`) that every search
    (``cache='sorted'``; 'rings' refuses an index with deleted vectors) clears from its allowed ids, and
    past ``compact_above`` of the rows deleted the index is rebuilt over the live vectors with the same
    ids (:func:`compact`). :func:`save` keeps the marks; :func:`extend` rebuilds without the deleted
    vectors.

    Parameters
    ----------
    index : Index or MultiDeviceIndex
        A sharded :class:`~knngraph.multidevice.MultiDeviceIndex` deletes each part's ids in its part.
    ids : 1-D array of int
        Ids in [0, number of ids given so far); ids deleted already stay deleted.
    compact_above : float, default=0.5
        Compact when the deleted share of the rows passes this (0: at every delete; 1: never).
    {device}
        Where a compaction builds.
    {memory_limit}
    {verbose}

    Returns
    -------
    Index or MultiDeviceIndex
        The index to use from now on: ``index`` itself with its marks updated, or the compacted index
        (``index`` then keeps its marks and stays usable).
    """
    return delete_rows(index, ids, Index, compact_above,
                       lambda: compact(index, device=device, memory_limit=memory_limit, verbose=verbose),
                       memory_limit=memory_limit, verbose=verbose)


@runtime_docs
def compact(index: Index, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
            verbose: bool = True) -> Index:
    """A new index over the live vectors of ``index`` (those not deleted, :func:`delete`), built with its
    params (:func:`build`; fewer shards if the live vectors are too few for them), that keeps their ids:
    its ``row_ids`` holds the id of each row and searches return those. ``index`` is unchanged; one with
    nothing deleted comes back as it is.

    Parameters
    ----------
    index : Index
    {device}
    {memory_limit}
    {verbose}
    """
    def rebuild(vectors):
        params = dataclasses.replace(index.params, n_shards=min(index.params.n_shards, int(vectors.shape[0]) // 2))
        return build(params, vectors, device=device, memory_limit=memory_limit, verbose=verbose)

    return compact_rows(index, Index, rebuild)


def save(path: FileTarget, index: Index | multidevice.MultiDeviceIndex) -> None:
    """Write ``index`` (vectors, graph, entry points, shard layout, d+_nn1) to ``path``: versioned,
    atomic, checksummed; loadable on any device."""
    if isinstance(index, multidevice.MultiDeviceIndex):  # a folder: knngraph.multidevice.save
        return multidevice.save(path, index)
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.ggnn.Index, got {type(index).__name__}")
    g = index.graph.to_host()
    arrays = {"dataset": index.dataset, "graph_indices": g.indices, "graph_distances": g.distances,
              "entry_points": index.entry_points, "entry_bounds": index.entry_bounds,
              "shard_bounds": index.shard_bounds, "nn1": index.nn1}
    meta = {"graph_info": g.info}
    save_index(path, index, arrays, meta)


def load(path: FileTarget, *, metric: str | None = None) -> Index | multidevice.MultiDeviceIndex:
    """Read an index written by :func:`save`; ``metric``, when given, must match the saved one."""
    if multidevice.is_saved(path):  # a folder written for a MultiDeviceIndex
        return multidevice.load(path, metric=metric)
    arrays, params, meta = load_index(path, Index, metric=metric)
    with assembling(path, Index):
        graph = Graph(arrays["graph_indices"], arrays["graph_distances"], params.metric, meta.get("graph_info", {}))
        dataset = arrays["dataset"]
    with assembling(path, Index, dataset, graph):
        n = dataset.shape[0]
        e, eb, sb, nn1 = arrays["entry_points"], arrays["entry_bounds"], arrays["shard_bounds"], arrays["nn1"]
        if e.ndim != 1 or e.size < 1 or e.min() < 0 or e.max() >= n:
            raise ValueError(f"its entry points are not ids in [0, {n})")
        if sb.ndim != 1 or sb.size < 2 or sb[0] != 0 or sb[-1] != n or (np.diff(sb) <= 0).any() or \
                eb.shape != sb.shape or eb[0] != 0 or eb[-1] != e.size or (np.diff(eb) < 0).any() or \
                nn1.shape != (sb.size - 1,):
            raise ValueError("its shard layout is inconsistent")
        rows = RowIds.from_saved(n, arrays, meta)
        return Index(dataset, params, graph, e.astype(np.int32), eb.astype(np.int64), sb.astype(np.int64),
                     nn1.astype(np.float32), row_ids=rows)
