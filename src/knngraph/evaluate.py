"""Recall measures, as the library defines them everywhere.

* ``recall@k`` (C@k, k-recall@k): |returned top-k ∩ true top-k| / k, averaged over queries.
* ``R@k`` (GGNN, Eq. 5): share of queries whose true nearest neighbour is among the returned top k.
* graph recall@k (GNND): recall@k of each node's neighbour list against its true k-NN, self excluded,
  averaged over nodes (or over a fixed random sample of nodes, whose true k-NN is computed exactly).

Ties: when distances are given, a returned id whose distance is <= the true k-th distance counts as
correct (datasets with integer distances have many ties). Ids of -1 never count, and an id returned twice
in one row counts once.
"""

from __future__ import annotations

import numpy as np

from ._device import as_numpy

__all__ = ["recall_at_k", "r_at_k", "graph_recall", "TIE_RTOL"]

#: relative tolerance for "equal to the true k-th distance" (float32 vs float64 distance arithmetic)
TIE_RTOL = 1e-5
_ROW_CHUNK = 4096


def _as_2d(x, name, dtype=None):
    a = as_numpy(x)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_queries, k), got shape {a.shape}")
    return a.astype(dtype, copy=False) if dtype is not None else a


def _check_k(k, have, name):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if k > have:
        raise ValueError(f"k={k} but {name} has only {have} columns")
    return int(k)


def _correct_per_row(ids, gt, k, dist, gt_dist):
    """Number of distinct correct ids among the first k of each row."""
    n = ids.shape[0]
    out = np.empty(n, dtype=np.int64)
    for s in range(0, n, _ROW_CHUNK):
        e = min(n, s + _ROW_CHUNK)
        r = ids[s:e, :k]
        g = gt[s:e, :k]
        hit = (r[:, :, None] == g[:, None, :]).any(axis=2)
        if dist is not None:
            kth = gt_dist[s:e, k - 1].astype(np.float64)
            tol = TIE_RTOL * np.abs(kth) + 1e-6
            hit |= dist[s:e, :k].astype(np.float64) <= (kth + tol)[:, None]
        hit &= r >= 0
        # an id returned twice counts once
        marked = np.sort(np.where(hit, r, -1), axis=1)
        first = np.ones_like(marked, dtype=bool)
        first[:, 1:] = marked[:, 1:] != marked[:, :-1]
        out[s:e] = ((marked >= 0) & first).sum(axis=1)
    return out


def recall_at_k(indices, true_indices, k: int, *, distances=None, true_distances=None) -> float:
    """recall@k = mean over queries of |returned top-k ∩ true top-k| / k.

    Parameters
    ----------
    indices : array of int, shape (n_queries, >= k)
        Returned ids, nearest first.
    true_indices : array of int, shape (n_queries, >= k)
        Exact ids, nearest first.
    k : int
        How many neighbours to score.
    distances, true_distances : array of float, optional
        Give both to count ties: a returned id whose distance is <= the true k-th distance is correct.

    Examples
    --------
    >>> recall_at_k([[1, 2, 3]], [[1, 3, 4]], k=3)
    0.6666666666666666
    """
    ids = _as_2d(indices, "indices", np.int64)
    gt = _as_2d(true_indices, "true_indices", np.int64)
    if ids.shape[0] != gt.shape[0]:
        raise ValueError(f"indices has {ids.shape[0]} rows but true_indices has {gt.shape[0]}")
    k = _check_k(k, ids.shape[1], "indices")
    _check_k(k, gt.shape[1], "true_indices")
    dist = gt_dist = None
    if (distances is None) != (true_distances is None):
        raise ValueError("give both distances and true_distances (for ties), or neither")
    if distances is not None:
        dist = _as_2d(distances, "distances")
        gt_dist = _as_2d(true_distances, "true_distances")
        if dist.shape[0] != ids.shape[0] or dist.shape[1] < k or gt_dist.shape[0] != gt.shape[0] \
                or gt_dist.shape[1] < k:
            raise ValueError("distances / true_distances must match the shapes of indices / true_indices")
    return float(_correct_per_row(ids, gt, k, dist, gt_dist).mean() / k)


def r_at_k(indices, true_indices, k: int, *, distances=None, true_distances=None) -> float:
    """R@k: share of queries whose true nearest neighbour is among the returned top ``k``.

    With distances, a returned id at distance <= the true 1-NN distance also counts (ties).

    Examples
    --------
    >>> r_at_k([[5, 1], [2, 3]], [[1, 9], [7, 2]], k=2)
    0.5
    """
    ids = _as_2d(indices, "indices", np.int64)
    gt = _as_2d(true_indices, "true_indices", np.int64)
    if ids.shape[0] != gt.shape[0]:
        raise ValueError(f"indices has {ids.shape[0]} rows but true_indices has {gt.shape[0]}")
    k = _check_k(k, ids.shape[1], "indices")
    hit = (ids[:, :k] == gt[:, :1]).any(axis=1)
    if (distances is None) != (true_distances is None):
        raise ValueError("give both distances and true_distances (for ties), or neither")
    if distances is not None:
        dist = _as_2d(distances, "distances").astype(np.float64)
        first = _as_2d(true_distances, "true_distances")[:, 0].astype(np.float64)
        tol = TIE_RTOL * np.abs(first) + 1e-6
        hit |= ((dist[:, :k] <= (first + tol)[:, None]) & (ids[:, :k] >= 0)).any(axis=1)
    return float(hit.mean())


def graph_recall(graph, k: int, *, true_graph=None, base=None, sample: int | None = None, seed: int = 0,
                 device="auto") -> float:
    """Graph recall@k of ``graph`` (a :class:`~knngraph.Graph`).

    Against ``true_graph`` when given (an exact graph with at least k columns); otherwise the true k-NN
    of ``sample`` random nodes (all nodes when None) is computed exactly from ``base`` (self excluded).
    """
    from .graph import Graph

    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a knngraph.Graph, got {type(graph).__name__}")
    n = graph.n
    k = _check_k(k, graph.degree, "graph")
    ids = as_numpy(graph.indices)
    dist = as_numpy(graph.distances)
    if true_graph is not None:
        if true_graph.n != n:
            raise ValueError(f"graph has {n} nodes but true_graph has {true_graph.n}")
        _check_k(k, true_graph.degree, "true_graph")
        return recall_at_k(ids, true_graph.indices, k, distances=dist, true_distances=true_graph.distances)
    if base is None:
        raise ValueError("graph_recall needs true_graph= or base= (to compute the true neighbours)")
    from . import knn

    if sample is None or sample >= n:
        nodes = np.arange(n)
    else:
        nodes = np.sort(np.random.default_rng(seed).choice(n, size=int(sample), replace=False))
    base_np = base
    queries = base_np[nodes] if not hasattr(base_np, "__cuda_array_interface__") else as_numpy(base_np)[nodes]
    td, ti = knn(base, queries, min(k + 1, n), metric=graph.metric, device=device, verbose=False)
    td = as_numpy(td)
    ti = as_numpy(ti)
    # drop each node itself from its exact list (or the last entry when duplicates pushed it out)
    keep_i = np.empty((len(nodes), k), dtype=np.int64)
    keep_d = np.empty((len(nodes), k), dtype=np.float64)
    for r, node in enumerate(nodes):
        row_i = ti[r]
        row_d = td[r]
        pos = np.flatnonzero(row_i == node)
        drop = pos[0] if len(pos) else len(row_i) - 1
        keep_i[r] = np.delete(row_i, drop)[:k]
        keep_d[r] = np.delete(row_d, drop)[:k]
    return recall_at_k(ids[nodes], keep_i, k, distances=dist[nodes], true_distances=keep_d)
