"""The methods the runner measures: knngraph's and the baselines users would otherwise pick.

Each method answers one or both tasks:

* ``search``: build an index over the base (``build``), then answer the queries (``search``, top-k ids);
* ``graph``: build the k-nearest-neighbour graph of the base (``graph``: k other nodes per node).

Parameters are split into build parameters and search parameters; a sweep is the product of lists of
values for each (``build_sweep`` / ``search_sweep`` / ``graph_sweep`` hold the defaults, the suites and the
command line override them). A baseline whose library is not installed reports why in :meth:`missing`
and the runner writes a ``skipped`` line with that note: nothing is ever substituted for it.

knngraph's methods are its registry (:mod:`knngraph.registry`) through one adapter,
:class:`KnngraphMethod`: ``knngraph-<algorithm>`` for every algorithm, and ``knngraph-song-on-<builder>``
for the builders of search graphs (GGNN, GRNND), whose graphs the fast searcher searches as built. Only
their public API is used (``build``, ``search``, ``from_graph``, ``knngraph.knn_graph``).

Inputs: on ``device="cuda"`` knngraph and PyTorch receive the base and queries already on the GPU (CuPy
arrays, uploaded once per dataset outside the timings) unless a run asks for ``input="host"``; CPU
libraries receive NumPy arrays. Conversions a library needs (uint8 / float16 -> float32, normalising
for cosine) happen inside the timed build or search call, since users pay them too.

The cuVS baselines (``cuvs-cagra``, ``cuvs-cagra-on-knngraph``, ``cuvs-nn-descent``, ``cuvs-brute-force``)
run only on ``device="cuda"`` and only where cuVS is installed and loads; cuVS is no dependency of
knngraph (not in any extra, not in CI). They receive the CuPy arrays as they are (cuVS reads
``__cuda_array_interface__``) and return cuVS's device arrays, which the runner copies to the host after
the clock stops. cuVS allocates through RMM, not CuPy's pool, so ``peak_gpu_bytes`` does not see what it
holds.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import time

import numpy as np

from .data import host as _host
from .measure import sync

__all__ = ["Context", "Method", "KnngraphMethod", "METHODS", "GRAPH_SEARCHER", "KNOB_SWEEPS", "get", "strip_self"]


@dataclasses.dataclass
class Context:
    """Where and how a run executes: ``device`` 'cpu' or 'cuda', CPU ``threads``, ``seed``."""

    device: str = "cpu"
    threads: int = 1
    seed: int = 0


def _float32(x) -> np.ndarray:
    return np.ascontiguousarray(_host(x), dtype=np.float32)


def _normalised(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(x / norms, dtype=np.float32)


def strip_self(ids: np.ndarray, k: int) -> np.ndarray:
    """Drop each row's own id from a (n, >= k+1) neighbour table (the last column where it is absent)."""
    ids = _host(ids)
    n = ids.shape[0]
    own = ids == np.arange(n)[:, None]
    has = own.any(axis=1)
    drop = np.where(has, own.argmax(axis=1), ids.shape[1] - 1)
    keep = np.ones(ids.shape, bool)
    keep[np.arange(n), drop] = False
    return ids[keep].reshape(n, ids.shape[1] - 1)[:, :k]


class Method:
    """Base class; see the module docs. Subclasses set the class attributes and override the calls."""

    #: name used in JSON lines, suites and on the command line
    name = ""
    #: distribution whose version is recorded
    library = ""
    #: Python module that must import for the method to run
    module = ""
    #: how to get it, for the note of a skipped run
    install_hint = "pip install knngraph[bench]"
    tasks: tuple = ()
    devices: tuple = ("cpu",)
    #: True when the first call compiles (numba): the build warm-up then runs on a small subset
    compiles = False
    #: False when a search needs no index (exact search): no build time is reported
    has_index = True
    build_sweep: dict = {}
    search_sweep: dict = {}
    graph_sweep: dict = {}
    #: further search parameters (not swept by default) that ``--set`` must route to the search
    search_keys: tuple = ()

    def missing(self) -> str | None:
        """None when usable, else the note written in the ``skipped`` line."""
        if self.module and importlib.util.find_spec(self.module) is None:
            return f"{self.library} is not installed ({self.install_hint}): skipped, not measured"
        return None

    def build(self, ctx: Context, base, metric: str, **params):
        """An index over ``base`` (timed as the build)."""
        return {"base": base, "metric": metric}

    def search(self, ctx: Context, index, queries, k: int, **params):
        """Top-``k`` ids of each query (any array type; timed as the search)."""
        raise NotImplementedError

    def graph(self, ctx: Context, base, metric: str, k: int, **params):
        """(ids (n, k) of each node's k nearest other nodes, info dict) (timed as the build)."""
        raise NotImplementedError

    def finish_graph(self, ids, k: int):
        """The ids of :meth:`graph` as scored, after the timed call: the place for bookkeeping that only
        makes libraries comparable (e.g. dropping the node itself where a library counts it as its own
        neighbour). Default: unchanged."""
        return ids

    def index_info(self, index) -> dict:
        """Facts about a built index worth recording (degree, iterations, ...)."""
        return {}


# --------------------------------------------------------------------------------------------------
# knngraph

#: the searcher that searches the search graphs of GRNND and GGNN (``song.search``, whose ``algo='auto'`` is
#: the library's fast searcher)
GRAPH_SEARCHER = "song"
#: values swept by default for each search knob of the registry (:attr:`knngraph.registry.Algorithm.search_knob`);
#: a knob missing here is swept over its ``SearchParams`` default alone
KNOB_SWEEPS = {"queue_size": [16, 32, 64, 128], "tau": [0.3, 0.4, 0.5, 0.7, 1.0]}


def _fields(params_class) -> tuple:
    return tuple(f.name for f in dataclasses.fields(params_class))


class KnngraphMethod(Method):
    """One algorithm of knngraph's registry through its module contract (:mod:`knngraph.index`): the one
    adapter of every knngraph method.

    * ``graph`` task (graph builders): ``knngraph.knn_graph(base, k, method=<name>)``; build parameters are
      fields of the algorithm's ``IndexParams``; ``memory_limit`` is the call argument (``"quarter"``: a
      quarter of the base's bytes, the out-of-core setting).
    * ``search`` task (searchers): ``build(IndexParams(metric=..., seed=..., **build parameters), base)``,
      timed as the build, then ``search(index, queries, k, SearchParams(**search parameters))``. The default
      sweep is over the registry's ``search_knob`` (:data:`KNOB_SWEEPS`); an algorithm without a knob is
      exact, and its build (a check of the data) is not timed.
    * ``searcher`` given (``knngraph-<searcher>-on-<name>``, for the builders of search graphs): the
      builder's own build, then ``<searcher>.from_graph(index.graph, base)`` (both timed as the build;
      ``info['from_graph_s']`` is the second step's part), searched by the searcher over its knob. Build
      parameters are the builder's ``IndexParams`` fields, search parameters the searcher's
      ``SearchParams`` fields.
    """

    library = "knngraph"
    module = "knngraph"
    devices = ("cpu", "cuda")
    compiles = True
    #: facts of a graph build's ``info`` recorded in its line
    INFO_KEYS = ("iterations", "sample_size", "update", "out_of_core", "shards", "merges", "shard_rows", "clusters",
                 "pieces", "overlap", "margin", "piece_rows_max", "max_piece_rows", "rows_built", "copies",
                 "partition_seconds")

    def __init__(self, algorithm, searcher=None):
        self.algorithm = algorithm
        self.searcher = searcher
        self.search_algorithm = searcher or algorithm
        if searcher is None:
            self.name = f"knngraph-{algorithm.name}"
            self.__doc__ = f"knngraph's {algorithm.summary}."
        else:
            self.name = f"knngraph-{searcher.name}-on-{algorithm.name}"
            self.__doc__ = f"knngraph's {searcher.name} searcher on the search graph of {algorithm.summary}."
        graph = algorithm.builds_graphs and searcher is None
        self.tasks = (("graph",) if graph else ()) + (("search",) if self.search_algorithm.searches else ())
        self.knob = self.search_algorithm.search_knob
        self.has_index = bool(self.knob)
        self.search_sweep = {self.knob: list(KNOB_SWEEPS.get(self.knob, [getattr(
            self.search_algorithm.load().SearchParams(), self.knob)]))} if self.knob else {}

    @property
    def search_keys(self):
        return _fields(self.search_algorithm.load().SearchParams) if self.search_algorithm.searches else ()

    @property
    def build_keys(self):
        """The build parameters (fields of the builder's ``IndexParams``)."""
        return _fields(self.algorithm.load().IndexParams)

    def _index_params(self, ctx, metric, params):
        mod = self.algorithm.load()
        seed = {"seed": ctx.seed} if "seed" in _fields(mod.IndexParams) else {}
        return mod.IndexParams(**{"metric": metric, **seed, **params})

    def build(self, ctx, base, metric, **params):
        mod = self.algorithm.load()
        index = mod.build(self._index_params(ctx, metric, params), base, device=ctx.device, verbose=False)
        if self.searcher is None:
            return {"index": index, "info": {}}
        searcher = self.searcher.load()
        sync()
        t0 = time.perf_counter()
        over = searcher.from_graph(index.graph, base, searcher.IndexParams(metric=metric, seed=ctx.seed),
                                   device=ctx.device, verbose=False)
        sync()
        return {"index": over, "info": {"from_graph_s": time.perf_counter() - t0, **_graph_facts(index.graph)}}

    def search(self, ctx, index, queries, k, **params):
        mod = self.search_algorithm.load()
        return mod.search(index["index"], queries, k, mod.SearchParams(**params), device=ctx.device,
                          verbose=False).indices

    def index_info(self, index):
        graph = getattr(index["index"], "graph", None)
        return {**(_graph_facts(graph) if graph is not None else {}), **index["info"]}

    def graph(self, ctx, base, metric, k, memory_limit=None, **params):
        import knngraph

        if memory_limit == "quarter":
            memory_limit = int(base.nbytes) // 4
        if "seed" in _fields(self.algorithm.load().IndexParams):
            params.setdefault("seed", ctx.seed)
        g = knngraph.knn_graph(base, k, method=self.algorithm.name, metric=metric, device=ctx.device,
                               memory_limit=memory_limit, verbose=False, **params)
        info = {key: g.info[key] for key in self.INFO_KEYS if key in g.info}
        if g.info.get("merge_iterations"):
            info["mean_merge_iterations"] = float(np.mean(g.info["merge_iterations"]))
        if memory_limit is not None:
            info["memory_limit_bytes"] = memory_limit
        return g.indices, info


def _graph_facts(graph) -> dict:
    """Out-degree facts of a search graph: its width (``graph_degree``) and mean number of edges
    (``mean_degree``; GRNND's RNG-pruned rows are sparser than their width)."""
    ids = graph.indices
    xp = np
    if hasattr(ids, "__cuda_array_interface__"):
        import cupy as xp
    return {"graph_degree": int(ids.shape[1]), "mean_degree": float((xp.asarray(ids) >= 0).sum(axis=1).mean())}


def knngraph_methods() -> list:
    """Every algorithm of knngraph's registry through :class:`KnngraphMethod`, and the graph searcher
    (:data:`GRAPH_SEARCHER`) on each builder of search graphs."""
    from knngraph import registry

    out = [KnngraphMethod(a) for a in registry.ALGORITHMS.values() if a.builds_graphs or a.searches]
    searcher = registry.get(GRAPH_SEARCHER)
    out += [KnngraphMethod(a, searcher) for a in registry.ALGORITHMS.values() if a.search_graph and a.builds_graphs]
    return out


# --------------------------------------------------------------------------------------------------
# baselines


class Pynndescent(Method):
    """pynndescent: its NN-Descent k-NN graph (``n_neighbors = k + 1``, self removed: pynndescent counts
    each point as its own first neighbour) and its graph search (``NNDescent`` + ``prepare`` + ``query``)."""

    name = "pynndescent"
    library = "pynndescent"
    module = "pynndescent"
    tasks = ("search", "graph")
    compiles = True
    build_sweep = {"n_neighbors": [30]}
    search_sweep = {"epsilon": [0.0, 0.1, 0.2, 0.3]}
    graph_sweep = {}

    _METRICS = {"sqeuclidean": "sqeuclidean", "euclidean": "euclidean", "cosine": "cosine", "inner_product": "dot"}

    def _index(self, ctx, base, metric, n_neighbors, **params):
        from pynndescent import NNDescent

        return NNDescent(_float32(base), metric=self._METRICS[metric], n_neighbors=n_neighbors, random_state=ctx.seed,
                         n_jobs=ctx.threads, verbose=False, compressed=False, **params)

    def build(self, ctx, base, metric, n_neighbors=30, **params):
        index = self._index(ctx, base, metric, n_neighbors, **params)
        index.prepare()
        return index

    def search(self, ctx, index, queries, k, epsilon=0.1):
        return index.query(_float32(queries), k=k, epsilon=epsilon)[0]

    def graph(self, ctx, base, metric, k, **params):
        index = self._index(ctx, base, metric, k + 1, **params)
        return strip_self(index.neighbor_graph[0], k), {}


class Hnswlib(Method):
    """hnswlib HNSW (``M``, ``ef_construction``; search knob ``ef``)."""

    name = "hnswlib"
    library = "hnswlib"
    module = "hnswlib"
    tasks = ("search",)
    build_sweep = {"M": [16], "ef_construction": [100]}
    search_sweep = {"ef": [10, 20, 40, 80, 160]}

    _SPACES = {"sqeuclidean": "l2", "euclidean": "l2", "cosine": "cosine", "inner_product": "ip"}

    def build(self, ctx, base, metric, M=16, ef_construction=100):
        import hnswlib

        x = _float32(base)
        index = hnswlib.Index(space=self._SPACES[metric], dim=x.shape[1])
        index.init_index(max_elements=x.shape[0], M=M, ef_construction=ef_construction, random_seed=ctx.seed)
        index.set_num_threads(ctx.threads)
        index.add_items(x)
        return index

    def search(self, ctx, index, queries, k, ef=50):
        index.set_ef(max(ef, k))
        return index.knn_query(_float32(queries), k=k, num_threads=ctx.threads)[0]


class _Faiss(Method):
    library = "faiss-cpu"
    module = "faiss"
    tasks = ("search",)

    def _metric(self, metric):
        import faiss

        if metric in ("sqeuclidean", "euclidean"):
            return faiss.METRIC_L2
        return faiss.METRIC_INNER_PRODUCT  # cosine: on normalised vectors

    @staticmethod
    def _prepare(x, metric):
        x = _float32(x)
        return _normalised(x) if metric == "cosine" else x

    def _threads(self, ctx):
        import faiss

        faiss.omp_set_num_threads(ctx.threads)

    def search(self, ctx, index, queries, k, **params):
        import faiss

        self._threads(ctx)
        for key, value in params.items():
            faiss.ParameterSpace().set_index_parameter(index["index"], key, value)
        return index["index"].search(self._prepare(queries, index["metric"]), k)[1]


class FaissFlat(_Faiss):
    """faiss-cpu exact search (``IndexFlatL2`` / ``IndexFlatIP``)."""

    name = "faiss-flat"
    has_index = False

    def build(self, ctx, base, metric):
        import faiss

        self._threads(ctx)
        x = self._prepare(base, metric)
        index = faiss.IndexFlat(x.shape[1], self._metric(metric))
        index.add(x)
        return {"index": index, "metric": metric}


class FaissHNSW(_Faiss):
    """faiss-cpu ``IndexHNSWFlat`` (``M``, ``efConstruction``; search knob ``efSearch``)."""

    name = "faiss-hnsw"
    build_sweep = {"M": [32], "efConstruction": [40]}
    search_sweep = {"efSearch": [16, 32, 64, 128, 256]}

    def build(self, ctx, base, metric, M=32, efConstruction=40):
        import faiss

        self._threads(ctx)
        x = self._prepare(base, metric)
        index = faiss.IndexHNSWFlat(x.shape[1], M, self._metric(metric))
        index.hnsw.efConstruction = efConstruction
        index.add(x)
        return {"index": index, "metric": metric}


class FaissIVF(_Faiss):
    """faiss-cpu ``IndexIVFFlat`` (``nlist`` lists, 0 = a power of two near 4 sqrt(n); search knob
    ``nprobe``). Training (k-means) is part of the build time."""

    name = "faiss-ivf"
    build_sweep = {"nlist": [0]}
    search_sweep = {"nprobe": [1, 2, 4, 8, 16, 32, 64]}

    def build(self, ctx, base, metric, nlist=0):
        import faiss

        self._threads(ctx)
        x = self._prepare(base, metric)
        if nlist == 0:
            nlist = 2 ** round(math.log2(4 * math.sqrt(x.shape[0])))
        quantizer = faiss.IndexFlat(x.shape[1], self._metric(metric))
        index = faiss.IndexIVFFlat(quantizer, x.shape[1], nlist, self._metric(metric))
        index.cp.seed = ctx.seed
        index.train(x)
        index.add(x)
        return {"index": index, "metric": metric, "quantizer": quantizer}

    def index_info(self, index):
        return {"nlist": int(index["index"].nlist)}


class TorchExact(Method):
    """PyTorch on the GPU: float32 GEMM over base tiles + ``torch.topk``, merged across tiles (the plain
    way to get exact k-NN on a GPU). TF32 stays off, so distances are float32-exact as in knngraph."""

    name = "torch-exact"
    library = "torch"
    module = "torch"
    tasks = ("search", "graph")
    devices = ("cuda",)
    install_hint = "pip install knngraph[bench-gpu], with CUDA"
    #: base rows per GEMM tile and query rows per block (memory: tile x block x 4 bytes)
    TILE = 65536
    QUERY_BLOCK = 16384

    def missing(self):
        note = super().missing()
        if note:
            return note
        import torch

        return None if torch.cuda.is_available() else "PyTorch sees no CUDA device: skipped"

    @staticmethod
    def _tensor(x):
        import torch

        if type(x).__module__.startswith("torch"):
            t = x
        elif hasattr(x, "__cuda_array_interface__"):
            t = torch.from_dlpack(x)
        else:
            t = torch.from_numpy(np.ascontiguousarray(x)).cuda()
        return t.float()

    def build(self, ctx, base, metric):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        x = self._tensor(base)
        if metric == "cosine":
            x = torch.nn.functional.normalize(x, dim=1)
        return {"x": x, "norms": (x * x).sum(1), "metric": metric}

    def _knn(self, index, q, k, row_offset=None):
        import torch

        x, norms, metric = index["x"], index["norms"], index["metric"]
        if metric == "cosine":
            q = torch.nn.functional.normalize(q, dim=1)
        best_d = best_i = None
        for s in range(0, x.shape[0], self.TILE):
            e = min(x.shape[0], s + self.TILE)
            dots = q @ x[s:e].T
            if metric in ("sqeuclidean", "euclidean"):
                key = norms[s:e][None, :] - 2 * dots
            else:
                key = -dots
            if row_offset is not None:  # graph: a node is not its own neighbour
                rows = torch.arange(q.shape[0], device=q.device) + row_offset
                inside = (rows >= s) & (rows < e)
                key[inside.nonzero().squeeze(1), (rows[inside] - s)] = float("inf")
            vd, vi = torch.topk(key, min(k, e - s), dim=1, largest=False)
            vi = vi + s
            if best_d is None:
                best_d, best_i = vd, vi
            else:
                cd, ci = torch.cat([best_d, vd], 1), torch.cat([best_i, vi], 1)
                best_d, pos = torch.topk(cd, k, dim=1, largest=False)
                best_i = torch.gather(ci, 1, pos)
        return best_i

    def search(self, ctx, index, queries, k):
        import torch

        q = self._tensor(queries)
        return torch.cat([self._knn(index, q[s:s + self.QUERY_BLOCK], k)
                          for s in range(0, q.shape[0], self.QUERY_BLOCK)])

    def graph(self, ctx, base, metric, k):
        import torch

        index = self.build(ctx, base, metric)
        x = index["x"]
        ids = torch.cat([self._knn(index, x[s:s + self.QUERY_BLOCK], k, row_offset=s)
                         for s in range(0, x.shape[0], self.QUERY_BLOCK)])
        return ids.int(), {}


# --------------------------------------------------------------------------------------------------
# NVIDIA cuVS (the GPU reference: CAGRA, NN-Descent, brute force)

#: where the install note of a skipped cuVS line points
CUVS_HINT = ("pip install cuvs-cu13 (or cuvs-cu12, matching the CUDA driver); on a machine without network, "
             "install the same wheels carried over and source the environment script that sets their paths "
             "($CUVS_ENV)")

# vector dtypes each cuVS entry point takes (others are converted to float32 inside the timed call)
_CAGRA_DTYPES = ("float32", "float16", "int8", "uint8")
_NND_DTYPES = ("float32", "float16", "int8", "uint8")
_BRUTE_DTYPES = ("float32", "float16")


#: RMM_POOL["on"]: whether cuVS allocates from an RMM pool (set on first use; None before, False if RMM refused)
RMM_POOL: dict = {"on": None}


def cuvs_modules():
    """(cagra, nn_descent, brute_force) of ``cuvs.neighbors``, after loading libcuvs' shared library
    (wheels installed with ``--target`` do not find it on their own) and, once, giving cuVS a pooled
    allocator (:func:`_rmm_pool`)."""
    try:
        import libcuvs
    except ImportError:
        libcuvs = None  # conda builds and older wheels load the library when cuvs is imported
    if libcuvs is not None and hasattr(libcuvs, "load_library"):
        libcuvs.load_library()
    from cuvs.neighbors import brute_force, cagra, nn_descent

    if RMM_POOL["on"] is None:
        RMM_POOL["on"] = _rmm_pool()
    return cagra, nn_descent, brute_force


def _rmm_pool() -> bool:
    """Route cuVS's allocations (through RMM) to a growing pool, as knngraph's go to CuPy's pool: without
    one every search call would pay cudaMalloc / cudaFree for its outputs and workspace (cuVS's docs
    recommend a pool for repeated searches). Starts at 256 MiB and grows on demand. False if RMM refuses."""
    try:
        import rmm

        rmm.mr.set_current_device_resource(rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(),
                                                                      initial_pool_size=2**28))
        return True
    except Exception:
        return False


def cuvs_array(x, metric: str, dtypes, cosine: str = "inner_product", like=None):
    """(CuPy array cuVS takes, cuVS metric name) for ``x`` (NumPy, CuPy, anything with
    ``__cuda_array_interface__``; host arrays are uploaded here, inside the timed call).

    ``cosine='inner_product'``: cosine data is normalised (float16 stays float16) and searched by inner
    product, the same order (entry points whose cosine support is not certain: CAGRA, NN-Descent);
    ``cosine='cosine'`` passes the metric through (brute force). Euclidean ranks as squared Euclidean.
    A dtype outside ``dtypes`` becomes float32 (exact for 8-bit values); ``like`` forces the dtype of an
    index's vectors onto its queries."""
    import cupy as cp

    a = cp.asarray(x)
    if metric == "cosine" and cosine == "inner_product":
        f = a.astype(cp.float32)
        norms = cp.linalg.norm(f, axis=1, keepdims=True)
        f /= cp.where(norms == 0, cp.float32(1), norms)
        a = f.astype(cp.float16) if a.dtype == cp.float16 else f
        metric = "inner_product"
    elif metric == "euclidean":
        metric = "sqeuclidean"
    want = cp.dtype(like) if like is not None else (a.dtype if a.dtype.name in dtypes else cp.dtype(cp.float32))
    if a.dtype != want:
        a = a.astype(want)
    return cp.ascontiguousarray(a), metric


def _uint32_graph(indices):
    """A knngraph graph's int32 ids (-1 = no edge) as the uint32 table CAGRA's ``from_graph`` takes:
    a missing edge repeats the row's first neighbour (the node itself when the row is empty), since
    CAGRA has no 'no edge' value. Returns (table, number of edges filled)."""
    import cupy as cp

    ids = cp.asarray(indices)
    holes = int((ids < 0).sum())
    if holes:
        first = ids[:, :1]
        first = cp.where(first < 0, cp.arange(ids.shape[0], dtype=ids.dtype)[:, None], first)
        ids = cp.where(ids < 0, first, ids)
    return cp.ascontiguousarray(ids.astype(cp.uint32)), holes


class _Cuvs(Method):
    """Common ground of the cuVS baselines: availability (installed, loadable, a GPU) and versions."""

    library = "cuvs"
    module = "cuvs"
    install_hint = CUVS_HINT
    devices = ("cuda",)

    def missing(self):
        note = super().missing()
        if note:
            return note
        try:
            cuvs_modules()
        except Exception as exc:  # a wheel without its native libraries, a CUDA mismatch, ...
            return (f"cuVS is installed but does not load ({type(exc).__name__}: {exc}); check LD_LIBRARY_PATH / "
                    f"LD_PRELOAD ({CUVS_HINT}): skipped, not measured")
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "no CUDA device for cuVS: skipped, not measured"
        except Exception as exc:
            return f"no usable CUDA device for cuVS ({type(exc).__name__}: {exc}): skipped, not measured"
        return None

    def index_info(self, index):
        return {"rmm_pool": RMM_POOL["on"]}

    @staticmethod
    def _resources() -> dict:
        """``resources=`` for cuVS calls: one ``cuvs.common.Resources`` per index, reused by its searches (as
        a service keeps it; otherwise every call makes its own and synchronises it). Empty where the
        release has no such class. The runner synchronises the whole device before the clock stops."""
        try:
            from cuvs.common import Resources
        except ImportError:
            return {}
        return {"resources": Resources()}

    @staticmethod
    def _search_params(index, cls, **params):
        """A ``SearchParams`` made once per index and setting (as a user keeps it between calls)."""
        key = tuple(sorted(params.items()))
        cache = index.setdefault("search_params", {})
        if key not in cache:
            cache[key] = cls(**params)
        return cache[key]


class CuvsCagra(_Cuvs):
    """cuVS CAGRA on its own graph: ``cagra.build`` (``graph_degree``, ``intermediate_graph_degree``,
    ``build_algo`` 'nn_descent' / 'ivf_pq' / 'iterative_cagra_search', further ``IndexParams`` fields as
    build parameters) and ``cagra.search`` (``itopk_size``, ``search_width``, further ``SearchParams``
    fields such as ``algo`` or ``max_iterations`` as search parameters). Data stays in its dtype (float32,
    float16, int8, uint8); cosine is searched as inner product over normalised vectors."""

    name = "cuvs-cagra"
    tasks = ("search",)
    build_sweep = {"graph_degree": [32], "intermediate_graph_degree": [64], "build_algo": ["nn_descent"]}
    search_sweep = {"itopk_size": [16, 32, 64, 128, 256, 512], "search_width": [1]}
    search_keys = ("algo", "max_iterations", "min_iterations", "team_size", "thread_block_size", "max_queries",
                   "hashmap_mode", "persistent")

    def build(self, ctx, base, metric, graph_degree=32, intermediate_graph_degree=64, build_algo="nn_descent",
              **params):
        cagra = cuvs_modules()[0]
        x, cmetric = cuvs_array(base, metric, _CAGRA_DTYPES)
        ip = cagra.IndexParams(metric=cmetric, graph_degree=graph_degree,
                               intermediate_graph_degree=max(intermediate_graph_degree, graph_degree),
                               build_algo=build_algo, **params)
        res = self._resources()
        return {"index": cagra.build(ip, x, **res), "vectors": x, "metric": metric, "dtype": x.dtype.name, "res": res}

    def search(self, ctx, index, queries, k, itopk_size=64, search_width=1, **params):
        cagra = cuvs_modules()[0]
        q, _ = cuvs_array(queries, index["metric"], _CAGRA_DTYPES, like=index["dtype"])
        sp = self._search_params(index, cagra.SearchParams, itopk_size=max(itopk_size, k), search_width=search_width,
                                 **params)
        _, ids = cagra.search(sp, index["index"], q, k, **index["res"])
        return ids  # uint32 (int64 in some releases) on the GPU; the runner scores ids outside [0, n) as misses

    def index_info(self, index):
        info = {**super().index_info(index), "dtype": index["dtype"]}
        try:
            info["graph_degree"] = int(index["index"].graph_degree)
        except Exception:
            pass
        info.update(index.get("info", {}))
        return info


class CuvsCagraOnKnngraph(CuvsCagra):
    """CAGRA's searcher over knngraph's prepared graph: ``knngraph.song.build`` (build parameters are
    fields of ``knngraph.song.IndexParams``; the defaults give the graph knngraph's own GPU searcher uses:
    exact ``intermediate_graph_degree``-NN graph pruned by ``optimize_graph`` to ``graph_degree``), then
    ``cagra.from_graph`` over that graph and the vectors. The build time covers both steps."""

    name = "cuvs-cagra-on-knngraph"
    build_sweep = {}

    def build(self, ctx, base, metric, **params):
        import knngraph.song as song

        cagra = cuvs_modules()[0]
        params.setdefault("seed", ctx.seed)
        graph = song.build(song.IndexParams(metric=metric, **params), base, device=ctx.device, verbose=False).graph
        table, holes = _uint32_graph(graph.indices)
        x, cmetric = cuvs_array(base, metric, _CAGRA_DTYPES)
        res = self._resources()
        index = cagra.from_graph(table, x, metric=cmetric, **res)
        # the graph and vectors stay referenced: from_graph may keep views of them
        return {"index": index, "vectors": x, "graph": table, "metric": metric, "dtype": x.dtype.name, "res": res,
                "info": {"knngraph_graph_degree": int(table.shape[1]), "edges_filled": holes}}


class CuvsNNDescent(_Cuvs):
    """cuVS NN-Descent k-NN graph (``nn_descent.build``; build parameters are ``nn_descent.IndexParams``
    fields such as ``max_iterations`` or ``intermediate_graph_degree``, cuVS's defaults otherwise). It is
    asked for ``k + 1`` neighbours per node, since cuVS counts a node as its own neighbour: the runner
    then drops each row's own id (:meth:`finish_graph`, outside the timed call) so that every method is
    scored on k other nodes."""

    name = "cuvs-nn-descent"
    tasks = ("graph",)

    def graph(self, ctx, base, metric, k, **params):
        nn_descent = cuvs_modules()[1]
        x, cmetric = cuvs_array(base, metric, _NND_DTYPES)
        index = nn_descent.build(nn_descent.IndexParams(metric=cmetric, graph_degree=k + 1, **params), x)
        return index.graph, {"graph_degree": k + 1, "rmm_pool": RMM_POOL["on"]}

    def finish_graph(self, ids, k):
        return strip_self(ids, k)


class CuvsBruteForce(_Cuvs):
    """cuVS exact search (``brute_force.build`` + ``search``; float32 / float16 data, 8-bit data is
    converted to float32 inside the timed calls) and the exact k-NN graph (the base searched against
    itself for k + 1 neighbours, each row's own id dropped outside the timed call)."""

    name = "cuvs-brute-force"
    tasks = ("search", "graph")
    has_index = False

    def build(self, ctx, base, metric):
        brute_force = cuvs_modules()[2]
        x, cmetric = cuvs_array(base, metric, _BRUTE_DTYPES, cosine="cosine")
        res = self._resources()
        return {"index": brute_force.build(x, metric=cmetric, **res), "vectors": x, "metric": metric,
                "dtype": x.dtype.name, "res": res}

    def search(self, ctx, index, queries, k):
        brute_force = cuvs_modules()[2]
        q, _ = cuvs_array(queries, index["metric"], _BRUTE_DTYPES, cosine="cosine", like=index["dtype"])
        _, ids = brute_force.search(index["index"], q, k, **index["res"])
        return ids

    def graph(self, ctx, base, metric, k):
        index = self.build(ctx, base, metric)
        return self.search(ctx, index, index["vectors"], k + 1), {"rmm_pool": RMM_POOL["on"]}

    def finish_graph(self, ids, k):
        return strip_self(ids, k)


CUVS_METHODS = (CuvsCagra(), CuvsCagraOnKnngraph(), CuvsNNDescent(), CuvsBruteForce())

METHODS: dict[str, Method] = {m.name: m for m in (*knngraph_methods(), Pynndescent(),
                                                  Hnswlib(), FaissFlat(), FaissHNSW(), FaissIVF(), TorchExact(),
                                                  *CUVS_METHODS)}


def get(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(METHODS)}")
    return METHODS[name]
