"""knngraph: k-nearest-neighbour graphs and approximate nearest-neighbour search on NVIDIA GPUs.

Quick tour::

    import knngraph
    d, i = knngraph.knn(base, queries, k=10)               # exact, GPU if there is one
    g = knngraph.knn_graph(base, k=32)                      # exact k-NN graph (self excluded)
    knngraph.evaluate.recall_at_k(i, true_ids, k=10)
"""

from . import bruteforce, evaluate, metrics, nndescent
from ._api import GRAPH_METHODS, knn, knn_graph
from ._device import gpu_available
from .bruteforce import KNNResult
from .evaluate import graph_recall, r_at_k, recall_at_k
from .graph import Graph
from .nndescent import merge_graphs
from . import song
from .song import optimize_graph

__version__ = "0.1.0"

__all__ = ["knn", "knn_graph", "Graph", "KNNResult", "GRAPH_METHODS", "gpu_available", "recall_at_k",
           "r_at_k", "graph_recall", "bruteforce", "evaluate", "metrics", "__version__", "nndescent",
           "merge_graphs", "song", "optimize_graph"]
