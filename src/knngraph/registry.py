"""The one table of knngraph's algorithms.

``knngraph.knn_graph(method=...)``, the command line, the scikit-learn transformer, the benchmark runner
and the search-index builders (e.g. SONG's ``build_algo``) all read it; nothing else lists algorithms.
Each entry names the algorithm's folder (imported on first use) and what it can do under the module
contract (:mod:`knngraph.index`):

* ``builds_graphs``: its ``IndexParams`` has ``graph_degree`` and ``build(...).graph`` is the k-NN graph
  of the dataset (a node is never its own neighbour), so ``knn_graph(method=name)`` works;
* ``searches``: it has ``SearchParams`` and ``search(index, queries, k, params)``;
* ``searches_graphs``: it has ``from_graph(graph, dataset)``: it searches any builder's graph;
* ``search_graph``: (with ``builds_graphs``) its graph is a search graph, not the k-NN graph: rows of up to
  ``graph_degree`` distinct neighbours (never the node itself) chosen by its own rule, -1 padded; hand it
  to a graph searcher as it is;
* ``rng_pruned``: (with ``search_graph``) that rule is the relative neighbourhood graph's: for kept
  neighbours n1 nearer than n2 of v, d(n1, n2) >= d(v, n2) (GRNND), in every row but the edges the
  connectivity step adds to reach what the rule's approximation left unreachable (listed in
  ``graph.info['connect']['links']``, :func:`knngraph.graphops.connect_graph`). GGNN's bottom layer is not: it keeps
  nearest neighbours and symmetric links (GGNN section 5).
* ``search_knob``: (with ``searches``) the field of its ``SearchParams`` that trades speed for recall, the
  one a benchmark sweeps for a recall / queries-per-second curve ('queue_size' for SONG, 'tau' for
  GGNN); empty for an exact searcher, which has none.

A new algorithm adds one line to :data:`ALGORITHMS`.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._device import is_device_array
from ._typing import Array, DeviceLike, MemoryLimit

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["Algorithm", "ALGORITHMS", "get", "graph_builders", "searchers", "graph_searchers", "by_file_kind"]


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm of the library (see the module docs)."""

    name: str
    module: str
    summary: str
    builds_graphs: bool = False
    searches: bool = False
    searches_graphs: bool = False
    search_graph: bool = False
    rng_pruned: bool = False
    file_kind: str = ""
    search_knob: str = ""

    def load(self) -> ModuleType:
        """The algorithm's folder (``IndexParams``, ``build``, ...)."""
        return importlib.import_module(self.module)

    def build_graph(self, dataset: Array, graph_degree: int, *, metric: str = "sqeuclidean",
                    device: DeviceLike = "auto", memory_limit: MemoryLimit = None, verbose: bool = True,
                    params: Any = None, piece: bool = False, **param_fields: Any) -> Graph:
        """The k-NN graph of ``dataset`` with ``graph_degree`` neighbours per node: ``build(IndexParams(
        graph_degree=..., metric=..., **param_fields), dataset, ...).graph``. ``params``: a ready
        ``IndexParams`` of this algorithm instead (its ``graph_degree`` and ``metric`` are replaced).
        ``piece=True``: ``dataset`` is one piece of a graph built in overlapping pieces whose lists are
        merged afterwards; an algorithm with a ``piece_params(params, dataset, device)`` adapts its
        automatic parameters to that (NN-Descent's shorter lists)."""
        if not self.builds_graphs:
            raise ValueError(f"{self.name!r} does not build k-NN graphs; graph builders: "
                             f"{', '.join(graph_builders())}")
        mod = self.load()
        if params is not None:
            if not isinstance(params, mod.IndexParams):
                raise TypeError(f"params must be a {self.module}.IndexParams, got {type(params).__name__}")
            params = dataclasses.replace(params, graph_degree=graph_degree, metric=metric, **param_fields)
        else:
            params = mod.IndexParams(graph_degree=graph_degree, metric=metric, **param_fields)
        if piece and hasattr(mod, "piece_params"):
            params = mod.piece_params(params, dataset, device)
        graph = mod.build(params, dataset, device=device, memory_limit=memory_limit, verbose=verbose).graph
        # device input, device output, whatever memory the builder keeps its graph in (GGNN: the host's)
        return graph.to_device() if is_device_array(dataset) else graph


#: name -> Algorithm, in the order users meet them
ALGORITHMS = {a.name: a for a in (
    Algorithm("exact", "knngraph.bruteforce", "exact k-NN: GEMM tiles + GPU k-selection (quick multi-select)",
              builds_graphs=True, searches=True, file_kind="bruteforce-index"),
    Algorithm("nndescent", "knngraph.nndescent", "approximate k-NN graphs by NN-Descent (GNND on the GPU)",
              builds_graphs=True, file_kind="nndescent-index"),
    Algorithm("grnnd", "knngraph.grnnd", "sparse RNG-pruned search graphs by relative NN-Descent (GRNND)",
              builds_graphs=True, search_graph=True, rng_pruned=True, file_kind="grnnd-index"),
    Algorithm("song", "knngraph.song", "graph search, one GPU warp per query (SONG), on any graph",
              searches=True, searches_graphs=True, file_kind="song-index", search_knob="queue_size"),
    Algorithm("ggnn", "knngraph.ggnn", "hierarchical graph build + block-per-query search (GGNN), sharding",
              builds_graphs=True, search_graph=True, searches=True, searches_graphs=True, file_kind="ggnn-index",
              search_knob="tau"),
)}


def get(name: str) -> Algorithm:
    """The algorithm called ``name``; ValueError listing the known ones otherwise."""
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; available: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def graph_builders() -> tuple[str, ...]:
    """Names of the algorithms that build k-NN graphs (``knn_graph(method=...)``)."""
    return tuple(a.name for a in ALGORITHMS.values() if a.builds_graphs)


def searchers() -> tuple[str, ...]:
    """Names of the algorithms that build searchable indexes."""
    return tuple(a.name for a in ALGORITHMS.values() if a.searches)


def graph_searchers() -> tuple[str, ...]:
    """Names of the searchers that take any builder's graph (``from_graph``)."""
    return tuple(a.name for a in ALGORITHMS.values() if a.searches_graphs)


def by_file_kind(kind: str) -> Algorithm | None:
    """The algorithm whose index files hold ``kind`` (the header of a saved index), or None."""
    return next((a for a in ALGORITHMS.values() if a.file_kind == kind), None)
