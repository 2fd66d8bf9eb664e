"""Exact (brute-force) k-NN search and exact k-NN graphs: GEMM tiles + per-row k-selection (the GPU quick
multi-select of Komarov, Dashti, D'Souza, or a warp filter), on the GPU or the CPU.

The module contract (:mod:`knngraph.index`)::

    params = bruteforce.IndexParams(metric="sqeuclidean")
    index = bruteforce.build(params, base)
    distances, indices = bruteforce.search(index, queries, k=10)
    index = bruteforce.extend(index, more_vectors)
    bruteforce.save("exact.index", index); index = bruteforce.load("exact.index")

    graph = bruteforce.build(bruteforce.IndexParams(graph_degree=32), base).graph   # exact k-NN graph

Most users call :func:`knngraph.knn` and :func:`knngraph.knn_graph`, which wrap these. The GPU path is
``cuda.py`` (cuBLAS GEMM through CuPy, selection kernels of :mod:`knngraph.primitives.kselect`), the CPU
path ``cpu.py`` (NumPy's BLAS, bounded heaps in numba); both expose ``exact_knn``.
"""

from ._index import Index, build, extend, load, save, search
from ._params import IndexParams, SearchParams

__all__ = ["IndexParams", "SearchParams", "Index", "build", "search", "extend", "save", "load"]
