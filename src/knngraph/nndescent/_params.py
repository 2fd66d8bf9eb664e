"""Parameters of an NN-Descent build: :class:`IndexParams`."""

from __future__ import annotations

import dataclasses

from .._params import Boolean, Interval, Metric, Options, Params

__all__ = ["IndexParams", "UPDATE_MODES", "INIT_MODES", "OUT_OF_CORE", "MAX_SAMPLE_SIZE"]

UPDATE_MODES = ("auto", "all", "selective")
INIT_MODES = ("auto", "random", "rp_forest", "cluster_windows")
OUT_OF_CORE = ("auto", "clusters", "shard_pairs")
#: largest sample count p (the GPU join's shared memory is sized for it)
MAX_SAMPLE_SIZE = 32


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of an NN-Descent graph build.

    Parameters
    ----------
    graph_degree : int, default=32
        Neighbours kept per node (1 <= graph_degree < n).
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
        Distance; see :mod:`knngraph.metrics`.
    intermediate_graph_degree : int, default=0
        Entries kept per list while the build iterates (at least ``graph_degree``); the first
        ``graph_degree`` are returned. Longer lists make the tail of the returned list converge (the
        whole list's recall, not only its first ten) and cost time about in proportion. 0 = auto: with
        GNND's selective update (the GPU's), where each sample inserts only its nearest partners and a
        list converges short of its last true neighbours, ``max(32, 2 graph_degree)`` (sift-photos 450k,
        k=64, H200: lists of 64 entries 0.62 s at whole-list recall@64 0.922, of 128 entries 1.15 s at
        0.982, one phase; ``benchmarks/studies/nndescent_full_list.py``; with ``two_phase`` 0.80 s at
        0.987); with the update 'all',
        ``max(16, graph_degree)``; the pieces of an out-of-core build over clusters keep
        ``max(32 or 16, graph_degree)``, as the merge of each row's lists from its overlapping pieces
        completes the tail. Capped at n - 1.
    sample_size : int, default=0
        p, the NEW and OLD entries sampled from each list per iteration (GNND section 4.1); reverse
        samples add up to p more of each. 0 = auto: graph_degree, at most 32 (the GNND authors used 64
        neighbours and p=32). The second phase of ``two_phase`` samples half as many.
    max_iterations : int, default=20
        Iteration cap (both phases of ``two_phase`` together).
    termination_threshold : float, default=0.001
        Stop when an iteration changes fewer than this share of the n * graph_degree list entries.
    update : {'auto', 'all', 'selective'}, default='auto'
        'selective' inserts only each sample's nearest partners (GNND section 4.3), and iterates with
        longer lists than it returns (see ``intermediate_graph_degree``); 'all' inserts every improving
        pair (classic NN-Descent; CPU only). 'auto': 'selective' on the GPU, 'all' on the CPU,
        where distance computations dominate and 'all' reaches a given recall sooner.
    two_phase : bool, default=True
        With the selective update and lists longer than ``graph_degree`` (``intermediate_graph_degree``;
        short lists of at most 128 entries, wide ones of at most 256; others take one phase):
        iterate on lists of ``graph_degree`` entries (at least 32) first, until an iteration changes
        fewer than a tenth of their entries, then widen every list to the intermediate length with the
        nearest of its neighbours' neighbours (the first 32 entries of the lists of its first 32 entries,
        each id's distance computed once) and iterate on the wide lists with half the sample size until
        the usual stop. The first iterations, from random lists, cost the most and do the same on short
        lists in about half the time; the neighbours' neighbours fill a wide list nearly converged.
        H200, 1,000 overlapping clusters of 128-d rows, k=32: 1M rows 1.19 s at graph recall@10 0.9995 /
        recall@32 0.995 (one phase: 2.44 s at 0.9999 / 0.991), 16M rows 25.7 s at 0.9994 / 0.994 (38.8 s
        at 1.000 / 0.988); ``benchmarks/results/nndescent_gpu_h200_two_phase.jsonl``.
        False: the intermediate lists from the start. The graph's ``info`` reports ``phase_iterations``
        and ``widen_seconds``.
    init : {'auto', 'random', 'rp_forest', 'cluster_windows'}, default='auto'
        Initial lists. 'random': graph_degree random nodes each (GNND Alg. 1). 'rp_forest' (CPU only):
        every node's nearest leaf-mates in a forest of random projection trees, as pynndescent starts
        NN-Descent; far fewer iterations follow. The forest has ``max(3, min(12, round(2 log10 n)))``
        trees with leaves of at most ``max(32, min(256, 5 graph_degree))`` points. 'cluster_windows' (GPU
        only): the exact k-NN inside windows of ``max(1024, 2 graph_degree)`` consecutive points of three
        k-means cluster orderings, by batched GEMM; a better start than random lists but no sooner at
        graph recall 0.99 and above (its lists lack long-range links; ``benchmarks/studies/profile_join.py``).
        Meant for L2 and cosine. 'auto': 'rp_forest' on the CPU, 'random' on the GPU.
    seed : int, default=0
        Seeds the initial graph and (CPU) the reverse sampling. Same seed, same CPU result.
    out_of_core : {'auto', 'clusters', 'shard_pairs'}, default='auto'
        How data larger than the build's ``memory_limit`` is built (see the package docs):
        'shard_pairs' is the paper's all-pairs GGM merge of equal shards; 'clusters' builds overlapping
        k-means clusters one at a time; 'auto' takes shard pairs when at most 4 shards are needed, else
        clusters.
    cluster_overlap : int, default=3
        With ``out_of_core='clusters'``: the most clusters a row joins (1 to 8): its nearest one, and of
        its 2nd to ``cluster_overlap``-th nearest those whose border it lies near (``cluster_margin``).
        Neighbours across a border are found in the clusters both rows join.
    piece_termination_threshold : float or None, default=None
        With ``out_of_core='clusters'``: the pieces' ``termination_threshold``. None: 0.1 with the selective
        update (the GPU's), ``termination_threshold`` with the update 'all'. A piece stops once an
        iteration changes fewer than a tenth of its lists' entries, as the two-phase schedule's short
        lists do: its nearest entries have converged by then (the first ten nearly all), and a row's lists
        from its overlapping pieces are merged. H200, 10M x 128 rows of 5000 separate clusters, k=32, a
        quarter of the data's memory, one process: 26.7 s at graph recall@10 0.962 / recall@32 0.902
        against 37.8 s at 0.963 / 0.923 with the pieces run to 0.001 (the in-memory build: 17.4 s;
        ``benchmarks/results/nndescent_out_of_core_gpu_h200.jsonl``).
    cluster_margin : float or None, default=0.2
        With ``out_of_core='clusters'``: a row joins its j-th nearest cluster (j = 2 to
        ``cluster_overlap``) where its distance to the border between that cluster and its nearest one
        (the hyperplane halfway between the two centroids) is at most ``cluster_margin * r``, ``r`` the
        data's neighbourhood radius: the median distance from a row to its k-th nearest neighbour (k the
        pieces' list length), measured on 64 sample rows during the assignment (``info['neighbour_radius']``).
        Rows deep inside a cluster are built once, rows near a border two or three times; a cluster
        halved to fit the memory limit builds the rows within the same distance of the cut on both sides.
        The work is about ``rows built / n`` in-memory builds (``info['copies']``); where the border
        distance would build more than 2.4 rows per row (data without cluster structure, where nearly every
        row is near a border), it is lowered to what builds 2.4 (``info['border_distance']``). Cosine:
        distances of the normalised vectors; inner product: of the usual reduction to L2 (see
        :func:`knngraph.partition.nearest_centroids`). None: every row joins its ``cluster_overlap``
        nearest clusters (the most work, ``cluster_overlap`` in-memory builds; the partition of the
        several-device and Dask graphs). Measurements: :mod:`knngraph.partition` and
        ``benchmarks/studies/nndescent_out_of_core.py``.
    """

    graph_degree: int = 32
    metric: str = "sqeuclidean"
    intermediate_graph_degree: int = 0
    sample_size: int = 0
    max_iterations: int = 20
    termination_threshold: float = 0.001
    update: str = "auto"
    two_phase: bool = True
    init: str = "auto"
    seed: int = 0
    out_of_core: str = "auto"
    cluster_overlap: int = 3
    cluster_margin: float | None = 0.2
    piece_termination_threshold: float | None = None

    _constraints = {"graph_degree": Interval(1, None), "metric": Metric(),
                    "intermediate_graph_degree": Interval(0, None), "sample_size": Interval(0, MAX_SAMPLE_SIZE),
                    "max_iterations": Interval(1, None),
                    "termination_threshold": Interval(0.0, 1.0, integer=False), "update": Options(UPDATE_MODES),
                    "two_phase": Boolean(),
                    "init": Options(INIT_MODES), "seed": Interval(0, 2**63 - 1), "out_of_core": Options(OUT_OF_CORE),
                    "cluster_overlap": Interval(1, 8),
                    "cluster_margin": Interval(0.0, None, integer=False, allow_none=True),
                    "piece_termination_threshold": Interval(0.0, 1.0, integer=False, allow_none=True)}
