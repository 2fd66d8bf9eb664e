"""The exact index: :class:`Index`, :func:`build`, :func:`search`, :func:`extend`, :func:`save`,
:func:`load`. The GEMM tiles are formed per call; what depends on the vectors alone is made by the first
search and kept with the index (its numeric plan; on a GPU, a base of at most
``knngraph.bruteforce.cuda.KEEP_OPERAND_BYTES`` as the GEMM operand: :meth:`Index.release` drops them).
With ``graph_degree > 0`` the build also computes the exact k-NN graph of the dataset."""

from __future__ import annotations

import dataclasses
import time
from typing import overload

import numpy as np

from .. import multidevice
from .._device import (Device, array_kind, default_memory_limit, device_context, implementation, is_device_array,
                       parse_memory, resolve_device, return_as)
from .._device import on_input_device
from .._typing import Array, DeviceLike, Devices, FileTarget, MemoryLimit
from .._validate import check_finite, check_k, check_new_vectors, check_same_dim, check_vectors
from ..graph import Graph
from ..index import Index as IndexBase
from ..index import KNNResult, assembling, check_out, cpu_threads, fill_out, load_index, runtime_docs, save_index
from ..primitives.filters import prepare_filter
from ..primitives.kselect import resolve_select
from .._validate import flag_nonfinite, nonfinite_flaggable
from ._exact import FLAG_QUERIES_NONFINITE, new_flags, plan_numerics, raise_flagged
from ._params import IndexParams, SearchParams

__all__ = ["Index", "build", "search", "extend", "save", "load"]


@dataclasses.dataclass(eq=False)
class Index(IndexBase):
    """An exact index: the base vectors (as given, on the host or a GPU), the params and, when
    ``params.graph_degree > 0``, the exact k-NN graph of the vectors (else None).

    The first search keeps what the vectors alone decide (their numeric plan, and on a GPU a small base's
    GEMM operand), so the vectors must not be changed in place afterwards; :meth:`release` drops it."""

    dataset: Array
    params: IndexParams
    graph: Graph | None = None
    #: what searches keep between calls (see :func:`_exact`); not saved, not pickled
    _prepared: dict = dataclasses.field(default_factory=dict, repr=False)

    algorithm = "exact"
    _module = "knngraph.bruteforce"
    _file_kind = "bruteforce-index"
    _params_class = IndexParams

    def release(self) -> None:
        """Drop what searches kept (the numeric plan, GPU copies of the GEMM operand, the CUDA graphs of
        repeated searches, each once its last replay has finished)."""
        kept = tuple(self._prepared.values())
        self._prepared.clear()
        for value in kept:
            if hasattr(value, "close"):
                value.close()


def _budget(memory_limit, dev: Device):
    limit = parse_memory(memory_limit)
    if dev.is_cuda:
        return limit or default_memory_limit(dev)
    return limit


def _exact(dev: Device, base, queries, k, metric, *, graph, select, memory_limit, verbose, stats=None,
           plan=None, prepared: dict | None = None, queries_checked: bool = True):
    """(distances, ids) of the exact top-k, on the implementation for ``dev`` (validated arrays).

    ``prepared``: the index's dict of what its searches keep (the numeric plan of ``base``; the GPU's
    resident GEMM operand), or None to keep nothing. ``queries_checked``: False when the caller has not
    checked the queries for NaN and inf (:func:`knngraph._validate.check_finite`): on a GPU with device
    queries and the warp filter, a kernel flags them and the search raises the same error once it reads
    its flags, its one wait for the device (the filter ranks NaN keys after every number, so nothing
    else changes); otherwise they are checked here first.

    Queries whose candidates could not prove their answer (:mod:`._exact`) are searched again with four
    times the candidates, until every answer is proven (at worst with every point a candidate). Distances
    that do not fit float32 are a ValueError naming the arrays (the base, and the queries unless they are
    the base's own rows)."""
    try:
        return _exact_unnamed(dev, base, queries, k, metric, graph=graph, select=select, memory_limit=memory_limit,
                              verbose=verbose, stats=stats, plan=plan, prepared=prepared,
                              queries_checked=queries_checked)
    except ValueError as exc:
        if "exceed the float32 range" not in str(exc):
            raise
        what = "base (the distances of its k-NN graph)" if graph else "queries against base"
        raise ValueError(f"{what}: {exc}") from None


def _exact_unnamed(dev: Device, base, queries, k, metric, *, graph, select, memory_limit, verbose, stats=None,
                   plan=None, prepared=None, queries_checked=True):
    impl = implementation(__package__, dev)
    xp = _xp_of(base) if dev.is_cuda else np
    if plan is None:
        plan = None if prepared is None else prepared.get(("plan", metric))
        if plan is None:
            plan = plan_numerics(base, metric, xp)  # the same plan whichever device computes it
            if prepared is not None:
                prepared[("plan", metric)] = plan
    plan = plan.for_queries(queries)
    n = base.shape[0]
    n_available = n - 1 if graph else n
    c = plan.candidates(k, n_available)
    with device_context(dev):
        if dev.is_cuda:
            d, i, unsure, flags = _gpu_first_round(impl, dev, base, queries, k, metric, graph=graph, select=select,
                                                   memory_limit=memory_limit, verbose=verbose, stats=stats, plan=plan,
                                                   candidates=c, prepared=prepared, queries_checked=queries_checked)
            # the GPU's checks and whether any answer is unproven, in one transfer
            more = raise_flagged(flags.get(), queries, metric)
        else:
            if not queries_checked:
                check_finite(queries, "queries")
            d, i, unsure = impl.exact_knn(base, queries, k, metric, graph=graph,
                                          memory_limit=_budget(memory_limit, dev), select=select,
                                          device_index=dev.index, verbose=verbose, stats=stats, plan=plan)
            more = bool(unsure.any())
        keep = {"prepared": prepared} if dev.is_cuda else {}  # (the rounds below check their own flags)
        retries = 0
        budget = _budget(memory_limit, dev) if more else None
        while more and c < n_available:
            c = min(n_available, 4 * c)
            retries += 1
            rows = _nonzero(unsure)
            if graph:
                # the rows as queries of a plain search, one more neighbour, then each row's own id out
                rd, ri, ru = impl.exact_knn(base, base[rows], k + 1, metric, memory_limit=budget, device_index=dev.index,
                                            verbose=False, plan=plan, candidates=min(n, c + 1), **keep)
                rd, ri = _without_self(rd, ri, rows)
            else:
                rd, ri, ru = impl.exact_knn(base, queries[rows], k, metric, memory_limit=budget, device_index=dev.index,
                                            verbose=False, plan=plan, candidates=c, **keep)
            d[rows], i[rows] = rd, ri
            unsure[:] = False
            unsure[rows] = ru
            more = bool(unsure.any())
        if stats is not None:
            stats["exactness_retries"] = retries
    return d, i


def _gpu_first_round(impl, dev: Device, base, queries, k, metric, *, graph, select, memory_limit, verbose, stats,
                     plan, candidates, prepared, queries_checked):
    """(distances, ids, unsure, check flags) of the first round of a GPU search, all on the device, nothing
    waited for. Device queries searched with the warp filter are checked for NaN and inf by a flag kernel
    (:func:`_exact`); others here, first.

    A search of device queries against an index's device-resident base that the GPU answers in one pass
    (one GEMM, one selection, the exact finish: a small base) is replayed as a CUDA graph from its second
    call with the same shapes and settings (:mod:`knngraph._cuda_graphs`; the graph is kept with the
    index, :meth:`Index.release` drops it): the Python host issuing ten launches was most of such a
    search's time (5,000 x 384 float16 base, 1,000 queries: about 0.45 ms, of which 0.2 ms of kernels on
    an H200)."""
    import cupy

    from .._cuda_graphs import GraphCache

    deferred = (not queries_checked and select != "quickselect" and resolve_select("auto", candidates) == "warp_filter"
                and is_device_array(queries) and nonfinite_flaggable(queries))
    if not queries_checked and not deferred:
        check_finite(queries, "queries")

    def first_round(q, capturing=False):
        flags = new_flags(cupy)
        if deferred:
            flag_nonfinite(q, flags, FLAG_QUERIES_NONFINITE)
        seen: dict = {}
        d, i, unsure = impl.exact_knn(base, q, k, metric, graph=graph, memory_limit=_budget(memory_limit, dev),
                                      select=select, device_index=dev.index, verbose=verbose and not capturing,
                                      stats=seen, plan=plan, prepared=prepared, flags=flags, one_pass_only=capturing)
        return (d, i, unsure, flags), seen

    replayable = (prepared is not None and not graph and isinstance(base, cupy.ndarray)
                  and isinstance(queries, cupy.ndarray) and queries.flags.c_contiguous)
    if not replayable:
        (d, i, unsure, flags), seen = first_round(queries)
        replayed = False
    else:
        cache = prepared.get(("cuda graphs", dev.index))
        if cache is None:
            cache = prepared.setdefault(("cuda graphs", dev.index), GraphCache())
        key = (queries.shape, queries.dtype.str, k, metric, select, plan.gamma, repr(memory_limit), deferred)
        def held():
            # what the graph reads that the index holds (its resident operand), whatever release() drops
            # meanwhile (tuple() of a dict's values is one step: other threads may add entries)
            return (base,) + tuple(v for v in tuple(prepared.values()) if not isinstance(v, GraphCache))

        (d, i, unsure, flags), seen, replayed = cache.call(key, first_round, (queries,), dev.index, held)
    if stats is not None:
        stats.update(seen, cuda_graph=replayed)
    return d, i, unsure, flags


def _xp_of(a):
    return __import__("cupy") if is_device_array(a) else np


def _nonzero(mask):
    return mask.nonzero()[0]


def _without_self(d, i, rows):
    """Drop each row's own id (``rows``) from (n, k + 1) results, or the last column where it is absent."""
    xp = _xp_of(i)
    rows = xp.asarray(rows)
    own = i == rows[:, None]
    pos = xp.where(own.any(axis=1), own.argmax(axis=1), i.shape[1] - 1)
    keep = xp.ones(i.shape, dtype=bool)
    keep[xp.arange(i.shape[0]), pos] = False
    m, w = i.shape
    return d[keep].reshape(m, w - 1), i[keep].reshape(m, w - 1)


@overload
def build(params: IndexParams, dataset: Array, *, device: DeviceLike = ..., memory_limit: MemoryLimit = ...,
          verbose: bool = ..., devices: None = ..., layout: str = ..., _checked: bool = ...) -> Index: ...


@overload
def build(params: IndexParams, dataset: Array, *, device: DeviceLike = ..., memory_limit: MemoryLimit = ...,
          verbose: bool = ..., devices: Devices, layout: str = ...) -> multidevice.MultiDeviceIndex: ...


@runtime_docs
@on_input_device('dataset')
def build(params: IndexParams, dataset: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
          verbose: bool = True, devices: Devices | None = None, layout: str = "auto",
          _checked: bool = False) -> Index | multidevice.MultiDeviceIndex:
    """Validate ``dataset`` and wrap it in an :class:`Index`; with ``params.graph_degree > 0`` also
    compute its exact k-NN graph (``index.graph``: NumPy arrays for host input, CuPy for device input).

    Parameters
    ----------
    params : IndexParams
    dataset : array of shape (n, d)
        float32, float16, uint8 or int8 (float64 is cast to float32); NumPy (memory maps stream tile by
        tile), CuPy, PyTorch or DLPack. Device arrays are used in place.
    {device}
    {memory_limit}
    {verbose}
    {devices}
    {layout}

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import bruteforce
    >>> x = np.random.default_rng(0).random((100, 8), dtype=np.float32)
    >>> index = bruteforce.build(bruteforce.IndexParams(metric="euclidean", graph_degree=4), x, device="cpu")
    >>> index.graph.indices.shape
    (100, 4)
    >>> d, i = bruteforce.search(index, x[:3], k=2, device="cpu")
    >>> i[:, 0].tolist()
    [0, 1, 2]
    """
    if not isinstance(params, IndexParams):
        raise TypeError(f"params must be a knngraph.bruteforce.IndexParams, got {type(params).__name__}")
    if devices is not None:
        if params.graph_degree:
            raise ValueError("bruteforce.build with devices= builds no graph (a shard's graph would miss the other "
                             "shards' rows); use knngraph.knn_graph(base, k, devices=...) for the exact graph")
        return multidevice.build(__package__, params, dataset, devices, layout=layout, memory_limit=memory_limit,
                                 verbose=verbose)
    dev = resolve_device(device, dataset)
    data = check_vectors(dataset, "dataset", on_gpu=dev.is_cuda and is_device_array(dataset))
    if not _checked:  # knngraph.knn has checked it under the name the caller knows
        check_finite(data, "dataset")
    graph = None
    if params.graph_degree:
        k = check_k(params.graph_degree, data.shape[0], graph=True, name="graph_degree")
        stats: dict = {}
        t0 = time.perf_counter()
        d, i = _exact(dev, data, data, k, params.metric, graph=True, select="auto", memory_limit=memory_limit,
                      verbose=verbose, stats=stats)
        if is_device_array(d) and not is_device_array(dataset):  # host input, host graph
            d, i = d.get(), i.get()
        info = {"method": "exact", "graph_degree": k, "build_seconds": time.perf_counter() - t0,
                "device": "cuda" if dev.is_cuda else "cpu", **stats}
        graph = Graph(i, d, params.metric, info)
    return Index(data, params, graph)


def filtered_exact(dev: Device, base, queries, k, metric, allowed, *, select="auto", memory_limit=None,
                   verbose=False, stats=None, prepared=None):
    """(distances, ids) of the exact top-k among the ids ``allowed`` (:class:`AllowedIds`) holds, on the
    implementation for ``dev``: the exact search over those vectors, ids mapped back; -1 / inf past the
    number of allowed ids. Validated arrays in, NumPy or CuPy arrays out."""
    xp = _xp_of(base) if dev.is_cuda else np
    if allowed.n_allowed == 0:  # nothing to search: every row is missing
        qxp = __import__("cupy") if dev.is_cuda else np
        nq = queries.shape[0]
        return qxp.full((nq, k), np.inf, qxp.float32), qxp.full((nq, k), -1, qxp.int32)
    ids = allowed.ids()
    if allowed.n_allowed == allowed.n:
        d, i = _exact(dev, base, queries, k, metric, graph=False, select=select, memory_limit=memory_limit,
                      verbose=verbose, stats=stats, prepared=prepared)
        return d, i
    subset = base[xp.asarray(ids)]  # the allowed vectors (a copy; a memory map is read here)
    kk = min(k, allowed.n_allowed)
    d, i = _exact(dev, subset, queries, kk, metric, graph=False, select=select, memory_limit=memory_limit,
                  verbose=verbose, stats=stats)
    qxp = _xp_of(i)
    ids_q = qxp.asarray(ids.astype(np.int32))
    i = ids_q[i]
    if kk < k:
        nq = i.shape[0]
        i = qxp.concatenate([i, qxp.full((nq, k - kk), -1, qxp.int32)], axis=1)
        d = qxp.concatenate([d, qxp.full((nq, k - kk), np.inf, qxp.float32)], axis=1)
    return d, i


@runtime_docs
@on_input_device('index', 'queries', pass_device=True)
def search(index: Index | multidevice.MultiDeviceIndex, queries: Array, k: int, params: SearchParams | None = None,
           *, device: DeviceLike = "auto", verbose: bool = True, filter: Array | None = None,
           stats: dict | None = None, memory_limit: MemoryLimit = None, out: tuple[Array, Array] | None = None,
           n_threads: int | None = None, devices: Devices | None = None) -> KNNResult:
    """Exact top-``k`` of each query among the index's vectors.

    Parameters
    ----------
    index : Index
    queries : array of shape (n_queries, d)
        Same forms as the dataset; may live on another device than the index's vectors.
    k : int
        Neighbours per query, 1 <= k <= n.
    params : SearchParams, optional
    {device}
    {verbose}
    {filter}
    {stats}
        Also ``exactness_retries``: the rounds of more candidates that unproven answers took
        (:mod:`knngraph.bruteforce._exact`; 0 on the few-query path) and, on a GPU, ``cuda_graph``: whether
        the search was replayed as a CUDA graph (repeated small searches, :mod:`knngraph._cuda_graphs`).
    {memory_limit}
    {out}
    {n_threads}
        The CPU's GEMM runs in NumPy's BLAS, whose threads this does not set.
    {devices_search}

    Returns
    -------
    KNNResult
        ``(distances, indices)``: float32 and int32 arrays of shape (n_queries, k), nearest first, ties
        broken by the lower id; in the framework of ``queries`` (NumPy, CuPy or PyTorch; ``out`` itself
        when given).
    """
    if isinstance(index, multidevice.MultiDeviceIndex) or (devices is not None and isinstance(index, Index)):
        spread = index if isinstance(index, multidevice.MultiDeviceIndex) else multidevice.replicate(index, devices)
        return multidevice.search(spread, queries, k, params, device=device, verbose=verbose, filter=filter,
                                  stats=stats, memory_limit=memory_limit, out=out, n_threads=n_threads)
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.bruteforce.Index, got {type(index).__name__}")
    params = SearchParams() if params is None else params
    if not isinstance(params, SearchParams):
        raise TypeError(f"params must be a knngraph.bruteforce.SearchParams, got {type(params).__name__}")
    kind = array_kind(queries)
    dev = resolve_device(device, index.dataset, queries)
    # a GPU index searched on the CPU is copied to the host; a host index searched on the GPU streams
    base = check_vectors(index.dataset, "dataset", on_gpu=dev.is_cuda and is_device_array(index.dataset))
    q = check_vectors(queries, "queries", on_gpu=dev.is_cuda and is_device_array(queries))
    check_same_dim(base, q, "the index's vectors")
    k = check_k(k, base.shape[0])
    resolve_select(params.select, k)  # the same rule whatever path below answers (few queries, filter, ...)
    allowed = prepare_filter(filter, base.shape[0])
    # the GPU search of device queries checks them for NaN and inf with its own flags (_exact)
    queries_checked = not (dev.is_cuda and allowed is None and is_device_array(q))
    if queries_checked:
        check_finite(q, "queries")
    parse_memory(memory_limit)  # a bad limit is an error on every path below, the few-query one too
    if out is not None:
        check_out(out, q.shape[0], k, dev)
    t0 = time.perf_counter()
    with cpu_threads(n_threads):
        few = None
        if (allowed is None and not dev.is_cuda and index.metric in ("sqeuclidean", "euclidean")
                and base.dtype != np.float16):
            from .cpu import FEW_QUERIES, exact_few_l2

            if q.shape[0] <= FEW_QUERIES:  # one query (or a few): a direct pass over the base beats GEMM tiles
                few = exact_few_l2(base, q, k, index.metric)
        if few is not None:
            d, i = few
            if stats is not None:
                stats["exactness_retries"] = 0
        elif allowed is not None:
            d, i = filtered_exact(dev, base, q, k, index.metric, allowed, select=params.select,
                                  memory_limit=memory_limit, verbose=verbose, stats=stats, prepared=index._prepared)
        else:
            d, i = _exact(dev, base, q, k, index.metric, graph=False, select=params.select,
                          memory_limit=memory_limit, verbose=verbose, stats=stats, prepared=index._prepared,
                          queries_checked=queries_checked)
    if stats is not None:
        stats["seconds"] = time.perf_counter() - t0
    if out is not None:
        return fill_out(out, d, i)
    return KNNResult(return_as(kind, d), return_as(kind, i))


@runtime_docs
@on_input_device('index', 'new_vectors')
def extend(index: Index, new_vectors: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
           verbose: bool = True) -> Index:
    """A new index over the index's vectors followed by ``new_vectors`` (ids ``len(index) + i``); the
    exact graph, if the index has one, is rebuilt over all vectors. ``index`` is unchanged.

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
        raise TypeError(f"index must be a knngraph.bruteforce.Index, got {type(index).__name__}")
    dev, new = check_new_vectors(index.dataset, new_vectors, device)
    data = _concatenate(index.dataset, new)
    return build(index.params, data, device=dev, memory_limit=memory_limit, verbose=verbose)


def _concatenate(a, b):
    """Rows of a then b: on the GPU when either is there, else in host memory."""
    if is_device_array(a) or is_device_array(b):
        from .._device import as_cupy

        import cupy

        return cupy.concatenate([as_cupy(a), as_cupy(b)])
    from .._device import as_numpy

    return np.concatenate([as_numpy(a), as_numpy(b)])


def save(path: FileTarget, index: Index | multidevice.MultiDeviceIndex) -> None:
    """Write ``index`` (vectors, params, graph if any) to ``path``: versioned, atomic, checksummed;
    loadable on any device."""
    if isinstance(index, multidevice.MultiDeviceIndex):  # a folder: knngraph.multidevice.save
        return multidevice.save(path, index)
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.bruteforce.Index, got {type(index).__name__}")
    arrays = {"dataset": index.dataset}
    meta = {}
    if index.graph is not None:
        g = index.graph.to_host()
        arrays.update(graph_indices=g.indices, graph_distances=g.distances)
        meta["graph_info"] = g.info
    save_index(path, index, arrays, meta)


def load(path: FileTarget, *, metric: str | None = None) -> Index | multidevice.MultiDeviceIndex:
    """Read an index written by :func:`save` (host arrays); ``metric``, when given, must match the saved
    one."""
    if multidevice.is_saved(path):  # a folder written for a MultiDeviceIndex
        return multidevice.load(path, metric=metric)
    arrays, params, meta = load_index(path, Index, metric=metric)
    with assembling(path, Index):
        dataset = arrays["dataset"]
        graph = None
        if "graph_indices" in arrays:
            graph = Graph(arrays["graph_indices"], arrays["graph_distances"], params.metric,
                          dict(meta.get("graph_info", {})))
    with assembling(path, Index, dataset, graph):
        return Index(dataset, params, graph)
