"""Recall of search results and of graphs: the one definition every benchmark (runner and studies) scores by.

The definitions are :mod:`knngraph.evaluate`'s: recall@k counts a returned id whose distance is at most
the true k-th distance as correct (ties: datasets of integer distances have many), an id outside [0, n)
or -1 never counts; R@k is the share of queries whose true nearest neighbour is among the k returned.
Distances are never taken from a method: :func:`benchmarks.runner.data.exact_distances` recomputes those of
the returned ids and of the true ids in float64 under the dataset's metric, so every method is judged
alike (CAGRA's inner products, float16 distances, a hashed search's Hamming ranks).
"""

from __future__ import annotations

import numpy as np

from . import data as data_mod

__all__ = ["as_ids", "search_quality", "recall", "GraphTruth", "graph_quality"]


def as_ids(ids, n: int, k: int | None = None) -> np.ndarray:
    """Host int64 ids (first ``k`` columns), with ids outside [0, n) set to -1 (e.g. CAGRA's 0xFFFFFFFF:
    no id found)."""
    ids = np.array(data_mod.host(ids), dtype=np.int64, copy=True)
    if k is not None:
        ids = ids[:, :k]
    ids[(ids < 0) | (ids >= n)] = -1
    return ids


def search_quality(ds: data_mod.Dataset, ids, k: int, first: int | None = None) -> dict:
    """``recall@k``, ``recall@1`` and ``R@k`` of ``ids`` (one row per query of ``ds``, or of its first
    ``first`` queries, any array type) against the dataset's ground truth."""
    from knngraph.evaluate import r_at_k, recall_at_k

    m = ds.nq if first is None else int(first)
    ids = as_ids(ids, ds.n, k)
    if ids.shape[0] != m:
        raise ValueError(f"ids has {ids.shape[0]} rows, expected {m} (the queries scored)")
    gt_ids, gt_dist = ds.truth(k)
    gt_ids, gt_dist = gt_ids[:m], gt_dist[:m]
    dist = data_mod.exact_distances(ds.base, ds.queries[:m], ids, ds.metric)
    return {f"recall@{k}": recall_at_k(ids, gt_ids, k, distances=dist, true_distances=gt_dist),
            "recall@1": recall_at_k(ids[:, :1], gt_ids, 1, distances=dist[:, :1], true_distances=gt_dist),
            f"R@{k}": r_at_k(ids, gt_ids, k, distances=dist, true_distances=gt_dist)}


def recall(ds: data_mod.Dataset, ids, k: int = 10, first: int | None = None) -> float:
    """recall@k of ``ids`` (see :func:`search_quality`)."""
    return search_quality(ds, ids, k, first)[f"recall@{k}"]


class GraphTruth:
    """The exact neighbours of a fixed random sample of nodes, to score k-NN graphs of ``base``.

    Parameters
    ----------
    base : array (n, d)
    metric : str
    k : int
        Neighbours per node scored.
    sample : int, default=1000
        Nodes scored (all of them when n is smaller), drawn with ``seed``.
    seed : int, default=0
    device : str, default='auto'
        Where knngraph's exact k-NN computes the truth.

    Each sampled node's exact ``k`` nearest other nodes come from :func:`knngraph.knn` (self removed;
    where duplicates push the node itself out of its k+1 list, the last entry is dropped). ``base`` may be
    a NumPy or a device array.
    """

    def __init__(self, base, metric: str, k: int, sample: int = 1000, seed: int = 0, device="auto"):
        import knngraph

        n = int(base.shape[0])
        self.metric, self.k = metric, int(k)
        self.nodes = np.sort(np.random.default_rng(seed).choice(n, size=min(sample, n), replace=False))
        queries = np.ascontiguousarray(_rows(base, self.nodes))
        _, ids = knngraph.knn(base, queries, min(self.k + 1, n), metric=metric, device=device, verbose=False)
        self.base = data_mod.host(base)  # scoring gathers rows on the host (device data: copied once)
        ids = data_mod.host(ids).astype(np.int64)
        own = ids == self.nodes[:, None]
        drop = np.where(own.any(1), own.argmax(1), ids.shape[1] - 1)
        keep = np.ones(ids.shape, bool)
        keep[np.arange(len(self.nodes)), drop] = False
        self.ids = ids[keep].reshape(len(self.nodes), ids.shape[1] - 1)[:, :self.k]
        self.queries = queries
        self.dist = data_mod.exact_distances(base, queries, self.ids, metric)

    def recall(self, graph_ids, k: int | None = None, rows_are_sample: bool = False) -> float:
        """Graph recall@k (default the truth's k) of ``graph_ids`` (n rows, or only the sampled nodes' rows
        in sample order with ``rows_are_sample``)."""
        from knngraph.evaluate import recall_at_k

        k = self.k if k is None else int(k)
        rows = np.asarray(data_mod.host(graph_ids if rows_are_sample else _rows(graph_ids, self.nodes)))
        rows = as_ids(rows, int(self.base.shape[0]))
        dist = data_mod.exact_distances(self.base, self.queries, rows, self.metric)
        return recall_at_k(rows, self.ids, k, distances=dist, true_distances=self.dist)


def _rows(a, nodes):
    """The rows ``nodes`` of ``a`` (host or device), on the host."""
    if hasattr(a, "__cuda_array_interface__"):
        import cupy

        return cupy.asnumpy(cupy.asarray(a)[cupy.asarray(nodes)])
    return np.asarray(a[nodes])


def graph_quality(truth: GraphTruth, graph_ids) -> dict:
    """``graph_recall@10`` (or @k when k < 10), ``graph_recall@k`` and ``graph_recall_sample`` of a graph."""
    out = {"graph_recall_sample": int(len(truth.nodes))}
    for kk in sorted({min(10, truth.k), truth.k}):
        out[f"graph_recall@{kk}"] = truth.recall(graph_ids, kk)
    return out
