"""scikit-learn integration: :class:`KNNGraphTransformer`, a drop-in for ``KNeighborsTransformer``.

Use it wherever scikit-learn, UMAP or t-SNE accept a precomputed sparse neighbours graph::

    from sklearn.pipeline import make_pipeline
    from sklearn.manifold import Isomap
    from knngraph.sklearn import KNNGraphTransformer

    pipe = make_pipeline(KNNGraphTransformer(n_neighbors=15, mode="distance"),
                         Isomap(n_neighbors=15, metric="precomputed"))

Conventions copied from ``KNeighborsTransformer``: ``__init__`` only stores parameters; ``fit``
validates them and the data; ``transform(X)`` returns a CSR matrix of shape (n_queries, n_samples_fit)
with ``n_neighbors`` (+1 when X is the training data, the sample itself at distance 0, as
scikit-learn does) sorted entries per row; fitted attributes end in ``_``. Needs scikit-learn and SciPy
(``pip install knngraph[sklearn]``).
"""

from __future__ import annotations

import numbers

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

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
        How the graph of the training data is built: a graph builder of :mod:`knngraph.registry`
        ('exact', 'nndescent': approximate and faster at scale). Transform of new data is always exact.
    method_params : dict, optional
        Fields of the builder's ``IndexParams`` (e.g. ``{"max_iterations": 10}`` for 'nndescent').
    device : str, default='auto'
        'auto', 'cpu', 'cuda' or 'cuda:N'.

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen in fit.
    n_samples_fit_ : int
        Number of samples seen in fit.
    """

    def __init__(self, *, n_neighbors=5, mode="distance", metric="euclidean", method="exact", method_params=None,
                 device="auto"):
        self.n_neighbors = n_neighbors
        self.mode = mode
        self.metric = metric
        self.method = method
        self.method_params = method_params
        self.device = device

    def _check_params(self):
        if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, numbers.Integral) \
                or self.n_neighbors < 1:
            raise ValueError(f"The 'n_neighbors' parameter of KNNGraphTransformer must be an int in the range "
                             f"[1, inf). Got {self.n_neighbors!r} instead.")
        if self.mode not in ("distance", "connectivity"):
            raise ValueError(f"The 'mode' parameter of KNNGraphTransformer must be one of {{'distance', "
                             f"'connectivity'}}. Got {self.mode!r} instead.")
        from .registry import graph_builders

        builders = graph_builders()
        if self.method not in builders:
            raise ValueError(f"The 'method' parameter of KNNGraphTransformer must be one of "
                             f"{{{', '.join(repr(b) for b in builders)}}}. Got {self.method!r} instead.")
        if self.method_params is not None and not isinstance(self.method_params, dict):
            raise ValueError(f"The 'method_params' parameter of KNNGraphTransformer must be a dict or None. "
                             f"Got {self.method_params!r} instead.")
        from .metrics import canonical_metric

        canonical_metric(self.metric)

    def fit(self, X, y=None):
        """Validate parameters and store ``X`` (float32) as the samples to connect to."""
        self._check_params()
        X = validate_data(self, X, dtype=[np.float32, np.float64], ensure_min_samples=2)
        self._fit_X = np.ascontiguousarray(X, dtype=np.float32)
        self.n_samples_fit_ = X.shape[0]
        return self

    def transform(self, X):
        """CSR graph (n_queries, n_samples_fit_) of each row's nearest fitted samples."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float32, np.float64], reset=False)
        X = np.ascontiguousarray(X, dtype=np.float32)
        is_fit_data = X.shape == self._fit_X.shape and np.array_equal(X, self._fit_X)
        return self._graph(X, include_self=is_fit_data)

    def fit_transform(self, X, y=None):
        return self.fit(X).transform(X)

    def _graph(self, X, include_self):
        import knngraph

        n_fit = self.n_samples_fit_
        # as scikit-learn: 'distance' mode returns n_neighbors + 1 entries per row (for the training data
        # the extra one is the sample itself, at distance 0), 'connectivity' returns n_neighbors
        width = self.n_neighbors + (1 if self.mode == "distance" else 0)
        if width > n_fit:
            raise ValueError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {self.n_neighbors}, "
                             f"n_samples_fit = {n_fit}")
        if include_self and self.method != "exact" and width >= 2:
            g = knngraph.knn_graph(self._fit_X, width - 1, method=self.method, metric=self.metric,
                                   device=self.device, verbose=False, **(self.method_params or {})).to_host()
            ids = np.concatenate([np.arange(n_fit, dtype=np.int64)[:, None], np.asarray(g.indices, np.int64)], 1)
            dist = np.concatenate([np.zeros((n_fit, 1), np.float32), np.asarray(g.distances)], 1)
        else:
            dist, ids = knngraph.knn(self._fit_X, X, width, metric=self.metric, device=self.device, verbose=False)
            dist, ids = np.asarray(dist), np.asarray(ids, np.int64)
        return _neighbours_csr(ids, dist, n_fit, connectivity=self.mode == "connectivity")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = False
        tags.transformer_tags.preserves_dtype = []  # distances are always float32
        return tags


def _neighbours_csr(ids, dist, n_fit: int, *, connectivity: bool):
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
    data = np.ones(ids.size, np.float32) if connectivity else dist.ravel()
    indptr = np.arange(0, n_rows * width + 1, width, dtype=np.int64)
    return sparse.csr_matrix((data, ids.ravel(), indptr), shape=(n_rows, n_fit))

