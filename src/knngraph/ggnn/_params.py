"""Parameters of a GGNN index: :class:`IndexParams` (build) and :class:`SearchParams` (search)."""

from __future__ import annotations

import dataclasses

from .._params import Interval, Metric, Options, Params

__all__ = ["IndexParams", "SearchParams", "MAX_CACHE_SIZE", "MAX_SORTED_SIZE", "MIN_VISITED"]

#: largest cache of a search (ids of best list + priority queue + visited ring; GPU shared memory)
MAX_CACHE_SIZE = 4096
#: largest sorted buffer (best list + priority queue) of ``cache='sorted'`` (the fast searcher's list)
MAX_SORTED_SIZE = 1024
#: the visited ring keeps at least this many ids
MIN_VISITED = 32


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of a GGNN index: the hierarchy of section 5 of the paper.

    Parameters
    ----------
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
    graph_degree : int, default=24
        k, the out-degree of every node of every layer (the paper's KBuild).
    inverse_links : int, default=0
        k_sym, the slots of each row that symmetric linking may fill with inverse links (section 5.2);
        0: graph_degree // 2. The other graph_degree - k_sym slots always hold nearest neighbours. More
        slots mean fewer path searches (one per nearest-neighbour slot): a faster build. On sift-photos
        450k (H200) ``graph_degree=20, inverse_links=14, refinements=0`` builds in 1.65 s a graph GGNN's
        search takes to recall@10 0.95 at 1.80M queries/s (the defaults: 4.4 s, 2.36M; README).
    segment_size : int, default=32
        s, the points of a segment (of the bottom layer: about that many) and of the top layer.
    layers : int, default=4
        L, the layers of the hierarchy; fewer are used when the data is too small for L layers with a
        merge factor of at least 2.
    tau_build : float, default=0.5
        The build slack tau_b of the merge queries and the symmetric-linking searches (Eq. 2, with the
        mean nearest-neighbour distance).
    refinements : int, default=2
        r, refinement passes after the hierarchy is built (section 5.3).
    n_shards : int, default=1
        Split the dataset into this many contiguous shards, each with its own hierarchy (section 5.5);
        a search queries every shard and merges the per-shard top-k. A GPU build uses more shards when
        one would not fit its ``memory_limit`` (see :func:`knngraph.ggnn.build`).
    seed : int, default=0
        Seeds the random bottom-layer partition and the weighted reservoir sampling.
    """

    metric: str = "sqeuclidean"
    graph_degree: int = 24
    inverse_links: int = 0
    segment_size: int = 32
    layers: int = 4
    tau_build: float = 0.5
    refinements: int = 2
    n_shards: int = 1
    seed: int = 0

    _constraints = {"metric": Metric(), "graph_degree": Interval(2, 512), "inverse_links": Interval(0, 511),
                    "segment_size": Interval(2, 1024), "layers": Interval(1, 16),
                    "tau_build": Interval(0.0, 16.0, integer=False), "refinements": Interval(0, 16),
                    "n_shards": Interval(1, 1 << 20), "seed": Interval(0, 2**63 - 1)}

    def __post_init__(self):
        super().__post_init__()
        if self.inverse_links >= self.graph_degree:
            raise ValueError(f"The 'inverse_links' parameter of IndexParams must be smaller than graph_degree="
                             f"{self.graph_degree} (the rest of a row holds nearest neighbours). Got "
                             f"{self.inverse_links!r} instead.")

    @property
    def k_sym(self) -> int:
        """Inverse-link slots per row."""
        return self.inverse_links or self.graph_degree // 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchParams(Params):
    """Parameters of a GGNN search (section 4.1).

    Parameters
    ----------
    tau : float, default=1.0
        The query slack tau_q, the speed/recall knob: the search stops when the best unexpanded
        candidate is farther than d_k + tau * min(d_1, d+_nn1) (Eq. 2 and 3). Larger: higher recall,
        lower throughput. The defaults (tau 1.0, a sorted queue of 256) are chosen for right answers: on
        100 well-separated Gaussian clusters (100k x 128, ``benchmarks/studies/clustered_recall.py``, 2 CPU
        threads) the default graph reaches recall@10 0.994 with them, against 0.972 at tau 0.5 (any queue)
        and 0.986 at tau 1.0 with a queue of 128 (the queue bounds it there). The paper's faster setting,
        ``SearchParams(tau=0.5, queue_size=128)``, answered 2.3x the queries per second on sift-photos 450k
        (H200) at recall@10 0.939 against 0.978 (``benchmarks/results/ggnn_gpu_h200_sorted.jsonl``).
    max_iterations : int, default=400
        Cap on the vertices expanded per query.
    queue_size : int, default=0
        Capacity of the candidate queue. ``cache='rings'``: the priority queue beside the best list
        (max(k, 10)); ``cache='sorted'``: the one sorted buffer whose head is the best list
        (max(k, 10) <= queue_size <= 1024). 0: 64 for 'rings', 256 for 'sorted'. The slack tau stops a
        query first unless the queue is too small to hold what it would still expand: for high recall
        with 'sorted' raise both.
    cache : {'sorted', 'rings'}, default='sorted'
        The layout of the search cache; both stop by the same rule (the 'sorted' buffer's kb-th entry is
        d_k) and find about the same neighbours (not always the same: they forget different
        candidates). 'rings' is the paper's (Fig. 2, Algorithm 2): a sorted best list, a sorted
        priority-queue ring and a FIFO ring of visited ids, one thread block per query. 'sorted' is the
        layout of the authors' later code (SortedBufferCache: best list and queue in one sorted buffer,
        each entry marked once expanded; here the visited ids in a hash table), run by the library's
        fast searcher (:mod:`knngraph.beam`: the whole warp merges a chunk of
        candidates by rank, lanes team up per distance, dp4a for 8-bit vectors). On sift-photos 20k
        (CPU) 'sorted' with its default queue reaches the recall of 'rings' at each tau with 40-75% of
        the distances; GPU speeds: ``benchmarks/studies/ggnn_gpu.py``.
    cache_size : int, default=256
        ``cache='rings'``: ids in the whole cache, the best list (max(k, 10)), the priority queue and
        the visited ring, which gets the rest (at least 32). ``cache='sorted'`` sizes its visited
        table itself.
    batch_size : int, default=0
        Queries per GPU launch (0: all, at most 2^20).
    search_width : int, default=0
        GPU, ``cache='sorted'``: warps that work on one query (1..8; 0: chosen from the batch size, the
        queue (at least 2 from 128, and 4 from 512) and the shared memory a block holds, as
        :class:`knngraph.song.SearchParams` does; set it for results independent of the batch, 1 for
        those of the CPU).
    filtered_path : {'auto', 'graph', 'exact'}, default='auto'
        Filtered searches (and indexes with deleted vectors), ``cache='sorted'``: the exact search over the
        allowed vectors or the walk with its list grown by the allowed share, as
        :class:`knngraph.song.SearchParams` (``'auto'``: the cost model of :func:`knngraph.beam.filtered_path`).
    """

    tau: float = 1.0
    max_iterations: int = 400
    queue_size: int = 0
    cache: str = "sorted"
    cache_size: int = 256
    batch_size: int = 0
    search_width: int = 0
    filtered_path: str = "auto"

    _constraints = {"tau": Interval(0.0, 64.0, integer=False), "max_iterations": Interval(1, 1 << 20),
                    "queue_size": Interval(0, MAX_CACHE_SIZE), "cache": Options(("sorted", "rings")),
                    "cache_size": Interval(16, MAX_CACHE_SIZE), "batch_size": Interval(0, None),
                    "search_width": Interval(0, 8), "filtered_path": Options(("auto", "graph", "exact"))}

    @property
    def queue(self) -> int:
        """The queue's capacity: ``queue_size``, or for 0 the layout's default (64 'rings', 256 'sorted')."""
        return self.queue_size or (256 if self.cache == "sorted" else 64)
