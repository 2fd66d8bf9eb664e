"""Parameters of a GRNND build: :class:`IndexParams`."""

from __future__ import annotations

import dataclasses

from .._params import Interval, Metric, Params

__all__ = ["IndexParams", "MAX_GRAPH_DEGREE", "AUTO_INITIAL_DEGREE"]

#: largest pool capacity R (the GPU kernels keep a pool per warp in shared memory)
MAX_GRAPH_DEGREE = 128
#: initial_degree=0 takes min(graph_degree, AUTO_INITIAL_DEGREE, n - 1) random neighbours per vertex
AUTO_INITIAL_DEGREE = 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of a GRNND search-graph build (notation of the paper's Table 1 in brackets).

    Parameters
    ----------
    graph_degree : int, default=32
        R, the pool capacity: most neighbours a vertex holds while building and most out-edges of the
        result (rows have fewer after pruning; -1 pads them). 1 <= graph_degree < n, at most 128.
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
        Distance; see :mod:`knngraph.metrics`.
    initial_degree : int, default=0
        S, random initial neighbours per vertex; at most graph_degree and smaller than n. 0 = auto:
        min(graph_degree, 20, n - 1) (20 as the RNN-Descent authors' benchmark script).
    outer_iterations : int, default=3
        T1, outer iterations; reverse edges are sampled after each one but the last. (The paper found
        1 to 2 near-optimal on SIFT1M and DEEP1M, section 4.4; on sift-photos 20k, 3 x 6 rounds reached
        recall@10 0.944 / 0.980 at SONG queue sizes 32 / 64 against 0.936 / 0.979 for 2 x 10, and
        1 x 20 only 0.902 / 0.962: the reverse steps matter.)
    inner_iterations : int, default=6
        T2, propagation rounds per outer iteration.
    reverse_ratio : float, default=0.6
        rho in [0, 1]: after an outer iteration every vertex offers itself as a reverse edge to its
        nearest round(rho * count) pool entries (section 3.6; 0.6 is the paper's trade-off, Fig. 8).
    prune_alpha : float, default=1.0
        alpha in [1, 2], a relaxation of the RNG test (the alpha of Vamana / DiskANN and of
        :func:`knngraph.optimize_graph`): a vertex v drops the farther member n_far of a pair of its pool
        only when f * d(n_i, n_j) < max(d(v, n_i), d(v, n_j)), with f = alpha^2 on the squared L2
        values kept internally, alpha for cosine, 1 for inner product
        (:func:`knngraph.graphops.prune.occlusion_factor`); the final prune of each row uses the same
        test. The redirects still follow the paper's Eq. (2): an entry occluded by the plain test but
        not by the relaxed one stays in v's pool and is offered to the closer member's pool as well, so
        the propagation of the rounds is the paper's. 1.0 is the paper's rule exactly. Larger values
        keep more, longer edges (on sift-photos 100k, R = 32: 9.9 edges per row at 1.0, 18.8 at 1.05,
        24.4 at 1.1, 28.9 at 1.2): a denser graph that reaches a given recall with a shorter search
        queue, at more pair tests per round (pools stay fuller). ``benchmarks/studies/grnnd_alpha_cpu.py``
        measures it.
    seed : int, default=0
        Seeds the initial neighbours and the order of the pair tests. Same seed, same result (CPU and GPU).
    """

    graph_degree: int = 32
    metric: str = "sqeuclidean"
    initial_degree: int = 0
    outer_iterations: int = 3
    inner_iterations: int = 6
    reverse_ratio: float = 0.6
    prune_alpha: float = 1.0
    seed: int = 0

    _constraints = {"graph_degree": Interval(1, MAX_GRAPH_DEGREE), "metric": Metric(),
                    "initial_degree": Interval(0, MAX_GRAPH_DEGREE), "outer_iterations": Interval(1, 100),
                    "inner_iterations": Interval(1, 1000), "reverse_ratio": Interval(0.0, 1.0, integer=False),
                    "prune_alpha": Interval(1.0, 2.0, integer=False),
                    "seed": Interval(0, 2**63 - 1)}

    def __post_init__(self):
        super().__post_init__()
        if self.initial_degree > self.graph_degree:
            raise ValueError(f"The 'initial_degree' parameter of IndexParams must be at most graph_degree="
                             f"{self.graph_degree} (the pool capacity R). Got {self.initial_degree!r} instead.")
