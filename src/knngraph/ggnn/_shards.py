"""Sharding (section 5.5): the dataset is cut into contiguous shards, each with its own hierarchy; a
search runs every query on every shard and merges the per-shard top-k
(:func:`knngraph.graphops.merge_topk`).

Device copies of a shard (its vectors, graph rows with shard-local ids, entry points) are made on first
use and kept while all shards fit in ``memory_limit`` (default: free device memory minus a margin);
otherwise each shard is uploaded from host memory, searched and dropped before the next (the paper's
out-of-GPU-memory mode, without its background overlap of copy and search), so one GPU serves an
index larger than its memory. The shards of one device are searched one after another; several GPUs at
once are ``devices=`` of :func:`knngraph.ggnn.build` and :func:`knngraph.ggnn.search`
(:mod:`knngraph.multidevice`).
"""

from __future__ import annotations

import numpy as np

from .. import beam
from .._device import (Device, as_numpy, default_memory_limit, device_context, implementation, kept_across_streams,
                       parse_memory)
from ..graphops import merge_topk
from ..primitives.cpu_inputs import cpu_vectors
from ..primitives.distances import distance_kind, inverse_norms, report_distances

__all__ = ["shard_bounds", "search_shards", "shard_bytes"]


def shard_bounds(n: int, n_shards: int) -> np.ndarray:
    """Row bounds of ``n_shards`` contiguous shards of n rows (sizes differ by at most one)."""
    return (np.arange(n_shards + 1, dtype=np.int64) * n // n_shards).astype(np.int64)


def shard_bytes(index, s: int) -> int:
    """Bytes of shard s on a device: vectors plus graph rows."""
    a, b = int(index.shard_bounds[s]), int(index.shard_bounds[s + 1])
    x = index.dataset
    row = x.shape[1] * np.dtype(x.dtype).itemsize + 4 * index.graph.degree + 8
    return (b - a) * row


def _shard_rows(index, s: int):
    """(host graph rows with shard-local ids, host vectors, local entry points) of shard s."""
    a, b = int(index.shard_bounds[s]), int(index.shard_bounds[s + 1])
    ea, eb = int(index.entry_bounds[s]), int(index.entry_bounds[s + 1])
    ids = np.asarray(as_numpy(index.graph.indices)[a:b])
    local = np.where(ids >= 0, ids - a, -1).astype(np.int32)
    if ((local < -1) | (local >= b - a)).any():
        raise ValueError(f"the graph of shard {s} links outside the shard")
    return local, as_numpy(index.dataset[a:b]), (index.entry_points[ea:eb] - a).astype(np.int32)


def _shard_arrays(index, s: int, dev: Device):
    """(graph with shard-local ids, vectors, inverse norms, local entry points) of shard s on ``dev``."""
    key = (str(dev), s)
    if key in index._cache:
        return index._cache[key]
    local, x, entries = _shard_rows(index, s)
    cosine = index.metric == "cosine"
    if dev.is_cuda:
        import cupy as cp

        with cp.cuda.Device(dev.index), kept_across_streams():
            g = cp.asarray(local)
            xb = cp.asarray(x)
            inv = inverse_norms(xb, cp) if cosine else cp.zeros(1, cp.float32)
            e = cp.asarray(entries)
    else:
        g = np.ascontiguousarray(local)
        xb = np.ascontiguousarray(cpu_vectors(x))
        inv = inverse_norms(xb) if cosine else np.zeros(1, np.float32)
        e = entries
    index._cache[key] = (g, xb, inv, e)
    return index._cache[key]


def _sorted_view(index, s: int):
    """Shard s as a :class:`knngraph.beam.GraphView` (its graph rows with shard-local ids, its vectors and
    entry points): what the fast searcher reads for ``cache='sorted'``; made once and kept (with the
    device copies it makes) in the index's cache."""
    key = ("sorted", s)
    if key in index._cache:
        return index._cache[key]
    if index.n_shards == 1:  # the index's own graph and vectors (device arrays used in place)
        ids, x, entries = index.graph.indices, index.dataset, index.entry_points
    else:
        ids, x, entries = _shard_rows(index, s)
    view = beam.GraphView(ids, x, entries, index.metric)
    index._cache[key] = view
    return view


def _search_sorted(index, s: int, q, k: int, sp, dev: Device, allowed=None, counts: bool = True):
    """GGNN search of shard s with the sorted cache: the fast searcher's list of ``sp.queue`` entries,
    stopped by the slack rule (Eq. 2 with the shard's d+_nn1, d_k the list's max(k, 10)-th entry) or
    ``max_iterations`` expansions; ``allowed``: None or the shard's part of a filter
    (:class:`~knngraph.primitives.filters.AllowedIds` over its rows): the fast searcher's filtered walk,
    whose list and d_k entry grow by the allowed share (:func:`knngraph.beam.search`). Returns (reported
    distances, shard-local ids, distances computed, expansions per query); without ``counts`` the two
    counts are 0 and the search never waits for the GPU to read them (the GPU searcher counts only when
    asked, a host wait per call). The fast searcher's chunks for many host queries
    (``host_results``) are not asked for: GGNN's searches, longer per query, went 0.96x-0.98x as fast in
    chunks on an H200 (sift-photos 450k, 16k-400k host queries, ``benchmarks/studies/host_chunks.py``)."""
    view = _sorted_view(index, s)
    kb = max(k, 10)
    slack = (kb, float(sp.tau), float(index.nn1[s]), int(sp.max_iterations))
    nq = q.shape[0]
    batch = int(sp.batch_size) if sp.batch_size else max(nq, 1)
    parts, nd, ne = [], 0.0, 0.0
    for b0 in range(0, nq, batch):
        qb = q[b0:b0 + batch]
        st = {} if counts else None
        parts.append(beam.search(view, qb, k, sp.queue, device=dev, search_width=sp.search_width, stats=st,
                                 slack=slack, filter=allowed))
        if counts:
            nd += st["distances_per_query"] * qb.shape[0]
            ne += st["expansions_per_query"] * qb.shape[0]
    xp = np if isinstance(parts[0][1], np.ndarray) else __import__("cupy")
    d = parts[0][0] if len(parts) == 1 else xp.concatenate([p[0] for p in parts])
    i = parts[0][1] if len(parts) == 1 else xp.concatenate([p[1] for p in parts])
    return d, i, nd / max(nq, 1), ne / max(nq, 1)


def _search_rings(index, s: int, q, k: int, sp, dev: Device, kind: int, counts: bool = True):
    """GGNN search of shard s with the paper's cache (:func:`knngraph.ggnn.cpu.search` or its GPU twin).
    Returns (internal distances, shard-local ids, distances computed, expansions per query; the counts 0
    without ``counts``)."""
    g, xb, inv, e = _shard_arrays(index, s, dev)
    if dev.is_cuda:
        import cupy as cp

        qs = cp.asarray(q).astype(cp.float32)
        inv_q = inverse_norms(qs, cp) if index.metric == "cosine" else cp.zeros(1, cp.float32)
    else:
        qs = np.ascontiguousarray(as_numpy(q), dtype=np.float32)
        inv_q = inverse_norms(qs) if index.metric == "cosine" else np.zeros(1, np.float32)
    out_d, out_i, nd, ne = implementation(__package__, dev).search(
        g, xb, qs, inv, inv_q, kind, e, k, sp.tau, float(index.nn1[s]), sp.max_iterations, sp.queue,
        sp.cache_size, batch_size=sp.batch_size)
    if not counts or not nd.size:
        return out_d, out_i, 0.0, 0.0
    return out_d, out_i, float(nd.mean()), float(ne.mean())


def search_shards(index, q, k: int, sp, dev: Device, *, memory_limit=None, verbose=False, allowed=None,
                  counts: bool = True):
    """Search every shard of ``index`` for the validated queries ``q`` (with the cache layout
    ``sp.cache``) on ``dev``; ``allowed``: None or the rows a search may return
    (:class:`~knngraph.primitives.filters.AllowedIds`, ``cache='sorted'`` only), each shard its part.
    Returns (reported distances, global row ids, mean distances computed, mean vertices expanded; the two
    means 0 without ``counts``, which spares a GPU search a host wait) on the host or on ``dev``."""
    devs = [dev]
    kind = distance_kind(index.metric)
    n_sh = index.n_shards
    swap = False
    if any(d.is_cuda for d in devs):
        budget = parse_memory(memory_limit) if memory_limit is not None else default_memory_limit(devs[0])
        swap = sum(shard_bytes(index, s) for s in range(n_sh)) > budget * len(devs)
    parts_d, parts_i = [], []
    nd_total = ne_total = 0.0
    for s in range(n_sh):
        d_s = devs[s % len(devs)]
        a = int(index.shard_bounds[s])
        kk = min(k, int(index.shard_bounds[s + 1]) - a)
        with device_context(d_s):
            if sp.cache == "sorted":
                part = None if allowed is None else allowed.rows(a, int(index.shard_bounds[s + 1]))
                out_d, out_i, nd, ne = _search_sorted(index, s, q, kk, sp, d_s, part, counts)
            else:
                out_d, out_i, nd, ne = _search_rings(index, s, q, kk, sp, d_s, kind, counts)
            if (len(devs) > 1 or n_sh > 1) and d_s.is_cuda:
                out_d, out_i = as_numpy(out_d), as_numpy(out_i)
            xp = np if isinstance(out_i, np.ndarray) else __import__("cupy")
            out_i = xp.where(out_i >= 0, out_i + a, -1).astype(xp.int32)
            nd_total += nd
            ne_total += ne
        if swap:
            index._cache.pop(("sorted", s) if sp.cache == "sorted" else (str(d_s), s), None)
        parts_d.append(out_d)
        parts_i.append(out_i)
    if n_sh == 1 and parts_d[0].shape[1] == k:
        d, i = parts_d[0], parts_i[0]
    else:
        pad = [(pd_, pi_) for pd_, pi_ in zip(parts_d, parts_i)]
        d, i = merge_topk([p[0] for p in pad], [p[1] for p in pad], k)
    xp = np if isinstance(d, np.ndarray) else __import__("cupy")
    # the sorted cache's searcher reports distances already (merge_topk orders reported distances as it
    # orders internal ones: the report is monotone)
    rep = d if sp.cache == "sorted" else report_distances(d, index.metric, xp)
    rep = xp.where(i < 0, xp.float32(np.inf), rep)
    return rep, i, nd_total, ne_total
