"""The compiled (numba, CPU) steps of :func:`knngraph.graphops.connect.connect` that edit rows: in-degrees
from the reached vertices, whether a row has room for a new edge, and the edit that puts one in. Imported
only when a graph has vertices to link: checking a connected graph never imports numba."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["reached_in_degree", "has_room", "link"]


@numba.njit(cache=True)
def reached_in_degree(ids, seen, indeg):
    """Add to ``indeg`` the in-edges of every vertex from the rows of the reached (``seen``) vertices."""
    n, deg = ids.shape
    for u in range(n):
        if seen[u]:
            for j in range(deg):
                v = ids[u, j]
                if v >= 0:
                    indeg[v] += 1


@numba.njit(cache=True)
def has_room(ids, src, indeg):
    """Whether src's row has a free slot or one whose target keeps another in-edge."""
    for j in range(ids.shape[1]):
        if ids[src, j] < 0 or indeg[ids[src, j]] >= 2:
            return True
    return False


@numba.njit(cache=True)
def link(ids, dists, src, dst, d, indeg, seen):
    """Put edge src -> dst (distance d) into src's row: a free (-1) slot, else the farthest slot whose
    target keeps another reached in-edge, else the last slot; rows stay sorted by distance. Returns
    False when the edge is there already."""
    deg = ids.shape[1]
    slot = -1
    for j in range(deg):
        if ids[src, j] == dst:
            return False
    for j in range(deg):
        if ids[src, j] < 0:
            slot = j
            break
    if slot < 0:
        for j in range(deg - 1, -1, -1):
            if indeg[ids[src, j]] >= 2:
                slot = j
                break
    if slot < 0:
        slot = deg - 1
    old = ids[src, slot]
    if old >= 0 and seen[src]:
        indeg[old] -= 1
    # remove the slot, then insert (d, dst) at its sorted place
    for j in range(slot, deg - 1):
        ids[src, j] = ids[src, j + 1]
        dists[src, j] = dists[src, j + 1]
    ids[src, deg - 1] = -1
    dists[src, deg - 1] = np.inf
    t = deg - 1
    while t > 0 and (ids[src, t - 1] < 0 or dists[src, t - 1] > d):
        ids[src, t] = ids[src, t - 1]
        dists[src, t] = dists[src, t - 1]
        t -= 1
    ids[src, t] = dst
    dists[src, t] = d
    if seen[src]:
        indeg[dst] += 1
    return True
