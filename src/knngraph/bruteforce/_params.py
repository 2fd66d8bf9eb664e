"""Parameters of exact (brute-force) k-NN: :class:`IndexParams` and :class:`SearchParams`."""

from __future__ import annotations

import dataclasses

from .._params import Interval, Metric, Options, Params
from ..primitives.kselect import SELECT_STRATEGIES

__all__ = ["IndexParams", "SearchParams"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of an exact index.

    Parameters
    ----------
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
        Distance; see :mod:`knngraph.metrics` for what each reports.
    graph_degree : int, default=0
        0: a search index only. > 0: :func:`build` also computes the exact k-NN graph of the dataset
        with this many neighbours per node (a node is never its own neighbour), ``index.graph``.
    """

    metric: str = "sqeuclidean"
    graph_degree: int = 0

    _constraints = {"metric": Metric(), "graph_degree": Interval(0, None)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchParams(Params):
    """Parameters of an exact search.

    Parameters
    ----------
    select : {'auto', 'warp_filter', 'quickselect'}, default='auto'
        GPU k-selection strategy (:mod:`knngraph.primitives.kselect`). 'quickselect' is Komarov et al.'s
        quick multi-select; 'warp_filter' a single-pass threshold filter with bitonic merging
        (k <= 1024). 'auto' uses 'warp_filter' for k <= 1024 and 'quickselect' above. The CPU path keeps
        a bounded heap per query whatever ``select`` says (a 'warp_filter' with k > 1024 is refused on
        both).
    """

    select: str = "auto"

    _constraints = {"select": Options(SELECT_STRATEGIES)}
