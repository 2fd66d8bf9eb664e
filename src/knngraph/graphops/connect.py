"""Connected search graphs: every vertex reachable from the entry points.

A k-NN graph of data in well-separated clusters (near-duplicate groups, languages, product categories)
has no edge between the clusters: every row points inside its own cluster. Diversity pruning only keeps
or drops a row's candidates, so it cannot add the missing edges, and a search started elsewhere never
sees those vertices: recall is lost silently. (The relative neighbourhood graph of GRNND does keep such
edges: it contains the minimum spanning tree of the points, Toussaint, "The relative neighbourhood graph of
a finite planar set", 1980; a k-NN graph pruned by the same rule does not, since the edges were never
candidates.)

:func:`connect` repairs a search graph in two steps, for fixed-degree rows and many components at once:

1. **Bridges between components, where they face each other.** The weakly connected components of the
   graph (union-find over its edges) are joined along a neighbour graph of their centroids: each
   component to its :data:`COMPONENT_NEIGHBOURS` nearest components, plus the edges of a minimum spanning
   tree of the centroids where those leave the components in several groups (Kruskal's rule over the
   candidate edges, nearest first). For a pair (A, B) the bridge is a <-> b, a the member of A nearest to
   B's centroid and b the member of B nearest to a: the vertices on the sides of the clusters that face
   each other, which is where a best-first search heading from A towards a query near B passes. (A star
   of bridges from one reached cluster, or bridges from each cluster's centre, would leave the search no
   path that gets nearer to the query at every step.) This is the role the spanning tree of the points
   plays in the relative neighbourhood graph.
2. **Reachability passes**, as NSG's spanning pass from its navigating node (Fu, Xiang, Wang, Cai, "Fast
   Approximate Nearest Neighbor Search With The Navigating Spreading-out Graph", section 3.3): a
   breadth-first pass over the directed graph from the entry points marks the reached vertices; the
   unreached ones are grouped into weakly connected components; each component's representatives (its
   vertex nearest to the component's mean, and up to ``links - 1`` more, spread by id) search the graph
   for their nearest reached vertex u (any search over the current graph from the entry points finds
   only reached vertices), and r and u are linked both ways; repeated until every vertex is reached.

A new edge takes a -1 slot of its row, else the farthest slot whose target keeps another in-edge (so that
no vertex loses its last way in; the next pass links any vertex cut off all the same), and rows stay sorted
by distance.

The pass count is bounded; the result reports how many vertices were linked and how many passes ran.
Linking runs on the host (numba, :mod:`knngraph.graphops._connect_kernels`, imported only when a graph has
vertices to link); the first reachability pass, which finds most graphs connected
already, runs where the graph is (a GPU build's graph is checked level by level on its GPU, a few
milliseconds for 450k rows of 32, instead of being copied to the host and searched there), and the
searches of step 3 run on the device that holds the graph (the caller's ``nearest`` function).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .._device import as_numpy, is_device_array
from .._typing import Array, DeviceLike
from ..primitives.components import reachable, unreachable_count, weak_components

if TYPE_CHECKING:
    from ..graph import Graph

__all__ = ["reachable", "weak_components", "unreachable_count", "connect", "connect_graph", "warn_unreachable",
           "UnreachableVerticesWarning", "MAX_PASSES"]

#: passes of :func:`connect` before it gives up (each pass links every component it finds)
MAX_PASSES = 16
#: each component is bridged to this many of its nearest components (by centroid): a cluster bridged to
#: few others leaves a best-first search started in another cluster too few ways in (measured on 100
#: separated clusters, 20k rows: recall@10 at queue 64 was 0.79 with 16 neighbours, 0.91 with all 99)
COMPONENT_NEIGHBOURS = 128
#: components that get an entry point of their own (the largest)
MAX_COMPONENT_ENTRIES = 256
#: edges of the reachability passes recorded in the report (``links``: [u, r] pairs)
MAX_RECORDED_LINKS = 4096
#: nearest reached vertices found per representative (the first that has room takes the link)
_CANDIDATES = 16


class UnreachableVerticesWarning(UserWarning):
    """A search graph leaves vertices that no search from its entry points reaches: they are never
    returned. :func:`connect_graph` (or ``optimize_graph(connect=True)``) links them."""


def warn_unreachable(ids: Array, entries: ArrayLike, searcher: str) -> int:
    """Warn (:class:`UnreachableVerticesWarning`) when the graph ``ids`` leaves vertices unreachable from
    ``entries``; returns how many. One breadth-first pass (on the GPU that holds a device graph)."""
    import warnings

    missing = unreachable_count(ids, entries)
    if missing:
        n = int(ids.shape[0])
        warnings.warn(f"{searcher}: {missing} of {n} vertices ({100.0 * missing / n:.2g}%) cannot be reached from "
                      "the entry points, so searches never return them; link them with "
                      "knngraph.graphops.connect_graph(graph, dataset) (optimize_graph does by default)",
                      UnreachableVerticesWarning, stacklevel=3)
    return missing


def _representatives(labels, count: int, vectors, links: int) -> np.ndarray:
    """Up to ``links`` members of each component (rows of ``labels`` >= 0): the member nearest to the
    component's mean first, then members spread evenly over the component's ids."""
    order = np.argsort(labels, kind="stable")
    order = order[labels[order] >= 0]
    bounds = np.searchsorted(labels[order], np.arange(count + 1))
    reps = []
    for c in range(count):
        members = order[bounds[c]:bounds[c + 1]]
        if members.size <= links:
            reps.extend(members.tolist())
            continue
        sample = members if members.size <= 4096 else members[np.linspace(0, members.size - 1, 4096).astype(np.int64)]
        x = np.asarray(vectors[np.sort(sample)], dtype=np.float32)
        centre = x.mean(axis=0)
        first = int(np.sort(sample)[int(np.argmin(((x - centre) ** 2).sum(axis=1)))])
        picks = [first] + [int(v) for v in members[np.linspace(0, members.size - 1, links + 1).astype(np.int64)[1:]]
                           if int(v) != first][: links - 1]
        reps.extend(picks)
    return np.asarray(reps, dtype=np.int64)


def _component_edges(cent: np.ndarray, metric: str) -> list:
    """(A, B) pairs of components to bridge: each centroid's :data:`COMPONENT_NEIGHBOURS` nearest, plus
    spanning-tree edges (nearest first) until the pairs join every component."""
    from ..metrics import pairwise_distances
    from ..primitives._component_kernels import find_root

    c = cent.shape[0]
    nb = min(COMPONENT_NEIGHBOURS, c - 1)
    cand = []
    block = max(1, min(2048, (1 << 24) // c))  # rows of the centroid distance matrix at once (<= 128 MiB)
    for s0 in range(0, c, block):
        d = pairwise_distances(cent[s0:s0 + block], cent, metric)
        d[np.arange(d.shape[0]), np.arange(s0, s0 + d.shape[0])] = np.inf
        near = np.argsort(d, axis=1)[:, :max(nb, 8)]
        for r in range(d.shape[0]):
            for j, b in enumerate(near[r].tolist()):
                cand.append((float(d[r, b]), s0 + r, b, j < nb))
    cand.sort()
    parent = np.arange(c, dtype=np.int64)
    pairs = set()
    for _, a, b, kept in cand:
        joined = find_root(parent, a) != find_root(parent, b)
        if joined:
            ra, rb = find_root(parent, a), find_root(parent, b)
            parent[max(ra, rb)] = min(ra, rb)
        if kept or joined:
            pairs.add((min(a, b), max(a, b)))
    roots = {int(find_root(parent, v)) for v in range(c)}
    while len(roots) > 1:  # candidate lists too short to join all: nearest pair across groups, one at a time
        group = np.array([find_root(parent, v) for v in range(c)])
        first = group == group[0]
        d = pairwise_distances(cent[first], cent[~first], metric)
        i, j = np.unravel_index(int(np.argmin(d)), d.shape)
        a, b = int(np.flatnonzero(first)[i]), int(np.flatnonzero(~first)[j])
        parent[find_root(parent, b)] = find_root(parent, a)
        pairs.add((min(a, b), max(a, b)))
        roots = {int(find_root(parent, v)) for v in range(c)}
    return sorted(pairs)


def _bridge_components(ids, dists, vectors, metric: str) -> tuple[int, list]:
    """Step 1 of :func:`connect`: bridge the weakly connected components of the graph. Returns how many
    components there were and, largest first (at most :data:`MAX_COMPONENT_ENTRIES`), each one's member
    nearest to its centroid: entry points that start a search in every component."""
    from ..metrics import pairwise_distances
    from ._connect_kernels import link, reached_in_degree

    count, labels = weak_components(ids)
    if count < 2:
        return count, []
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(count + 1))
    members = [order[bounds[c]:bounds[c + 1]] for c in range(count)]
    x = [np.asarray(vectors[m], dtype=np.float32) for m in members]
    cent = np.stack([v.mean(axis=0) for v in x])
    largest = np.argsort(-np.diff(bounds), kind="stable")[:MAX_COMPONENT_ENTRIES]
    centres = [int(members[c][int(np.argmin(pairwise_distances(cent[c:c + 1], x[c], metric)[0]))]) for c in largest]
    n = ids.shape[0]
    indeg = np.zeros(n, np.int64)
    every = np.ones(n, np.bool_)
    reached_in_degree(ids, every, indeg)
    # each vertex takes at most one bridge: a row's farthest slot is where a bridge goes, so a second bridge
    # into the same row would push the first one out
    used = np.zeros(n, np.bool_)
    for a, b in _component_edges(cent, metric):
        u = _free_nearest(members[a], pairwise_distances(cent[b:b + 1], x[a], metric)[0], used)
        if u < 0:
            continue
        db = pairwise_distances(np.asarray(vectors[u:u + 1], dtype=np.float32), x[b], metric)[0]
        v = _free_nearest(members[b], db, used)
        if v < 0:
            continue
        d = np.float32(db[np.flatnonzero(members[b] == v)[0]])
        used[u] = used[v] = True
        link(ids, dists, u, v, d, indeg, every)
        link(ids, dists, v, u, d, indeg, every)
    return count, centres


def _free_nearest(members: np.ndarray, dist: np.ndarray, used: np.ndarray) -> int:
    """The member nearest by ``dist`` that holds no bridge yet; -1 when all do."""
    for j in np.argsort(dist, kind="stable").tolist():
        if not used[members[j]]:
            return int(members[j])
    return -1


def connect(ids, dists, entries, vectors, nearest, *, metric: str = "sqeuclidean", links: int = 2,
            max_passes: int = MAX_PASSES, rng_rule: bool = False) -> dict:
    """Make every vertex of the graph (``ids`` int32 rows, ``dists`` their float32 distances in ``metric``,
    host arrays, changed in place) reachable from ``entries`` (see the module docs).

    ``vectors``: host array of the rows; ``nearest(rows)``: for an int64 array of vertex ids, the ids (int64,
    shape (len(rows), c), nearest first, -1 when none) and distances (float32, in ``metric``) of each one's
    c nearest vertices found by searching the current graph from the entry points, i.e. its nearest
    reached vertices. Returns
    ``{"components", "passes", "linked_components", "unreached_before", "unreached_after", "entry_points",
    "links"}`` (``links``: the [u, r] edges the passes added, the first :data:`MAX_RECORDED_LINKS`),
    the last a vertex per component (largest first, the member nearest to its centroid; empty for one
    component): searchers start there too, so that a query starts in its own cluster when one holds it.
    Vertices that ``max_passes`` passes leave unreached (``unreached_after``) add entry points of their
    own after those, so that a search from ``entries`` and ``entry_points`` reaches every vertex.

    ``rng_rule=True`` keeps the relative neighbourhood rule of an RNG-pruned graph (GRNND's: for kept
    neighbours n1 nearer than n2 of v, d(n1, n2) >= d(v, n2)): no component bridges (step 1), and each
    pass links only u -> r with u the exact nearest reached vertex of r (``nearest`` must be exact): every
    other neighbour n1 of u is reached, so d(n1, r) >= d(u, r) and the new farthest edge keeps the rule."""
    if is_device_array(ids) or is_device_array(dists):
        raise TypeError("connect() works on host arrays; copy the graph to the host first")
    n = ids.shape[0]
    out = {"components": 0, "passes": 0, "linked_components": 0, "unreached_before": 0, "unreached_after": 0,
           "entry_points": [], "links": []}
    if n == 0 or ids.shape[1] == 0:
        return out
    entries = np.ascontiguousarray(entries, dtype=np.int64)
    seen = reachable(ids, entries)  # level by level in NumPy (a connected graph starts no compiled pass)
    out["unreached_before"] = int(n - seen.sum())
    if out["unreached_before"] == 0:
        return out
    from ..primitives._component_kernels import bfs
    from ._connect_kernels import has_room, link, reached_in_degree

    if not rng_rule:
        out["components"], out["entry_points"] = _bridge_components(ids, dists, vectors, metric)
    for p in range(max_passes + 1):
        seen = np.zeros(n, np.bool_)
        bfs(ids, entries, seen)
        missing = int(n - seen.sum())
        out["unreached_after"] = missing
        if missing == 0 or p == max_passes:
            break
        out["passes"] = p + 1
        count, labels = weak_components(ids, ~seen)
        reps = _representatives(labels, count, vectors, max(1, int(links)))
        found, found_d = nearest(reps)
        found = np.asarray(found, dtype=np.int64).reshape(len(reps), -1)
        found_d = np.asarray(found_d, dtype=np.float32).reshape(len(reps), -1)
        indeg = np.zeros(n, np.int64)
        reached_in_degree(ids, seen, indeg)
        # a vertex takes at most half of its row in links per pass: where one vertex is the nearest
        # reached vertex of many (a hub of large norm under inner product), the next nearest take the rest
        # rather than the hub's new links pushing each other out of its row
        cap = max(1, ids.shape[1] // 2)
        taken = np.zeros(n, np.int64)
        for j, r in enumerate(reps.tolist()):
            pick = [(int(u), float(d)) for u, d in zip(found[j], found_d[j]) if u >= 0 and u != r and seen[u]]
            # a row that can take the edge without cutting off the only way into one of its targets
            pick = [(u, d) for u, d in pick if taken[u] < cap and has_room(ids, u, indeg)] or pick[:1]
            if not pick:
                continue
            u, d = pick[0]
            taken[u] += 1
            link(ids, dists, u, r, np.float32(d), indeg, seen)
            if len(out["links"]) < MAX_RECORDED_LINKS:
                out["links"].append([int(u), int(r)])
            if not rng_rule and has_room(ids, r, indeg):
                # the way back only where it cuts no edge a vertex of r's own component may need
                link(ids, dists, r, u, np.float32(d), indeg, seen)
        out["linked_components"] += count
    if out["unreached_after"]:
        # what the passes could not link (the rows its links need would each cut another way in, as around
        # a hub of large norm under inner product) gets entry points of its own: an unreached vertex, then
        # again one of what that does not reach, until a search from the entry points reaches everything
        seen = np.zeros(n, np.bool_)
        bfs(ids, entries, seen)
        bfs(ids, np.asarray(out["entry_points"], dtype=np.int64), seen)
        while not seen.all():
            v = int(np.argmin(seen))
            out["entry_points"].append(v)
            bfs(ids, np.array([v], np.int64), seen)
    return out


def connect_graph(graph: Graph, base: Array, *, entry_points: ArrayLike | None = None, device: DeviceLike = "auto",
                  queue_size: int = 64, links: int = 2, rng_rule: bool = False) -> Graph:
    """``graph`` with every vertex reachable from ``entry_points`` (default: the medoid of ``base``, which
    every default entry set of the library's searchers starts with), as :func:`connect` makes it; the
    nearest reached vertex of each linked component's representatives is found by the fast graph
    searcher (:func:`knngraph.beam.search`, queue ``queue_size``) on ``device``.

    Returns a new :class:`~knngraph.Graph` (host arrays for host input, the input's device otherwise) whose
    ``info["connect"]`` holds what :func:`connect` reports, or ``graph`` itself when every vertex is
    reached already (the check is one breadth-first pass, on the GPU for a device graph). ``rng_rule=True``: for an
    RNG-pruned graph, links that keep its rule (:func:`connect`; the nearest reached vertices are then
    found exactly, by distances to every reached vertex on the host).

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> from knngraph.graphops import connect_graph
    >>> x = np.array([[0], [1], [10], [11]], np.float32)   # two islands: 0-1 and 2-3
    >>> g = knngraph.knn_graph(x, 1, device="cpu")
    >>> g.components()
    2
    >>> connect_graph(g, x, entry_points=[0], device="cpu").components()
    1
    """
    from .. import beam
    from .._device import resolve_device
    from ..graph import Graph
    from .entry_points import medoid

    dev = resolve_device(device, base, graph.indices)
    entries = np.asarray([medoid(base, graph.metric)] if entry_points is None else entry_points, dtype=np.int64)
    if graph.indices.shape[0] == 0 or not (~reachable(graph.indices, entries)).any():
        return graph  # (checked where the graph is: a GPU build's graph on its GPU)
    ids = np.array(as_numpy(graph.indices), dtype=np.int32, order="C")
    dists = np.array(as_numpy(graph.distances), dtype=np.float32, order="C")
    host = as_numpy(base)

    def nearest_exact(rows):
        from ..metrics import pairwise_distances

        reached = np.flatnonzero(reachable(ids, entries))
        best_i = np.full((len(rows), 0), -1, np.int64)
        best_d = np.full((len(rows), 0), np.inf, np.float64)
        q = np.asarray(host[rows], dtype=np.float32)
        for s in range(0, reached.size, 1 << 16):
            cand = reached[s:s + (1 << 16)]
            d = pairwise_distances(q, np.asarray(host[cand], dtype=np.float32), graph.metric)
            all_d = np.concatenate([best_d, d], axis=1)
            all_i = np.concatenate([best_i, np.broadcast_to(cand, d.shape)], axis=1)
            top = np.argsort(all_d, axis=1, kind="stable")[:, :_CANDIDATES]
            best_d, best_i = np.take_along_axis(all_d, top, 1), np.take_along_axis(all_i, top, 1)
        return best_i, best_d.astype(np.float32)

    def nearest(rows):
        if rng_rule:
            return nearest_exact(rows)
        view = beam.GraphView(ids, base, entries.astype(np.int32), graph.metric)
        q = base[rows] if is_device_array(base) else np.ascontiguousarray(host[rows])
        c = min(_CANDIDATES, max(queue_size, 1), ids.shape[0])
        # the vectors themselves: a one-off view of a graph being built would code every vector for a few rows
        d, i = beam.search(view, q, c, max(queue_size, c), device=dev, cpu_walk="exact")
        return as_numpy(i).astype(np.int64), as_numpy(d)

    report = connect(ids, dists, entries, host, nearest, metric=graph.metric, links=links, rng_rule=rng_rule)
    info = dict(graph.info, connect=report)
    if is_device_array(graph.indices):
        import cupy as cp

        return Graph(cp.asarray(ids), cp.asarray(dists), graph.metric, info)
    return Graph(ids, dists, graph.metric, info)
