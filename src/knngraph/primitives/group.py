"""Rows grouped by label: a counting sort compiled by numba (:func:`rows_by_label`)."""

from __future__ import annotations

import numpy as np

from .compile import host_and_device

__all__ = ["rows_by_label"]


@host_and_device(inline=False, cache=True)
def _count(labels, n_groups, starts):
    """starts[g + 1] = the entries of ``labels`` (any 2-D int array, -1: none) equal to g."""
    n, w = labels.shape
    for i in range(n):
        for j in range(w):
            g = labels[i, j]
            if 0 <= g < n_groups:
                starts[g + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]


@host_and_device(inline=False, cache=True)
def _place(labels, n_groups, starts, out):
    """Each labelled row's index at its group's next place (rows in increasing order, so each group's
    rows come out sorted)."""
    n, w = labels.shape
    fill = starts[:-1].copy()
    for i in range(n):
        for j in range(w):
            g = labels[i, j]
            if 0 <= g < n_groups:
                out[fill[g]] = i
                fill[g] += 1


def rows_by_label(labels, n_groups: int) -> list:
    """Each group's rows (sorted int64 arrays, views of one array) from ``(n, w)`` integer ``labels``: row i
    belongs to every group among its labels (labels outside ``[0, n_groups)``, -1 for none, are skipped; a
    label twice lists the row twice). Two passes of a counting sort, O(n w): the sort of the n w keys
    ``group * n + row`` it replaced took 1.2 s for 10M rows of 2.4 labels (one core, NumPy), a twentieth
    of an out-of-core NN-Descent build."""
    labels = np.ascontiguousarray(labels)
    if labels.ndim != 2:
        raise ValueError(f"labels must be 2-D (rows, labels per row), got shape {labels.shape}")
    starts = np.zeros(n_groups + 1, np.int64)
    _count(labels, np.int64(n_groups), starts)
    out = np.empty(int(starts[-1]), np.int64)
    _place(labels, np.int64(n_groups), starts, out)
    return [out[starts[g]:starts[g + 1]] for g in range(n_groups)]
