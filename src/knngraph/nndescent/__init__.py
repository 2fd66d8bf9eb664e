"""Approximate k-NN graphs by NN-Descent: GNND on the GPU (paper 004), the same iteration on the CPU,
graph merge (GGM), graphs of data larger than the memory budget, and incremental add.

The same outward shape as every algorithm folder::

    params = nndescent.IndexParams(k=32, metric="sqeuclidean")
    index = nndescent.build(params, base)            # index.graph is a knngraph.Graph
    index = index.add(more_vectors)                  # GGM merge of the new points' graph
    nndescent.save("g.knng", index); index = nndescent.load("g.knng")
    g = nndescent.merge_graphs(g1, g2, base1, base2) # = knngraph.merge_graphs

Most users call ``knngraph.knn_graph(base, k, method="nndescent")``.

How it works (paper sections in brackets): initial lists, then iterations of sampling the first p
NEW and p OLD entries of each list plus up to p reverse entries each [4.1], a local join of every
NEW-NEW and NEW-OLD sample pair of each node [4.2], and the update of the lists [4.3]. The GPU path
starts from random lists (GNND Alg. 1) and uses GNND's fixed-size sample arrays, one thread block per
node, shared-memory distance tiles and selective update with spinlocked in-place insertion (see
``_kernels.py``). The CPU path starts from a random projection forest, as pynndescent does (each node's
nearest leaf-mates in a few trees that split space by the hyperplane halfway between two random points;
see ``_rptree.py``), which leaves a few iterations to run, and runs the same iteration in numba (see
``cpu.py``): on sift-photos 100k, k=32, 2 threads, graph recall@10 0.9976 in 3.8 s where pynndescent's
default build gives 0.9968 in 6.6 s (benchmarks/results/nndescent_cpu_2cores.json). Merging two graphs
[5.1] keeps half of every list, fills the other half with random nodes of the other set and refines with
cross pairs only.

When the data does not fit ``memory_limit`` (out-of-core), ``out_of_core`` picks how it is cut:

* ``'shard_pairs'``: the paper's scheme [5]: equal shards in storage order, each shard's graph built,
  then every pair of shards merged once with GGM, the next shard loading while the current merge runs.
  With few shards this is the most accurate; but a node's true neighbours are spread over all s shards,
  so with many shards each merge must find far-down cross neighbours from random starts, the cost grows
  with s^2 and recall falls (measured on an H200, 10M clustered points in 41 shards: graph recall@10
  0.29 after 861 merges and 388 s; 1M points in 5 shards: 0.9999).
* ``'clusters'``: k-means centroids from a sample, every row in the clusters of its ``cluster_overlap``
  nearest centroids, each cluster (halved until it fits) built in memory while the next one loads, and
  every row's lists from its clusters merged (see ``_partition.py``). About ``cluster_overlap``
  in-memory builds of work, whatever the number of clusters.
* ``'auto'`` (default): 'shard_pairs' when at most 4 shards are needed (6 merges), else 'clusters'.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np

from .._device import (Device, array_kind, as_cupy, as_numpy, default_memory_limit, is_device_array,
                       resolve_device)
from .._distances import DIST_COS, distance_kind, report_distances
from .._params import Interval, MemoryLimit, Metric, Options, Params
from .._validate import check_finite, check_k, check_same_dim, check_vectors
from ..graph import Graph, load_arrays, save_arrays
from . import _build
from ._common import auto_sample_size

__all__ = ["IndexParams", "Index", "build", "extend", "merge_graphs", "save", "load", "nndescent_graph",
           "UPDATE_MODES", "INIT_MODES", "OUT_OF_CORE"]

UPDATE_MODES = ("auto", "all", "selective")
INIT_MODES = ("auto", "random", "rp_forest", "cluster_windows")
OUT_OF_CORE = ("auto", "clusters", "shard_pairs")
#: out_of_core='auto' merges shard pairs up to this many shards, then switches to clusters
AUTO_MAX_SHARDS = 4
_MAX_SAMPLE = 32


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of an NN-Descent graph build.

    Parameters
    ----------
    k : int, default=32
        Graph degree: neighbours kept per node (1 <= k < n).
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
        Distance; see :mod:`knngraph.metrics`.
    sample_size : int, default=0
        p, the NEW and OLD entries sampled from each list per iteration (GNND section 4.1); reverse
        samples add up to p more of each. 0 = auto: k, at most 32 (the GNND authors used k=64, p=32).
    max_iterations : int, default=20
        Iteration cap.
    termination_threshold : float, default=0.001
        Stop when an iteration changes fewer than this share of the n*k list entries.
    update : {'auto', 'all', 'selective'}, default='auto'
        'selective' inserts only each sample's nearest partners (GNND section 4.3); 'all' inserts every
        improving pair (classic NN-Descent; CPU only). 'auto': 'selective' on the GPU, 'all' on the CPU,
        where distance computations dominate and 'all' reaches a given recall sooner.
    init : {'auto', 'random', 'rp_forest', 'cluster_windows'}, default='auto'
        Initial lists. 'random': k random nodes each (GNND Alg. 1). 'rp_forest' (CPU only): every
        node's nearest leaf-mates in a forest of random projection trees, as pynndescent starts
        NN-Descent; far fewer iterations follow. The forest has ``max(3, min(12, round(2 log10 n)))``
        trees with leaves of at most ``max(32, min(256, 5k))`` points (10 trees of 160 for 100k
        points and k=32). 'cluster_windows' (GPU only): the exact k-NN inside windows of
        ``max(1024, 2k)`` consecutive points of three k-means cluster orderings, by batched GEMM: on
        sift-photos 450k (k=64, H200) graph recall@10 0.86 after one iteration and 0.984 after three
        (0.28 s), but no sooner than random lists at 0.99 and above (its lists lack long-range links).
        Meant for L2 and cosine; inner product runs but its neighbours lie outside the clusters.
        'auto': 'rp_forest' on the CPU, 'random' on the GPU.
    seed : int, default=0
        Seeds the initial graph and (CPU) the reverse sampling. Same seed, same CPU result.
    memory_limit : int or str or None, default=None
        Most bytes of working memory (device memory on the GPU, "8GB" works). None: free device memory
        minus a margin (GPU), a quarter of RAM (CPU). Data that does not fit is built in parts, as
        ``out_of_core`` says.
    out_of_core : {'auto', 'clusters', 'shard_pairs'}, default='auto'
        How data larger than ``memory_limit`` is built (module docs): 'shard_pairs' is the paper's
        all-pairs GGM merge of equal shards; 'clusters' builds overlapping k-means clusters one at a
        time; 'auto' takes shard pairs when at most 4 shards are needed, else clusters.
    cluster_overlap : int, default=3
        With ``out_of_core='clusters'``: how many nearest clusters each row joins (1 to 8). The work is
        about ``cluster_overlap`` in-memory builds; more overlap keeps more of the neighbours that lie
        across cluster borders. Graph recall@10 with k=32 for overlap 1 / 2 / 3 / 4: sift-photos 100k in
        clusters of at most 20k rows 0.83 / 0.96 / 0.99 / -, of at most 4k rows - / 0.89 / 0.95 / -;
        a 200k-point, 2,000-component Gaussian mixture in clusters of at most 8k rows - / 0.90 / 0.98 /
        0.99 (time 1 : 1.6 : 2.3 from overlap 2 to 4).
    """

    k: int = 32
    metric: str = "sqeuclidean"
    sample_size: int = 0
    max_iterations: int = 20
    termination_threshold: float = 0.001
    update: str = "auto"
    init: str = "auto"
    seed: int = 0
    memory_limit: object = None
    out_of_core: str = "auto"
    cluster_overlap: int = 3

    _constraints = {"k": Interval(1, None), "metric": Metric(), "sample_size": Interval(0, _MAX_SAMPLE),
                    "max_iterations": Interval(1, None), "termination_threshold": Interval(0.0, 1.0, integer=False),
                    "update": Options(UPDATE_MODES), "init": Options(INIT_MODES), "seed": Interval(0, 2**63 - 1),
                    "memory_limit": MemoryLimit(), "out_of_core": Options(OUT_OF_CORE),
                    "cluster_overlap": Interval(1, 8)}


@dataclasses.dataclass
class Index:
    """An NN-Descent graph with the vectors it was built on, ready for :meth:`add`.

    Attributes
    ----------
    graph : Graph
        The k-NN graph (self excluded), nearest first.
    dataset : array
        The vectors (as given: NumPy, memory map or CuPy).
    params : IndexParams
    """

    graph: Graph
    dataset: object
    params: IndexParams

    @property
    def metric(self) -> str:
        return self.params.metric

    @property
    def k(self) -> int:
        return self.graph.degree

    def add(self, new_vectors, *, device="auto", verbose: bool = True) -> "Index":
        """A new index over ``dataset + new_vectors`` (see :func:`extend`)."""
        return extend(self, new_vectors, device=device, verbose=verbose)


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
    selective = params.update == "selective" or (params.update == "auto" and dev.is_cuda)
    kind = distance_kind(params.metric)
    if params.init != "auto":
        init = params.init
    else:
        init = "random" if dev.is_cuda else "rp_forest"
    p = params.sample_size or auto_sample_size(k, selective)
    p = max(1, min(p, k))
    return _build.Config(k=k, p=p, max_iterations=params.max_iterations, threshold=params.termination_threshold,
                         seed=params.seed, selective=selective, kind=kind, verbose=verbose, init=init)


def _budget(params: IndexParams, dev: Device) -> int:
    return params.memory_limit or default_memory_limit(dev)


def _engine_rows_fit(engine, n, d, itemsize, cfg, budget, cosine, on_device) -> bool:
    # device-resident input is used in place: its vectors need no second copy
    return n * _build._build_bytes_per_node(engine, n, d, 0 if on_device else itemsize, cfg, cosine) <= budget


# Many large shards: the pairwise merges start each cross list from random nodes of the other shard,
# and in a large shard too few of them find their way to the true neighbours (see the warning in
# _build_arrays; measured with 41 shards: 24k rows each kept recall, 244k rows did not).
MANY_SHARDS = 8
LARGE_SHARD_ROWS = 100_000


def _build_arrays(data, k, params: IndexParams, dev: Device, verbose: bool, info: dict, *, simulate=False,
                  callback=None, force_shard_rows=None):
    """(distances, ids) of the k-NN graph of validated ``data`` (internal distances; engine or host arrays)."""
    cfg = _config(params, k, dev, verbose)
    engine = _build.make_engine(dev, simulate=simulate)
    n, d = data.shape
    cosine = cfg.kind == DIST_COS
    budget = _budget(params, Device("cpu") if simulate else dev)
    info.update(sample_size=cfg.p, update="selective" if cfg.selective else "all", init=cfg.init)
    with engine:
        on_device = engine.is_cuda and is_device_array(data)
        fits = _engine_rows_fit(engine, n, d, data.dtype.itemsize, cfg, budget, cosine, on_device)
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
            rows = force_shard_rows or _build.plan_piece_rows(engine, n, d, data.dtype.itemsize, cfg, budget,
                                                              cosine=cosine)
            rows = min(rows, max(n // 2, 1))
            stats = {}
            gd, gi = _build.clustered_build(engine, data, cfg, rows, metric=params.metric,
                                            overlap=params.cluster_overlap, stats=stats)
            info.update(stats)
            return gd, gi, engine
        rows = pair_rows()
        if rows >= n:
            rows = (n + 1) // 2
        n_shards = -(-n // rows)
        if n_shards > MANY_SHARDS and rows >= LARGE_SHARD_ROWS and force_shard_rows is None:
            warnings.warn(
                f"nn-descent: memory_limit splits the data into {n_shards} shards; every shard pair is merged "
                f"once, and with more than about {MANY_SHARDS} shards the merged graph loses recall (measured on "
                "10M x 128 clustered points: 41 shards of 244k rows gave graph recall@10 0.29, 41 shards of "
                "24k rows 0.96). Use out_of_core='clusters' (or 'auto'), raise memory_limit so that fewer, "
                "larger shards are needed, or check recall on a sample with knngraph.evaluate.",
                RuntimeWarning, stacklevel=3)
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
        check_k(k, data.shape[0], graph=True)
    return data


# --------------------------------------------------------------------------------------------------
# public API


def build(params: IndexParams, dataset, *, device="auto", verbose: bool = True, _simulate: bool = False,
          _callback=None) -> Index:
    """Build the approximate k-NN graph of ``dataset``.

    Parameters
    ----------
    params : IndexParams
    dataset : array of shape (n, d)
        float32, float16, uint8 or int8 (float64 is cast); NumPy (memory maps are read shard by shard
        when they do not fit ``memory_limit``), CuPy, PyTorch or DLPack.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
    verbose : bool, default=True
        Progress bars on a terminal.

    Returns
    -------
    Index
        ``index.graph`` holds int32 ids and float32 distances (n, k), nearest first; NumPy for host
        input, CuPy for device input.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import nndescent
    >>> x = np.random.default_rng(0).random((500, 8), dtype=np.float32)
    >>> index = nndescent.build(nndescent.IndexParams(k=10), x, device="cpu", verbose=False)
    >>> index.graph.indices.shape
    (500, 10)
    """
    if not isinstance(params, IndexParams):
        raise TypeError(f"params must be nndescent.IndexParams, got {type(params).__name__}")
    dev = Device("cpu") if _simulate else resolve_device(device, dataset)
    data = _validated(dataset, "dataset", dev, params.k)
    t0 = time.perf_counter()
    info = {"method": "nndescent", "k": params.k, "device": "cuda" if dev.is_cuda else "cpu",
            "seed": params.seed}
    gd, gi, engine = _build_arrays(data, params.k, params, Device("cuda") if _simulate else dev, verbose, info,
                                   simulate=_simulate, callback=_callback)
    info["build_seconds"] = time.perf_counter() - t0
    graph = _finish_graph(gd, gi, params.metric, info, dev.is_cuda and is_device_array(dataset), engine)
    return Index(graph, data, params)


def nndescent_graph(base, k: int, *, metric: str = "sqeuclidean", device="auto", verbose: bool = True,
                    sample_size: int = 0, max_iterations: int = 20, termination_threshold: float = 0.001,
                    update: str = "auto", init: str = "auto", seed: int = 0, memory_limit=None,
                    out_of_core: str = "auto", cluster_overlap: int = 3) -> Graph:
    """The ``method="nndescent"`` builder of :func:`knngraph.knn_graph` (parameters as :class:`IndexParams`)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__} {k!r}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    params = IndexParams(k=int(k), metric=metric, sample_size=sample_size, max_iterations=max_iterations,
                         termination_threshold=termination_threshold, update=update, init=init, seed=seed,
                         memory_limit=memory_limit, out_of_core=out_of_core, cluster_overlap=cluster_overlap)
    return build(params, base, device=device, verbose=verbose).graph


def _check_graph(g, name, base, base_name):
    if not isinstance(g, Graph):
        raise TypeError(f"{name} must be a knngraph.Graph, got {type(g).__name__}")
    if g.n != base.shape[0]:
        raise ValueError(f"{name} has {g.n} nodes but {base_name} has {base.shape[0]} vectors; they must match")


def merge_graphs(g1: Graph, g2: Graph, base1, base2, *, k: int | None = None, sample_size: int = 0,
                 max_iterations: int = 20, termination_threshold: float = 0.001, update: str = "auto",
                 seed: int = 0, device="auto", verbose: bool = True) -> Graph:
    """Merge the k-NN graphs of two disjoint sets into the graph of their union (GGM, paper section 5.1).

    Each list keeps its first k/2 entries and gets k/2 random nodes of the other set; NN-Descent then
    refines the lists comparing only pairs from different sets; finally the removed halves are merged
    back. Nodes of ``base2`` get ids ``len(base1) + i``.

    Parameters
    ----------
    g1, g2 : Graph
        Graphs of ``base1`` and ``base2`` (same metric), e.g. from :func:`build`.
    base1, base2 : array of shape (n1, d), (n2, d)
    k : int, optional
        Degree of the result, at most the smaller degree of g1 and g2 (the default).
    sample_size, max_iterations, termination_threshold, update, seed
        As for :class:`IndexParams`.

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
    dev = resolve_device(device, base1, base2)
    b1 = _validated(base1, "base1", dev)
    b2 = _validated(base2, "base2", dev)
    check_same_dim(b1, b2, "base1", "base2")
    _check_graph(g1, "g1", b1, "base1")
    _check_graph(g2, "g2", b2, "base2")
    g1.validate_ids()
    g2.validate_ids()
    max_k = min(g1.degree, g2.degree)
    k = max_k if k is None else k
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__} {k!r}")
    if not 1 <= k <= max_k:
        raise ValueError(f"k must be in [1, {max_k}] (the smaller degree of g1 and g2), got {k}")
    if k >= b1.shape[0] + b2.shape[0]:
        raise ValueError(f"k={k} must be smaller than the number of vectors of the union "
                         f"({b1.shape[0] + b2.shape[0]})")
    params = IndexParams(k=int(k), metric=g1.metric, sample_size=sample_size, max_iterations=max_iterations,
                         termination_threshold=termination_threshold, update=update, seed=seed)
    return _merge(g1, g2, b1, b2, params, dev, verbose, want_device=dev.is_cuda and is_device_array(base1))


def _merge(g1, g2, b1, b2, params, dev, verbose, *, want_device, simulate=False):
    t0 = time.perf_counter()
    k = params.k
    # a merge starts the cross halves from random nodes whatever ``init`` says (GGM, Alg. 3)
    cfg = _config(dataclasses.replace(params, init="random"), k, Device("cuda") if simulate else dev, verbose)
    engine = _build.make_engine(dev, simulate=simulate)
    xp = engine.xp
    if b1.dtype != b2.dtype:
        b1 = b1.astype(np.float32)
        b2 = b2.astype(np.float32)
    n1 = b1.shape[0]
    with engine:
        x_host_or_dev = xp.concatenate([engine.asarray(b1), engine.asarray(b2)])
        x, inv = engine.prepare(x_host_or_dev, cfg.kind)
        g1d = _build.to_internal(engine.asarray(g1.distances[:, :k]), params.metric, xp)
        g2d = _build.to_internal(engine.asarray(g2.distances[:, :k]), params.metric, xp)
        g1i = xp.ascontiguousarray(engine.asarray(g1.indices[:, :k]))
        g2i = xp.ascontiguousarray(engine.asarray(g2.indices[:, :k]))
        # GGM assumes every list is sorted by (distance, id); graphs from other builders may order ties
        # differently, which only matters for which half is kept
        stats: dict = {}
        gd, gi = _build.ggm(engine, x, inv, n1, g1d, g1i, g2d, g2i, cfg, readd=True, stats=stats)
        info = {"method": "nndescent-merge", "k": k, "device": "cuda" if dev.is_cuda else "cpu",
                "sample_size": cfg.p, **stats, "build_seconds": time.perf_counter() - t0}
        return _finish_graph(gd, gi, params.metric, info, want_device, engine)


def extend(index: Index, new_vectors, *, device="auto", verbose: bool = True) -> Index:
    """Add ``new_vectors`` to ``index`` (paper section 5.1, incremental construction): build their own
    graph (exactly when there are at most k of them), then merge it into the index's graph with GGM.
    The new vectors get ids ``index.graph.n + i``. Returns a new :class:`Index`; ``index`` is unchanged.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import nndescent
    >>> x = np.random.default_rng(0).random((600, 8), dtype=np.float32)
    >>> index = nndescent.build(nndescent.IndexParams(k=10), x[:500], device="cpu", verbose=False)
    >>> index.add(x[500:], device="cpu", verbose=False).graph.indices.shape
    (600, 10)
    """
    if not isinstance(index, Index):
        raise TypeError(f"index must be an nndescent.Index, got {type(index).__name__}")
    dev = resolve_device(device, index.dataset, new_vectors)
    new = _validated(new_vectors, "new_vectors", dev)
    check_same_dim(index.dataset, new, "index.dataset", "new_vectors")
    old = index.dataset
    if new.dtype != old.dtype:
        raise TypeError(f"new_vectors has dtype {new.dtype} but the index holds {old.dtype}; convert them first")
    k = index.graph.degree
    if new.shape[0] <= k:
        dist, ids = _build.small_exact_lists(new, k, index.metric)
        g_new = Graph(ids, dist, index.metric, {"method": "exact"})
    else:
        params = dataclasses.replace(index.params, k=k, seed=index.params.seed + 1)
        g_new = build(params, new, device=dev, verbose=verbose).graph
    on_dev = dev.is_cuda and is_device_array(old)
    old_b = old if (on_dev or not is_device_array(old)) else as_numpy(old)
    new_b = new if (on_dev or not is_device_array(new)) else as_numpy(new)
    params = dataclasses.replace(index.params, k=k)
    merged = _merge(index.graph, g_new, old_b, new_b, params, dev, verbose, want_device=on_dev)
    if on_dev:
        import cupy as cp

        data = cp.concatenate([as_cupy(old), as_cupy(new)])
    else:
        data = np.concatenate([as_numpy(old), as_numpy(new)])
    merged.info["method"] = "nndescent"
    merged.info["added"] = int(new.shape[0])
    return Index(merged, data, params)


def save(path, index: Index) -> None:
    """Write the index (graph, vectors, params) to ``path`` (versioned, atomic, checksummed)."""
    g = index.graph.to_host()
    meta = {"metric": index.metric, "params": {f.name: getattr(index.params, f.name)
                                              for f in dataclasses.fields(index.params)},
            "info": {k: v for k, v in g.info.items() if isinstance(v, (int, float, str, bool))}}
    save_arrays(path, "nndescent-index", {"indices": g.indices, "distances": g.distances,
                                          "dataset": as_numpy(index.dataset)}, meta)


def load(path, *, metric: str | None = None) -> Index:
    """Read an index written by :func:`save` (host arrays); ``metric``, when given, must match."""
    arrays, meta = load_arrays(path, "nndescent-index")
    params = IndexParams(**meta["params"])
    if metric is not None and IndexParams(metric=metric).metric != params.metric:
        raise ValueError(f"{path}: index was saved with metric {params.metric!r}, not {metric!r}")
    graph = Graph(arrays["indices"], arrays["distances"], params.metric, dict(meta.get("info", {})))
    return Index(graph, arrays["dataset"], params)
