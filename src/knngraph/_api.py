"""The top-level functions most users call: :func:`knn` and :func:`knn_graph`."""

from __future__ import annotations

from . import bruteforce
from .nndescent import nndescent_graph
from .bruteforce import KNNResult
from .graph import Graph

__all__ = ["knn", "knn_graph", "GRAPH_METHODS"]

#: graph builders by name; algorithm folders add themselves here when they exist
GRAPH_METHODS = {"exact": bruteforce.exact_knn_graph, "nndescent": nndescent_graph}


def knn(base, queries, k: int, *, metric: str = "sqeuclidean", device="auto", select: str = "auto",
        memory_limit=None, verbose: bool = True) -> KNNResult:
    """Exact k nearest neighbours of each query among ``base``.

    Parameters
    ----------
    base : array of shape (n, d)
        Base vectors: float32, float16, uint8 or int8 (float64 is cast to float32). NumPy (memory-mapped
        files stream tile by tile), CuPy, PyTorch or any DLPack / ``__cuda_array_interface__`` array.
        Device arrays are used in place.
    queries : array of shape (n_queries, d)
        Query vectors, same forms as ``base``; may live on another device than ``base``.
    k : int
        Neighbours per query, 1 <= k <= n.
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
        See :mod:`knngraph.metrics`; inner_product reports -<q, x> so that smaller is closer.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        'auto' uses the GPU when CuPy and numba-cuda can run on one (the GPU holding a device input
        first), else the CPU.
    select : {'auto', 'warp_filter', 'quickselect'}, default='auto'
        GPU selection strategy (see :class:`knngraph.bruteforce.SearchParams`).
    memory_limit : int or str or None, default=None
        Most device memory to use, e.g. "4GB"; None = free memory minus a margin.
    verbose : bool, default=True
        Progress bar for long work (only on a terminal).

    Returns
    -------
    KNNResult
        ``(distances, indices)``: float32 and int32 arrays of shape (n_queries, k), nearest first,
        ties broken by lower id; returned in the framework of ``queries`` (NumPy, CuPy or PyTorch).

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> base = np.array([[0, 0], [1, 0], [5, 5]], dtype=np.float32)
    >>> d, i = knngraph.knn(base, np.array([[0.9, 0.1]], dtype=np.float32), k=2, device="cpu")
    >>> i.tolist(), [round(float(v), 2) for v in d[0]]
    ([[1, 0]], [0.02, 0.82])
    """
    return bruteforce.exact_knn(base, queries, k, metric=metric, device=device, select=select,
                                memory_limit=memory_limit, verbose=verbose)


def knn_graph(base, k: int, *, method: str = "exact", metric: str = "sqeuclidean", device="auto",
              verbose: bool = True, **method_params) -> Graph:
    """The k-nearest-neighbour graph of ``base`` (each node's k nearest other nodes).

    Parameters
    ----------
    base : array of shape (n, d)
        Vectors, as for :func:`knn`.
    k : int
        Neighbours per node, 1 <= k < n (a node is never its own neighbour).
    method : str, default='exact'
        Builder: one of ``knngraph.GRAPH_METHODS`` ('exact' = GEMM + selection).
    metric, device, verbose
        As for :func:`knn`.
    **method_params
        Passed to the builder (for 'exact': ``select``, ``memory_limit``).

    Returns
    -------
    Graph
        int32 ``indices`` and float32 ``distances`` of shape (n, k), nearest first; NumPy arrays for host
        input, CuPy arrays for device input.

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> x = np.array([[0], [1], [3], [7]], dtype=np.float32)
    >>> knngraph.knn_graph(x, k=1, device="cpu").indices.ravel().tolist()
    [1, 0, 1, 2]
    """
    if method not in GRAPH_METHODS:
        raise ValueError(f"unknown graph method {method!r}; available: {', '.join(sorted(GRAPH_METHODS))}")
    return GRAPH_METHODS[method](base, k, metric=metric, device=device, verbose=verbose, **method_params)
