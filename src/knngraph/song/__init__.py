"""SONG: graph search with one GPU warp per query (Zhao, Tan, Li, ICDE 2020; paper 003), on any
fixed-degree graph, with a CPU path that runs the same algorithm.

Two ways in::

    import knngraph
    from knngraph import song

    # 1. any graph + the vectors it was built on
    g = knngraph.optimize_graph(knngraph.knn_graph(base, 96), base, degree=32)
    d, i = song.search(g, base, queries, k=10, queue_size=64)

    # 2. an index bundling vectors, search graph and entry points (build, search, save, load)
    index = song.build(song.IndexParams(metric="sqeuclidean"), base)
    d, i = index.search(queries, k=10)                      # = song.search(index, ...) shape-wise
    song.save("sift.song", index); index = song.load("sift.song")

**The speed/recall knob is ``queue_size``** (Q): each query keeps its Q best candidates (the bounded
priority queue of section IV-C) and its Q best results so far; the search stops when the nearest
unexpanded candidate is worse than all Q results. Larger Q: more vertices expanded, higher recall, lower
throughput; ``k <= queue_size``. Measured with a prepared exact graph of degree 32 (k=10; the
k-NN graph's rows pruned together with their reverse edges, :func:`knngraph.optimize_graph`):

==========  ===============================  =============================================
queue_size  sift-photos 20k (CPU, k-NN 64)   sift-photos 450k (k-NN 96), 10k queries, H200
==========  ===============================  =============================================
16          recall@10 0.966                  recall@10 0.927, 2.8M queries/s
24                                           0.954, 2.1M queries/s
32          0.987                            0.969, 1.8M queries/s
48          0.994                            0.983, 1.35M queries/s
64          0.997                            0.989, 1.08M queries/s
80                                           0.993, 0.89M queries/s
128                                          0.996, 0.60M queries/s
192                                          0.998, 0.45M queries/s
==========  ===============================  =============================================

(benchmarks/results/song_gpu_h200.*; QPS counts the whole call on host queries.)

**Entry points.** By default each query starts from 32 vertices: the *medoid* (the base vector nearest
to the base mean, a central vertex from which most of the graph is a few hops away) and 31 vertices
drawn uniformly at random with ``seed`` (same for every query). Several spread-out starts make the
search robust on graphs with weakly connected clusters (k-NN graphs of real data often have them); they
cost one 32-id chunk of distance computations per query. Pass ``entry_points=`` (1-D ids) to choose.

**Visited set** (section IV-B/E): ``visited="hash"`` (default) is an open-addressing hash table in
shared memory with selected insertion and visited deletion, so it holds only the ids in the queue and
in the results (<= 2Q); ``"bloom"`` is a Bloom filter (no deletion: every id ever queued stays marked, so
fewer distances are recomputed but rare false positives may skip a vertex).

**What is implemented from the paper**: one warp per query and the three stages of Fig. 3; the
bounded priority queue (symmetric min-max heap), selected insertion and visited deletion (section IV);
hash table and Bloom filter visited sets; 1-bit hashing (section VII). Not implemented: the Cuckoo filter,
the "basic" and "selected-insertion-only" hash-table ablations of Fig. 7, multi-query per warp and
multi-step probing (section V; the paper measured both as slower than one query and one step).

**Data beyond GPU memory** (section VII): ``IndexParams(hash_bits=128)`` keeps 1-bit random-projection
codes (16 bytes per vector at 128 bits) on the GPU and the full vectors in host memory; the graph is
searched with Hamming distances and the final ``rerank`` candidates are re-ranked exactly on the host.
Use it when the vectors do not fit on the GPU (the graph, 4 * degree bytes per vector, must); expect
lower recall at a given queue size than the full-vector search and raise ``queue_size`` / ``rerank``.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .._device import Device, array_kind, as_numpy, is_device_array, resolve_device, return_as
from .._distances import cpu_vectors, distance_kind, inverse_norms, report_distances
from .._params import Interval, Metric, Options, Params
from .._validate import check_finite, check_k, check_same_dim, check_vectors
from ..bruteforce import KNNResult
from ..graph import Graph, load_arrays, save_arrays
from .hashing import HASH_BITS, RandomProjectionHasher
from .prepare import optimize_graph

__all__ = ["IndexParams", "SearchParams", "Index", "build", "search", "save", "load", "optimize_graph",
           "default_entry_points", "RandomProjectionHasher", "KNNResult", "MAX_QUEUE_SIZE",
           "DEFAULT_ENTRY_POINTS"]

#: largest queue_size (shared memory per warp grows with it)
MAX_QUEUE_SIZE = 1024
#: number of default entry points (the medoid + random vertices)
DEFAULT_ENTRY_POINTS = 32
_FILE_KIND = "song-index"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchParams(Params):
    """Parameters of a SONG search.

    Parameters
    ----------
    queue_size : int, default=64
        Q, the speed/recall knob: candidates kept in the bounded priority queue and results kept while
        searching; 1 <= k <= Q <= 1024. GPU kernels are compiled for Q rounded up to a power of two
        (>= 16), so nearby values share one build.
    visited : {'hash', 'bloom'}, default='hash'
        Visited set: hash table with visited deletion (exact, <= 2Q ids) or Bloom filter (no deletion).
    rerank : int, default=0
        Hashed indexes only: how many Hamming-nearest candidates are re-ranked with exact distances
        (0: all Q). Between k and Q.
    batch_size : int, default=0
        Queries per GPU launch (0: all, at most 2^20); host queries are copied batch by batch.
    max_registers : int, default=0
        GPU only: cap on registers per thread of the search kernel (0: the compiler's choice). A cap
        lets more warps stay resident at the price of some spilling; benchmarks/song_gpu.py measures it.
    """

    queue_size: int = 64
    visited: str = "hash"
    rerank: int = 0
    batch_size: int = 0
    max_registers: int = 0

    _constraints = {"queue_size": Interval(1, MAX_QUEUE_SIZE), "visited": Options(("hash", "bloom")),
                    "rerank": Interval(0, MAX_QUEUE_SIZE), "batch_size": Interval(0, None),
                    "max_registers": Interval(0, 255)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of a SONG index build: k-NN graph, preparation, optional hashing.

    Parameters
    ----------
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
    graph_degree : int, default=32
        Out-degree of the prepared search graph (:func:`knngraph.optimize_graph`).
    intermediate_graph_degree : int, default=96
        Degree of the k-NN graph built first (capped at n - 1); :func:`knngraph.optimize_graph` prunes
        its rows together with its reverse edges. 96 reaches recall@10 0.99 at a smaller queue_size than
        64 on sift-photos 450k (see knngraph.song.prepare).
    build_method : str, default='exact'
        k-NN graph builder, a key of ``knngraph.GRAPH_METHODS`` ('exact'; 'nndescent' when installed).
    alpha : float, default=1.0
        Pruning relaxation of :func:`knngraph.optimize_graph`.
    fill : bool, default=True
        Fill rows up to ``graph_degree`` (:func:`knngraph.optimize_graph`); False keeps diverse edges only
        (about 12 per row: a larger queue_size for the same recall, but fewer distances per query; on
        the H200 about 15% more queries/s at recall@10 0.99, the same at 0.95).
    hash_bits : int, default=0
        0: search full vectors. 32..1024 (a power of two): keep 1-bit random-projection codes of this
        length for the search and re-rank with the full vectors (data larger than GPU memory).
    seed : int, default=0
        Seeds the random entry points and the hash projections.
    """

    metric: str = "sqeuclidean"
    graph_degree: int = 32
    intermediate_graph_degree: int = 96
    build_method: str = "exact"
    alpha: float = 1.0
    fill: bool = True
    hash_bits: int = 0
    seed: int = 0

    _constraints = {"metric": Metric(), "graph_degree": Interval(1, 1024),
                    "intermediate_graph_degree": Interval(1, 4096), "alpha": Interval(1.0, None, integer=False), "fill": Options((True, False)),
                    "hash_bits": Options((0,) + HASH_BITS), "seed": Interval(0, None)}


# --------------------------------------------------------------------------------------------------
# validation helpers


def _check_graph(graph, n: int):
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a knngraph.Graph, got {type(graph).__name__}")
    if graph.n != n:
        raise ValueError(f"graph has {graph.n} rows but base has {n} vectors; they must match")
    ids = graph.indices
    if is_device_array(ids):
        import cupy as cp

        g = cp.asarray(ids)
        if g.size and (int(g.min()) < -1 or int(g.max()) >= n):
            bad = cp.argmax(((g < -1) | (g >= n)).any(axis=1))
            raise ValueError(f"graph row {int(bad)} holds neighbour ids outside [-1, {n})")
    else:
        graph.validate_ids()


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
                         "so raise queue_size to at least k")
    if sp.rerank and sp.rerank < k:
        raise ValueError(f"rerank={sp.rerank} must be at least k={k} (or 0 for all of queue_size)")
    return k


def _merge_params(params, overrides) -> SearchParams:
    if params is None:
        params = SearchParams()
    elif not isinstance(params, SearchParams):
        raise TypeError(f"params must be a knngraph.song.SearchParams, got {type(params).__name__}")
    overrides = {key: v for key, v in overrides.items() if v is not None}
    return dataclasses.replace(params, **overrides) if overrides else params


def default_entry_points(base, metric: str = "sqeuclidean", n_points: int = DEFAULT_ENTRY_POINTS,
                         seed: int = 0) -> np.ndarray:
    """The default entry points: the medoid (base vector nearest to the mean, by ``metric``) followed by
    ``n_points - 1`` distinct vertices drawn uniformly at random with ``seed``. int32 host array."""
    xp = __import__("cupy") if is_device_array(base) else np
    n, d = base.shape
    kind = distance_kind(metric)
    chunk = 1 << 16
    total = xp.zeros(d, xp.float64)
    for s in range(0, n, chunk):
        total += base[s:s + chunk].astype(xp.float32).sum(axis=0, dtype=xp.float64)
    mean = (total / n).astype(xp.float32)
    if kind == 2:  # cosine: the direction of the mean
        nrm = float(xp.linalg.norm(mean))
        mean = mean / nrm if nrm > 0 else mean
    best_d, best_i = np.inf, 0
    for s in range(0, n, chunk):
        blk = base[s:s + chunk].astype(xp.float32)
        if kind == 0:
            dist = ((blk - mean) ** 2).sum(axis=1)
        elif kind == 1:
            dist = -(blk @ mean)
        else:
            nb = xp.linalg.norm(blk, axis=1)
            nb[nb == 0] = 1
            dist = 1 - (blk @ mean) / nb
        j = int(xp.argmin(dist))
        if float(dist[j]) < best_d:
            best_d, best_i = float(dist[j]), s + j
    rng = np.random.default_rng(seed)
    m = min(n, n_points + 1)
    others = rng.choice(n, size=m, replace=False)
    others = others[others != best_i][: max(0, min(n, n_points) - 1)]
    return np.concatenate([[best_i], others]).astype(np.int32)


# --------------------------------------------------------------------------------------------------
# the search, once arrays are validated and placed


def _search_arrays(dev: Device, g_ids, xb, inv_b, entries, queries, k, metric, sp: SearchParams, *,
                   codes=None, hasher=None, verbose=True, stats=None):
    """Run SONG on prepared arrays. GPU: ``g_ids``, ``xb``, ``inv_b``, ``entries`` (and ``codes``) are
    CuPy; queries anywhere. CPU: NumPy. With ``codes``, the search runs on codes and re-ranks against
    ``xb`` (host vectors). Returns (reported distances, ids) as NumPy or CuPy arrays."""
    kind = distance_kind(metric)
    t0 = time.perf_counter()
    hashed = codes is not None
    if hashed:
        rerank = min(sp.queue_size, sp.rerank or sp.queue_size)
        k_search = max(k, rerank)
    else:
        k_search = k
    if dev.is_cuda:
        import cupy as cp

        from .cpu import DIST_HAMMING
        from .cuda import distance_mode, search_device

        with cp.cuda.Device(dev.index):
            sm = cp.cuda.Device(dev.index).attributes["MultiProcessorCount"]
            if hashed:
                qcodes = hasher.encode(cp.asarray(queries))
                out_k, out_i, nd, ne = search_device(g_ids, codes, qcodes, cp.zeros(1, cp.float32),
                                                     cp.zeros(1, cp.float32), DIST_HAMMING, entries, k_search,
                                                     sp.queue_size, sp.visited, distance_mode(None, 0, True), xp=cp,
                                                     batch_size=sp.batch_size, sm_count=sm, verbose=verbose,
                                                     max_registers=sp.max_registers or None)
            else:
                qinv_fn = (lambda qb: inverse_norms(qb, cp)) if metric == "cosine" else None
                out_k, out_i, nd, ne = search_device(g_ids, xb, queries, inv_b, cp.zeros(1, cp.float32), kind,
                                                     entries, k_search, sp.queue_size, sp.visited,
                                                     distance_mode(xb.dtype, xb.shape[1], False), xp=cp,
                                                     batch_size=sp.batch_size, sm_count=sm, verbose=verbose,
                                                     query_inv_fn=qinv_fn, max_registers=sp.max_registers or None)
            if stats is not None:
                stats["distances_per_query"] = float(nd.mean()) if nd.size else 0.0
                stats["expansions_per_query"] = float(ne.mean()) if ne.size else 0.0
    else:
        from .cpu import DIST_HAMMING, search_cpu

        if hashed:
            qcodes = hasher.encode(as_numpy(queries))
            z = np.zeros(1, np.float32)
            out_k, out_i, nd, ne = search_cpu(g_ids, codes, qcodes, z, z, DIST_HAMMING, entries, k_search,
                                              sp.queue_size, sp.visited)
        else:
            qf = np.ascontiguousarray(as_numpy(queries), dtype=np.float32)
            inv_q = inverse_norms(qf) if metric == "cosine" else np.zeros(1, np.float32)
            out_k, out_i, nd, ne = search_cpu(g_ids, xb, qf, inv_b, inv_q, kind, entries, k_search,
                                              sp.queue_size, sp.visited)
        if stats is not None:
            stats["distances_per_query"] = float(nd.mean()) if nd.size else 0.0
            stats["expansions_per_query"] = float(ne.mean()) if ne.size else 0.0
    if hashed:
        from .cpu import rerank_cpu

        t1 = time.perf_counter()
        cand = out_i.get() if hasattr(out_i, "get") else out_i
        qf = np.ascontiguousarray(as_numpy(queries), dtype=np.float32)
        inv_q = inverse_norms(qf) if metric == "cosine" else np.zeros(1, np.float32)
        out_k, out_i = rerank_cpu(xb, qf, inv_b, inv_q, kind, cand[:, :rerank], k)
        if stats is not None:
            stats["rerank_seconds"] = time.perf_counter() - t1
    xp = np if isinstance(out_k, np.ndarray) else __import__("cupy")
    dist = report_distances(out_k, metric, xp)
    dist = xp.where(out_i < 0, xp.float32(np.inf), dist)
    if stats is not None:
        stats["seconds"] = time.perf_counter() - t0
    return dist, out_i


def search(graph: Graph, base, queries, k: int, params: SearchParams | None = None, *, queue_size=None,
           visited=None, entry_points=None, metric=None, batch_size=None, device="auto", verbose: bool = True,
           stats: dict | None = None) -> KNNResult:
    """Approximate top-``k`` of each query by SONG graph search (one GPU warp per query).

    Parameters
    ----------
    graph : Graph
        A fixed-degree graph over ``base`` (any builder; prepare it with :func:`knngraph.optimize_graph`
        for good recall). Ids outside [-1, n) are rejected; -1 entries are skipped.
    base : array of shape (n, d)
        The vectors (float32, float16, uint8, int8; NumPy, CuPy, PyTorch, DLPack). Device arrays are used
        in place; host arrays are copied to the GPU for the call (an :class:`Index` keeps them there).
    queries : array of shape (n_queries, d)
        Any number of queries; GPU launches take ``batch_size`` at a time.
    k : int
        Neighbours per query, 1 <= k <= queue_size, k <= n.
    params : SearchParams, optional
        ``queue_size``, ``visited``, ``batch_size``; the keyword arguments below override its fields.
    queue_size : int, optional
        The speed/recall knob (default 64, see :class:`SearchParams`).
    visited : {'hash', 'bloom'}, optional
    batch_size : int, optional
        Queries per GPU launch (see :class:`SearchParams`).
    entry_points : 1-D array of int, optional
        Start vertices shared by all queries; default: the medoid + 31 random vertices (module docs).
    metric : str, optional
        Distance; default the graph's metric.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
    verbose : bool, default=True
    stats : dict, optional
        Filled with ``distances_per_query`` (mean number of distance computations),
        ``expansions_per_query`` (mean number of vertices whose row was read) and ``seconds``.

    Returns
    -------
    KNNResult
        ``(distances, indices)``, float32 / int32 of shape (n_queries, k), nearest first (ties by lower
        id), -1 / inf where fewer than k vertices were reached; in the framework of ``queries``.

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> from knngraph import song
    >>> x = np.random.default_rng(0).random((500, 8), dtype=np.float32)
    >>> g = knngraph.optimize_graph(knngraph.knn_graph(x, 16, device="cpu"), x, degree=8, device="cpu")
    >>> d, i = song.search(g, x, x[:3], k=4, queue_size=16, device="cpu")
    >>> i[:, 0].tolist()
    [0, 1, 2]
    """
    sp = _merge_params(params, {"queue_size": queue_size, "visited": visited, "batch_size": batch_size})
    qkind = array_kind(queries)
    dev = resolve_device(device, base, queries)
    on_gpu_base = dev.is_cuda and is_device_array(base)
    x = check_vectors(base, "base", on_gpu=on_gpu_base)
    q = check_vectors(queries, "queries", on_gpu=dev.is_cuda and is_device_array(queries))
    check_same_dim(x, q)
    n = x.shape[0]
    _check_graph(graph, n)
    k = _check_k_queue(k, n, sp)
    check_finite(x, "base")
    check_finite(q, "queries")
    metric = graph.metric if metric is None else Metric().check("search", "metric", metric)
    entries = (_check_entries(entry_points, n) if entry_points is not None
               else default_entry_points(x, metric, DEFAULT_ENTRY_POINTS, 0))
    if dev.is_cuda:
        import cupy as cp

        with cp.cuda.Device(dev.index):
            xb = cp.asarray(x)
            g_ids = cp.ascontiguousarray(cp.asarray(graph.indices))
            inv_b = inverse_norms(xb, cp) if metric == "cosine" else cp.zeros(1, cp.float32)
            e = cp.asarray(entries)
            d, i = _search_arrays(dev, g_ids, xb, inv_b, e, q, k, metric, sp, verbose=verbose, stats=stats)
    else:
        xb = cpu_vectors(as_numpy(x))
        g_ids = np.ascontiguousarray(as_numpy(graph.indices))
        inv_b = inverse_norms(xb) if metric == "cosine" else np.zeros(1, np.float32)
        d, i = _search_arrays(dev, g_ids, xb, inv_b, entries, q, k, metric, sp, verbose=verbose, stats=stats)
    return KNNResult(return_as(qkind, d), return_as(qkind, i))


# --------------------------------------------------------------------------------------------------
# Index


@dataclasses.dataclass
class Index:
    """A SONG index: base vectors (as given), the prepared search graph, entry points and, for hashed
    indexes, the hasher and the codes. GPU copies are made on first use and kept (``release()`` drops them).
    """

    dataset: object
    graph: Graph
    params: IndexParams
    entry_points: np.ndarray
    hasher: RandomProjectionHasher | None = None
    codes: object = None
    _cache: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def metric(self) -> str:
        return self.params.metric

    @property
    def shape(self):
        return tuple(int(s) for s in self.dataset.shape)

    def release(self) -> None:
        """Drop the cached device copies."""
        self._cache.clear()

    def _arrays(self, dev: Device):
        key = str(dev)
        if key in self._cache:
            return self._cache[key]
        metric = self.metric
        if dev.is_cuda:
            import cupy as cp

            with cp.cuda.Device(dev.index):
                g_ids = cp.ascontiguousarray(cp.asarray(self.graph.indices))
                e = cp.asarray(self.entry_points)
                if self.hasher is not None:
                    xb = cpu_vectors(as_numpy(self.dataset))  # full vectors stay on the host
                    inv_b = inverse_norms(xb) if metric == "cosine" else np.zeros(1, np.float32)
                    codes = cp.asarray(self.codes)
                else:
                    xb = cp.asarray(self.dataset)
                    inv_b = inverse_norms(xb, cp) if metric == "cosine" else cp.zeros(1, cp.float32)
                    codes = None
        else:
            g_ids = np.ascontiguousarray(as_numpy(self.graph.indices))
            e = self.entry_points
            xb = cpu_vectors(as_numpy(self.dataset))
            inv_b = inverse_norms(xb) if metric == "cosine" else np.zeros(1, np.float32)
            codes = as_numpy(self.codes) if self.codes is not None else None
        self._cache[key] = (g_ids, xb, inv_b, e, codes)
        return self._cache[key]

    def search(self, queries, k: int, params: SearchParams | None = None, *, queue_size=None, visited=None,
               rerank=None, batch_size=None, max_registers=None, device="auto", verbose: bool = True,
               stats: dict | None = None) -> KNNResult:
        """Top-``k`` of each query; see :func:`knngraph.song.search` (keywords override ``params``)."""
        sp = _merge_params(params, {"queue_size": queue_size, "visited": visited, "rerank": rerank,
                                    "batch_size": batch_size, "max_registers": max_registers})
        qkind = array_kind(queries)
        dev = resolve_device(device, self.dataset, queries)
        q = check_vectors(queries, "queries", on_gpu=dev.is_cuda and is_device_array(queries))
        check_same_dim(self.dataset, q, "the index's vectors")
        k = _check_k_queue(k, self.shape[0], sp)
        check_finite(q, "queries")
        g_ids, xb, inv_b, e, codes = self._arrays(dev)
        d, i = _search_arrays(dev, g_ids, xb, inv_b, e, q, k, self.metric, sp, codes=codes, hasher=self.hasher,
                              verbose=verbose, stats=stats)
        return KNNResult(return_as(qkind, d), return_as(qkind, i))


def build(params: IndexParams, dataset, *, graph: Graph | None = None, device="auto",
          verbose: bool = True) -> Index:
    """Build a SONG index: k-NN graph (``build_method``), :func:`knngraph.optimize_graph`, entry points and
    (``hash_bits > 0``) the 1-bit codes. Give ``graph=`` to use a ready search graph instead.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import song
    >>> x = np.random.default_rng(0).random((400, 8), dtype=np.float32)
    >>> index = song.build(song.IndexParams(graph_degree=8, intermediate_graph_degree=16), x, device="cpu")
    >>> d, i = index.search(x[:2], k=3, queue_size=16, device="cpu")
    >>> i[:, 0].tolist()
    [0, 1]
    """
    if not isinstance(params, IndexParams):
        raise TypeError(f"params must be a knngraph.song.IndexParams, got {type(params).__name__}")
    dev = resolve_device(device, dataset)
    x = check_vectors(dataset, "dataset", on_gpu=dev.is_cuda and is_device_array(dataset))
    check_finite(x, "dataset")
    n = x.shape[0]
    if graph is None:
        if n < 2:
            raise ValueError("a SONG index needs at least 2 vectors")
        from .._api import knn_graph

        k0 = min(params.intermediate_graph_degree, n - 1)
        g0 = knn_graph(x, k0, method=params.build_method, metric=params.metric, device=device, verbose=verbose)
        graph = optimize_graph(g0, x, params.graph_degree, alpha=params.alpha, fill=params.fill, device=device,
                               verbose=verbose)
    else:
        _check_graph(graph, n)
        if graph.metric != params.metric:
            raise ValueError(f"graph was built with metric {graph.metric!r} but the index uses {params.metric!r}")
    entries = default_entry_points(x, params.metric, DEFAULT_ENTRY_POINTS, params.seed)
    hasher = codes = None
    if params.hash_bits:
        hasher = RandomProjectionHasher(params.hash_bits, seed=params.seed).fit(x, params.metric)
        codes = hasher.encode(x)
    return Index(x, graph, params, entries, hasher, codes)


def save(path, index: Index) -> None:
    """Write ``index`` (vectors, graph, entry points, hash state) to ``path``: versioned, atomic,
    checksummed; loadable on any device."""
    if not isinstance(index, Index):
        raise TypeError(f"index must be a knngraph.song.Index, got {type(index).__name__}")
    g = index.graph.to_host()
    arrays = {"dataset": as_numpy(index.dataset), "graph_indices": g.indices, "graph_distances": g.distances,
              "entry_points": index.entry_points}
    if index.hasher is not None:
        arrays.update(projections=index.hasher.projections_, center=index.hasher.center_,
                      codes=as_numpy(index.codes))
    from ..graph import _jsonable

    meta = {"params": dataclasses.asdict(index.params), "graph_info": _jsonable(g.info)}
    save_arrays(path, _FILE_KIND, arrays, meta)


def load(path, *, metric: str | None = None) -> Index:
    """Read an index written by :func:`save`; ``metric``, when given, must match the saved one."""
    arrays, meta = load_arrays(path, _FILE_KIND)
    try:
        params = IndexParams(**meta["params"])
        graph = Graph(arrays["graph_indices"], arrays["graph_distances"], params.metric, meta.get("graph_info", {}))
        entries = arrays["entry_points"]
        dataset = arrays["dataset"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a complete SONG index ({exc})") from None
    if metric is not None and IndexParams(metric=metric).metric != params.metric:
        raise ValueError(f"{path}: index was saved with metric {params.metric!r}, not {metric!r}")
    hasher = codes = None
    if params.hash_bits:
        hasher = RandomProjectionHasher(params.hash_bits, seed=params.seed).set_state(arrays["projections"],
                                                                                      arrays["center"])
        codes = arrays["codes"]
    return Index(dataset, graph, params, entries, hasher, codes)
