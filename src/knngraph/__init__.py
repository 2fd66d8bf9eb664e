"""knngraph: k-nearest-neighbour graphs and approximate nearest-neighbour search on NVIDIA GPUs, with a
CPU path that runs anywhere.

Quick tour::

    import knngraph
    d, i = knngraph.knn(base, queries, k=10)               # exact, GPU if there is one
    g = knngraph.knn_graph(base, k=32)                      # exact k-NN graph (self excluded)
    g = knngraph.knn_graph(base, k=32, method="nndescent")  # approximate, much faster at scale
    knngraph.recall_at_k(i, true_ids, k=10)

Every algorithm folder of :mod:`knngraph.registry` (``knngraph.bruteforce``, ``knngraph.nndescent``,
``knngraph.ggnn``, ...) follows one module contract, written down in :mod:`knngraph.index`; each is an
attribute of the package, read from the registry. Importing knngraph loads neither numba.cuda nor CuPy:
the algorithm folders load on first use, their GPU code on first GPU use. ``knngraph.distributed``
(sharded indexes and graphs on a Dask cluster) loads on first use too; it needs the ``dask`` extra, so it
is left out of ``__all__`` (``from knngraph import *`` works without Dask).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import registry
from ._api import knn, knn_graph
from ._device import gpu_available
from .evaluate import graph_recall, r_at_k, recall_at_k
from .graph import Graph
from .index import KNNResult

if TYPE_CHECKING:  # what __getattr__ below loads on first use, named for type checkers
    from . import (bruteforce, datasets, distributed, evaluate, ggnn, graphops, grnnd, index, io, metrics, nndescent,
                   partition, primitives, song)
    from ._warmup import warmup
    from .graphops import optimize_graph
    from .nndescent import merge_graphs

__version__ = "0.1.0"

#: the algorithm folders, as the registry names them ("knngraph.ggnn" -> "ggnn")
_ALGORITHM_MODULES = tuple(dict.fromkeys(a.module.split(".")[1] for a in registry.ALGORITHMS.values()
                                         if a.module.startswith(__name__ + ".")))
#: the library's other modules that load on first use (``knngraph.graphops``, ...)
_LIBRARY_MODULES = ("graphops", "primitives", "partition", "evaluate", "metrics", "io", "datasets", "registry",
                    "index", "cli")
#: modules that need an extra (here: Dask): reachable, but not in ``__all__``
_EXTRA_MODULES = ("distributed",)
_SUBMODULES = _ALGORITHM_MODULES + _LIBRARY_MODULES + _EXTRA_MODULES
_LAZY_NAMES = {"optimize_graph": "graphops", "merge_graphs": "nndescent", "warmup": "_warmup"}

__all__ = ["knn", "knn_graph", "Graph", "KNNResult", "gpu_available", "recall_at_k", "r_at_k", "graph_recall",
           "optimize_graph", "merge_graphs", "warmup", "registry", *_ALGORITHM_MODULES, "graphops", "evaluate", "metrics",
           "io", "datasets", "__version__"]


def __getattr__(name: str) -> Any:
    """Algorithm folders, the other submodules and their top-level names load on first use
    (``knngraph.song``, ``knngraph.distributed``, ``knngraph.optimize_graph``, ...)."""
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'knngraph' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY_NAMES))
