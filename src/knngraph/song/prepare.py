"""Search-graph preparation: turn any builder's k-NN graph into a fixed-degree graph that navigates well.

A k-NN graph alone searches poorly: its edges all point into the same small neighbourhood (many are
redundant), far regions are reached through long chains, and rows are not symmetric, so some nodes are
hard to reach at all. SONG (paper 003) assumes a search graph with a fixed degree bound (section IV-A;
it used NSW and NSG graphs, section VIII). :func:`optimize_graph` makes one from a k-NN graph in three
steps, each on the GPU or the CPU:

1. **Diversity pruning of each row** (the relative-neighbourhood rule of Toussaint 1980, as used by NSG's
   MRNG and HNSW's neighbour heuristic). u's candidates are its k-NN row *and* the nodes whose k-NN rows
   hold u (its reverse k-NN edges, the ``reverse_candidates`` nearest of them). Walk them nearest first
   and keep c unless an already kept r *occludes* it: ``alpha * dist(r, c) < dist(u, c)`` (c is closer
   to r than to u, so a search at u reaches c through r anyway). At most ``degree`` are kept.
   ``alpha > 1`` occludes less, so rows keep more (and longer) edges (DiskANN's relaxation); it applies
   to (euclidean) distances and cosine distances; for inner product the plain rule (alpha = 1) is used.
2. **Reverse edges.** Every kept edge u -> c offers c the edge c -> u; each node takes its ``degree``
   nearest offers. This makes the graph close to symmetric, so a node is reachable from its neighbours.
3. **Merge to a fixed out-degree.** The kept forward edges and the reverse edges are pruned together
   with the same rule (up to ``degree``). With ``fill=True`` (default) the row is then filled up to
   ``degree`` with the rejected ones, then with the rest of the original row, nearest first, so every
   row has ``degree`` ids (fewer only when the graph has fewer distinct candidates). With
   ``fill=False`` rows keep only the diverse edges (about 12 of 32 on SIFT) and end in -1 padding.
   Rows are sorted by distance.

Why the reverse k-NN candidates of step 1: real data has small dense islands (near-duplicate
descriptors of one photo, say). Their members' k-NN rows point inside the island, and the k-NN rows of
the nodes around them are filled by their own denser neighbourhoods, so few edges lead *into* the
island and a best-first search that does not start there stalls on its rim (the true neighbours are
strongly connected to the rest, but only through vertices farther from the query than the queue's
worst entry). An island member's row does point outwards, to the nodes around it; taking those
reverse edges as candidates of the outside nodes gives each of them an edge into the island in its
own direction, which the diversity rule keeps. (NSG and DiskANN take extra candidates from search
paths for the same purpose; the reverse k-NN edges come from the graph at hand, at no search cost.)

Measured on sift-photos 450k (CPU, 2,000 queries, degree 32, about the same search work per query at
a given queue size; ranges are over three sets of random entry points):

=====================================  ============================  ==================
preparation                            recall@10, queue_size 128     queue for 0.99
=====================================  ============================  ==================
k-NN 64, forward candidates only       0.984                         192 - 256
k-NN 96, forward candidates only       0.984 - 0.988                 ~192
k-NN 64 + 64 reverse candidates        0.991 - 0.994                 ~96
k-NN 96 + 96 reverse candidates        0.995 - 0.997                 ~80
=====================================  ============================  ==================

On the H200 (10k queries, benchmarks/results/song_gpu_h200.jsonl) the last row reaches recall@10 0.99
at 894k queries/s (queue_size 80) where the first needs queue_size 192 for 402k; the NN-Descent graph
prepared the same way gives the same curve. On sift-photos 100k, alpha = 1.0 beats 1.2 and 1.4 at every
queue size (at 450k, 1.1 is within noise of 1.0). ``fill=False`` needs a larger queue_size (more
expansions) for the same recall but computes fewer distances; on the H200 it is about 15% faster at
recall 0.99 (1.03M queries/s at queue_size 96) and equal at 0.95.

The result is deterministic (ties are ordered by id). Cost: O(n * L * degree) distance evaluations,
L = the input degree + ``reverse_candidates``; on the GPU one warp handles one node.
"""

from __future__ import annotations

import time

import numpy as np

from .._device import as_numpy, is_device_array, resolve_device
from .._distances import distance_kind, inverse_norms, report_distances
from .._validate import check_finite, check_int, check_vectors
from ..graph import Graph

__all__ = ["optimize_graph"]


def _reverse_edges(ids, dists, degree, xp):
    """For each node, up to ``degree`` sources of edges pointing at it, nearest first: (ids, dists)."""
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


def optimize_graph(graph: Graph, base, degree: int = 32, *, alpha: float = 1.0, fill: bool = True,
                   reverse_candidates: int | None = None, device="auto", verbose: bool = True) -> Graph:
    """Prepare a search graph from a k-NN graph: diversity pruning, reverse edges, fixed out-degree.

    Parameters
    ----------
    graph : Graph
        Any builder's graph over ``base`` (e.g. ``knngraph.knn_graph(base, 64)``); -1 entries are allowed.
        Its metric is used. Input degrees of two to three times ``degree`` work well (96 for 32).
    base : array of shape (n, d)
        The vectors the graph was built on (float32, float16, uint8, int8; NumPy, CuPy, PyTorch...).
    degree : int, default=32
        Out-degree of the result. 32 fills one GPU warp per expansion in :func:`knngraph.song.search`.
    alpha : float, default=1.0
        Pruning relaxation, >= 1 (see the module docs): 1 is the RNG rule; larger occludes less, so
        rows keep more, longer edges.
    fill : bool, default=True
        Top every row up to ``degree`` with pruned candidates (step 3); False keeps only diverse edges.
    reverse_candidates : int, optional
        How many reverse input edges (nodes whose input rows hold u, nearest first) join u's own row as
        candidates of step 1; default the input degree, 0 for the forward row alone (module docs).
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
    verbose : bool, default=True

    Returns
    -------
    Graph
        int32 ids / float32 distances of shape (n, degree), nearest first, -1 / inf padding where a node
        has fewer distinct candidates; same metric; NumPy arrays for host input, CuPy for device input.
        ``info`` records the parameters and the mean number of edges per node that survived pruning
        (step 1), before reverse edges and filling.

    Examples
    --------
    >>> import numpy as np, knngraph
    >>> x = np.random.default_rng(0).random((300, 8), dtype=np.float32)
    >>> g = knngraph.optimize_graph(knngraph.knn_graph(x, 16, device="cpu"), x, degree=8, device="cpu")
    >>> g.indices.shape, bool((g.indices >= 0).all())
    ((300, 8), True)
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a knngraph.Graph, got {type(graph).__name__}")
    dev = resolve_device(device, base, graph.indices)
    x = check_vectors(base, "base", on_gpu=dev.is_cuda and is_device_array(base))
    if x.shape[0] != graph.n:
        raise ValueError(f"graph has {graph.n} rows but base has {x.shape[0]} vectors; they must match")
    degree = check_int(degree, "degree", low=1, high=1024)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating, np.integer)) or not alpha >= 1:
        raise ValueError(f"alpha must be a number >= 1, got {alpha!r}")
    if not isinstance(fill, (bool, np.bool_)):
        raise TypeError(f"fill must be True or False, got {fill!r}")
    n_rev = graph.degree if reverse_candidates is None else check_int(reverse_candidates, "reverse_candidates",
                                                                       low=0, high=4096)
    check_finite(x, "base")
    graph.validate_ids()
    metric = graph.metric
    kind = distance_kind(metric)
    t0 = time.perf_counter()
    if dev.is_cuda:
        from .cuda import prune_cuda
        import cupy as cp

        with cp.cuda.Device(dev.index):
            xg = cp.asarray(x)
            ids_in = cp.asarray(graph.indices)
            inv = inverse_norms(xg, cp) if metric == "cosine" else cp.zeros(1, cp.float32)
            empty = cp.empty((graph.n, 0), cp.int32)
            rin = _reverse_edges(ids_in, cp.asarray(graph.distances), n_rev, cp)[0] if n_rev else empty
            fwd, fwd_d = prune_cuda(xg, inv, kind, alpha, ids_in, rin, empty, degree, False)
            del rin
            rev, _ = _reverse_edges(fwd, fwd_d, degree, cp)
            out, out_d = prune_cuda(xg, inv, kind, alpha, fwd, rev, ids_in, degree, bool(fill))
            kept = float((fwd >= 0).sum()) / graph.n
            dist = report_distances(out_d, metric, cp)
            dist = cp.where(out < 0, cp.float32(np.inf), dist)
            if not is_device_array(base) and not is_device_array(graph.indices):
                out, dist = out.get(), dist.get()
    else:
        from .._distances import cpu_vectors
        from ._prune_cpu import prune_cpu

        xh = cpu_vectors(as_numpy(x))
        ids_in = np.ascontiguousarray(as_numpy(graph.indices))
        inv = inverse_norms(xh) if metric == "cosine" else np.zeros(1, np.float32)
        empty = np.empty((graph.n, 0), np.int32)
        rin = _reverse_edges(ids_in, as_numpy(graph.distances), n_rev, np)[0] if n_rev else empty
        fwd, fwd_d = prune_cpu(xh, inv, kind, alpha, ids_in, rin, empty, degree, False)
        del rin
        rev, _ = _reverse_edges(fwd, fwd_d, degree, np)
        out, out_d = prune_cpu(xh, inv, kind, alpha, fwd, rev, ids_in, degree, bool(fill))
        kept = float((fwd >= 0).sum()) / graph.n
        dist = report_distances(out_d, metric, np)
        dist[out < 0] = np.inf
    info = {"method": "optimize_graph", "source": dict(graph.info), "degree": degree, "alpha": float(alpha),
            "input_degree": graph.degree, "fill": bool(fill), "reverse_candidates": n_rev,
            "seconds": time.perf_counter() - t0,
            "device": "cuda" if dev.is_cuda else "cpu", "diverse_edges_per_node": kept}
    return Graph(out, dist, metric, info)
