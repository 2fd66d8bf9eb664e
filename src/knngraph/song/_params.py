"""Parameters of a SONG index: :class:`IndexParams` (build) and :class:`SearchParams` (search)."""

from __future__ import annotations

import dataclasses

from .._device import Device
from .._params import Boolean, GraphBuilder, Interval, Mapping, Metric, Options, Params
from .._typing import DeviceLike
from .hashing import HASH_BITS

__all__ = ["IndexParams", "SearchParams", "MAX_QUEUE_SIZE", "BuildRoute", "AUTO_ROUTES"]

#: largest queue_size (shared memory per warp grows with it)
MAX_QUEUE_SIZE = 1024


@dataclasses.dataclass(frozen=True)
class BuildRoute:
    """What :func:`knngraph.song.build` does on one kind of device for the :class:`IndexParams` fields left
    automatic: the k-NN graph builder and its parameters, the k-NN graph's degree, and the preparation's
    out-degree and filling (:func:`knngraph.optimize_graph`)."""

    build_algo: str
    build_params: dict
    intermediate_graph_degree: int
    graph_degree: int
    fill: bool


#: the automatic build of each kind of device, the fastest measured there (the table of :class:`IndexParams`)
AUTO_ROUTES = {
    # one warp computes 32 distances at once: the exact graph (GEMM tiles) pruned to 32 full rows
    "cuda": BuildRoute("exact", {}, 96, 32, True),
    # exact k-NN costs O(n^2) on the CPU; NN-Descent's 48-NN graph pruned to its diverse edges searches as
    # well as a 64-NN or an exact one, in fewer distances than rows filled to 32 (benchmarks/studies/cpu_defaults.py)
    "cpu": BuildRoute("nndescent", {}, 48, 40, False),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of a SONG index: k-NN graph, preparation, entry points, optional hashing.

    Parameters
    ----------
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
    graph_degree : int, default=0
        Out-degree of the prepared search graph (:func:`knngraph.optimize_graph`); 0: the device's (see
        the table below).
    intermediate_graph_degree : int, default=0
        Degree of the k-NN graph built first (capped at n - 1); :func:`knngraph.optimize_graph` prunes
        its rows together with its reverse edges. Larger reaches a given recall at a smaller queue_size.
        0: the device's.
    build_algo : str, default='auto'
        k-NN graph builder, a graph builder of :mod:`knngraph.registry` ('exact', 'nndescent', ...), or
        'auto': the device's (with its ``build_params`` when those are None).
    build_params : dict or None, default=None
        Fields of the builder's ``IndexParams`` (e.g. ``{"max_iterations": 6}`` for 'nndescent').
    alpha : float, default=1.0
        Pruning relaxation of :func:`knngraph.optimize_graph`.
    fill : bool or None, default=None
        Fill rows up to ``graph_degree`` (:func:`knngraph.optimize_graph`); False keeps diverse edges only
        (a larger queue_size for the same recall, but fewer distances per query). None: the device's.
    hash_bits : int, default=0
        0: search full vectors. 32..1024 (a power of two): keep 1-bit random-projection codes of this
        length for the search and re-rank with the full vectors (data larger than GPU memory).
    n_entry_points : int, default=32
        Start vertices of every search: the medoid and ``n_entry_points - 1`` random vertices
        (:func:`knngraph.graphops.default_entry_points`).
    seed : int, default=0
        Seeds the random entry points, the hash projections and the builder.

    Notes
    -----
    The automatic fields (``build_algo='auto'``, degrees 0, ``fill=None``) take the values of the device
    the index is built on (:data:`AUTO_ROUTES`), the fastest build measured there; :func:`build` stores
    the values it used in ``index.params``. On a GPU: the exact 96-NN graph pruned to 32 filled rows (the
    fastest graph at recall@10 0.99 with one of the quickest builds, the GRNND study of the README). On the
    CPU the exact k-NN graph costs O(n^2), so: NN-Descent's 48-NN graph pruned to at most 40 diverse edges
    (``fill=False``). Measured on 2 CPU threads, k=10, in one run (``python benchmarks/studies/cpu_defaults.py``,
    ``benchmarks/results/cpu_defaults_2cores.jsonl``): build time (the default's and hnswlib's: median of
    3), queries/s at recall@10 0.95 / 0.99 and their ratio to hnswlib's, and the time to a first result
    (build + 1,000 queries at recall@10 >= 0.95, in a new process, median of 3). Routes: *default 48/40*
    (NN-Descent 48-NN, at most 40 diverse edges), *exact 96/32* (the GPU's, and the CPU's before: exact
    96-NN, 32 filled rows), *NN-Descent 64/40* (the earlier CPU recipe), *GRNND R=48* (prune_alpha 1.05,
    searched as built), hnswlib (M=16, ef_construction=200):

    ====================  ========================  ========================  =================
    CPU route             sift-photos 100k, uint8:  minilm-words 60k, cosine  first result:
                          build, queries/s          build, queries/s          clustered / sift
    ====================  ========================  ========================  =================
    **default 48/40**     5.0 s, 69.4k / 34.8k      6.2 s, 18.3k / 7.4k       6.7 s / 5.9 s
                          (1.65x / 1.75x)           (1.01x / 1.04x)
    exact 96/32           35.3 s, 80.0k / 37.7k     58.3 s, 17.1k / 7.6k
                          (1.91x / 1.90x)           (0.94x / 1.07x)
    NN-Descent 64/40      6.5 s, 61.5k / 35.1k      7.6 s, 18.5k / 7.8k
                          (1.47x / 1.77x)           (1.02x / 1.09x)
    GRNND R=48            11.6 s, 65.9k / 32.5k     10.3 s, 12.9k / 4.6k
                          (1.57x / 1.64x)           (0.71x / 0.64x)
    hnswlib               11.3 s, 41.9k / 19.8k     15.4 s, 18.2k / 7.1k      8.9 s / 11.8 s
    ====================  ========================  ========================  =================

    The default builds in under half of hnswlib's time and, of the routes within hnswlib's build time,
    searches fastest at 0.95 and 0.99 on sift-photos. On minilm-words (384-d) every graph is near
    hnswlib's speed: the distance computations, not the graph, bound the search there.
    """

    metric: str = "sqeuclidean"
    graph_degree: int = 0
    intermediate_graph_degree: int = 0
    build_algo: str = "auto"
    build_params: dict | None = None
    alpha: float = 1.0
    fill: bool | None = None
    hash_bits: int = 0
    n_entry_points: int = 32
    seed: int = 0

    _constraints = {"metric": Metric(), "graph_degree": Interval(0, 1024),
                    "intermediate_graph_degree": Interval(0, 4096), "build_algo": GraphBuilder(auto=True),
                    "build_params": Mapping(), "alpha": Interval(1.0, None, integer=False),
                    "fill": Boolean(allow_none=True), "hash_bits": Options((0,) + HASH_BITS),
                    "n_entry_points": Interval(1, 1024), "seed": Interval(0, 2**63 - 1)}

    def resolved(self, device: DeviceLike = "cpu") -> IndexParams:
        """These parameters with every automatic field set to its value on ``device`` ('cpu', 'cuda',
        'cuda:N' or a :class:`~knngraph._device.Device`; see :data:`AUTO_ROUTES`); the fields given stay."""
        kind = "cuda" if (device.is_cuda if isinstance(device, Device) else str(device).startswith("cuda")) else "cpu"
        route = AUTO_ROUTES[kind]
        changes: dict = {}
        if self.build_algo == "auto":
            changes["build_algo"] = route.build_algo
            if self.build_params is None and route.build_params:
                changes["build_params"] = dict(route.build_params)
        if self.intermediate_graph_degree == 0:
            changes["intermediate_graph_degree"] = route.intermediate_graph_degree
        if self.graph_degree == 0:
            changes["graph_degree"] = route.graph_degree
        if self.fill is None:
            changes["fill"] = route.fill
        return dataclasses.replace(self, **changes) if changes else self


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchParams(Params):
    """Parameters of a SONG search.

    Parameters
    ----------
    queue_size : int, default=64
        Q, the speed/recall knob: candidates kept in the bounded priority queue and results kept while
        searching; 1 <= k <= Q <= 1024. GPU kernels are compiled for Q rounded up to a power of two
        (>= 32), so nearby values share one build.
    visited : {'hash', 'bloom'}, default='hash'
        Visited set: hash table with visited deletion (exact, <= 2Q ids) or Bloom filter (no deletion).
    rerank : int, default=0
        Hashed indexes only: how many Hamming-nearest candidates are re-ranked with exact distances
        (0: all Q). Between k and Q.
    batch_size : int, default=0
        Queries per GPU launch (0: all, at most 2^20); host queries are copied batch by batch.
    max_registers : int, default=0
        GPU only: cap on registers per thread of the search kernel (0: the compiler's choice). A cap
        lets more warps stay resident at the price of some spilling (``benchmarks/studies/song_gpu.py``).
    algo : {'auto', 'beam', 'song'}, default='auto'
        'beam' is the fast searcher (:mod:`knngraph.beam`: the whole warp keeps one sorted
        list, merges candidates by rank, lanes team up per distance, dp4a for 8-bit vectors); 'song' is
        the paper's kernel (lane 0 keeps heaps; it also serves hashed indexes, ``visited='bloom'`` and
        ``max_registers``). 'auto': 'beam' where it applies, else 'song'. Both
        stop when the ``queue_size`` nearest vertices found are all expanded; their results differ
        slightly (SONG's queue and result heap are separate). The CPU has both too (``beam/cpu.py``,
        ``song/cpu.py``), chosen the same way; its 'beam' walks as the GPU's does with ``search_width=1``
        (same ids on integer data).
    search_width : int, default=0
        GPU fast searcher only: warps that work on one query, each expanding one of the list's first
        ``search_width`` unexpanded vertices per step (1..8). Wider steps finish a query in fewer
        sequential steps (lower latency for small batches) at the price of some extra distances.
        0: chosen from the batch size (8 for a few queries, 1 for batches that fill the GPU), at least
        2 for queues of 128 and 4 from 512 (faster at equal or higher recall; ``beam.cuda``), and
        narrowed to what a block's shared memory holds (each warp keeps a copy of the query: long
        vectors or queues take fewer warps), so a query's result can depend on the batch it comes in;
        set it for results independent of that (a width that does not fit is then an error).
    filtered_path : {'auto', 'graph', 'exact'}, default='auto'
        Filtered searches (and indexes with deleted vectors) only: 'auto' runs the exact search over the
        allowed vectors or the graph walk with its list grown by the allowed share, whichever the cost
        model of :func:`knngraph.beam.filtered_path` estimates cheaper (the exact search also when the
        walk would need a list longer than 1024); 'graph' always walks, 'exact' always scans
        (``benchmarks/studies/filtered_search.py``).
    cpu_walk : {'auto', 'int8', 'exact'}, default='auto'
        CPU fast searcher only: what its walk reads (see :func:`knngraph.beam.search`): 'int8' codes of
        float vectors with the final list re-ranked by exact distances (about 1.4x-1.7x the queries per
        second of 'exact' at the same recall on 384-d embeddings), or the vectors ('exact', the GPU's ids).
        'auto': 'int8' for float16 / float32 vectors of at least 128 dimensions in unfiltered searches, unless
        one scale codes them badly (:func:`knngraph.beam.int8_plan`: e.g. one dimension far larger than the rest).
    """

    queue_size: int = 64
    visited: str = "hash"
    rerank: int = 0
    batch_size: int = 0
    max_registers: int = 0
    filtered_path: str = "auto"
    algo: str = "auto"
    search_width: int = 0
    cpu_walk: str = "auto"

    _constraints = {"queue_size": Interval(1, MAX_QUEUE_SIZE), "visited": Options(("hash", "bloom")),
                    "rerank": Interval(0, MAX_QUEUE_SIZE), "batch_size": Interval(0, None),
                    "max_registers": Interval(0, 255),
                    "filtered_path": Options(("auto", "graph", "exact")),
                    "algo": Options(("auto", "beam", "song")), "search_width": Interval(0, 8),
                    "cpu_walk": Options(("auto", "int8", "exact"))}
