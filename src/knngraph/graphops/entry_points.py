"""Where graph searches start: the medoid of the data and a few vertices spread at random.

The *medoid* here is the base vector nearest to the base mean (by the metric; for cosine, nearest in
direction): a central vertex from which most of a well-built graph is a few hops away. Several spread-out
starts make a search robust on graphs with weakly connected clusters (k-NN graphs of real data often
have them); each costs one distance per query.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._device import is_device_array
from .._typing import Array
from ..primitives.distances import DIST_COS, DIST_L2SQ, distance_kind

__all__ = ["medoid", "default_entry_points"]

_CHUNK_ROWS = 1 << 16


def medoid(base: Array, metric: str = "sqeuclidean") -> int:
    """Id of the base vector nearest to the mean of ``base`` by ``metric`` (NumPy or CuPy rows; read in
    chunks, so memory maps work)."""
    xp = __import__("cupy") if is_device_array(base) else np
    n, d = base.shape
    kind = distance_kind(metric)
    total = xp.zeros(d, xp.float64)
    for s in range(0, n, _CHUNK_ROWS):
        total += base[s:s + _CHUNK_ROWS].astype(xp.float32).sum(axis=0, dtype=xp.float64)
    mean = (total / n).astype(xp.float32)
    if kind == DIST_COS:  # the direction of the mean
        nrm = float(xp.linalg.norm(mean))
        mean = mean / nrm if nrm > 0 else mean
    best_d, best_i = np.inf, 0
    for s in range(0, n, _CHUNK_ROWS):
        blk = base[s:s + _CHUNK_ROWS].astype(xp.float32)
        if kind == DIST_L2SQ:
            dist = ((blk - mean) ** 2).sum(axis=1)
        elif kind == DIST_COS:
            nb = xp.linalg.norm(blk, axis=1)
            nb[nb == 0] = 1
            dist = 1 - (blk @ mean) / nb
        else:
            dist = -(blk @ mean)
        j = int(xp.argmin(dist))
        if float(dist[j]) < best_d:
            best_d, best_i = float(dist[j]), s + j
    return best_i


def default_entry_points(base: Array, metric: str = "sqeuclidean", n_points: int = 32, seed: int = 0,
                         graph: Any = None) -> np.ndarray:
    """The medoid, then for a ``graph`` whose components were linked (:func:`knngraph.graphops.connect_graph`)
    a vertex of each component (``graph.info['connect']['entry_points']``: a search then starts inside
    the cluster of any query), then distinct vertices drawn uniformly at random with ``seed`` up to
    ``n_points`` in all (fewer when ``base`` has fewer rows): int32 host array.

    Examples
    --------
    >>> import numpy as np
    >>> from knngraph.graphops import default_entry_points
    >>> x = np.array([[0, 0], [1, 1], [2, 2], [9, 9]], np.float32)
    >>> e = default_entry_points(x, n_points=3)
    >>> int(e[0]), len(e), len(set(e.tolist()))
    (1, 3, 3)
    """
    n = base.shape[0]
    best = medoid(base, metric)
    info = getattr(graph, "info", None) or {}
    linked = info.get("connect") if isinstance(info.get("connect"), dict) else {}
    components = [int(v) for v in (linked or {}).get("entry_points", []) if 0 <= int(v) < n and int(v) != best]
    chosen = list(dict.fromkeys([best] + components))
    rng = np.random.default_rng(seed)
    others = rng.choice(n, size=min(n, n_points + 1), replace=False)
    others = [int(v) for v in others if int(v) not in set(chosen)][: max(0, min(n, n_points) - len(chosen))]
    return np.asarray(chosen + others, dtype=np.int32)
