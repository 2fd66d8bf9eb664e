"""knngraph as an ann-benchmarks algorithm (https://github.com/erikbern/ann-benchmarks).

Copy this folder to ``ann_benchmarks/algorithms/knngraph/`` of an ann-benchmarks checkout (see
``annbench/README.md``). The harness builds the index once per ``args`` of ``config.yml`` (``fit``), then
for each ``query_args`` sets the search parameters and queries: one query at a time (``query``) or all at
once (``--batch``: ``batch_query`` then ``get_batch_results``).

:class:`KnngraphSONG`: a k-NN graph of degree ``intermediate_graph_degree`` (exact, or NN-Descent),
pruned to ``graph_degree`` (``knngraph.optimize_graph``), searched with SONG; ``queue_size`` is the
speed/recall knob. :class:`KnngraphExact`: exact search (a recall-1.0 reference point). Both run on the
GPU when CuPy and numba-cuda find one, else on the CPU.
"""

from __future__ import annotations

import numpy as np

try:  # inside an ann-benchmarks checkout
    from ..base.module import BaseANN
except ImportError:  # standalone (tests, or ann-benchmarks not installed): the same interface
    class BaseANN:
        """The part of ann-benchmarks' ``BaseANN`` interface the harness calls."""

        def done(self) -> None:
            pass

        def get_memory_usage(self):
            try:
                import psutil
            except ImportError:
                return None
            return psutil.Process().memory_info().rss / 1024

        def fit(self, X) -> None:
            pass

        def query(self, q, n):
            return []

        def batch_query(self, X, n) -> None:
            self.res = [self.query(q, n) for q in X]

        def get_batch_results(self):
            return self.res

        def get_additional(self):
            return {}

        def set_query_arguments(self, *args) -> None:
            pass

        def __str__(self) -> str:
            return self.name

#: ann-benchmarks ``distance`` names -> knngraph metrics (euclidean searched as sqeuclidean: the same order)
METRICS = {"euclidean": "sqeuclidean", "angular": "cosine", "ip": "inner_product", "dot": "inner_product"}


def _metric(name: str) -> str:
    if name not in METRICS:
        raise ValueError(f"metric: knngraph supports the ann-benchmarks metrics {', '.join(METRICS)}, got {name!r}")
    return METRICS[name]


class _Knngraph(BaseANN):
    """What both wrappers share: one query or a batch through ``_search(queries, n)`` (ids, nearest
    first)."""

    name = "knngraph"
    res = None

    def _search(self, queries, n):
        raise NotImplementedError

    def query(self, q, n):
        return self._search(np.asarray(q)[None, :], n)[0]

    def batch_query(self, X, n):
        self.res = self._search(X, n)

    def get_batch_results(self):
        return self.res

    def __str__(self):
        return self.name


class KnngraphSONG(_Knngraph):
    """SONG search on an optimized k-NN graph.

    Parameters (``config.yml`` ``args``): ``metric`` ('@metric'), ``graph_degree``,
    ``intermediate_graph_degree``, ``build_algo`` ('exact' or 'nndescent'). Query arguments:
    ``queue_size``.
    """

    def __init__(self, metric, graph_degree=32, intermediate_graph_degree=64, build_algo="nndescent"):
        from knngraph import song

        self._metric = _metric(metric)
        # checked now, before any data is read
        self._params = song.IndexParams(metric=self._metric, graph_degree=graph_degree,
                                        intermediate_graph_degree=intermediate_graph_degree, build_algo=build_algo)
        self._queue_size = 64
        self._index = None
        self.name = f"knngraph-song(d={graph_degree},k={intermediate_graph_degree},{build_algo})"

    def fit(self, X):
        from knngraph import song

        self._index = song.build(self._params, np.ascontiguousarray(X, dtype=np.float32), verbose=False)

    def set_query_arguments(self, queue_size):
        self._queue_size = int(queue_size)
        self.name = f"{self.name.split(' ')[0]} queue_size={self._queue_size}"

    def _search(self, queries, n):
        from knngraph import song

        params = song.SearchParams(queue_size=max(self._queue_size, n))
        _, ids = song.search(self._index, np.ascontiguousarray(queries, dtype=np.float32), n, params,
                             verbose=False)
        return np.asarray(ids)


class KnngraphExact(_Knngraph):
    """Exact search (GEMM + k-selection): recall 1.0, the reference point of the plots."""

    def __init__(self, metric):
        self._metric = _metric(metric)
        self._index = None
        self.name = "knngraph-exact"

    def fit(self, X):
        from knngraph import bruteforce

        self._index = bruteforce.build(bruteforce.IndexParams(metric=self._metric),
                                       np.ascontiguousarray(X, dtype=np.float32), verbose=False)

    def _search(self, queries, n):
        from knngraph import bruteforce

        _, ids = bruteforce.search(self._index, np.ascontiguousarray(queries, dtype=np.float32), n, verbose=False)
        return np.asarray(ids)
