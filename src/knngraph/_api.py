"""The top-level functions most users call: :func:`knn` and :func:`knn_graph`.

They dispatch through :mod:`knngraph.registry` and hold nothing algorithm-specific.
"""

from __future__ import annotations

from typing import Any

from . import registry
from ._device import is_device_array, resolve_device
from ._device import on_input_device
from ._params import Params
from ._typing import Array, DeviceLike, Devices, MemoryLimit
from ._validate import check_finite, check_int, check_k, check_same_dim, check_vectors
from .graph import Graph
from .index import KNNResult, runtime_docs

__all__ = ["knn", "knn_graph"]


@runtime_docs
@on_input_device('base', 'queries')
def knn(base: Array, queries: Array, k: int, *, metric: str = "sqeuclidean", device: DeviceLike = "auto",
        select: str = "auto", memory_limit: MemoryLimit = None, verbose: bool = True,
        filter: Array | None = None, devices: Devices | None = None, layout: str = "auto") -> KNNResult:
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
    {device}
    select : {'auto', 'warp_filter', 'quickselect'}, default='auto'
        GPU selection strategy (see :class:`knngraph.bruteforce.SearchParams`).
    {memory_limit}
    {verbose}
    {filter}
    {devices}
        The ids are those of one device.
    {layout}

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
    exact = registry.get("exact").load()
    if devices is not None:
        index = exact.build(exact.IndexParams(metric=metric), base, devices=devices, layout=layout,
                            memory_limit=memory_limit, verbose=verbose)
        return exact.search(index, queries, k, exact.SearchParams(select=select), memory_limit=memory_limit,
                            verbose=verbose, filter=filter)
    dev = resolve_device(device, base, queries)
    b = _checked(base, "base", dev)
    check_same_dim(b, _checked(queries, "queries", dev, finite=False))
    index = exact.build(exact.IndexParams(metric=metric), b, device=dev, verbose=verbose, _checked=True)
    return exact.search(index, queries, k, exact.SearchParams(select=select), device=device,
                        memory_limit=memory_limit, verbose=verbose, filter=filter)


@runtime_docs
@on_input_device('base')
def knn_graph(base: Array, k: int, *, method: str = "exact", metric: str = "sqeuclidean",
              device: DeviceLike = "auto", memory_limit: MemoryLimit = None, verbose: bool = True,
              params: Params | None = None, devices: Devices | None = None, **method_params: Any) -> Graph:
    """The k-nearest-neighbour graph of ``base``: each node's k nearest other nodes.

    Parameters
    ----------
    base : array of shape (n, d)
        Vectors, as for :func:`knn`.
    k : int
        Neighbours per node (the graph degree), 1 <= k < n (a node is never its own neighbour).
    method : str, default='exact'
        Builder: a graph builder of :mod:`knngraph.registry` ('exact' = GEMM + selection, 'nndescent' =
        NN-Descent, approximate and much faster at scale).
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
    {device}
    {memory_limit}
    {verbose}
    params : IndexParams of the method, optional
        Its other fields are used (``graph_degree`` and ``metric`` come from ``k`` and ``metric``).
    devices : list of int or str, or 'all', optional
        Build on several devices of this host at once (:func:`knngraph.multidevice.knn_graph`): the exact
        graph cut by rows (the same graph as on one device); other builders over the overlapping k-means
        clusters of the data spread over the devices when the graph does not fit one device's
        ``memory_limit``, else on the first device.
    **method_params
        Fields of the method's ``IndexParams`` (e.g. ``max_iterations=6`` for 'nndescent').

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
    k = check_int(k, "k", low=1)
    if not isinstance(method, str) or method not in registry.graph_builders():
        why = "does not build k-NN graphs" if method in registry.ALGORITHMS else "is not a graph builder"
        raise ValueError(f"method={method!r} {why}; graph builders: {', '.join(registry.graph_builders())}")
    algorithm = registry.get(method)
    if devices is not None:
        from . import multidevice

        devs = multidevice.resolve_devices(devices)
        base = _checked(base, "base", devs[0])
        check_k(k, base.shape[0], graph=True)
        return multidevice.knn_graph(algorithm, base, k, devs, metric=metric, memory_limit=memory_limit,
                                     verbose=verbose, params=params, **method_params)
    dev = resolve_device(device, base)
    base = _checked(base, "base", dev)
    check_k(k, base.shape[0], graph=True)
    return algorithm.build_graph(base, k, metric=metric, device=dev, memory_limit=memory_limit, verbose=verbose,
                                 params=params, **method_params)


def _checked(x, name: str, dev, *, finite: bool = True):
    """``x`` validated under the caller's argument name (the algorithms would call it 'dataset')."""
    arr = check_vectors(x, name, on_gpu=dev.is_cuda and is_device_array(x))
    if finite:
        check_finite(arr, name)
    return arr
