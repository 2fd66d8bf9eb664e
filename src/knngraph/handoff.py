"""Hand a knngraph :class:`~knngraph.Graph` to the tools that consume neighbour graphs.

=============================  ==================================================================================
UMAP (umap-learn)              ``umap.UMAP(n_neighbors=15, precomputed_knn=umap_knn(g, 15))``: the
                               ``(knn_indices, knn_dists)`` pair UMAP computes itself otherwise, self in column 0
scanpy                         ``sc.pp.neighbors(adata, transformer=KNNGraphTransformer(...))``
                               (:mod:`knngraph.sklearn`)
HDBSCAN, DBSCAN, t-SNE,        ``g.to_csr(...)``: a SciPy CSR matrix of the graph, the ``metric="precomputed"``
Isomap, spectral clustering    sparse input of scikit-learn's estimators
=============================  ==================================================================================

Distances come in the graph's metric unless ``metric=`` asks for another; only euclidean and sqeuclidean
convert (a square root apart). UMAP and HDBSCAN want euclidean distances for euclidean data; t-SNE's
affinities are defined on squared distances (van der Maaten and Hinton, Eq. 1), which scikit-learn's TSNE
takes as they are when ``metric="precomputed"``.

Neighbours each tool needs per row:

* UMAP: ``n_neighbors`` counting the point itself, so a graph of degree ``n_neighbors - 1``
  (:func:`umap_knn` adds the point in column 0).
* scikit-learn's TSNE: the point itself and at least ``3 * perplexity + 1`` neighbours, so a graph of
  ``k >= 3 * perplexity + 1`` (91 at the default perplexity 30) handed over with
  ``g.to_csr(include_self=True)``; fewer are refused ("92 neighbors per samples are required").
* scikit-learn's HDBSCAN: at least ``min_samples`` entries per row (default: ``min_cluster_size``) and a
  connected graph (``g.to_csr(symmetrize=True)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

__all__ = ["umap_knn", "graph_to_csr", "distances_in"]


def distances_in(distances: ArrayLike, from_metric: str, to_metric: str | None) -> np.ndarray:
    """``distances`` (in ``from_metric``) as float32 values in ``to_metric`` (None: unchanged).

    Euclidean and squared euclidean distances convert (``inf`` stays ``inf``); any other pair of different
    metrics is a ValueError.

    >>> distances_in(np.array([[4.0, 9.0]]), "sqeuclidean", "euclidean").tolist()
    [[2.0, 3.0]]
    """
    from .metrics import canonical_metric

    src = canonical_metric(from_metric)
    dst = src if to_metric is None else canonical_metric(to_metric)
    d = np.asarray(distances)
    if dst == src:
        return d.astype(np.float32, copy=False)
    if (src, dst) == ("sqeuclidean", "euclidean"):
        return np.sqrt(np.maximum(d.astype(np.float64), 0.0)).astype(np.float32)
    if (src, dst) == ("euclidean", "sqeuclidean"):
        return np.square(d.astype(np.float64)).astype(np.float32)
    raise ValueError(f"metric: distances in {src!r} cannot be converted to {dst!r} (only euclidean and "
                     f"sqeuclidean convert); build the graph with metric={dst!r}")


def _scipy_sparse():
    try:
        from scipy import sparse
    except ImportError:  # pragma: no cover - scipy comes with the sklearn and test extras
        raise ImportError("sparse graph output needs SciPy: pip install 'knngraph[sklearn]' (or pip install "
                          "scipy)") from None
    return sparse


def _check_bool(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _whole_graph(graph: Any, user: str):
    """``graph`` on the host, its ids checked (the arrays may have been changed in place since it was made);
    a block of rows of a larger graph (``info["n"]`` above its rows) is refused: ``user`` (a CSR matrix,
    UMAP's lists, whose column 0 is each row's own id) needs the whole graph."""
    g = graph.to_host()
    if g.n_nodes != g.n:
        raise ValueError(f"{user} needs a whole graph, got a block of {g.n} rows of a graph over {g.n_nodes} nodes "
                         "(info['n'])")
    g.validate_ids()
    return g


def graph_to_csr(graph: Any, *, include_self: bool = False, symmetrize: bool = False, mode: str = "distance",
                 metric: str | None = None, dtype: DTypeLike = np.float32) -> csr_matrix:
    """The graph as a SciPy CSR matrix of shape (n, n); see :meth:`knngraph.Graph.to_csr`."""
    include_self = _check_bool(include_self, "include_self")
    symmetrize = _check_bool(symmetrize, "symmetrize")
    if mode not in ("distance", "connectivity"):
        raise ValueError(f"mode must be 'distance' or 'connectivity', got {mode!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    sparse = _scipy_sparse()
    g = _whole_graph(graph, "a CSR matrix")
    n = g.n
    ids = np.asarray(g.indices, dtype=np.int64).ravel()
    dist = distances_in(g.distances, g.metric, metric).ravel()
    rows = np.repeat(np.arange(n, dtype=np.int64), g.degree)
    keep = (ids >= 0) & (ids != rows)  # -1: no neighbour; a self loop of a hand-made graph is left out
    rows, cols, dist = rows[keep], ids[keep], dist[keep]
    if symmetrize:  # union of i -> j and j -> i
        rows, cols, dist = np.concatenate([rows, cols]), np.concatenate([cols, rows]), np.concatenate([dist, dist])
    if include_self:  # as scikit-learn's KNeighborsTransformer: the sample itself, an explicit 0
        every = np.arange(n, dtype=np.int64)
        rows, cols = np.concatenate([rows, every]), np.concatenate([cols, every])
        dist = np.concatenate([dist, np.zeros(n, dist.dtype)])
    # one entry per (row, col), the smaller distance when an edge came from both ends
    order = np.lexsort((dist, cols, rows))
    rows, cols, dist = rows[order], cols[order], dist[order]
    first = np.ones(rows.size, bool)
    first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    rows, cols, dist = rows[first], cols[first], dist[first]
    # each row nearest first (ties by column), as scikit-learn's precomputed-graph consumers expect
    order = np.lexsort((cols, dist, rows))
    rows, cols, dist = rows[order], cols[order], dist[order]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    data = np.ones(dist.size, dtype) if mode == "connectivity" else dist.astype(dtype)
    index_dtype = np.int32 if max(n, dist.size) < 2**31 else np.int64
    return sparse.csr_matrix((data, cols.astype(index_dtype), indptr.astype(index_dtype)), shape=(n, n))


def umap_knn(graph: Any, n_neighbors: int | None = None, *,
             metric: str | None = "auto") -> tuple[np.ndarray, np.ndarray]:
    """``(knn_indices, knn_dists)`` of ``graph`` as ``umap.UMAP(precomputed_knn=...)`` takes them.

    UMAP counts a point among its own neighbours: column 0 is the point itself at distance 0, then the
    graph's neighbours nearest first, ``n_neighbors`` columns in all (UMAP's ``n_neighbors``; give the same
    number to ``umap.UMAP``). A graph of degree ``n_neighbors - 1`` is enough.

    Parameters
    ----------
    graph : Graph
        A k-NN graph (e.g. ``knngraph.knn_graph(x, k=14, method="nndescent")``).
    n_neighbors : int, optional
        Columns to return, 2 <= n_neighbors <= graph.degree + 1; default graph.degree + 1.
    metric : str or None, default='auto'
        Metric of the returned distances: 'auto' gives euclidean for a sqeuclidean graph (UMAP's
        ``metric="euclidean"``) and the graph's own metric otherwise; None keeps the graph's.

    Returns
    -------
    knn_indices : ndarray of int32, shape (n, n_neighbors)
        -1 where the graph had no neighbour (UMAP skips those).
    knn_dists : ndarray of float32, shape (n, n_neighbors)

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> from knngraph.handoff import umap_knn
    >>> x = np.array([[0], [1], [3], [7]], dtype=np.float32)
    >>> ids, dists = umap_knn(knngraph.knn_graph(x, k=2, device="cpu"))
    >>> ids.tolist(), dists[0].tolist()
    ([[0, 1, 2], [1, 0, 2], [2, 1, 0], [3, 2, 1]], [0.0, 1.0, 3.0])
    """
    from ._validate import check_int

    g = _whole_graph(graph, "umap_knn")
    width = g.degree + 1 if n_neighbors is None else check_int(n_neighbors, "n_neighbors", low=2)
    if width > g.degree + 1:
        raise ValueError(f"n_neighbors={width} needs a graph of degree >= {width - 1} (UMAP counts the point "
                         f"itself), but the graph has degree {g.degree}")
    if metric == "auto":
        metric = "euclidean" if g.metric == "sqeuclidean" else None
    n = g.n
    ids = np.empty((n, width), np.int32)
    dists = np.empty((n, width), np.float32)
    ids[:, 0] = np.arange(n, dtype=np.int32)
    dists[:, 0] = 0.0
    ids[:, 1:] = g.indices[:, :width - 1]
    dists[:, 1:] = distances_in(g.distances[:, :width - 1], g.metric, metric)
    return ids, dists
