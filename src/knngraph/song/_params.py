"""Parameters of a SONG index: :class:`IndexParams` (build) and :class:`SearchParams` (search)."""

from __future__ import annotations

import dataclasses

from .._params import Boolean, GraphBuilder, Interval, Mapping, Metric, Options, Params
from .hashing import HASH_BITS

__all__ = ["IndexParams", "SearchParams", "MAX_QUEUE_SIZE"]

#: largest queue_size (shared memory per warp grows with it)
MAX_QUEUE_SIZE = 1024


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of a SONG index: k-NN graph, preparation, entry points, optional hashing.

    Parameters
    ----------
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
    graph_degree : int, default=32
        Out-degree of the prepared search graph (:func:`knngraph.optimize_graph`).
    intermediate_graph_degree : int, default=96
        Degree of the k-NN graph built first (capped at n - 1); :func:`knngraph.optimize_graph` prunes
        its rows together with its reverse edges. Larger reaches a given recall at a smaller queue_size
        (``benchmarks/song_gpu.py``).
    build_algo : str, default='exact'
        k-NN graph builder, a graph builder of :mod:`knngraph.registry` ('exact', 'nndescent').
    build_params : dict or None, default=None
        Fields of the builder's ``IndexParams`` (e.g. ``{"max_iterations": 6}`` for 'nndescent').
    alpha : float, default=1.0
        Pruning relaxation of :func:`knngraph.optimize_graph`.
    fill : bool, default=True
        Fill rows up to ``graph_degree`` (:func:`knngraph.optimize_graph`); False keeps diverse edges only
        (a larger queue_size for the same recall, but fewer distances per query).
    hash_bits : int, default=0
        0: search full vectors. 32..1024 (a power of two): keep 1-bit random-projection codes of this
        length for the search and re-rank with the full vectors (data larger than GPU memory).
    n_entry_points : int, default=32
        Start vertices of every search: the medoid and ``n_entry_points - 1`` random vertices
        (:func:`knngraph.graphops.default_entry_points`).
    seed : int, default=0
        Seeds the random entry points, the hash projections and the builder.
    """

    metric: str = "sqeuclidean"
    graph_degree: int = 32
    intermediate_graph_degree: int = 96
    build_algo: str = "exact"
    build_params: dict | None = None
    alpha: float = 1.0
    fill: bool = True
    hash_bits: int = 0
    n_entry_points: int = 32
    seed: int = 0

    _constraints = {"metric": Metric(), "graph_degree": Interval(1, 1024),
                    "intermediate_graph_degree": Interval(1, 4096), "build_algo": GraphBuilder(),
                    "build_params": Mapping(), "alpha": Interval(1.0, None, integer=False), "fill": Boolean(),
                    "hash_bits": Options((0,) + HASH_BITS), "n_entry_points": Interval(1, 1024),
                    "seed": Interval(0, 2**63 - 1)}


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
        lets more warps stay resident at the price of some spilling (``benchmarks/song_gpu.py``).
    algo : {'auto', 'beam', 'song'}, default='auto'
        'beam' is the fast searcher (:mod:`knngraph.beam`: the whole warp keeps one sorted
        list, merges candidates by rank, lanes team up per distance, dp4a for 8-bit vectors); 'song' is
        the paper's kernel (lane 0 keeps heaps; it also serves hashed indexes, ``visited='bloom'``,
        ``max_registers`` and filtered searches). 'auto': 'beam' where it applies, else 'song'. Both
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
    filtered_exact_ratio : float, default=100.0
        Filtered searches only: when fewer ids are allowed than this many times the walk's queue, the
        search is exact over the allowed vectors instead of a graph walk (a walk computes about 20
        distances per queue slot, each several times dearer than a GEMM's); 0: always walk
        (``benchmarks/filtered_search.py``).
    """

    queue_size: int = 64
    visited: str = "hash"
    rerank: int = 0
    batch_size: int = 0
    max_registers: int = 0
    filtered_exact_ratio: float = 100.0
    algo: str = "auto"
    search_width: int = 0

    _constraints = {"queue_size": Interval(1, MAX_QUEUE_SIZE), "visited": Options(("hash", "bloom")),
                    "rerank": Interval(0, MAX_QUEUE_SIZE), "batch_size": Interval(0, None),
                    "max_registers": Interval(0, 255),
                    "filtered_exact_ratio": Interval(0.0, None, integer=False),
                    "algo": Options(("auto", "beam", "song")), "search_width": Interval(0, 8)}
