"""The compiled (numba, CPU) passes of :mod:`knngraph.primitives.components`: a breadth-first pass over
directed edges and union-find. Imported only where they run: a graph on a GPU is checked there, level by
level, and a process that never links components never imports numba for them."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["bfs", "find_root", "union_edges", "component_labels"]


@numba.njit(cache=True)
def bfs(ids, entries, seen):
    """Mark in ``seen`` every vertex reachable from ``entries`` over the directed edges of ``ids`` (a
    vertex marked already is not expanded); returns the vertices marked."""
    n, deg = ids.shape
    queue = np.empty(n, np.int64)
    head = 0
    tail = 0
    for t in range(entries.shape[0]):
        e = entries[t]
        if 0 <= e < n and not seen[e]:
            seen[e] = True
            queue[tail] = e
            tail += 1
    while head < tail:
        u = queue[head]
        head += 1
        for j in range(deg):
            v = ids[u, j]
            if v >= 0 and not seen[v]:
                seen[v] = True
                queue[tail] = v
                tail += 1
    return tail


@numba.njit(cache=True)
def find_root(parent, x):
    """The root of ``x`` in the union-find forest ``parent`` (paths compressed on the way)."""
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:  # path compression
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@numba.njit(cache=True)
def union_edges(ids, member, parent):
    """Join in ``parent`` the two ends of every edge of ``ids`` between members (edges taken both ways)."""
    n, deg = ids.shape
    for u in range(n):
        if not member[u]:
            continue
        for j in range(deg):
            v = ids[u, j]
            if v >= 0 and member[v]:
                a = find_root(parent, u)
                b = find_root(parent, v)
                if a != b:
                    if a < b:
                        parent[b] = a
                    else:
                        parent[a] = b


@numba.njit(cache=True)
def component_labels(member, parent, labels):
    """labels[v] = dense component number of member v (0, 1, ... in order of smallest id), -1 elsewhere."""
    n = member.shape[0]
    root_label = np.full(n, -1, np.int64)
    count = 0
    for v in range(n):
        if member[v]:
            r = find_root(parent, v)
            if root_label[r] < 0:
                root_label[r] = count
                count += 1
            labels[v] = root_label[r]
        else:
            labels[v] = -1
    return count
