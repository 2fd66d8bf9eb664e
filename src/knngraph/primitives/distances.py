"""Distances of single pairs of vectors, for graph algorithms (NN-Descent, graph search, pruning), which
compare pairs rather than blocks and so do not use GEMM.

Vectors may be float32, float16, uint8 or int8; arithmetic is float32. Internal distance kinds:

* ``DIST_L2SQ`` (0): ||x - y||^2 (also used for "euclidean"; the root is taken only when reporting);
* ``DIST_IP`` (1): -<x, y>;
* ``DIST_COS`` (2): 1 - <x, y> * inv_norm(x) * inv_norm(y), with inverse norms precomputed by
  :func:`inverse_norms` (0 for zero vectors, which then sit at distance 1 from everything);
* ``DIST_HAMMING`` (3): the Hamming distance of 1-bit codes (uint32 words; SONG, section VII). Not a
  metric and not taken by the functions here: the searchers choose it by the codes' dtype
  (:func:`knngraph.primitives.rows.row_distance`, the GPU's ``MODE_HAMMING``).

Every kernel turns its accumulated sum into a distance with
:func:`knngraph.primitives.pair_distance.finish_distance` (written once for the CPU and the GPU; the CPU
kernels' whole pair distance is :func:`~knngraph.primitives.pair_distance.cpu_distance` there, the
warp-parallel GPU versions are in :mod:`knngraph.primitives.warp`). :func:`report_distances` turns internal
values into what the metric reports. This module is host code that does not import numba: a GPU process whose
kernels are all on disk never imports numba.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DIST_L2SQ", "DIST_IP", "DIST_COS", "DIST_HAMMING", "distance_kind", "inverse_norms",
           "report_distances"]

DIST_L2SQ = 0
DIST_IP = 1
DIST_COS = 2
DIST_HAMMING = 3


def distance_kind(metric: str) -> int:
    """The internal distance kind for a canonical metric name."""
    return {"sqeuclidean": DIST_L2SQ, "euclidean": DIST_L2SQ, "inner_product": DIST_IP, "cosine": DIST_COS}[metric]


def inverse_norms(x, xp=np):
    """1/||row|| in float32 (0 for zero rows); ``xp`` is numpy or cupy. Only cosine needs them."""
    xf = x.astype(xp.float32)
    nrm = xp.sqrt((xf * xf).sum(axis=1))
    out = xp.zeros_like(nrm)
    nz = nrm > 0
    out[nz] = 1.0 / nrm[nz]
    return out.astype(xp.float32)


def report_distances(values, metric: str, xp=np):
    """Internal distances -> the metric's reported distances: sqrt for euclidean, L2 clamped at 0 and
    cosine to [0, 2] (float32 sums can land a hair outside; t-SNE, DBSCAN and UMAP refuse negative
    distances)."""
    if metric == "euclidean":
        return xp.sqrt(xp.maximum(values, 0)).astype(xp.float32)
    if metric == "sqeuclidean":
        return xp.maximum(values, 0).astype(xp.float32)
    if metric == "cosine":
        return xp.clip(values, 0, 2).astype(xp.float32)
    return values.astype(xp.float32)
