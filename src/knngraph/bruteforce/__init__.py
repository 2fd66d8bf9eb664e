"""Exact (brute-force) k-NN search and k-NN graphs: GEMM tiles + GPU quick multi-select / warp filter.

The same outward shape as every algorithm folder::

    params = bruteforce.IndexParams(metric="sqeuclidean")
    index = bruteforce.build(params, base)
    distances, indices = bruteforce.search(index, queries, k=10)
    bruteforce.save("exact.knng", index); index = bruteforce.load("exact.knng")

Most users call :func:`knngraph.knn` and :func:`knngraph.knn_graph` instead, which wrap these.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import numpy as np

from .._device import Device, array_kind, default_memory_limit, is_device_array, resolve_device, return_as
from .._params import MemoryLimit, Metric, Options, Params
from .._validate import check_finite, check_k, check_same_dim, check_vectors
from ..graph import Graph, load_arrays, save_arrays
from .cuda import SELECT_STRATEGIES

__all__ = ["IndexParams", "SearchParams", "Index", "KNNResult", "build", "search", "save", "load",
           "exact_knn", "exact_knn_graph", "SELECT_STRATEGIES"]


class KNNResult(NamedTuple):
    """``(distances, indices)``: float32 distances and int32 ids, [n_queries, k], nearest first."""

    distances: object
    indices: object


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexParams(Params):
    """Parameters of an exact index.

    Parameters
    ----------
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
        Distance; see :mod:`knngraph.metrics` for what each reports.
    """

    metric: str = "sqeuclidean"

    _constraints = {"metric": Metric()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchParams(Params):
    """Parameters of an exact search.

    Parameters
    ----------
    select : {'auto', 'warp_filter', 'quickselect'}, default='auto'
        GPU k-selection strategy. 'quickselect' is Komarov et al.'s quick multi-select; 'warp_filter' a
        single-pass threshold filter with bitonic merging (k <= 1024). 'auto' uses 'warp_filter' for
        k <= 1024 (faster in our benchmarks) and 'quickselect' above. Ignored on the CPU.
    memory_limit : int or str or None, default=None
        Most bytes of device memory the search may allocate ("8GB" works). None: free device memory
        minus a margin (GPU), a quarter of RAM (CPU). Tiles are sized to fit it.
    """

    select: str = "auto"
    memory_limit: object = None

    _constraints = {"select": Options(SELECT_STRATEGIES), "memory_limit": MemoryLimit()}


@dataclasses.dataclass
class Index:
    """An exact index: the base vectors (as given, on the host or a GPU) and the metric."""

    dataset: object
    params: IndexParams

    @property
    def metric(self) -> str:
        return self.params.metric

    @property
    def shape(self):
        return tuple(int(s) for s in self.dataset.shape)

    def search(self, queries, k: int, params: SearchParams | None = None, *, device="auto",
               verbose: bool = True) -> KNNResult:
        return search(self, queries, k, params, device=device, verbose=verbose)


def build(params: IndexParams, dataset, *, device="auto") -> Index:
    """Validate ``dataset`` and wrap it in an :class:`Index` (nothing is precomputed).

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph import bruteforce
    >>> x = np.random.default_rng(0).random((100, 8), dtype=np.float32)
    >>> index = bruteforce.build(bruteforce.IndexParams(metric="euclidean"), x)
    >>> d, i = bruteforce.search(index, x[:3], k=2, device="cpu", verbose=False)
    >>> i[:, 0].tolist()
    [0, 1, 2]
    """
    dev = resolve_device(device, dataset)
    data = check_vectors(dataset, "dataset", on_gpu=dev.is_cuda and is_device_array(dataset))
    check_finite(data, "dataset")
    return Index(data, params)


def search(index: Index, queries, k: int, params: SearchParams | None = None, *, device="auto",
           verbose: bool = True) -> KNNResult:
    """Exact top-``k`` of each query among the index's base vectors; see :func:`knngraph.knn`."""
    params = params or SearchParams()
    return exact_knn(index.dataset, queries, k, metric=index.metric, device=device, select=params.select,
                     memory_limit=params.memory_limit, verbose=verbose, _base_checked=True)


def save(path, index: Index) -> None:
    """Write the index (base vectors + params) to ``path``."""
    from .._device import as_numpy

    save_arrays(path, "bruteforce-index", {"dataset": as_numpy(index.dataset)},
                {"metric": index.metric})


def load(path, *, metric: str | None = None) -> Index:
    """Read an index written by :func:`save`; ``metric``, when given, must match the saved one."""
    arrays, meta = load_arrays(path, "bruteforce-index")
    params = IndexParams(metric=meta["metric"])
    if metric is not None and IndexParams(metric=metric).metric != params.metric:
        raise ValueError(f"{path}: index was saved with metric {params.metric!r}, not {metric!r}")
    return Index(arrays["dataset"], params)


# --------------------------------------------------------------------------------------------------


def _prepare(base, queries, k, *, graph: bool, device, base_checked: bool = False):
    """Validation shared by search and graph builds; returns (device, base, queries, k)."""
    dev: Device = resolve_device(device, base, queries)
    b = check_vectors(base, "base", on_gpu=dev.is_cuda and is_device_array(base))
    if graph:
        q = b
    else:
        q = check_vectors(queries, "queries", on_gpu=dev.is_cuda and is_device_array(queries))
        check_same_dim(b, q)
    k = check_k(k, b.shape[0], graph=graph)
    if not base_checked:
        check_finite(b, "base")
    if not graph:
        check_finite(q, "queries")
    return dev, b, q, k


def _run(dev, b, q, k, metric, *, graph, select, memory_limit, verbose, stats=None):
    if dev.is_cuda:
        from .cuda import knn_cuda

        budget = memory_limit or default_memory_limit(dev)
        return knn_cuda(b, q, k, metric, graph=graph, memory_limit=budget, select=select,
                        device_index=dev.index, verbose=verbose, stats=stats)
    from .cpu import knn_cpu

    if select == "warp_filter" and k > 1024:
        raise ValueError(f"select='warp_filter' supports k <= 1024, got k={k}; use select='quickselect' or 'auto'")
    return knn_cpu(b, q, k, metric, graph=graph, memory_limit=memory_limit, verbose=verbose)


def exact_knn(base, queries, k, *, metric="sqeuclidean", device="auto", select="auto", memory_limit=None,
              verbose=True, _base_checked=False) -> KNNResult:
    metric = IndexParams(metric=metric).metric
    sp = SearchParams(select=select, memory_limit=memory_limit)
    kind = array_kind(queries)
    dev, b, q, k = _prepare(base, queries, k, graph=False, device=device, base_checked=_base_checked)
    d, i = _run(dev, b, q, k, metric, graph=False, select=sp.select, memory_limit=sp.memory_limit,
                verbose=verbose)
    return KNNResult(return_as(kind, d), return_as(kind, i))


def exact_knn_graph(base, k, *, metric="sqeuclidean", device="auto", select="auto", memory_limit=None,
                    verbose=True) -> Graph:
    metric = IndexParams(metric=metric).metric
    sp = SearchParams(select=select, memory_limit=memory_limit)
    dev, b, _, k = _prepare(base, None, k, graph=True, device=device)
    stats: dict = {}
    t0 = time.perf_counter()
    d, i = _run(dev, b, b, k, metric, graph=True, select=sp.select, memory_limit=sp.memory_limit,
                verbose=verbose, stats=stats)
    if is_device_array(d):
        if not is_device_array(base):  # host input, host graph
            d, i = d.get(), i.get()
    info = {"method": "exact", "k": k, "build_seconds": time.perf_counter() - t0,
            "device": "cuda" if dev.is_cuda else "cpu", **stats}
    return Graph(i, d, metric, info)
