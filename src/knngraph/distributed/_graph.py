"""The k-NN graph of data larger than one worker: :func:`knn_graph` and :func:`load_graph`.

The data is cut as the out-of-core NN-Descent build with ``cluster_margin=None`` cuts it
(:mod:`knngraph.partition`; GNND section 5 merges equal shards pairwise instead, which loses recall as
shards grow): k-means centroids from a sample, every row in the clusters of its ``overlap`` nearest
centroids (computed by the workers, block by block), clusters larger than ``piece_rows`` halved at a
median. Each piece's k-NN graph is built by one worker with any graph builder of
:mod:`knngraph.registry`, its local ids mapped to global ones; then every block of rows gathers its rows'
lists from the pieces that hold them and merges them with :func:`knngraph.graphops.merge_sorted_lists` (a
shuffle by row id). With the same inputs, pieces and per-piece seeds as that in-memory out-of-core build,
the result is that build's graph. (The out-of-core build's default border rule, which builds only the
rows near a border in more than one cluster, is not used here yet.)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import partition as P
from .. import registry
from .._device import as_numpy, device_context, resolve_device
from .._typing import Array, MemoryLimit, PathLike
from .._validate import check_int, check_k
from ..graph import Graph
from ..graphops import merge_sorted_lists
from ..index import KNNResult
from ..io import _atomic_write
from ..metrics import canonical_metric
from ..primitives.distances import distance_kind
from ._common import (ShardError, _is_dask_array, _is_file_list, get_client, n_workers, named, plan_shards,
                      read_source)

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["knn_graph", "load_graph", "GRAPH_MANIFEST"]

GRAPH_MANIFEST = "graph.json"
GRAPH_FORMAT = "knngraph-sharded-graph"
#: The out-of-core build's constants (``knngraph.nndescent``), so that the same inputs give the same
#: pieces: clusters of fewer than POOL_PER_K * (degree + 1) rows are pooled, pieces of at most
#: SMALL_PIECE_PER_K * (degree + 1) rows get an exact graph; the degree is at least MIN_BUILD_DEGREE.
POOL_PER_K = 2
SMALL_PIECE_PER_K = 4
MIN_BUILD_DEGREE = 16
#: a piece's build seed is seed + PIECE_SEED_STRIDE * piece number (as the out-of-core build)
PIECE_SEED_STRIDE = 7919
#: default rows per output block (and per block of the centroid assignment)
DEFAULT_BLOCK_ROWS = 1 << 20


class _Engine:
    """The array engine :func:`knngraph.partition.nearest_centroids` expects, on the worker's device."""

    def __init__(self, dev):
        if dev.is_cuda:
            import cupy

            self.xp, self.asarray, self.to_host = cupy, cupy.asarray, cupy.asnumpy
        else:
            self.xp, self.asarray, self.to_host = np, np.asarray, np.asarray


class _ClientRows:
    """Rows of a Dask array fetched through the client: what :func:`knngraph.partition.kmeans` and
    :func:`~knngraph.partition.split_pieces` read (a sample; the rows of an oversized cluster)."""

    def __init__(self, x, client):
        self.x = x
        self.client = client
        self.shape = tuple(int(s) for s in x.shape)

    def __getitem__(self, idx):
        return np.asarray(self.client.compute(self.x[idx]).result())


# --------------------------------------------------------------------------------------------------
# worker tasks


def _labels(block, cent, kind, overlap, device):
    dev = resolve_device(device)
    with device_context(dev):
        return P.nearest_centroids(_Engine(dev), np.asarray(block), cent, kind, overlap, 65536)


def _build_piece(block, rows, k, method, metric, seed, params, device, memory_limit, small):
    """(rows, distances, global ids) of one piece: its k-NN graph, ids mapped to global rows, padded to k."""
    m = len(rows)
    dist = np.full((m, k), np.inf, np.float32)
    ids = np.full((m, k), -1, np.int32)
    if m < 2:
        return rows, dist, ids
    kk = min(k, m - 1)
    x = np.asarray(block)
    if m <= small:
        g = registry.get("exact").build_graph(x, kk, metric=metric, device=device, verbose=False)
    else:
        algo = registry.get(method)
        fields = {"seed": seed} if "seed" in {f.name for f in dataclasses.fields(algo.load().IndexParams)} else {}
        g = algo.build_graph(x, kk, metric=metric, device=device, memory_limit=memory_limit, verbose=False,
                             params=params, piece=True, **fields)
    gi = as_numpy(g.indices)
    dist[:, :kk] = as_numpy(g.distances)[:, :kk]
    ids[:, :kk] = np.where(gi[:, :kk] >= 0, rows[np.maximum(gi[:, :kk], 0)], -1)
    return rows, dist, ids


def _select(piece, lo, hi):
    """The part of a piece's lists whose rows lie in [lo, hi): (rows - lo, distances, ids)."""
    rows, dist, ids = piece
    a, b = np.searchsorted(rows, [lo, hi])
    return (rows[a:b] - lo).astype(np.int64), dist[a:b], ids[a:b]


def _merge_block(lo, hi, k, k_out, *parts):
    """The merged lists of rows [lo, hi) over the pieces' parts (each row sits in up to ``overlap``):
    ``k`` entries merged, the first ``k_out`` returned."""
    d = np.full((hi - lo, k), np.inf, np.float32)
    i = np.full((hi - lo, k), -1, np.int32)
    for rows, pd, pi in parts:
        if len(rows):
            md, mi = merge_sorted_lists(d[rows], i[rows], pd, pi, k)
            d[rows], i[rows] = md, mi
    return np.ascontiguousarray(d[:, :k_out]), np.ascontiguousarray(i[:, :k_out])


def _write_block(merged, path, lo, hi, n, metric):
    d, i = merged
    Graph(i, d, metric, {"rows": [int(lo), int(hi)], "n": int(n)}).save(path)
    return path


# --------------------------------------------------------------------------------------------------
# public API


def _as_dask(dataset, client, block_rows):
    """(Dask array of the rows, n, d): a Dask array rechunked to whole rows, files read by workers,
    a NumPy array cut into blocks."""
    import dask
    import dask.array as da

    if _is_dask_array(dataset):
        plan, _, n, d, dtype = plan_shards(dataset, None, 1)  # checks shape and dtype
        x = dataset
        if any(math.isnan(c) for c in x.chunks[0]):
            x = x.compute_chunk_sizes()
        return x.rechunk({1: -1}), n, d
    if _is_file_list(dataset):
        plan, _, n, d, dtype = plan_shards(dataset, None, 1)  # reads and checks the headers
        named_sources = [(f"rows {lo}-{min(s.rows, lo + block_rows) - 1} of {s.source}",
                          ("file", s.source, lo, min(s.rows, lo + block_rows)))
                         for s in plan for lo in range(0, s.rows, block_rows)]
    else:
        n = int(dataset.shape[0]) if hasattr(dataset, "shape") else 0
        plan, sources, n, d, dtype = plan_shards(dataset, max(1, -(-n // block_rows)) if n else None, 1)
        named_sources = [(s.source, src) for s, src in zip(plan, sources)]
    parts = [da.from_delayed(dask.delayed(named, pure=True)(name, read_source, src), (hi - lo, d), dtype)
             for name, src, (lo, hi) in ((nm, src, _rows_of(src)) for nm, src in named_sources)]
    x = da.concatenate(parts, axis=0)
    if not _is_file_list(dataset):
        # a NumPy array travels once: later tasks (samples, pieces) refer to the workers' copies, and Dask
        # keeps the blocks' tasks to remake a copy lost with its worker
        x = client.persist(x)
    return x, n, d


def _rows_of(src):
    """(0, rows) of a NumPy block, (first, end) of a file range."""
    return (src[2], src[3]) if isinstance(src, tuple) else (0, src.shape[0])


def knn_graph(dataset: Array | Sequence[PathLike], graph_degree: int, *, client: Client | str | None = None,
              method: str = "nndescent", metric: str = "sqeuclidean", piece_rows: int | None = None, overlap: int = 3,
              seed: int = 0, params: Any = None, build_degree: int = 0, block_rows: int | None = None,
              out: PathLike | None = None, device: str = "auto", memory_limit: MemoryLimit = None,
              verbose: bool = True) -> KNNResult | str:
    """The approximate k-NN graph of a dataset too large for one worker, built on a Dask cluster.

    Parameters
    ----------
    dataset : Dask array, list of vector file paths, or NumPy array
        The rows (files are read by the workers; only headers here).
    graph_degree : int
        Neighbours per node, 1 <= graph_degree < n (self excluded).
    client : distributed.Client or str, optional
        Default: the current client.
    method : str, default='nndescent'
        The graph builder of each piece (a graph builder of :mod:`knngraph.registry`).
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}, default='sqeuclidean'
    piece_rows : int, optional
        Most rows per piece (what one worker builds at once). Default: n / number of workers (at least
        two pieces' worth of clusters), at most n / 2.
    overlap : int, default=3
        Clusters each row joins (1 to 8): more keeps more neighbours across cluster borders.
    seed : int, default=0
        Seeds k-means and the pieces' builds (piece s: seed + 7919 s).
    params : IndexParams of ``method``, optional
        Its other fields are used for every piece.
    build_degree : int, default=0
        Neighbours kept per row while building and merging the pieces (at least ``graph_degree``; the
        first ``graph_degree`` are returned): longer lists raise recall for a little more time and
        memory. 0: ``graph_degree`` (then the pieces and the result are the out-of-core build's).
    block_rows : int, optional
        Rows per output block (the shuffle's unit; one ``.knng`` file each): default the Dask array's
        chunks, else 2**20.
    out : str or path, optional
        A folder: each block is written there as a ``.knng`` graph file by a worker, with
        ``graph.json`` listing them (:func:`load_graph` reads it back). Default: return Dask arrays.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Resolved by each worker.
    memory_limit : int or str or None, default=None
        Working memory of one piece's build on its worker.
    verbose : bool, default=True
        Unused (the workers build quietly).

    Returns
    -------
    KNNResult of Dask arrays, or str
        (distances float32, indices int32) of shape (n, graph_degree), persisted on the cluster; with
        ``out``, the folder written.
    """
    import dask
    import dask.array as da
    from distributed import futures_of

    client = get_client(client)
    metric = canonical_metric(metric)
    kind = distance_kind(metric)
    overlap = check_int(overlap, "overlap", low=1, high=8)
    seed = check_int(seed, "seed", low=0)
    algo = registry.get(method)
    if not algo.builds_graphs:
        raise ValueError(f"method {method!r} does not build k-NN graphs; available: "
                         f"{', '.join(registry.graph_builders())}")
    if params is not None and not isinstance(params, algo.load().IndexParams):
        raise TypeError(f"params must be a {algo.module}.IndexParams, got {type(params).__name__}")
    if block_rows is not None:
        block_rows = check_int(block_rows, "block_rows", low=1)
    x, n, d = _as_dask(dataset, client, block_rows or DEFAULT_BLOCK_ROWS)
    k_out = check_k(graph_degree, n, graph=True)
    build_degree = check_int(build_degree, "build_degree", low=0)
    k = min(max(k_out, build_degree), n - 1)
    if block_rows is not None:
        x = x.rechunk({0: block_rows})
    kb = max(k, min(MIN_BUILD_DEGREE, n - 1))
    pool = POOL_PER_K * (kb + 1)
    if piece_rows is None:
        piece_rows = max(2 * pool, -(-n // max(2, n_workers(client))))
    piece_rows = check_int(piece_rows, "piece_rows", low=2 * pool)
    piece_rows = min(piece_rows, max(n // 2, 1))

    token = dask.base.tokenize(x.name, k, method, metric, seed, os.urandom(8))  # keys of this call only
    # 1. the partition (knngraph.partition), exactly as the out-of-core build plans it
    rows_view = _ClientRows(x, client)
    n_clusters = P.plan_clusters(n, piece_rows, overlap)
    overlap = min(overlap, n_clusters)
    cent = P.kmeans(rows_view, n_clusters, kind, seed)
    label_tasks = [dask.delayed(_labels)(b, cent, kind, overlap, device, dask_key_name=f"knngraph-labels-{j}-{token}")
                   for j, b in enumerate(x.to_delayed().ravel())]
    labels = np.concatenate(client.gather(client.compute(label_tasks)), axis=0)
    pieces = P.split_pieces(rows_view, labels, len(cent), kind, seed, max(pool, piece_rows - pool),
                            max(1024, piece_rows // 2), min_rows=pool)
    del labels
    # the row lists travel inside the task graph (twice: Dask's gather of the rows and the build): int32
    pieces = [r.astype(np.int32) for r in pieces]

    # 2. one task per piece: its rows (Dask's fancy indexing gathers them from the blocks) and its graph
    small = SMALL_PIECE_PER_K * (kb + 1)
    built = []
    for s, rows in enumerate(pieces):
        name = f"piece {s} of the k-NN graph ({len(rows)} rows)"
        built.append(dask.delayed(named)(name, _build_piece, x[rows], rows, k, method, metric,
                                         seed + PIECE_SEED_STRIDE * s, params, device, memory_limit, small,
                                         dask_key_name=f"knngraph-piece-{s}-{token}"))

    # 3. the shuffle: each block of rows merges its rows' parts of the pieces
    bounds = np.concatenate([[0], np.cumsum(x.chunks[0])]).astype(np.int64)
    merged = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi == lo:
            continue
        parts = []
        for s, rows in enumerate(pieces):
            a, b = np.searchsorted(rows, [lo, hi])
            if b > a:
                parts.append(dask.delayed(_select)(built[s], int(lo), int(hi),
                                                   dask_key_name=f"knngraph-select-{s}-{lo}-{token}"))
        merged.append((int(lo), int(hi), dask.delayed(_merge_block, nout=2)(
            int(lo), int(hi), k, k_out, *parts, dask_key_name=f"knngraph-merge-{lo}-{token}")))

    if out is not None:
        folder = Path(os.fspath(out)).absolute()
        folder.mkdir(parents=True, exist_ok=True)
        names = [f"part-{j:05d}.knng" for j in range(len(merged))]
        writes = [dask.delayed(_write_block)(m, str(folder / nm), lo, hi, n, metric,
                                             dask_key_name=f"knngraph-write-{lo}-{token}")
                  for (lo, hi, m), nm in zip(merged, names)]
        client.gather(client.compute(writes))
        manifest = {"format": GRAPH_FORMAT, "version": 1, "n": n, "degree": k_out, "metric": metric,
                    "parts": [{"file": nm, "offset": lo, "rows": hi - lo} for (lo, hi, _), nm in zip(merged, names)],
                    "info": {"method": method, "clusters": int(len(cent)), "pieces": len(pieces), "overlap": overlap,
                             "piece_rows": int(piece_rows), "seed": seed, "build_degree": k}}
        text = json.dumps(manifest, indent=1)
        _atomic_write(folder / GRAPH_MANIFEST, lambda tmp: Path(tmp).write_text(text))
        return str(folder)
    dist = da.concatenate([da.from_delayed(m[0], (hi - lo, k_out), np.float32) for lo, hi, m in merged], axis=0)
    ids = da.concatenate([da.from_delayed(m[1], (hi - lo, k_out), np.int32) for lo, hi, m in merged], axis=0)
    dist, ids = client.persist([dist, ids])
    for f in futures_of(dist) + futures_of(ids):
        exc = f.exception()  # waits; a failed piece or block raises its (named) error: never a partial graph
        if exc is not None:
            raise exc
        if f.status != "finished":
            raise ShardError(f"a block of the k-NN graph was not computed ({f.status})")
    return KNNResult(dist, ids)


def load_graph(path: PathLike) -> Graph:
    """The graph written by ``knn_graph(..., out=path)``, as one host :class:`~knngraph.Graph`."""
    folder = Path(os.fspath(path))
    mpath = folder / GRAPH_MANIFEST
    if not mpath.is_file():
        raise FileNotFoundError(f"{folder}: not a sharded k-NN graph (no {GRAPH_MANIFEST})")
    try:
        m = json.loads(mpath.read_text())
        if m.get("format") != GRAPH_FORMAT:
            raise ValueError(f"format is {m.get('format')!r}, not {GRAPH_FORMAT!r}")
        n, k, metric, parts = int(m["n"]), int(m["degree"]), m["metric"], m["parts"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{mpath}: not a valid sharded-graph manifest ({type(exc).__name__}: {exc})") from None
    ids = np.empty((n, k), np.int32)
    dist = np.empty((n, k), np.float32)
    covered = 0
    for p in parts:
        g = Graph.load(folder / p["file"])
        lo, rows = int(p["offset"]), int(p["rows"])
        if g.indices.shape != (rows, k) or lo != covered:
            raise ValueError(f"{folder / p['file']}: holds {g.indices.shape} lists at row {lo}, the manifest "
                             f"expects ({rows}, {k}) at row {covered}")
        ids[lo:lo + rows], dist[lo:lo + rows] = g.indices, g.distances
        covered += rows
    if covered != n:
        raise ValueError(f"{mpath}: its parts cover {covered} rows of {n}")
    return Graph(ids, dist, metric, dict(m.get("info", {})))
