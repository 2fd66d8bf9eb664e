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
    seed : int, default=0
        Seeds the initial neighbours and the order of the pair tests. Same seed, same result (CPU and GPU).
    """

    graph_degree: int = 32
    metric: str = "sqeuclidean"
    initial_degree: int = 0
    outer_iterations: int = 3
    inner_iterations: int = 6
    reverse_ratio: float = 0.6
    seed: int = 0

    _constraints = {"graph_degree": Interval(1, MAX_GRAPH_DEGREE), "metric": Metric(),
                    "initial_degree": Interval(0, MAX_GRAPH_DEGREE), "outer_iterations": Interval(1, 100),
                    "inner_iterations": Interval(1, 1000), "reverse_ratio": Interval(0.0, 1.0, integer=False),
                    "seed": Interval(0, 2**63 - 1)}

    def __post_init__(self):
        super().__post_init__()
        if self.initial_degree > self.graph_degree:
            raise ValueError(f"The 'initial_degree' parameter of IndexParams must be at most graph_degree="
                             f"{self.graph_degree} (the pool capacity R). Got {self.initial_degree!r} instead.")
