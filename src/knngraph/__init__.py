"""knngraph: k-nearest-neighbour graphs and approximate nearest-neighbour search on NVIDIA GPUs, with a
CPU path that runs anywhere.

Quick tour::

    import knngraph
    d, i = knngraph.knn(base, queries, k=10)               # exact, GPU if there is one
    g = knngraph.knn_graph(base, k=32)                      # exact k-NN graph (self excluded)
    g = knngraph.knn_graph(base, k=32, method="nndescent")  # approximate, much faster at scale
    knngraph.recall_at_k(i, true_ids, k=10)

Every algorithm folder (``knngraph.bruteforce``, ``knngraph.nndescent``, ``knngraph.song``) follows one
module contract, written down in :mod:`knngraph.index`; :mod:`knngraph.registry` lists them. Importing
knngraph loads neither numba.cuda nor CuPy: the algorithm folders load on first use, their GPU code on
first GPU use.
"""

from __future__ import annotations

import importlib

from . import registry
from ._api import knn, knn_graph
from ._device import gpu_available
from .evaluate import graph_recall, r_at_k, recall_at_k
from .graph import Graph
from .index import KNNResult

__version__ = "0.1.0"

_SUBMODULES = ("bruteforce", "nndescent", "song", "graphops", "primitives", "partition", "evaluate", "metrics",
               "io", "datasets", "registry", "index", "cli")
_LAZY_NAMES = {"optimize_graph": "graphops", "merge_graphs": "nndescent"}

__all__ = ["knn", "knn_graph", "Graph", "KNNResult", "gpu_available", "recall_at_k", "r_at_k", "graph_recall",
           "optimize_graph", "merge_graphs", "registry", "bruteforce", "nndescent", "song", "graphops",
           "evaluate", "metrics", "io", "datasets", "__version__"]


def __getattr__(name):
    """Algorithm folders and their top-level names load on first use (``knngraph.song``, ...)."""
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'knngraph' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY_NAMES))
