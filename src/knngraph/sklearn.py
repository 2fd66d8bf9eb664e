"""scikit-learn integration: :class:`KNNGraphTransformer`, a drop-in for ``KNeighborsTransformer``.

Its sparse output is the ``metric="precomputed"`` input of scikit-learn's estimators and scanpy's
``transformer=`` (both tested in ``tests/test_sklearn.py`` and ``tests/test_handoff.py``)::

    from sklearn.pipeline import make_pipeline
    from sklearn.manifold import Isomap
    from knngraph.sklearn import KNNGraphTransformer

    pipe = make_pipeline(KNNGraphTransformer(n_neighbors=15, mode="distance"),
                         Isomap(n_neighbors=15, metric="precomputed"))

    import scanpy as sc
    sc.pp.neighbors(adata, transformer=KNNGraphTransformer(n_neighbors=15, method="nndescent"))

Conventions copied from ``KNeighborsTransformer``: ``__init__`` only stores parameters; ``fit``
validates them and the data; ``transform(X)`` returns a CSR matrix of shape (n_queries, n_samples_fit)
with ``n_neighbors`` (+1 in 'distance' mode: for the training data, the sample itself at distance 0, as
scikit-learn does) entries per row, each row sorted by distance; ``kneighbors()`` as
``KNeighborsMixin.kneighbors``; fitted attributes end in ``_``. Needs scikit-learn and SciPy
(``pip install 'knngraph[sklearn]'``).
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

try:
    from scipy import sparse
    from sklearn.base import BaseEstimator, TransformerMixin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as _exc:  # pragma: no cover - exercised in a child process by tests/test_sklearn.py
    raise ImportError(f"knngraph.sklearn needs scikit-learn (>= 1.6) and SciPy: pip install 'knngraph[sklearn]' "
                      f"({_exc})") from _exc

__all__ = ["KNNGraphTransformer"]


class KNNGraphTransformer(TransformerMixin, BaseEstimator):
    """Sparse k-nearest-neighbours graph of the data, computed by knngraph (GPU when there is one).

    Parameters
    ----------
    n_neighbors : int, default=5
        Neighbours per sample (not counting the sample itself).
    mode : {'distance', 'connectivity'}, default='distance'
        'distance' stores distances, 'connectivity' stores ones.
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='euclidean'
        Distance (scikit-learn's default for neighbours graphs is euclidean).
    method : str, default='exact'
        How the graph of the training data is built, at ``fit``: a graph builder of
        :mod:`knngraph.registry` ('exact'; 'nndescent': approximate, much faster at scale). Neighbours of
        new data (``transform(Y)``, ``kneighbors(Y)``) are always exact.
    method_params : dict, default=None
        Fields of the builder's ``IndexParams``, e.g. ``{"max_iterations": 10}`` or
        ``{"termination_threshold": 0.001}`` for 'nndescent'.
    device : str, default='auto'
        'auto', 'cpu', 'cuda' or 'cuda:N'.
    n_jobs : int, default=None
        CPU threads (numba) during fit, transform and kneighbors: None keeps numba's setting, -1 all
        cores, -2 all but one, and so on; more than the cores numba started with are capped.
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32
        dtype of the returned distances (computed in float32 either way).

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of str
        Column names, when fit on a pandas DataFrame.
    n_samples_fit_ : int
        Number of samples seen in fit.
    graph_ : knngraph.Graph
        The k-NN graph of the training data built at fit (degree ``min(n_neighbors, n_samples_fit_ - 1)``,
        self excluded).

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph.sklearn import KNNGraphTransformer
    >>> x = np.array([[0.0], [1.0], [3.0], [7.0]])
    >>> t = KNNGraphTransformer(n_neighbors=1, device="cpu").fit(x)
    >>> t.transform(x).toarray().tolist()
    [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 4.0, 0.0]]
    >>> t.kneighbors()[1].tolist()
    [[1], [0], [1], [2]]
    """

    def __init__(self, *, n_neighbors: int = 5, mode: str = "distance", metric: str = "euclidean",
                 method: str = "exact", method_params: dict[str, Any] | None = None, device: str = "auto",
                 n_jobs: int | None = None, dtype: DTypeLike = np.float32) -> None:
        self.n_neighbors = n_neighbors
        self.mode = mode
        self.metric = metric
        self.method = method
        self.method_params = method_params
        self.device = device
        self.n_jobs = n_jobs
        self.dtype = dtype

    def _check_params(self):
        if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, numbers.Integral) \
                or self.n_neighbors < 1:
            raise ValueError(f"The 'n_neighbors' parameter of KNNGraphTransformer must be an int in the range "
                             f"[1, inf). Got {self.n_neighbors!r} instead.")
        if self.mode not in ("distance", "connectivity"):
            raise ValueError(f"The 'mode' parameter of KNNGraphTransformer must be one of {{'distance', "
                             f"'connectivity'}}. Got {self.mode!r} instead.")
        from . import registry

        # builders of k-NN graphs (not of pruned search graphs, whose rows are not each node's k nearest)
        builders = [b for b in registry.graph_builders() if not getattr(registry.get(b), "search_graph", False)]
        if self.method not in builders:
            raise ValueError(f"The 'method' parameter of KNNGraphTransformer must be one of "
                             f"{{{', '.join(repr(b) for b in builders)}}}. Got {self.method!r} instead.")
        if self.method_params is not None and not isinstance(self.method_params, dict):
            raise ValueError(f"The 'method_params' parameter of KNNGraphTransformer must be a dict or None. "
                             f"Got {self.method_params!r} instead.")
        if self.n_jobs is not None and (isinstance(self.n_jobs, bool) or not isinstance(self.n_jobs, numbers.Integral)
                                        or self.n_jobs == 0):
            raise ValueError(f"The 'n_jobs' parameter of KNNGraphTransformer must be a non-zero int or None. "
                             f"Got {self.n_jobs!r} instead.")
        try:
            dtype = np.dtype(self.dtype)
        except TypeError:
            dtype = None
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"The 'dtype' parameter of KNNGraphTransformer must be one of {{numpy.float32, "
                             f"numpy.float64}}. Got {self.dtype!r} instead.")
        from .metrics import canonical_metric

        canonical_metric(self.metric)
        return dtype

    @contextlib.contextmanager
    def _threads(self):
        """numba's thread count set from ``n_jobs`` for the duration of a call, restored after."""
        if self.n_jobs is None:
            yield
            return
        import numba

        most = numba.config.NUMBA_NUM_THREADS
        wanted = self.n_jobs if self.n_jobs > 0 else most + 1 + self.n_jobs
        before = numba.get_num_threads()
        numba.set_num_threads(min(max(wanted, 1), most))
        try:
            yield
        finally:
            numba.set_num_threads(before)

    def fit(self, X: ArrayLike, y: object = None) -> KNNGraphTransformer:
        """Validate parameters, store ``X`` (as float32) and build the k-NN graph of ``X`` (``graph_``)."""
        self._check_params()
        X = validate_data(self, X, dtype=[np.float32, np.float64], ensure_min_samples=2)
        self._fit_X = np.ascontiguousarray(X, dtype=np.float32)
        self.n_samples_fit_ = X.shape[0]
        with self._threads():
            self.graph_ = self._build_graph(min(self.n_neighbors, self.n_samples_fit_ - 1))
        return self

    def _build_graph(self, degree: int):
        import knngraph

        return knngraph.knn_graph(self._fit_X, degree, method=self.method, metric=self.metric, device=self.device,
                                  verbose=False, **(self.method_params or {})).to_host()

    def _training_neighbours(self, count: int):
        """(ids int64, distances float32) of each training sample's ``count`` nearest others."""
        graph = self.graph_ if count <= self.graph_.degree else self._build_graph(count)
        return np.asarray(graph.indices[:, :count], np.int64), np.asarray(graph.distances[:, :count])

    def _check_count(self, count: int, *, training: bool):
        if count > self.n_samples_fit_ - (1 if training else 0):
            raise ValueError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {count}, "
                             f"n_samples_fit = {self.n_samples_fit_}")

    def transform(self, X: ArrayLike) -> sparse.csr_matrix:
        """CSR graph of shape ``(n_queries, n_samples_fit_)`` of each row's nearest fitted samples, each row sorted by
        distance."""
        check_is_fitted(self)
        dtype = self._check_params()
        X = validate_data(self, X, dtype=[np.float32, np.float64], reset=False)
        X = np.ascontiguousarray(X, dtype=np.float32)
        # as scikit-learn: 'distance' mode returns n_neighbors + 1 entries per row (for the training data
        # the extra one is the sample itself, at distance 0), 'connectivity' returns n_neighbors
        width = self.n_neighbors + (1 if self.mode == "distance" else 0)
        self._check_count(width, training=False)
        n_fit = self.n_samples_fit_
        with self._threads():
            if X.shape == self._fit_X.shape and np.array_equal(X, self._fit_X):
                ids, dist = self._training_neighbours(width - 1)
                ids = np.concatenate([np.arange(n_fit, dtype=np.int64)[:, None], ids], 1)
                dist = np.concatenate([np.zeros((n_fit, 1), np.float32), dist], 1)
            else:
                dist, ids = self._exact(X, width)
        return _neighbours_csr(ids, dist, n_fit, connectivity=self.mode == "connectivity", dtype=dtype)

    def _exact(self, X, count: int):
        import knngraph

        dist, ids = knngraph.knn(self._fit_X, X, count, metric=self.metric, device=self.device, verbose=False)
        return np.asarray(dist), np.asarray(ids, np.int64)

    def fit_transform(self, X: ArrayLike, y: object = None) -> sparse.csr_matrix:
        """``fit(X).transform(X)``: the graph of the training data as scikit-learn's
        ``KNeighborsTransformer`` returns it (each sample among its own neighbours, at distance 0)."""
        return self.fit(X).transform(X)

    @overload
    def kneighbors(self, X: ArrayLike | None = None, n_neighbors: int | None = None,
                   return_distance: Literal[True] = True) -> tuple[np.ndarray, np.ndarray]: ...

    @overload
    def kneighbors(self, X: ArrayLike | None, n_neighbors: int | None,
                   return_distance: Literal[False]) -> np.ndarray: ...

    @overload
    def kneighbors(self, X: ArrayLike | None = None, n_neighbors: int | None = None, *,
                   return_distance: Literal[False]) -> np.ndarray: ...

    def kneighbors(self, X: ArrayLike | None = None, n_neighbors: int | None = None,
                   return_distance: bool = True) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
        """Neighbours of each row of ``X`` among the fitted samples, as ``KNeighborsMixin.kneighbors``.

        ``X=None``: the training samples, each one's neighbours excluding itself (read from ``graph_``,
        so approximate for an approximate ``method``). Returns ``(distances, indices)`` of shape
        (n_queries, n_neighbors), nearest first: distances in ``dtype``, indices int64; only the indices
        when ``return_distance=False``.
        """
        check_is_fitted(self)
        dtype = self._check_params()
        count = self.n_neighbors if n_neighbors is None else n_neighbors
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise ValueError(f"Expected n_neighbors > 0. Got {count!r}")
        count = int(count)
        with self._threads():
            if X is None:
                self._check_count(count, training=True)
                ids, dist = self._training_neighbours(count)
            else:
                X = np.ascontiguousarray(validate_data(self, X, dtype=[np.float32, np.float64], reset=False),
                                         dtype=np.float32)
                self._check_count(count, training=False)
                dist, ids = self._exact(X, count)
        dist = np.ascontiguousarray(dist, dtype=dtype)
        return (dist, ids) if return_distance else ids

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = False
        tags.transformer_tags.preserves_dtype = []  # output dtype is the dtype parameter, whatever the input's
        return tags


def _neighbours_csr(ids, dist, n_fit: int, *, connectivity: bool, dtype=np.float32):
    """CSR matrix (n_rows, n_fit) of the neighbour lists ``ids`` / ``dist`` (n_rows, width), each row
    ordered by distance (what scikit-learn's precomputed-graph consumers expect, as KNeighborsTransformer
    gives them). The lists are checked first, so that no id outside [0, n_fit) (-1: no neighbour found),
    repeated id or non-finite distance can ever reach the sparse matrix: ValueError instead."""
    ids = np.asarray(ids)
    dist = np.asarray(dist, dtype=np.float32)
    if ids.ndim != 2 or ids.shape != dist.shape:
        raise ValueError(f"neighbour ids {ids.shape} and distances {dist.shape} must be 2-D of one shape")
    n_rows, width = ids.shape
    ids = ids.astype(np.int64, copy=False)
    valid = (ids >= 0) & (ids < n_fit)
    if not valid.all():
        row = int(np.flatnonzero(~valid.all(axis=1))[0])
        found = int(valid[row].sum())
        if (ids[row][~valid[row]] == -1).all():
            raise ValueError(f"only {found} of the {width} neighbours of row {row} were found: its distances are "
                             f"not finite (are the values too large for float32?)")
        raise ValueError(f"row {row} holds neighbour ids outside [0, {n_fit}): {ids[row].tolist()}")
    finite = np.isfinite(dist)
    if not finite.all():
        row = int(np.flatnonzero(~finite.all(axis=1))[0])
        raise ValueError(f"row {row} has non-finite neighbour distances {dist[row].tolist()} (are the values too "
                         f"large for float32?)")
    order = np.argsort(dist, axis=1, kind="stable")
    ids = np.take_along_axis(ids, order, axis=1)
    dist = np.take_along_axis(dist, order, axis=1)
    by_id = np.sort(ids, axis=1)
    repeated = (by_id[:, 1:] == by_id[:, :-1]).any(axis=1)
    if repeated.any():
        row = int(np.flatnonzero(repeated)[0])
        raise ValueError(f"row {row} lists a neighbour twice: {ids[row].tolist()}")
    data = np.ones(ids.size, dtype) if connectivity else dist.ravel().astype(dtype)
    indptr = np.arange(0, n_rows * width + 1, width, dtype=np.int64)
    return sparse.csr_matrix((data, ids.ravel(), indptr), shape=(n_rows, n_fit))

