"""The NN-Descent index: :class:`Index`, :func:`build`, :func:`extend`, :func:`merge_graphs`, :func:`save`,
:func:`load`, and the choice between an in-memory and an out-of-core build."""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._device import (Device, as_cupy, as_numpy, default_memory_limit, is_device_array, parse_memory,
                       resolve_device)
from .._device import on_input_device
from .._typing import Array, DeviceLike, FileTarget, MemoryLimit
from .._validate import check_finite, check_k, check_new_vectors, check_same_dim, check_vectors
from ..graph import Graph
from ..index import Index as IndexBase
from ..index import load_graph_index, runtime_docs, save_graph_index
from ..primitives.distances import DIST_COS, distance_kind, report_distances
from . import _build
from ._common import HOPS, MAX_HOP_LIST, MAX_HOP_WIDTH, auto_sample_size
from ._params import IndexParams

__all__ = ["Index", "build", "extend", "merge_graphs", "save", "load", "piece_params", "AUTO_MAX_SHARDS"]

#: out_of_core='auto' merges shard pairs up to this many shards, then switches to clusters
AUTO_MAX_SHARDS = 4
#: builds and merges keep at least this many neighbours per node while they iterate and return the first
#: graph_degree: NN-Descent finds neighbours through its lists, and lists of one or two entries (random at
#: first) lead nowhere (a 2-NN graph of 2,000 points built with 2-entry random lists recalled 3%)
MIN_BUILD_DEGREE = 16
#: the same for GNND's selective update (the GPU's): each sample inserts only its nearest partners
#: (section 4.3), so short lists converge short of the true neighbours. 15-NN graphs of 3,000 SIFT vectors
#: recalled 0.947 built with 15-entry lists, 0.981 with 24 and 0.992 with 32 (the update 'all': 0.994 with
#: 15); the GNND authors built with 64.
MIN_SELECTIVE_BUILD_DEGREE = 32
#: the selective update's automatic lists are this many times graph_degree long: the tail of a list
#: converges only with room behind it. Whole-list recall@k of the bundled sift 20k (CPU, the GPU's update):
#: k=32 0.953 / 0.982 / 0.991 and k=64 0.942 / 0.975 / 0.990 with lists of 1, 1.5 and 2 times k.
SELECTIVE_LIST_FACTOR = 2


#: the two-phase schedule leaves its short lists after the first iteration that changes fewer than this
#: share of their entries. A CPU study in the GPU's scheme (200k x 128 clustered rows, k=32, lists of 32
#: then 64; ``benchmarks/studies/nndescent_wide_tail.py``) switched after 5 iterations at recall@32 0.89
#: and reached recall@32 0.997 three iterations after the two-hop fill (a fixed 4 iterations: 0.996)
SHORT_LIST_STOP = 0.1
#: the pieces of an out-of-core build over clusters stop, with the selective update, at the same share
#: (``IndexParams.piece_termination_threshold``)
PIECE_STOP = SHORT_LIST_STOP


def _selective(params: IndexParams, dev) -> bool:
    """Whether the build uses GNND's selective update: asked for, or 'auto' on the GPU."""
    return params.update == "selective" or (params.update == "auto" and dev.is_cuda)


def _list_degree(k: int, n: int, selective: bool) -> int:
    """Lists of ``k`` entries, at least MIN_SELECTIVE_BUILD_DEGREE (selective update) or MIN_BUILD_DEGREE."""
    return max(k, min(MIN_SELECTIVE_BUILD_DEGREE if selective else MIN_BUILD_DEGREE, n - 1))


def _build_degree(params: IndexParams, k: int, n: int, selective: bool) -> int:
    """Neighbours per node while building or merging a ``k``-NN graph of ``n`` points (``selective``: with
    GNND's selective update): ``params.intermediate_graph_degree``, or the automatic length."""
    wanted = params.intermediate_graph_degree
    if wanted:
        if wanted < k:
            raise ValueError(f"intermediate_graph_degree={wanted} must be 0 (automatic) or at least "
                             f"graph_degree={k}: the build returns the first graph_degree entries of its lists")
        return min(wanted, max(k, n - 1))
    if selective:
        return max(_list_degree(k, n, True), min(SELECTIVE_LIST_FACTOR * k, n - 1))
    return _list_degree(k, n, False)


def _piece_degree(params: IndexParams, k: int, n: int, selective: bool) -> int:
    """List entries of the pieces of an out-of-core build over clusters (``k``: the in-memory build's): the
    automatic length is ``graph_degree`` (at least 32 / 16), not twice it, since every row's lists from
    its overlapping pieces are merged, which completes the tail. 200k x 64 clustered rows, k=32, the
    selective update, 2 CPU threads: lists of 32 / 48 / 64 entries built in 36 / 49 / 89 s at whole-list
    recall@32 0.989 / 0.995 / 0.996 (more entries also mean smaller, more pieces)."""
    if params.intermediate_graph_degree:
        return k
    return _list_degree(params.graph_degree, n, selective)


def piece_params(params: IndexParams, dataset: Array, device: DeviceLike = "auto") -> IndexParams:
    """``params`` for the build of one piece of a graph built in overlapping pieces whose lists are merged
    afterwards (the several-device and Dask graphs; :meth:`knngraph.registry.Algorithm.build_graph` with
    ``piece=True``): an automatic ``intermediate_graph_degree`` becomes the out-of-core pieces' length
    (``graph_degree``, at least 32 / 16), as in this module's own out-of-core build."""
    if params.intermediate_graph_degree:
        return params
    selective = _selective(params, resolve_device(device, dataset))
    return dataclasses.replace(params, intermediate_graph_degree=_piece_degree(params, params.graph_degree,
                                                                              int(dataset.shape[0]), selective))


def _first_columns(a, k: int):
    """The first ``k`` columns of a NumPy / CuPy array (the nearest entries of sorted lists), contiguous."""
    xp = np if isinstance(a, np.ndarray) else __import__("cupy")
    return xp.ascontiguousarray(a[:, :k]) if a.shape[1] != k else a


def _padded(a, k: int, fill, xp):
    """``a`` with (n, k) columns: cut, or padded on the right with ``fill`` (no neighbour)."""
    if a.shape[1] >= k:
        return xp.ascontiguousarray(a[:, :k])
    pad = xp.full((a.shape[0], k - a.shape[1]), fill, dtype=a.dtype)
    return xp.ascontiguousarray(xp.concatenate([a, pad], axis=1))


@dataclasses.dataclass(eq=False)
class Index(IndexBase):
    """An NN-Descent graph with the vectors it was built on (ready for :func:`extend`).

    Attributes
    ----------
    dataset : array
        The vectors (as given: NumPy, memory map or CuPy).
    params : IndexParams
    graph : Graph
        The k-NN graph (self excluded), nearest first.
    """

    dataset: Array
    params: IndexParams
    graph: Graph

    algorithm = "nndescent"
    _module = "knngraph.nndescent"
    _file_kind = "nndescent-index"
    _params_class = IndexParams


# --------------------------------------------------------------------------------------------------
# helpers


def _config(params: IndexParams, k: int, dev: Device, verbose: bool) -> _build.Config:
    if params.update == "all" and dev.is_cuda:
        raise ValueError("update='all' is only implemented on the CPU; the GPU path uses GNND's selective "
                         "update (update='auto' or 'selective')")
    if params.init == "rp_forest" and dev.is_cuda:
        raise ValueError("init='rp_forest' is only implemented on the CPU; the GPU path starts from cluster windows "
                         "or random lists (init='auto', 'cluster_windows' or 'random')")
    if params.init == "cluster_windows" and not dev.is_cuda:
        raise ValueError("init='cluster_windows' is only implemented on the GPU; the CPU path starts from a random "
                         "projection forest or random lists (init='auto', 'rp_forest' or 'random')")
    selective = _selective(params, dev)
    kind = distance_kind(params.metric)
    if params.init != "auto":
        init = params.init
    else:
        init = "random" if dev.is_cuda else "rp_forest"
    # two phases (``IndexParams.two_phase``): lists of graph_degree (at least 32) first, then the k of the
    # intermediate lists; the short lists' length bounds the two-hop fill's set (MAX_HOP_LIST)
    short_k = max(params.graph_degree, min(MIN_SELECTIVE_BUILD_DEGREE, k))
    if not (params.two_phase and selective and short_k < k and short_k <= MAX_HOP_LIST and k <= MAX_HOP_WIDTH):
        short_k = 0
    # an automatic p is the short lists' (the first phase's; the second samples half as many); a given one is
    # kept for the wide lists (and merges), the first phase taking at most its lists' length
    p = params.sample_size or auto_sample_size(short_k or k, selective)
    p = max(1, min(p, k))
    return _build.Config(k=k, p=p, max_iterations=params.max_iterations, threshold=params.termination_threshold,
                         seed=params.seed, selective=selective, kind=kind, verbose=verbose, init=init,
                         short_k=short_k, short_stop=SHORT_LIST_STOP, tail_p=max(1, p // 2), hops=HOPS)


def _budget(memory_limit, dev: Device) -> int:
    return parse_memory(memory_limit) or default_memory_limit(dev)


def _engine_rows_fit(engine, n, d, itemsize, cfg, budget, cosine, on_device) -> bool:
    # device-resident input is used in place: its vectors need no second copy
    return n * _build._build_bytes_per_node(engine, n, d, 0 if on_device else itemsize, cfg, cosine) <= budget


# Many large shards: the pairwise merges start each cross list from random nodes of the other shard,
# and in a large shard too few of them find their way to the true neighbours (see the warning in
# _build_arrays and the out-of-core results of benchmarks/REPORT.md).
MANY_SHARDS = 8
LARGE_SHARD_ROWS = 100_000


def _build_arrays(data, k, params: IndexParams, dev: Device, verbose: bool, info: dict, *, memory_limit=None,
                  simulate=False, callback=None, force_shard_rows=None):
    """(distances, ids) of the k-NN graph of validated ``data`` (internal distances; engine or host arrays)."""
    cfg = _config(params, k, dev, verbose)
    engine = _build.make_engine(dev, simulate=simulate)
    n, d = data.shape
    cosine = cfg.kind == DIST_COS
    budget = _budget(memory_limit, Device("cpu") if simulate else dev)
    info.update(sample_size=cfg.p, update="selective" if cfg.selective else "all", init=cfg.init)
    with engine:
        on_device = engine.is_cuda and is_device_array(data)
        fits = _engine_rows_fit(engine, n, d, data.dtype.itemsize, cfg, budget, cosine, on_device)
        short = _config(params, _piece_degree(params, k, n, cfg.selective), dev, verbose)
        if not fits and short.k < cfg.k and _engine_rows_fit(engine, n, d, data.dtype.itemsize, short, budget,
                                                             cosine, on_device):
            # automatic lists too long for the budget: shorter ones in memory beat building in pieces
            cfg, fits = short, True
        if fits and force_shard_rows is None:
            stats: dict = {}
            gd, gi = _build.build_in_memory(engine, data, cfg, stats=stats, callback=callback)
            info.update(stats)
            return gd, gi, engine
        def pair_rows():
            return force_shard_rows or _build.plan_shard_rows(engine, n, d, data.dtype.itemsize, cfg, budget,
                                                              cosine=cosine)

        strategy = params.out_of_core
        if strategy == "auto":
            # the pair plan raises MemoryError when not even two small shards fit: then nothing fits
            strategy = "shard_pairs" if -(-n // min(pair_rows(), (n + 1) // 2)) <= AUTO_MAX_SHARDS else "clusters"
        if strategy == "clusters":
            stop = params.piece_termination_threshold
            if stop is None:
                stop = PIECE_STOP if short.selective else params.termination_threshold
            cfg = dataclasses.replace(short, threshold=stop)
            rows = force_shard_rows or _build.plan_piece_rows(engine, n, d, data.dtype.itemsize, cfg, budget,
                                                              cosine=cosine)
            rows = min(rows, max(n // 2, 1))
            stats = {}
            gd, gi = _build.clustered_build(engine, data, cfg, rows, metric=params.metric,
                                            overlap=params.cluster_overlap, margin=params.cluster_margin,
                                            stats=stats)
            info.update(stats)
            return gd, gi, engine
        rows = pair_rows()
        if rows >= n:
            rows = (n + 1) // 2
        n_shards = -(-n // rows)
        if n_shards > MANY_SHARDS and rows >= LARGE_SHARD_ROWS and force_shard_rows is None:
            warnings.warn(
                f"nn-descent: memory_limit splits the data into {n_shards} shards; every shard pair is merged "
                f"once, and with more than about {MANY_SHARDS} large shards the merged graph loses much recall "
                "(see the out-of-core results in benchmarks/REPORT.md). Use out_of_core='clusters' (or 'auto'), "
                "raise memory_limit so that fewer, larger shards are needed, or check recall on a sample with "
                "knngraph.evaluate.", RuntimeWarning, stacklevel=3)
        stats = {"out_of_core": "shard_pairs"}
        gd, gi = _build.sharded_build(engine, data, cfg, rows, stats=stats)
        info.update(stats)
        return gd, gi, engine


def _finish_graph(gd, gi, metric, info, want_device: bool, engine) -> Graph:
    xp = engine.xp if (engine.is_cuda and not engine.simulate and not isinstance(gd, np.ndarray)) else np
    dist = report_distances(gd, metric, xp)
    if want_device:
        return Graph(as_cupy(gi), as_cupy(dist), metric, info)
    return Graph(as_numpy(gi).astype(np.int32, copy=False), as_numpy(dist), metric, info)


def _validated(dataset, name, dev, k=None):
    data = check_vectors(dataset, name, on_gpu=dev.is_cuda and is_device_array(dataset))
    check_finite(data, name)
    if k is not None:
        check_k(k, data.shape[0], graph=True, name="graph_degree")
    return data


# --------------------------------------------------------------------------------------------------
# public API


@runtime_docs
@on_input_device('dataset')
def build(params: IndexParams, dataset: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
          verbose: bool = True, _simulate: bool = False, _callback: Callable[..., Any] | None = None) -> Index:
    """Build the approximate k-NN graph of ``dataset``.

    Parameters
    ----------
    params : IndexParams
    dataset : array of shape (n, d)
        float32, float16, uint8 or int8 (float64 is cast); NumPy (memory maps are read shard by shard
        when they do not fit ``memory_limit``), CuPy, PyTorch or DLPack.
    {device}
    {memory_limit}
        Data that does not fit is built in parts, as ``params.out_of_core`` says.
    {verbose}

    Returns
    -------
    Index
        ``index.graph`` holds int32 ids and float32 distances (n, graph_degree), nearest first; NumPy for
        host input, CuPy for device input.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import nndescent
    >>> x = np.random.default_rng(0).random((500, 8), dtype=np.float32)
    >>> index = nndescent.build(nndescent.IndexParams(graph_degree=10), x, device="cpu", verbose=False)
    >>> index.graph.indices.shape
    (500, 10)
    """
    if not isinstance(params, IndexParams):
        raise TypeError(f"params must be a knngraph.nndescent.IndexParams, got {type(params).__name__}")
    dev = Device("cpu") if _simulate else resolve_device(device, dataset)
    data = _validated(dataset, "dataset", dev, params.graph_degree)
    t0 = time.perf_counter()
    info = {"method": "nndescent", "graph_degree": params.graph_degree, "device": "cuda" if dev.is_cuda else "cpu",
            "seed": params.seed}
    k = params.graph_degree
    build_dev = Device("cuda") if _simulate else dev
    kb = _build_degree(params, k, data.shape[0], _selective(params, build_dev))
    gd, gi, engine = _build_arrays(data, kb, params, build_dev, verbose, info, memory_limit=memory_limit,
                                   simulate=_simulate, callback=_callback)
    gd, gi = _first_columns(gd, k), _first_columns(gi, k)
    info["build_seconds"] = time.perf_counter() - t0
    graph = _finish_graph(gd, gi, params.metric, info, dev.is_cuda and is_device_array(dataset), engine)
    return Index(data, params, graph)


def _check_graph(g, name, base, base_name):
    if not isinstance(g, Graph):
        raise TypeError(f"{name} must be a knngraph.Graph, got {type(g).__name__}")
    if g.n != base.shape[0]:
        raise ValueError(f"{name} has {g.n} nodes but {base_name} has {base.shape[0]} vectors; they must match")


@runtime_docs
def merge_graphs(g1: Graph, g2: Graph, base1: Array, base2: Array, params: IndexParams | None = None, *,
                 graph_degree: int | None = None, device: DeviceLike = "auto", verbose: bool = True) -> Graph:
    """Merge the k-NN graphs of two disjoint sets into the graph of their union (GGM, GNND section 5.1).

    Each list keeps its first half and gets the other half from random nodes of the other set; NN-Descent
    then refines the lists comparing only pairs from different sets; finally the removed halves are merged
    back. Nodes of ``base2`` get ids ``len(base1) + i``.

    Parameters
    ----------
    g1, g2 : Graph
        Graphs of ``base1`` and ``base2`` (same metric), e.g. from :func:`build`.
    base1, base2 : array of shape (n1, d), (n2, d)
    params : IndexParams, optional
        Iteration settings (``sample_size``, ``max_iterations``, ``termination_threshold``, ``update``,
        ``seed``); its ``metric`` and ``graph_degree`` are taken from the graphs.
    graph_degree : int, optional
        Degree of the result, at most the smaller degree of g1 and g2 (the default).
    {device}
    {verbose}

    Returns
    -------
    Graph
        The graph of ``concatenate([base1, base2])``.

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> x = np.random.default_rng(0).random((400, 4), dtype=np.float32)
    >>> g1 = knngraph.knn_graph(x[:200], 8, method="exact", device="cpu", verbose=False)
    >>> g2 = knngraph.knn_graph(x[200:], 8, method="exact", device="cpu", verbose=False)
    >>> g = knngraph.merge_graphs(g1, g2, x[:200], x[200:], device="cpu", verbose=False)
    >>> g.indices.shape
    (400, 8)
    """
    if not isinstance(g1, Graph) or not isinstance(g2, Graph):
        bad = g1 if not isinstance(g1, Graph) else g2
        raise TypeError(f"g1 and g2 must be knngraph.Graph objects, got {type(bad).__name__}")
    if g1.metric != g2.metric:
        raise ValueError(f"g1 and g2 use different metrics ({g1.metric!r} and {g2.metric!r}); they must match")
    if params is not None and not isinstance(params, IndexParams):
        raise TypeError(f"params must be a knngraph.nndescent.IndexParams, got {type(params).__name__}")
    dev = resolve_device(device, base1, base2)
    b1 = _validated(base1, "base1", dev)
    b2 = _validated(base2, "base2", dev)
    check_same_dim(b1, b2, "base1", "base2")
    _check_graph(g1, "g1", b1, "base1")
    _check_graph(g2, "g2", b2, "base2")
    g1.validate_ids()
    g2.validate_ids()
    max_k = min(g1.degree, g2.degree)
    k = max_k if graph_degree is None else graph_degree
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"graph_degree must be an integer, got {type(k).__name__} {k!r}")
    if not 1 <= k <= max_k:
        raise ValueError(f"graph_degree must be in [1, {max_k}] (the smaller degree of g1 and g2), got {k}")
    if k >= b1.shape[0] + b2.shape[0]:
        raise ValueError(f"graph_degree={k} must be smaller than the number of vectors of the union "
                         f"({b1.shape[0] + b2.shape[0]})")
    params = dataclasses.replace(params or IndexParams(), graph_degree=int(k), metric=g1.metric)
    return _merge(g1, g2, b1, b2, params, dev, verbose, want_device=dev.is_cuda and is_device_array(base1))


def _merge(g1, g2, b1, b2, params, dev, verbose, *, want_device, simulate=False):
    t0 = time.perf_counter()
    k = params.graph_degree
    n = b1.shape[0] + b2.shape[0]
    build_dev = Device("cuda") if simulate else dev
    # the inputs' lists are padded to kb columns (GGM keeps half of each)
    kb = _build_degree(params, k, n, _selective(params, build_dev))
    # a merge starts the cross halves from random nodes whatever ``init`` says (GGM, Alg. 3)
    cfg = _config(dataclasses.replace(params, init="random"), kb, build_dev, verbose)
    engine = _build.make_engine(dev, simulate=simulate)
    xp = engine.xp
    if b1.dtype != b2.dtype:
        b1 = b1.astype(np.float32)
        b2 = b2.astype(np.float32)
    n1 = b1.shape[0]
    with engine:
        x_host_or_dev = xp.concatenate([engine.asarray(b1), engine.asarray(b2)])
        x, inv = engine.prepare(x_host_or_dev, cfg.kind)
        g1d = _padded(_build.to_internal(engine.asarray(g1.distances[:, :k]), params.metric, xp), kb, np.inf, xp)
        g2d = _padded(_build.to_internal(engine.asarray(g2.distances[:, :k]), params.metric, xp), kb, np.inf, xp)
        g1i = _padded(engine.asarray(g1.indices[:, :k]), kb, -1, xp)
        g2i = _padded(engine.asarray(g2.indices[:, :k]), kb, -1, xp)
        # GGM assumes every list is sorted by (distance, id); graphs from other builders may order ties
        # differently, which only matters for which half is kept
        stats: dict = {}
        gd, gi = _build.ggm(engine, x, inv, n1, g1d, g1i, g2d, g2i, cfg, readd=True, stats=stats)
        gd, gi = _first_columns(gd, k), _first_columns(gi, k)
        info = {"method": "nndescent-merge", "graph_degree": k, "device": "cuda" if dev.is_cuda else "cpu",
                "sample_size": cfg.p, **stats, "build_seconds": time.perf_counter() - t0}
        return _finish_graph(gd, gi, params.metric, info, want_device, engine)


@runtime_docs
@on_input_device('index', 'new_vectors')
def extend(index: Index, new_vectors: Array, *, device: DeviceLike = "auto", memory_limit: MemoryLimit = None,
           verbose: bool = True) -> Index:
    """Add ``new_vectors`` to ``index`` (GNND section 5.1, incremental construction): build their own
    graph (exactly when there are at most graph_degree of them), then merge it into the index's graph
    with GGM. The new vectors get ids ``len(index) + i``. Returns a new :class:`Index`; ``index`` is
    unchanged.

    Parameters
    ----------
    index : Index
    new_vectors : array of shape (m, d)
        Same dtype as the index's vectors.
    {device}
    {memory_limit}
    {verbose}

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import nndescent
    >>> x = np.random.default_rng(0).random((600, 8), dtype=np.float32)
    >>> index = nndescent.build(nndescent.IndexParams(graph_degree=10), x[:500], device="cpu", verbose=False)
    >>> nndescent.extend(index, x[500:], device="cpu", verbose=False).graph.indices.shape
    (600, 10)
    """
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.nndescent.Index, got {type(index).__name__}")
    dev, new = check_new_vectors(index.dataset, new_vectors, device)
    old = index.dataset
    k = index.graph.degree
    if new.shape[0] <= k:
        dist, ids = _build.small_exact_lists(new, k, index.metric)
        g_new = Graph(ids, dist, index.metric, {"method": "exact"})
    else:
        params = dataclasses.replace(index.params, graph_degree=k, seed=index.params.seed + 1)
        g_new = build(params, new, device=dev, memory_limit=memory_limit, verbose=verbose).graph
    on_dev = dev.is_cuda and is_device_array(old)
    old_b = old if (on_dev or not is_device_array(old)) else as_numpy(old)
    new_b = new if (on_dev or not is_device_array(new)) else as_numpy(new)
    params = dataclasses.replace(index.params, graph_degree=k)
    merged = _merge(index.graph, g_new, old_b, new_b, params, dev, verbose, want_device=on_dev)
    if on_dev:
        import cupy as cp

        data = cp.concatenate([as_cupy(old), as_cupy(new)])
    else:
        data = np.concatenate([as_numpy(old), as_numpy(new)])
    merged.info["method"] = "nndescent"
    merged.info["added"] = int(new.shape[0])
    return Index(data, params, merged)


def save(path: FileTarget, index: Index) -> None:
    """Write the index (graph, vectors, params) to ``path`` (versioned, atomic, checksummed)."""
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.nndescent.Index, got {type(index).__name__}")
    save_graph_index(path, index)


def load(path: FileTarget, *, metric: str | None = None) -> Index:
    """Read an index written by :func:`save` (host arrays); ``metric``, when given, must match."""
    return load_graph_index(path, Index, metric=metric)
