"""Merging neighbour lists: two sorted lists per row into their top-k distinct ids, and the top-k of
several partial results (per-shard searches, per-cluster graph builds, the halves of a graph merge).

Lists are sorted by (distance, id); -1 ids (no neighbour) are skipped and missing entries padded with
(inf, -1). Host arrays run on the CPU (numba), CuPy arrays on their GPU: the kernels are in
:mod:`knngraph.graphops.cpu` and :mod:`knngraph.graphops.cuda`.
"""

from __future__ import annotations

import numpy as np

from collections.abc import Sequence

from .._device import Device, implementation, is_device_array
from .._typing import Array

__all__ = ["merge_sorted_lists", "merge_topk"]


def merge_sorted_lists(ad: Array, ai: Array, bd: Array, bi: Array, k: int) -> tuple[Array, Array]:
    """Per row, the first ``k`` distinct ids of rows ``a`` and ``b`` (each sorted by (distance, id)),
    merged: (distances float32, ids int32) of shape (n, k), on the side of the inputs.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph.graphops import merge_sorted_lists
    >>> ad = np.array([[0.1, 0.5]], np.float32); ai = np.array([[3, 7]], np.int32)
    >>> bd = np.array([[0.2, 0.5]], np.float32); bi = np.array([[7, 9]], np.int32)
    >>> d, i = merge_sorted_lists(ad, ai, bd, bi, 3)
    >>> i.tolist(), d.round(2).tolist()
    ([[3, 7, 9]], [[0.1, 0.2, 0.5]])
    """
    on_gpu = is_device_array(ad)
    if on_gpu:
        import cupy

        sm = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
        return implementation(__package__, Device("cuda")).merge_sorted_lists(ad, ai, bd, bi, k, sm_count=sm)
    return implementation(__package__, Device("cpu")).merge_sorted_lists(ad, ai, bd, bi, k)


def merge_topk(distances: Sequence[Array], indices: Sequence[Array], k: int) -> tuple[Array, Array]:
    """The top-``k`` distinct ids of each row over several partial results: ``distances`` / ``indices``
    are sequences of (n, k_i) arrays, each row sorted by (distance, id), ids already global. Folds them
    pairwise with :func:`merge_sorted_lists`.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph.graphops import merge_topk
    >>> parts_d = [np.array([[1.0, 3.0]], np.float32), np.array([[2.0, 4.0]], np.float32)]
    >>> parts_i = [np.array([[10, 30]], np.int32), np.array([[20, 40]], np.int32)]
    >>> merge_topk(parts_d, parts_i, 3)[1].tolist()
    [[10, 20, 30]]
    """
    distances, indices = list(distances), list(indices)
    if not distances or len(distances) != len(indices):
        raise ValueError("merge_topk needs as many distance arrays as id arrays, at least one")
    out_d, out_i = distances[0], indices[0]
    if len(distances) == 1:
        xp = np if not is_device_array(out_d) else __import__("cupy")
        empty_d = xp.empty((out_d.shape[0], 0), xp.float32)
        return merge_sorted_lists(out_d, out_i, empty_d, xp.empty((out_d.shape[0], 0), xp.int32), k)
    for d, i in zip(distances[1:], indices[1:]):
        out_d, out_i = merge_sorted_lists(out_d, out_i, d, i, k)
    return out_d, out_i
