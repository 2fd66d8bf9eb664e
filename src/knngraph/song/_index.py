"""The SONG index: :class:`Index`, :func:`build`, :func:`from_graph`, :func:`search`, :func:`extend`,
:func:`delete`, :func:`compact`, :func:`save`, :func:`load`.

An index holds the vectors, a search graph over them, its entry points and, for hashed indexes, the 1-bit
codes. Everything a search needs is computed once, in :func:`build` / :func:`from_graph`; device copies
of the graph, vectors and norms are made on first use on a device and kept (:meth:`Index.release` drops
them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import overload

import numpy as np
from numpy.typing import ArrayLike

from .. import beam, multidevice, registry
from .._device import (Device, array_kind, as_numpy, device_context, implementation, is_device_array,
                       kept_across_streams, parse_memory, resolve_device, return_as)
from .._deletion import compact_rows, delete_rows
from .._device import on_input_device
from .._typing import Array, DeviceLike, Devices, FileTarget, MemoryLimit
from .._validate import check_finite, check_k, check_new_vectors, check_same_dim, check_vectors
from ..graph import Graph
from ..graphops import default_entry_points, optimize_graph, reverse_edges, warn_unreachable
from ..graphops.prune import occlusion_factor
from ..index import Index as IndexBase
from ..index import (KNNResult, assembling, check_out, cpu_threads, fill_out, load_index, runtime_docs,
                     save_index)
from ..primitives.cpu_inputs import cpu_vectors
from ..primitives.distances import distance_kind, inverse_norms, report_distances
from ..primitives.filters import AllowedIds, RowIds, allowed_rows, results_as_user_ids
from ._params import IndexParams, SearchParams
from .hashing import RandomProjectionHasher

__all__ = ["Index", "build", "from_graph", "search", "extend", "delete", "compact", "save", "load"]


@dataclasses.dataclass(eq=False)
class Index(IndexBase):
    """A SONG index: the vectors (as given), the search graph, its entry points and, for hashed indexes,
    the hasher and the codes; ``row_ids`` (:class:`~knngraph.primitives.filters.RowIds`), once vectors were
    deleted (:func:`delete`): the deleted rows and, after a compaction, each row's id. GPU copies are made
    on first use and kept (:meth:`release` drops them)."""

    dataset: Array
    params: IndexParams
    graph: Graph
    entry_points: np.ndarray
    hasher: RandomProjectionHasher | None = None
    codes: Array | None = None
    row_ids: RowIds | None = None
    _cache: dict = dataclasses.field(default_factory=dict, repr=False)
    # the fast searcher's view of this index (:meth:`_beam_view`), kept here and not in ``_cache``: the view
    # holds ``_cache``, and a cache holding its view would be a reference cycle that keeps a dropped index's
    # device copies and launch plans until Python's cycle collector runs
    _view: beam.GraphView | None = dataclasses.field(default=None, init=False, repr=False)

    algorithm = "song"
    _module = "knngraph.song"
    _file_kind = "song-index"
    _params_class = IndexParams

    def release(self) -> None:
        """Drop the cached device copies."""
        self._cache.clear()

    def _beam_view(self) -> beam.GraphView:
        """The index as the fast searcher's :class:`~knngraph.beam.GraphView`, made once; it keeps its
        per-device state in this index's cache, and SONG's walk reads the same device copies."""
        view = self._view
        if view is None:
            view = self._view = beam.GraphView(self.graph.indices, self.dataset, self.entry_points, self.metric,
                                               cache=self._cache)
        return view

    def _arrays(self, dev: Device):
        """(graph ids, vectors or host vectors of a hashed index, inverse norms, entry points, codes) on
        ``dev``, made once per device (those of the beam view, :meth:`_beam_view`, for unhashed indexes)."""
        if self.hasher is None:
            return (*self._beam_view().arrays(dev), None)
        key = str(dev)
        if key in self._cache:
            return self._cache[key]
        cosine = self.metric == "cosine"
        xb = cpu_vectors(as_numpy(self.dataset))  # full vectors stay on the host
        inv_b = inverse_norms(xb) if cosine else np.zeros(1, np.float32)
        if dev.is_cuda:
            import cupy as cp

            with cp.cuda.Device(dev.index), kept_across_streams():
                g_ids = cp.ascontiguousarray(cp.asarray(self.graph.indices))
                e = cp.asarray(self.entry_points)
                codes = cp.asarray(self.codes)
        else:
            g_ids = np.ascontiguousarray(as_numpy(self.graph.indices))
            e = self.entry_points
            codes = as_numpy(self.codes)
        self._cache[key] = (g_ids, xb, inv_b, e, codes)
        return self._cache[key]


# --------------------------------------------------------------------------------------------------
# checks


def _check_graph(graph, n: int):
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a knngraph.Graph, got {type(graph).__name__}")
    if graph.n != n:
        raise ValueError(f"graph has {graph.n} rows but dataset has {n} vectors; they must match")
    graph.validate_ids(n)  # against the vectors, not the graph's own bound (a block of a larger graph)


def _check_entries(entry_points, n: int) -> np.ndarray:
    e = as_numpy(entry_points)
    if e.ndim != 1 or e.shape[0] == 0:
        raise ValueError(f"entry_points must be a non-empty 1-D array of vertex ids, got shape {e.shape}")
    if e.dtype.kind not in "iu":
        raise TypeError(f"entry_points must hold integer ids, got dtype {e.dtype}")
    if int(e.min()) < 0 or int(e.max()) >= n:
        raise ValueError(f"entry_points must be ids in [0, {n}), got values from {int(e.min())} to {int(e.max())}")
    return np.ascontiguousarray(e, dtype=np.int32)


def _check_k_queue(k, n, sp: SearchParams) -> int:
    k = check_k(k, n)
    if k > sp.queue_size:
        raise ValueError(f"k={k} is larger than queue_size={sp.queue_size}; the search keeps queue_size results, "
                         "so raise SearchParams.queue_size to at least k")
    if sp.rerank and sp.rerank < k:
        raise ValueError(f"rerank={sp.rerank} must be at least k={k} (or 0 for all of queue_size)")
    return k


# --------------------------------------------------------------------------------------------------
# build


def _hash(params: IndexParams, x):
    if not params.hash_bits:
        return None, None
    hasher = RandomProjectionHasher(params.hash_bits, seed=params.seed).fit(x, params.metric)
    return hasher, hasher.encode(x)


@runtime_docs
@on_input_device('dataset')
def from_graph(graph: Graph, dataset: Array, params: IndexParams | None = None, *,
               entry_points: ArrayLike | None = None, device: DeviceLike = "auto", verbose: bool = True) -> Index:
    """A SONG index over a ready search graph: any builder's graph, best prepared with
    :func:`knngraph.optimize_graph` (a raw k-NN graph navigates poorly).

    Parameters
    ----------
    graph : Graph
        A graph over ``dataset`` (ids in [-1, n), -1 = no edge). Its metric is the index's.
    dataset : array of shape (n, d)
        The vectors (float32, float16, uint8, int8; NumPy, CuPy, PyTorch, DLPack).
    params : IndexParams, optional
        Used for ``hash_bits``, ``n_entry_points`` and ``seed`` (the graph-building fields are ignored);
        its ``metric`` must be the graph's. Default: ``IndexParams(metric=graph.metric)``.
    entry_points : 1-D array of int, optional
        Start vertices shared by all queries; default: the medoid and random vertices
        (:func:`knngraph.graphops.default_entry_points`).
    {device}
    {verbose}

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> from knngraph import song
    >>> x = np.random.default_rng(0).random((500, 8), dtype=np.float32)
    >>> g = knngraph.optimize_graph(knngraph.knn_graph(x, 16, device="cpu"), x, graph_degree=8, device="cpu")
    >>> index = song.from_graph(g, x, device="cpu")
    >>> d, i = song.search(index, x[:3], k=4, params=song.SearchParams(queue_size=16), device="cpu")
    >>> i[:, 0].tolist()
    [0, 1, 2]
    """
    if params is None:
        params = IndexParams(metric=graph.metric if isinstance(graph, Graph) else "sqeuclidean")
    elif not isinstance(params, IndexParams):
        raise TypeError(f"params must be a knngraph.song.IndexParams, got {type(params).__name__}")
    dev = resolve_device(device, dataset)
    x = check_vectors(dataset, "dataset", on_gpu=dev.is_cuda and is_device_array(dataset))
    check_finite(x, "dataset")
    _check_graph(graph, x.shape[0])
    if graph.metric != params.metric:
        raise ValueError(f"graph was built with metric {graph.metric!r} but the index uses {params.metric!r}")
    entries = (_check_entries(entry_points, x.shape[0]) if entry_points is not None
               else default_entry_points(x, params.metric, params.n_entry_points, params.seed, graph=graph))
    warn_unreachable(graph.indices, entries, "song.from_graph")
    hasher, codes = _hash(params, x)
    return Index(x, params, graph, entries, hasher, codes)


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
    """Build a SONG index: the k-NN graph (``build_algo`` with ``build_params``, degree
    ``intermediate_graph_degree``), :func:`knngraph.optimize_graph` to ``graph_degree`` (which ends by
    linking what its entry points cannot reach), the entry points and (``hash_bits > 0``) the 1-bit codes.
    The automatic fields of ``params`` take the device's values (:meth:`IndexParams.resolved`; the table of
    :class:`IndexParams`), and ``index.params`` holds the values used. For a ready graph use :func:`from_graph`.

    Parameters
    ----------
    params : IndexParams
    dataset : array of shape (n, d)
    {device}
    {memory_limit}
    {verbose}
    {devices}
    {layout}

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import song
    >>> x = np.random.default_rng(0).random((400, 8), dtype=np.float32)
    >>> index = song.build(song.IndexParams(graph_degree=8, intermediate_graph_degree=16), x, device="cpu")
    >>> d, i = song.search(index, x[:2], k=3, params=song.SearchParams(queue_size=16), device="cpu")
    >>> i[:, 0].tolist()
    [0, 1]
    """
    if not isinstance(params, IndexParams):
        raise TypeError(f"params must be a knngraph.song.IndexParams, got {type(params).__name__}")
    if devices is not None:
        return multidevice.build(__package__, params, dataset, devices, layout=layout, memory_limit=memory_limit,
                                 verbose=verbose)
    dev = resolve_device(device, dataset)
    x = check_vectors(dataset, "dataset", on_gpu=dev.is_cuda and is_device_array(dataset))
    check_finite(x, "dataset")
    n = x.shape[0]
    if n < 2:
        raise ValueError("a SONG index needs at least 2 vectors")
    params = params.resolved(dev)
    k0 = min(params.intermediate_graph_degree, n - 1)
    builder = registry.get(params.build_algo)
    g0 = builder.build_graph(x, k0, metric=params.metric, device=dev, memory_limit=memory_limit, verbose=verbose,
                             **(params.build_params or {}))
    graph = optimize_graph(g0, x, params.graph_degree, alpha=params.alpha, fill=params.fill, connect=True,
                           device=dev, verbose=verbose)
    return from_graph(graph, x, params, device=dev, verbose=verbose)


# --------------------------------------------------------------------------------------------------
# search


def _search_arrays(dev: Device, index: Index, queries, k, sp: SearchParams, *, verbose=True, stats=None,
                   allowed_bits=None):
    """Run SONG on the index's arrays for ``dev`` (hashed: on codes, then an exact re-rank on the host);
    ``allowed_bits``: None or the bitset of the ids that may be returned. Returns (reported distances,
    ids) as NumPy or CuPy arrays."""
    from ..primitives.distances import DIST_HAMMING

    g_ids, xb, inv_b, entries, codes = index._arrays(dev)
    metric = index.metric
    kind = distance_kind(metric)
    t0 = time.perf_counter()
    impl = implementation(__package__, dev)
    with device_context(dev):
        if codes is not None:
            rerank = min(sp.queue_size, sp.rerank or sp.queue_size)
            qxp = __import__("cupy") if dev.is_cuda else np
            qcodes = index.hasher.encode(qxp.asarray(queries) if dev.is_cuda else as_numpy(queries))
            z = qxp.zeros(1, qxp.float32)
            out_k, out_i, nd, ne = impl.search(g_ids, codes, qcodes, z, DIST_HAMMING, entries, max(k, rerank),
                                               sp.queue_size, sp.visited, batch_size=sp.batch_size,
                                               max_registers=sp.max_registers or None, verbose=verbose,
                                               allowed=allowed_bits)
        else:
            with contextlib.nullcontext(None) if dev.is_cuda else index._beam_view().borrow_scratch() as scratch:
                cpu_only = {} if dev.is_cuda else {"scratch": scratch}
                out_k, out_i, nd, ne = impl.search(g_ids, xb, queries, inv_b, kind, entries, k, sp.queue_size,
                                                   sp.visited, batch_size=sp.batch_size,
                                                   max_registers=sp.max_registers or None, verbose=verbose,
                                                   allowed=allowed_bits, **cpu_only)
        if stats is not None:
            stats["distances_per_query"] = float(nd.mean()) if nd.size else 0.0
            stats["expansions_per_query"] = float(ne.mean()) if ne.size else 0.0
        if codes is not None:
            from .cpu import rerank_cpu  # the exact re-rank of a hashed search (host, numba)

            t1 = time.perf_counter()
            qf = np.ascontiguousarray(as_numpy(queries), dtype=np.float32)
            inv_q = inverse_norms(qf) if metric == "cosine" else np.zeros(1, np.float32)
            out_k, out_i = rerank_cpu(xb, qf, inv_b, inv_q, kind, as_numpy(out_i)[:, :rerank], k)
            if stats is not None:
                stats["rerank_seconds"] = time.perf_counter() - t1
        xp = np if isinstance(out_k, np.ndarray) else __import__("cupy")
        dist = report_distances(out_k, metric, xp)
        dist = xp.where(out_i < 0, xp.float32(np.inf), dist)
    if stats is not None:
        stats["seconds"] = time.perf_counter() - t0
    return dist, out_i


def _uses_beam(index: Index, sp: SearchParams) -> bool:
    """Whether a search runs the fast searcher (:func:`knngraph.beam.search`; ``SearchParams.algo``), on
    the GPU and the CPU alike: 'auto' and 'beam' do, except for hashed indexes and ``visited='bloom'``,
    which need SONG's walk ('beam' then raises)."""
    if sp.algo == "song":
        return False
    hashed, bloom = index.hasher is not None, sp.visited == "bloom"
    if not (hashed or bloom):
        return True
    if sp.algo == "beam":
        blockers = [why for why, on in (("a hashed index (hash_bits)", hashed), ("visited='bloom'", bloom)) if on]
        raise ValueError(f"algo='beam' does not support {' or '.join(blockers)}; use algo='song' or 'auto'")
    return False


def _filtered_search(dev, index, q, k, sp, allowed: AllowedIds, *, verbose, stats, memory_limit, out):
    """A search restricted to the rows ``allowed`` holds: the exact search over the allowed vectors
    (:func:`knngraph.bruteforce.search` with the filter, within ``memory_limit``) or a graph walk whose list
    is grown by the allowed share (:func:`knngraph.beam.filtered_queue_size`), returning allowed rows only:
    the fast searcher's (``beam.search(..., filter=...)``), or SONG's walk where the fast searcher does not
    apply (:func:`_uses_beam`). ``sp.filtered_path`` picks the path, 'auto' by the cost model of
    :func:`knngraph.beam.filtered_path`. Returns (reported distances, row ids); ``out`` is filled by the
    fast searcher only."""
    path, queue = beam.filtered_path(allowed.n_allowed, allowed.n, q.shape[0], q.shape[1], sp.queue_size,
                                     "cuda" if dev.is_cuda else "cpu", sp.filtered_path)
    t0 = time.perf_counter()
    if path == "exact":
        # the exact searcher, through the registry (algorithms never import each other); on a GPU the vectors
        # the index keeps there: the allowed rows are gathered on the GPU, not on the host and copied over each
        # call (a hashed index keeps only codes there: its host vectors)
        vectors = index._arrays(dev)[1] if dev.is_cuda and index.hasher is None else index.dataset
        exact_search = registry.get("exact").load()
        exact = exact_search.Index(vectors, exact_search.IndexParams(metric=index.metric))
        d, i = exact_search.search(exact, q, k, device=dev, memory_limit=memory_limit, verbose=verbose,
                                   filter=allowed)
    elif _uses_beam(index, sp):
        d, i = beam.search(index._beam_view(), q, k, sp.queue_size, device=dev, search_width=sp.search_width,
                           max_registers=sp.max_registers, stats=stats, out=out, filter=allowed,
                           cpu_walk=sp.cpu_walk)
    else:
        check_finite(q, "queries")
        d, i = _search_arrays(dev, index, q, k, dataclasses.replace(sp, queue_size=queue), verbose=verbose,
                              stats=stats, allowed_bits=allowed.bits)
    if stats is not None:
        stats.update(filtered_path=path, allowed_fraction=allowed.fraction, seconds=time.perf_counter() - t0)
        if path == "graph":
            stats["queue_size"] = queue
    return d, i


#: the parameters of a search called without any: made once (frozen, so one serves every call; building and
#: checking a SearchParams costs about as much host time as the rest of a one-query GPU search's checks)
_DEFAULT_SEARCH = SearchParams()


@runtime_docs
@on_input_device('index', 'queries', pass_device=True)
def search(index: Index | multidevice.MultiDeviceIndex, queries: Array, k: int, params: SearchParams | None = None,
           *, device: DeviceLike = "auto", verbose: bool = True, filter: Array | None = None,
           stats: dict | None = None, memory_limit: MemoryLimit = None, out: tuple[Array, Array] | None = None,
           n_threads: int | None = None, devices: Devices | None = None) -> KNNResult:
    """Approximate top-``k`` of each query by graph search: the fast searcher (:mod:`knngraph.beam`) or
    SONG's walk (one GPU warp per query), as ``params.algo`` says.

    Parameters
    ----------
    index : Index
        From :func:`build` or :func:`from_graph`.
    queries : array of shape (n_queries, d)
        Any number of queries; SONG's GPU launches take ``params.batch_size`` at a time.
    k : int
        Neighbours per query, 1 <= k <= queue_size, k <= n.
    params : SearchParams, optional
        ``queue_size`` (the speed/recall knob), ``algo`` (which searcher), ``search_width``, ``visited``,
        ``rerank``, ``batch_size``, ``max_registers``, ``filtered_path``.
    {device}
    {verbose}
    {filter}
        Over the index's ids (those of a compacted index too, see :func:`delete`); deleted vectors are
        never returned either. The graph walk still passes through vertices that are not allowed, with
        its list grown to ``queue_size`` / (allowed share) (:func:`knngraph.beam.filtered_queue_size`,
        about ``queue_size`` allowed entries), and returns the first k allowed entries; or the search is
        the exact one over the allowed vectors, when the cost model of :func:`knngraph.beam.filtered_path`
        estimates it cheaper or the walk would need a list longer than 1024
        (``params.filtered_path`` forces either; ``stats['filtered_path']`` says which ran).
    {stats}
        Also ``algo`` ('beam' when the fast searcher ran) and on a GPU its ``search_width``; with a
        filter (or deleted vectors) ``filtered_path`` ('graph' or 'exact'), ``allowed_fraction`` and for
        the walk ``queue_size`` (its list's length).
    {memory_limit}
        A graph walk's working memory is its output and the index's device copies; the exact search of
        a filtered call (see ``filter``) cuts its tiles to this limit.
    {out}
        The fast searcher writes them directly.
    {n_threads}
        A single query runs on the calling thread.
    {devices_search}

    Returns
    -------
    KNNResult
        ``(distances, indices)``, float32 / int32 of shape (n_queries, k), nearest first (ties by lower
        id), -1 / inf where fewer than k vertices were reached (or allowed); in the framework of
        ``queries`` (``out`` itself when given).
    """
    if isinstance(index, multidevice.MultiDeviceIndex) or (devices is not None and isinstance(index, Index)):
        spread = index if isinstance(index, multidevice.MultiDeviceIndex) else multidevice.replicate(index, devices)
        return multidevice.search(spread, queries, k, params, device=device, verbose=verbose, filter=filter,
                                  stats=stats, memory_limit=memory_limit, out=out, n_threads=n_threads)
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.song.Index (song.build or song.from_graph), got "
                        f"{type(index).__name__}")
    sp = _DEFAULT_SEARCH if params is None else params
    if not isinstance(sp, SearchParams):
        raise TypeError(f"params must be a knngraph.song.SearchParams, got {type(sp).__name__}")
    qkind = array_kind(queries)
    dev = resolve_device(device, index.dataset, queries)
    q = check_vectors(queries, "queries", on_gpu=dev.is_cuda and is_device_array(queries))
    check_same_dim(index.dataset, q, "the index's vectors")
    n = index.shape[0]
    k = _check_k_queue(k, n, sp)
    rows = index.row_ids
    allowed = allowed_rows(rows, n, filter)
    parse_memory(memory_limit)  # a bad limit is an error on every path, those that need none too
    if allowed is not None and allowed.n_allowed < allowed.n and sp.cpu_walk == "int8" and not dev.is_cuda:
        raise ValueError("SearchParams.cpu_walk='int8' applies to unfiltered searches only (a filter or deleted "
                         "vectors are in play here): use 'auto' or 'exact'")
    if allowed is None and _uses_beam(index, sp):
        # the arguments are checked above (SearchParams at construction); beam checks out= and (host) queries
        # itself; device queries are used in place, not copied back to be checked
        d, i = beam.search_checked(index._beam_view(), q, k, sp.queue_size, dev, search_width=sp.search_width,
                                   max_registers=sp.max_registers, stats=stats, out=out, n_threads=n_threads,
                                   cpu_walk=sp.cpu_walk, host_results=not qkind.on_gpu)
    else:
        if out is not None:
            check_out(out, q.shape[0], k, dev)
        with cpu_threads(n_threads):
            if allowed is not None:
                d, i = _filtered_search(dev, index, q, k, sp, allowed, verbose=verbose, stats=stats,
                                        memory_limit=memory_limit, out=out)
            else:
                check_finite(q, "queries")
                d, i = _search_arrays(dev, index, q, k, sp, verbose=verbose, stats=stats)
    i = results_as_user_ids(i, rows, index._cache)
    if out is not None:
        return fill_out(out, d, i) if d is not out[0] or i is not out[1] else KNNResult(*out)
    return KNNResult(return_as(qkind, d), return_as(qkind, i))


# --------------------------------------------------------------------------------------------------
# extend


@runtime_docs
@on_input_device('index', 'new_vectors')
def extend(index: Index, new_vectors: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
           verbose: bool = True) -> Index:
    """A new index with ``new_vectors`` added (ids ``len(index) + i``); ``index`` is unchanged.

    Each new vector's candidates are its ``intermediate_graph_degree`` nearest old vertices found by
    searching the index (queue size twice that) and its nearest new vectors (the builder's k-NN graph of
    the new vectors); its row is pruned from them with the index's rule and degree, and every old vertex
    its row points to is offered the new vertex as a reverse edge, re-pruned with its row (an old row that
    takes no new vertex comes back as it was). Entry points are kept. Searching the extended index reaches
    recall close to a rebuild while only the new rows and their neighbours are touched
    (``tests/song/test_index.py``). Deleted vectors stay deleted (and are not offered as candidates);
    the new ones are live, with the next ids (:func:`delete`).

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
        raise TypeError(f"index must be a knngraph.song.Index, got {type(index).__name__}")
    dev, new = check_new_vectors(index.dataset, new_vectors, device)
    p = index.params.resolved(dev)  # an index of from_graph may leave the build fields automatic
    n, m = index.shape[0], new.shape[0]
    degree = index.graph.degree
    # 1. candidates of the new rows: old vertices by search, new ones by the builder
    k_old = min(p.intermediate_graph_degree, n)
    sp = SearchParams(queue_size=min(1024, max(2 * k_old, 32)))
    # candidates by row (a compacted index's user ids are not its rows), among the live rows
    row_ids = index.row_ids
    live = None if row_ids is None or row_ids.deleted is None else AllowedIds.of_bits(~row_ids.deleted, n)
    _, old_ids = search(dataclasses.replace(index, row_ids=None), new, k_old, sp, device=dev, verbose=False,
                        filter=live)
    old_ids = as_numpy(old_ids)
    if m > 1:
        k_new = min(p.intermediate_graph_degree, m - 1)
        g_new = registry.get(p.build_algo).build_graph(as_numpy(new), k_new, metric=p.metric, device=dev,
                                                      memory_limit=memory_limit, verbose=False,
                                                      **(p.build_params or {}))
        new_ids = np.where(as_numpy(g_new.indices) >= 0, as_numpy(g_new.indices) + n, -1).astype(np.int32)
    else:
        new_ids = np.empty((m, 0), np.int32)
    x_all = np.concatenate([as_numpy(index.dataset), as_numpy(new)])
    graph = index.graph.to_host()
    cand = np.full((n + m, old_ids.shape[1] + new_ids.shape[1]), -1, np.int32)
    cand[:n, :degree] = graph.indices
    cand[n:] = np.concatenate([old_ids, new_ids], axis=1)
    # 2. prune every row (old rows come back as they are: a filled row prunes to the same ids) and offer
    # each new row's kept edges to their targets as reverse edges, pruned with the targets' rows
    kind = distance_kind(p.metric)
    impl = implementation("knngraph.graphops", Device("cpu"))
    xc = cpu_vectors(x_all)
    inv = inverse_norms(xc) if p.metric == "cosine" else np.zeros(1, np.float32)
    factor = occlusion_factor(kind, p.alpha)
    empty = np.empty((n + m, 0), np.int32)
    rows, rows_d = impl.prune(xc, inv, kind, factor, cand, empty, empty, degree, p.fill)
    from_new = np.where(np.arange(n + m)[:, None] >= n, rows, -1).astype(np.int32)
    rev, _ = reverse_edges(from_new, rows_d, degree)
    rows, rows_d = impl.prune(xc, inv, kind, factor, rows, rev, rows, degree, p.fill)
    dist = report_distances(rows_d, p.metric, np)
    dist[rows < 0] = np.inf
    info = dict(graph.info, added=int(m))
    g = Graph(rows, dist, p.metric, info)
    data = x_all
    if is_device_array(index.dataset):
        import cupy as cp

        data = cp.asarray(x_all)
        g = Graph(cp.asarray(rows), cp.asarray(dist), p.metric, info)
    codes = None
    if index.hasher is not None:
        codes = np.concatenate([as_numpy(index.codes), as_numpy(index.hasher.encode(as_numpy(new)))])
    return Index(data, p, g, index.entry_points.copy(), index.hasher, codes,
                 None if row_ids is None else row_ids.extended(m))


# --------------------------------------------------------------------------------------------------
# delete, compact


@runtime_docs
def delete(index: Index | multidevice.MultiDeviceIndex, ids: ArrayLike, *, compact_above: float = 0.5,
           device: DeviceLike = "auto", memory_limit: MemoryLimit = None, verbose: bool = True
           ) -> Index | multidevice.MultiDeviceIndex:
    """Delete the vectors with the ids ``ids``: searches never return them again.

    The vectors stay in the graph and still guide the walks (a graph without them would have holes); the
    index keeps a bitset of its deleted rows (:class:`~knngraph.primitives.filters.RowIds`), cleared from
    the allowed ids of every search, with or without a ``filter`` (the filtered search of :func:`search`:
    the list grows by the live share). When more than ``compact_above`` of the rows are deleted, the index
    is compacted (:func:`compact`): rebuilt over the live vectors, with the same ids. :func:`save` keeps
    the marks, :func:`extend` adds live vectors after them.

    Parameters
    ----------
    index : Index or MultiDeviceIndex
        A sharded :class:`~knngraph.multidevice.MultiDeviceIndex` deletes each part's ids in its part.
    ids : 1-D array of int
        Ids in [0, number of ids given so far); ids deleted already stay deleted.
    compact_above : float, default=0.5
        Compact when the deleted share of the rows passes this (0: at every delete; 1: never, call
        :func:`compact`). A deleted row costs its share of every walk and of memory; compacting costs a
        build over the live vectors.
    {device}
        Where a compaction builds.
    {memory_limit}
    {verbose}

    Returns
    -------
    Index or MultiDeviceIndex
        The index to use from now on: ``index`` itself with its marks updated, or the compacted index
        (``index`` then keeps its marks and stays usable).

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import song
    >>> x = np.random.default_rng(0).random((400, 8), dtype=np.float32)
    >>> index = song.build(song.IndexParams(graph_degree=8, intermediate_graph_degree=16), x, device="cpu")
    >>> index = song.delete(index, [0, 1])
    >>> d, i = song.search(index, x[:2], k=1, params=song.SearchParams(queue_size=16), device="cpu")
    >>> bool((i != [[0], [1]]).all())
    True
    """
    return delete_rows(index, ids, Index, compact_above,
                       lambda: compact(index, device=device, memory_limit=memory_limit, verbose=verbose),
                       memory_limit=memory_limit, verbose=verbose)


@runtime_docs
def compact(index: Index, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
            verbose: bool = True) -> Index:
    """A new index over the live vectors of ``index`` (those not deleted, :func:`delete`), built with its
    params (:func:`build`), that keeps their ids: its ``row_ids`` holds the id of each row and searches
    return those. ``index`` is unchanged; one with nothing deleted comes back as it is.

    Parameters
    ----------
    index : Index
    {device}
    {memory_limit}
    {verbose}
    """
    return compact_rows(index, Index, lambda vectors: build(index.params, vectors, device=device,
                                                          memory_limit=memory_limit, verbose=verbose))


# --------------------------------------------------------------------------------------------------
# persistence


def save(path: FileTarget, index: Index | multidevice.MultiDeviceIndex) -> None:
    """Write ``index`` (vectors, graph, entry points, hash state) to ``path``: versioned, atomic,
    checksummed; loadable on any device. A :class:`~knngraph.multidevice.MultiDeviceIndex` is written
    as a folder (:func:`knngraph.multidevice.save`)."""
    if isinstance(index, multidevice.MultiDeviceIndex):
        return multidevice.save(path, index)
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.song.Index, got {type(index).__name__}")
    g = index.graph.to_host()
    arrays = {"dataset": index.dataset, "graph_indices": g.indices, "graph_distances": g.distances,
              "entry_points": index.entry_points}
    if index.hasher is not None:
        arrays.update(projections=index.hasher.projections_, center=index.hasher.center_, codes=index.codes)
    meta = {"graph_info": g.info}
    save_index(path, index, arrays, meta)


def load(path: FileTarget, *, metric: str | None = None) -> Index | multidevice.MultiDeviceIndex:
    """Read an index written by :func:`save`; ``metric``, when given, must match the saved one."""
    if multidevice.is_saved(path):
        return multidevice.load(path, metric=metric)
    arrays, params, meta = load_index(path, Index, metric=metric)
    with assembling(path, Index):
        graph = Graph(arrays["graph_indices"], arrays["graph_distances"], params.metric, meta.get("graph_info", {}))
        dataset = arrays["dataset"]
    with assembling(path, Index, dataset, graph):
        entries = arrays["entry_points"]
        if entries.ndim != 1 or entries.size < 1 or entries.min() < 0 or entries.max() >= dataset.shape[0]:
            raise ValueError(f"its entry points are not ids in [0, {dataset.shape[0]})")
        hasher = codes = None
        if params.hash_bits:
            hasher = RandomProjectionHasher(params.hash_bits, seed=params.seed).set_state(arrays["projections"],
                                                                                          arrays["center"])
            codes = arrays["codes"]
        rows = RowIds.from_saved(dataset.shape[0], arrays, meta)
        return Index(dataset, params, graph, entries, hasher, codes, rows)
