"""Search-graph preparation: turn any builder's k-NN graph into a fixed-degree graph that navigates well.

A k-NN graph alone searches poorly: its edges all point into the same small neighbourhood (many are
redundant), far regions are reached through long chains, and rows are not symmetric, so some nodes are
hard to reach at all. SONG (Zhao, Tan, Li, "SONG: Approximate Nearest Neighbor Search on GPU") assumes a search graph with a
fixed degree bound (section IV-A; it used NSW and NSG graphs, section VIII). :func:`optimize_graph` makes one from a k-NN graph in three
steps, each on the GPU or the CPU:

1. **Diversity pruning of each row** (the relative-neighbourhood rule of Toussaint 1980, as used by NSG's
   MRNG and HNSW's neighbour heuristic). u's candidates are its k-NN row *and* the nodes whose k-NN rows
   hold u (its reverse k-NN edges, the ``reverse_candidates`` nearest of them). Walk them nearest first
   and keep c unless an already kept r *occludes* it: ``alpha * dist(r, c) < dist(u, c)`` (c is closer
   to r than to u, so a search at u reaches c through r anyway). At most ``graph_degree`` are kept.
   ``alpha > 1`` occludes less, so rows keep more (and longer) edges (DiskANN's relaxation); it applies
   to (euclidean) distances and cosine distances; for inner product the plain rule (alpha = 1) is used.
2. **Reverse edges.** Every kept edge u -> c offers c the edge c -> u; each node takes its
   ``graph_degree`` nearest offers. This makes the graph close to symmetric, so a node is reachable from its neighbours.
3. **Merge to a fixed out-degree.** The kept forward edges and the reverse edges are pruned together
   with the same rule (up to ``graph_degree``). With ``fill=True`` (default) the row is then filled up to
   ``graph_degree`` with the rejected ones, then with the rest of the original row, nearest first, so
   every row has ``graph_degree`` ids (fewer only when the graph has fewer distinct candidates). With
   ``fill=False`` rows keep only the diverse edges and end in -1 padding.
   Rows are sorted by distance.
4. **Connect** (``connect=True``): every vertex a search from the medoid cannot reach is linked to the
   part it reaches (:mod:`knngraph.graphops.connect`).

Why the reverse k-NN candidates of step 1: real data has small dense islands (near-duplicate
descriptors of one photo, say). Their members' k-NN rows point inside the island, and the k-NN rows of
the nodes around them are filled by their own denser neighbourhoods, so few edges lead *into* the
island and a best-first search that does not start there stalls on its rim (the true neighbours are
strongly connected to the rest, but only through vertices farther from the query than the queue's
worst entry). An island member's row does point outwards, to the nodes around it; taking those
reverse edges as candidates of the outside nodes gives each of them an edge into the island in its
own direction, which the diversity rule keeps. (NSG and DiskANN take extra candidates from search
paths for the same purpose; the reverse k-NN edges come from the graph at hand, at no search cost.)

The preparation's effect on search (forward candidates only against reverse k-NN candidates, input
degrees 64 and 96, ``alpha``, ``fill``) is measured by ``benchmarks/studies/song_gpu.py`` and
``benchmarks/studies/song_cpu.py``; the numbers are in ``benchmarks/REPORT.md`` and ``benchmarks/results``.

The result is deterministic (ties are ordered by id). Cost: O(n * L * degree) distance evaluations,
L = the input degree + ``reverse_candidates``; on the GPU one warp handles one node
(:mod:`knngraph.graphops.cuda`), on the CPU one thread (:mod:`knngraph.graphops.cpu`).
"""

from __future__ import annotations

import time

import numpy as np

from .._device import as_numpy, device_context, implementation, is_device_array, resolve_device
from .._typing import Array, DeviceLike
from .._validate import check_finite, check_int, check_vectors
from ..graph import Graph
from ..primitives.cpu_inputs import cpu_vectors
from ..primitives.distances import DIST_IP, DIST_L2SQ, distance_kind, inverse_norms, report_distances
from .reverse import reverse_edges

__all__ = ["optimize_graph", "occlusion_factor"]


def occlusion_factor(kind: int, alpha: float) -> float:
    """The factor f of the occlusion test f * d(r, c) < d(u, c) on internal distances: alpha^2 for
    squared L2, alpha for cosine, 1 for inner product."""
    if kind == DIST_L2SQ:
        return float(np.float32(alpha * alpha))
    if kind == DIST_IP:
        return 1.0
    return float(np.float32(alpha))


def optimize_graph(graph: Graph, base: Array, graph_degree: int = 32, *, alpha: float = 1.0, fill: bool = True,
                   reverse_candidates: int | None = None, connect: bool = True, device: DeviceLike = "auto",
                   verbose: bool = True) -> Graph:
    """Prepare a search graph from a k-NN graph: diversity pruning, reverse edges, fixed out-degree.

    Parameters
    ----------
    graph : Graph
        Any builder's graph over ``base`` (e.g. ``knngraph.knn_graph(base, 64)``); -1 entries are allowed.
        Its metric is used. Input degrees of two to three times ``graph_degree`` work well (96 for 32).
    base : array of shape (n, d)
        The vectors the graph was built on (float32, float16, uint8, int8; NumPy, CuPy, PyTorch...).
    graph_degree : int, default=32
        Out-degree of the result. 32 fills one GPU warp per expansion of a graph search.
    alpha : float, default=1.0
        Pruning relaxation, >= 1 (see the module docs): 1 is the RNG rule; larger occludes less, so
        rows keep more, longer edges.
    fill : bool, default=True
        Top every row up to ``degree`` with pruned candidates (step 3); False keeps only diverse edges.
    reverse_candidates : int, optional
        How many reverse input edges (nodes whose input rows hold u, nearest first) join u's own row as
        candidates of step 1; default the input degree, 0 for the forward row alone (module docs).
    connect : bool, default=True
        Step 4: link every vertex that a search from the medoid cannot reach
        (:func:`knngraph.graphops.connect_graph`): a k-NN graph of separated clusters has no edge between
        them, and no pruning adds one. ``info["connect"]`` says what was linked.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
    verbose : bool, default=True

    Returns
    -------
    Graph
        int32 ids / float32 distances of shape (n, graph_degree), nearest first, -1 / inf padding where a node
        has fewer distinct candidates; same metric; NumPy arrays for host input, CuPy for device input.
        ``info`` records the parameters and the mean number of edges per node that survived pruning
        (step 1), before reverse edges and filling.

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> x = np.random.default_rng(0).random((300, 8), dtype=np.float32)
    >>> g = knngraph.optimize_graph(knngraph.knn_graph(x, 16, device="cpu"), x, graph_degree=8, device="cpu")
    >>> g.indices.shape, bool((g.indices >= 0).all())
    ((300, 8), True)
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a knngraph.Graph, got {type(graph).__name__}")
    dev = resolve_device(device, base, graph.indices)
    x = check_vectors(base, "base", on_gpu=dev.is_cuda and is_device_array(base))
    if x.shape[0] != graph.n:
        raise ValueError(f"graph has {graph.n} rows but base has {x.shape[0]} vectors; they must match")
    degree = check_int(graph_degree, "graph_degree", low=1, high=1024)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating, np.integer)) or not alpha >= 1:
        raise ValueError(f"alpha must be a number >= 1, got {alpha!r}")
    if not isinstance(fill, (bool, np.bool_)):
        raise TypeError(f"fill must be True or False, got {fill!r}")
    if not isinstance(connect, (bool, np.bool_)):
        raise TypeError(f"connect must be True or False, got {connect!r}")
    n_rev = graph.degree if reverse_candidates is None else check_int(reverse_candidates, "reverse_candidates",
                                                                       low=0, high=4096)
    check_finite(x, "base")
    graph.validate_ids()
    metric = graph.metric
    kind = distance_kind(metric)
    t0 = time.perf_counter()
    impl = implementation("knngraph.graphops", dev)
    factor = occlusion_factor(kind, alpha)
    with device_context(dev):
        if dev.is_cuda:
            import cupy as xp

            x_in = xp.asarray(x)
            ids_in = xp.ascontiguousarray(xp.asarray(graph.indices))
            dist_in = xp.asarray(graph.distances)
        else:
            xp = np
            x_in = cpu_vectors(as_numpy(x))
            ids_in = np.ascontiguousarray(as_numpy(graph.indices))
            dist_in = as_numpy(graph.distances)
        inv = inverse_norms(x_in, xp) if metric == "cosine" else xp.zeros(1, xp.float32)
        empty = xp.empty((graph.n, 0), xp.int32)
        rin = reverse_edges(ids_in, dist_in, n_rev)[0] if n_rev else empty
        fwd, fwd_d = impl.prune(x_in, inv, kind, factor, ids_in, rin, empty, degree, False)
        del rin
        rev, _ = reverse_edges(fwd, fwd_d, degree)
        out, out_d = impl.prune(x_in, inv, kind, factor, fwd, rev, ids_in, degree, bool(fill))
        kept = float((fwd >= 0).sum()) / graph.n
        dist = report_distances(out_d, metric, xp)
        dist = xp.where(out < 0, xp.float32(np.inf), dist)
        if dev.is_cuda and not is_device_array(base) and not is_device_array(graph.indices):
            out, dist = out.get(), dist.get()
    info = {"method": "optimize_graph", "source": dict(graph.info), "graph_degree": degree, "alpha": float(alpha),
            "input_degree": graph.degree, "fill": bool(fill), "reverse_candidates": n_rev,
            "device": "cuda" if dev.is_cuda else "cpu", "diverse_edges_per_node": kept}
    result = Graph(out, dist, metric, info)
    if connect:
        from .connect import connect_graph

        result = connect_graph(result, x if is_device_array(out) else as_numpy(x), device=dev)
    result.info["seconds"] = time.perf_counter() - t0
    return result
