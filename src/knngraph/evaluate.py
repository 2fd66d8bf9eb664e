"""Recall measures, as the library defines them everywhere.

* ``recall@k`` (C@k, k-recall@k): ``|returned top-k ∩ true top-k| / k``, averaged over queries.
* ``R@k`` (GGNN, Eq. 5): share of queries whose true nearest neighbour is among the returned top k.
* graph recall@k (GNND): recall@k of each node's neighbour list against its true k-NN, self excluded,
  averaged over nodes (or over a fixed random sample of nodes, whose true k-NN is computed exactly).

Ties: when distances are given, a returned id whose distance is <= the true k-th distance counts as
correct (datasets with integer distances have many ties). Ids of -1 never count, and an id returned twice
in one row counts once.

Inputs: ids must be integers (a float array is accepted only when every value is a whole number; ids are
never rounded) and >= -1; distances must have exactly the shape of the ids they belong to. Anything else
is a ValueError (TypeError for a non-numeric dtype) naming the argument.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import registry
from ._device import as_numpy, is_device_array, resolve_device
from ._typing import Array, DeviceLike
from ._validate import check_finite, check_vectors

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["recall_at_k", "r_at_k", "graph_recall", "true_distances_in", "TIE_RTOL"]

#: relative tolerance for "equal to the true k-th distance" (float32 vs float64 distance arithmetic)
TIE_RTOL = 1e-5
_ROW_CHUNK = 4096


def _as_2d(x, name):
    a = as_numpy(x)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_queries, k), got shape {a.shape}")
    return a


def _ids_2d(x, name):
    """``x`` as a 2-D int64 array of ids. Integer arrays pass; float arrays only when every value is a whole
    number (no NaN, no fraction: ids are never rounded); ids below -1 are refused (-1 marks "no id")."""
    a = _as_2d(x, name)
    if a.dtype.kind in "iu":
        if a.dtype == np.uint64 and a.size and a.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{name} holds ids larger than {np.iinfo(np.int64).max}")
        ids = a.astype(np.int64, copy=False)
    elif a.dtype.kind == "f":
        finite = np.isfinite(a)
        if not finite.all():
            bad = float(a[~finite][0])
            raise ValueError(f"{name} must hold integer ids, got {bad} (an array of {a.dtype.name} with "
                             f"non-finite values)")
        frac = a != np.floor(a)
        if frac.any():
            raise ValueError(f"{name} must hold integer ids, got {float(a[frac][0])!r} (an array of {a.dtype.name} "
                             f"with fractional values; ids are not rounded)")
        if a.size and (a.max() > 2.0**53 or a.min() < -1):
            raise ValueError(f"{name} holds ids outside [-1, 2**53] (an array of {a.dtype.name})")
        ids = a.astype(np.int64)
    else:
        raise TypeError(f"{name} must be an array of integer ids, got dtype {a.dtype}")
    if ids.size and ids.min() < -1:
        raise ValueError(f"{name} holds the id {int(ids.min())}; ids are >= 0, or -1 for a missing neighbour")
    return ids


def _dist_2d(x, name, shape, ids_name):
    """``x`` as a 2-D array of real distances of exactly ``shape`` (that of the ids it belongs to)."""
    a = _as_2d(x, name)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be an array of real distances, got dtype {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape} but {ids_name} has shape {shape}; they must match")
    return a


def _check_k(k, have, name):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if k > have:
        raise ValueError(f"k={k} but {name} has only {have} columns")
    return int(k)


def _inputs(indices, true_indices, k, distances, true_distances):
    """Checked (ids, gt, k, dist, gt_dist) of recall_at_k / r_at_k."""
    ids = _ids_2d(indices, "indices")
    gt = _ids_2d(true_indices, "true_indices")
    if ids.shape[0] != gt.shape[0]:
        raise ValueError(f"indices has {ids.shape[0]} rows but true_indices has {gt.shape[0]}")
    if ids.shape[0] == 0:
        raise ValueError("indices and true_indices have no rows; recall of nothing is undefined")
    k = _check_k(k, ids.shape[1], "indices")
    if (distances is None) != (true_distances is None):
        raise ValueError("give both distances and true_distances (for ties), or neither")
    dist = gt_dist = None
    if distances is not None:
        dist = _dist_2d(distances, "distances", ids.shape, "indices")
        gt_dist = _dist_2d(true_distances, "true_distances", gt.shape, "true_indices")
    return ids, gt, k, dist, gt_dist


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


def recall_at_k(indices: Array, true_indices: Array, k: int, *, distances: Array | None = None,
                true_distances: Array | None = None) -> float:
    """recall@k = mean over queries of ``|returned top-k ∩ true top-k| / k``.

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
    ids, gt, k, dist, gt_dist = _inputs(indices, true_indices, k, distances, true_distances)
    _check_k(k, gt.shape[1], "true_indices")
    return float(_correct_per_row(ids, gt, k, dist, gt_dist).mean() / k)


def r_at_k(indices: Array, true_indices: Array, k: int, *, distances: Array | None = None,
           true_distances: Array | None = None) -> float:
    """R@k: share of queries whose true nearest neighbour is among the returned top ``k``.

    With distances, a returned id at distance <= the true 1-NN distance also counts (ties).

    Examples
    --------
    >>> r_at_k([[5, 1], [2, 3]], [[1, 9], [7, 2]], k=2)
    0.5
    """
    ids, gt, k, dist, gt_dist = _inputs(indices, true_indices, k, distances, true_distances)
    _check_k(1, gt.shape[1], "true_indices")
    top = ids[:, :k]
    hit = ((top == gt[:, :1]) & (top >= 0)).any(axis=1)
    if dist is not None:
        first = gt_dist[:, 0].astype(np.float64)
        tol = TIE_RTOL * np.abs(first) + 1e-6
        hit |= ((dist[:, :k].astype(np.float64) <= (first + tol)[:, None]) & (top >= 0)).any(axis=1)
    return float(hit.mean())


def true_distances_in(metric: str, true_metric: str, true_dist: np.ndarray) -> np.ndarray:
    """``true_dist`` (in ``true_metric``) in ``metric``: the same values, or the exact conversion between
    euclidean and sqeuclidean (they rank alike and differ by a square root); ValueError otherwise."""
    from .handoff import distances_in

    if metric == true_metric:
        return true_dist
    if {metric, true_metric} == {"euclidean", "sqeuclidean"}:
        return distances_in(true_dist, true_metric, metric)
    raise ValueError(f"graph is in metric {metric!r} but true_graph is in {true_metric!r}: recall against "
                     f"neighbours of another metric is meaningless (only euclidean and sqeuclidean convert)")


def _check_sample(sample):
    if sample is None:
        return None
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < 1:
        raise ValueError(f"sample must be a positive integer (a number of nodes) or None (all nodes), "
                         f"got {sample!r}")
    return int(sample)


def graph_recall(graph: Graph, k: int, *, true_graph: Graph | None = None, base: Array | None = None,
                 sample: int | None = None, seed: int = 0, device: DeviceLike = "auto") -> float:
    """Graph recall@k of ``graph`` (a :class:`~knngraph.Graph`).

    Give exactly one reference: ``true_graph``, an exact graph of the same nodes with at least k columns
    (in the same metric; euclidean and sqeuclidean distances are converted, other mismatches are a
    ValueError), or ``base``, the graph's vectors (one row per node), from which the true k-NN is computed
    exactly (self excluded) in the graph's metric. ``sample``: score that many random nodes (seeded by
    ``seed``) instead of all of them.
    """
    from .graph import Graph

    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a knngraph.Graph, got {type(graph).__name__}")
    n = graph.n
    k = _check_k(k, graph.degree, "graph")
    sample = _check_sample(sample)
    if true_graph is not None and base is not None:
        raise ValueError("graph_recall takes true_graph= or base= (to compute the true neighbours), not both")
    if true_graph is None and base is None:
        raise ValueError("graph_recall needs true_graph= or base= (to compute the true neighbours)")
    if sample is None or sample >= n:
        nodes = np.arange(n)
    else:
        nodes = np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False))
    ids = as_numpy(graph.indices)[nodes]
    dist = as_numpy(graph.distances)[nodes]
    if true_graph is not None:
        if not isinstance(true_graph, Graph):
            raise TypeError(f"true_graph must be a knngraph.Graph, got {type(true_graph).__name__}")
        if true_graph.n != n:
            raise ValueError(f"graph has {n} nodes but true_graph has {true_graph.n}")
        _check_k(k, true_graph.degree, "true_graph")
        true_dist = true_distances_in(graph.metric, true_graph.metric, as_numpy(true_graph.distances)[nodes])
        return recall_at_k(ids, as_numpy(true_graph.indices)[nodes], k, distances=dist, true_distances=true_dist)

    if not hasattr(base, "shape"):
        base = np.asarray(base)
    if len(base.shape) != 2:
        raise ValueError(f"base must be 2-D (one row per graph node), got shape {tuple(base.shape)}")
    if base.shape[0] != n:
        raise ValueError(f"base has {base.shape[0]} rows but graph has {n} nodes; base must be the vectors "
                         f"the graph was built on")
    queries = as_numpy(base)[nodes] if hasattr(base, "__cuda_array_interface__") else base[nodes]
    # the exact search of :func:`knngraph.knn`, taken from the registry (the package top sits above this
    # module), with ``base`` checked under its own name as knn checks it
    dev = resolve_device(device, base)
    base = check_vectors(base, "base", on_gpu=dev.is_cuda and is_device_array(base))
    check_finite(base, "base")
    exact = registry.get("exact").load()
    index = exact.build(exact.IndexParams(metric=graph.metric), base, device=dev, verbose=False)
    td, ti = exact.search(index, queries, min(k + 1, n), device=device, verbose=False)
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
    return recall_at_k(ids, keep_i, k, distances=dist, true_distances=keep_d)
