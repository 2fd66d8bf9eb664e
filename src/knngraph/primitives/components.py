"""Reachability and connected components of fixed-degree graphs (int32 rows, -1 = no edge): a
breadth-first pass from given vertices over the directed edges (level by level with NumPy or CuPy where the
graph is, finished by a compiled pass), and union-find over the edges taken both ways.
:meth:`knngraph.Graph.components` and the connectivity step of search graphs
(:mod:`knngraph.graphops.connect`) are built on them. The compiled passes are in
:mod:`knngraph.primitives._component_kernels`, imported only when one runs: a GPU build whose graph is
connected checks it on its GPU without importing numba."""

from __future__ import annotations

import numpy as np

from .._device import Device, as_numpy, device_context, is_device_array
from .._typing import Array

__all__ = ["reachable", "unreachable_count", "weak_components"]


#: graphs of at most this many edge slots are searched level by level with NumPy first (a gather of the
#: frontier's rows per level): a new process's first compiled numba call starts LLVM (about half a second),
#: which a GPU build that only checks its graph should not pay; larger graphs, and a pass still going after
#: :data:`_VECTOR_LEVELS` levels (a long chain), go to the compiled pass
#: (:func:`knngraph.primitives._component_kernels.bfs`)
_VECTOR_EDGES = 1 << 24
_VECTOR_LEVELS = 64


def _bfs_levels(g, entries, seen, *, xp=np, levels: int = _VECTOR_LEVELS):
    """Breadth-first levels from ``entries`` over ``g`` with NumPy (or CuPy, ``xp``, for device arrays),
    marking ``seen``, for at most ``levels`` levels; returns the frontier left (empty when the pass is
    complete). Each level keeps one copy of every new vertex without sorting (:func:`_first_of_each`): a
    pass over 450k x 32 ids took about a third of the time it took with ``np.unique``."""
    n = g.shape[0]
    stamp = xp.empty(n, xp.int64)
    front = entries[(entries >= 0) & (entries < n)]
    front = _first_of_each(front[~seen[front]], stamp, xp)
    seen[front] = True
    for _ in range(levels):
        if front.size == 0:
            break
        nb = g[front].ravel()
        nb = nb[(nb >= 0) & (nb < n)]
        nb = _first_of_each(nb[~seen[nb]], stamp, xp)
        seen[nb] = True
        front = nb
    return front


def _first_of_each(ids, stamp, xp=np):
    """The distinct values of ``ids`` (vertex ids in [0, len(stamp))), one position each, in linear time:
    every id writes its position into ``stamp`` (scratch), and the position whose write remained keeps
    its id (whichever of a repeated id's writes remains, exactly one position matches it; on a GPU too,
    where the writes of one id race)."""
    pos = xp.arange(ids.size)
    stamp[ids] = pos
    return ids[stamp[ids] == pos]


#: levels a pass over a graph on a GPU takes there before it hands what is left to the host's compiled pass
#: (each level is a few CuPy kernels; k-NN and search graphs are reached in tens of levels)
_DEVICE_LEVELS = 1024


def reachable(ids: Array, entries: Array) -> np.ndarray:
    """Boolean mask (host) of the vertices of the graph ``ids`` (int32 rows, -1 = no edge; host or device)
    that a search started from ``entries`` can reach (directed edges). A graph on a GPU is searched there,
    level by level (a GPU build checks its graph without copying it to the host); a pass still going after
    the levels (a long chain) is finished on the host by the compiled pass, as are host graphs of more
    than :data:`_VECTOR_EDGES` edge slots."""
    starts = np.ascontiguousarray(as_numpy(entries), dtype=np.int64).ravel()
    if is_device_array(ids):
        import cupy as cp

        with device_context(Device("cuda", ids.data.device_id)):
            g = cp.ascontiguousarray(ids, dtype=cp.int32)
            seen = cp.zeros(g.shape[0], cp.bool_)
            left = _bfs_levels(g, cp.asarray(starts), seen, xp=cp, levels=_DEVICE_LEVELS)
            if left.size == 0:
                return cp.asnumpy(seen)
            g, seen, left = cp.asnumpy(g), cp.asnumpy(seen), cp.asnumpy(left)
    else:
        g = np.ascontiguousarray(as_numpy(ids), dtype=np.int32)
        seen = np.zeros(g.shape[0], np.bool_)
        if g.size > _VECTOR_EDGES:
            from ._component_kernels import bfs

            bfs(g, starts, seen)
            return seen
        left = _bfs_levels(g, starts, seen)
        if left.size == 0:
            return seen
    from ._component_kernels import bfs

    seen[left] = False  # the compiled pass expands what it marks: hand it the frontier unmarked
    bfs(g, left.astype(np.int64), seen)
    return seen


def unreachable_count(ids: Array, entries: Array) -> int:
    """Vertices of the graph ``ids`` that no search from ``entries`` reaches."""
    return int((~reachable(ids, entries)).sum())


def weak_components(ids, member=None) -> tuple[int, np.ndarray]:
    """(count, labels) of the weakly connected components of the graph ``ids`` (edges taken both ways),
    restricted to the vertices of the boolean mask ``member`` (default: all): labels are 0 .. count-1 in
    order of each component's smallest id, -1 for vertices outside ``member``."""
    g = np.ascontiguousarray(as_numpy(ids), dtype=np.int32)
    n = g.shape[0]
    m = np.ones(n, np.bool_) if member is None else np.ascontiguousarray(member, dtype=np.bool_)
    from ._component_kernels import component_labels, union_edges

    parent = np.arange(n, dtype=np.int64)
    union_edges(g, m, parent)
    labels = np.empty(n, np.int64)
    count = component_labels(m, parent, labels)
    return int(count), labels


