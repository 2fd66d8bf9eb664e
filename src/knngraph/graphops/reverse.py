"""Reverse edges of a graph: for each node, the nodes whose rows point at it (the "reverse k-NN").

Graph preparation offers them as candidates and adds them back as edges
(:func:`knngraph.graphops.optimize_graph`); sorting is by (target, distance, source), so the result is
deterministic.
"""

from __future__ import annotations

import numpy as np

from .._typing import Array

__all__ = ["reverse_edges"]


def reverse_edges(ids: Array, dists: Array, degree: int) -> tuple[Array, Array]:
    """For each node, up to ``degree`` sources of edges pointing at it, nearest first (ties by source id):
    (ids int32, distances float32) of shape (n, degree), -1 / inf padded. ``ids`` / ``dists`` are a
    graph's (n, r) rows (-1 = no edge), NumPy or CuPy; the result is on the same side.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph.graphops import reverse_edges
    >>> ids = np.array([[1, 2], [2, -1], [0, 1]], np.int32)
    >>> d = np.array([[1.0, 4.0], [2.0, np.inf], [4.0, 2.0]], np.float32)
    >>> reverse_edges(ids, d, 2)[0].tolist()
    [[2, -1], [0, 2], [1, 0]]
    """
    if isinstance(ids, np.ndarray):
        from .cpu import reverse_edges as on_host  # numba: by target buckets, no global sort

        return on_host(ids, dists, degree)
    xp = __import__("cupy")
    n, r = ids.shape
    src = xp.repeat(xp.arange(n, dtype=xp.int32), r)
    dst = ids.ravel()
    dd = dists.ravel()
    ok = dst >= 0
    src, dst, dd = src[ok], dst[ok], dd[ok]
    order = xp.lexsort(xp.stack([src, dd, dst]))  # by dst, then distance, then source id
    src, dst, dd = src[order], dst[order], dd[order]
    starts = xp.searchsorted(dst, xp.arange(n, dtype=dst.dtype))
    rank = xp.arange(dst.shape[0]) - starts[dst]
    keep = rank < degree
    rev = xp.full((n, degree), -1, dtype=xp.int32)
    rev_d = xp.full((n, degree), xp.inf, dtype=xp.float32)
    rev[dst[keep], rank[keep]] = src[keep]
    rev_d[dst[keep], rank[keep]] = dd[keep]
    return rev, rev_d
