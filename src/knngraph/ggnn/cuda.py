"""Host side of GGNN's GPU path: pick the kernel for a cache layout, launch it over query batches.

:func:`search` has the signature of :func:`knngraph.ggnn.cpu.search` (the dispatch idiom). Arrays may
be CuPy arrays (real GPU) or NumPy arrays with ``xp=np`` (the numba CUDA simulator in tests).
Everything here is validated already (see ``_index.py``).

Build: :func:`brute_segments`, :func:`merge_queries` and :func:`sym_requests` (the path searches of the
symmetric linking) run on the GPU with host arrays in and out (the vectors uploaded once per build);
placing the inverse links, writing them into the rows and the top-layer selection run on the host.
"""

from __future__ import annotations

import numpy as np

from .._device import sm_count
from . import _kernels as kn
from ..primitives.distances import DIST_COS
from .cpu import cache_layout

__all__ = ["search", "brute_segments", "merge_queries", "sym_requests"]


def search(graph_ids, base, queries, inv_b, inv_q, kind, entries, k, tau, nn1, max_iterations, queue_size,
           cache_size, *, batch_size=0, xp=None):
    """Search every query on the device (one block per query); returns device arrays (internal
    distances, ids, distances computed, vertices expanded per query)."""
    if xp is None:
        import cupy as xp
    kb, P, V = cache_layout(k, queue_size, cache_size)
    kern = kn.search_kernel(kb, P, V)
    nq = queries.shape[0]
    out_d = xp.empty((nq, k), xp.float32)
    out_i = xp.empty((nq, k), xp.int32)
    out_nd = xp.empty(nq, xp.int32)
    out_ne = xp.empty(nq, xp.int32)
    sm = 1 if xp is np else sm_count()
    batch = int(batch_size) if batch_size else min(max(nq, 1), 1 << 20)
    for s in range(0, nq, batch):
        e = min(nq, s + batch)
        qb = xp.ascontiguousarray(xp.asarray(queries[s:e], dtype=xp.float32))
        inv_qb = inv_q[s:e] if kind == DIST_COS else inv_q
        blocks = int(max(1, min(e - s, sm * 64 if xp is not np else 4)))
        kern[blocks, kn.THREADS](graph_ids, base, qb, inv_b, inv_qb, kind, entries, k, np.float32(tau),
                                 np.float32(nn1), max_iterations, out_d[s:e], out_i[s:e], out_nd[s:e], out_ne[s:e])
    return out_d, out_i, out_nd, out_ne


_DEVICE_BASE: dict = {}


def _on_device(arr, xp, key=None):
    """``arr`` on the device; the vectors (``key`` given) are uploaded once and kept for the build."""
    if xp is np:
        return arr
    if key is not None:
        hit = _DEVICE_BASE.get(key)
        if hit is not None and hit[0] is arr:
            return hit[1]
        _DEVICE_BASE[key] = (arr, xp.asarray(arr))
        return _DEVICE_BASE[key][1]
    return xp.asarray(arr)


def release_build_data() -> None:
    """Drop the vectors kept on the device for a build."""
    _DEVICE_BASE.clear()


def brute_segments(base, inv, kind, trans, lo, starts, k, out_i, out_d, *, xp=None):
    """:func:`.cpu.brute_segments` on the GPU (host arrays in, results written into ``out_i/out_d``)."""
    if xp is None:
        import cupy as xp
    nrows = out_i.shape[0]
    seg = (np.searchsorted(starts, np.arange(nrows), side="right") - 1).astype(np.int32)
    kern = kn.brute_kernel(int(k))
    d_i = xp.empty((nrows, k), xp.int32)
    d_d = xp.empty((nrows, k), xp.float32)
    threads = 32 if xp is np else 128
    kern[(nrows + threads - 1) // threads, threads](_on_device(base, xp, "base"), _on_device(inv, xp, "inv"), kind,
                                                   _on_device(trans, xp), lo, _on_device(seg, xp),
                                                   _on_device(np.asarray(starts, np.int32), xp), nrows, d_i, d_d)
    out_i[:] = d_i if xp is np else xp.asnumpy(d_i)
    out_d[:] = d_d if xp is np else xp.asnumpy(d_d)


def merge_queries(base, inv, kind, graph, trans, sel, offsets, top_seg, lt, lm, s, k, P, V, tau, nn1, max_pops,
                  out_i, out_d, *, xp=None):
    """:func:`.cpu.merge_queries` on the GPU, one block per row (host arrays in, results written into
    ``out_i/out_d``)."""
    if xp is None:
        import cupy as xp
    lo_m, lo_t = int(offsets[lm]), int(offsets[lt])
    nz = int(offsets[lm + 1]) - lo_m
    kern = kn.merge_kernel(int(k), int(P), int(V))
    d_i = xp.empty((nz, k), xp.int32)
    d_d = xp.empty((nz, k), xp.float32)
    sm = 1 if xp is np else sm_count()
    blocks = int(max(1, min(nz, 4 if xp is np else sm * 64)))
    kern[blocks, kn.THREADS](_on_device(base, xp, "base"), _on_device(inv, xp, "inv"), kind, _on_device(graph, xp),
                             _on_device(trans, xp), _on_device(sel, xp), lo_m, nz, lo_t, _on_device(top_seg, xp), lt,
                             lm, s, np.float32(tau), np.float32(nn1), max_pops, d_i, d_d)
    out_i[:] = d_i if xp is np else xp.asnumpy(d_i)
    out_d[:] = d_d if xp is np else xp.asnumpy(d_d)


def sym_requests(base, inv, kind, graph, trans, lo, z0, z1, knn, sym, cnt, P, V, tau, nn1, req_i, req_d, req_n, *,
                 xp=None):
    """:func:`.cpu.sym_requests` on the GPU, one block per row (host arrays in, the candidates written into
    ``req_i/req_d/req_n``); the host places the links (:func:`.cpu.sym_place`)."""
    from .cpu import MIDPOINT, SYM_MAX_POPS

    if xp is None:
        import cupy as xp
    nz = z1 - z0
    C = req_i.shape[2]
    kern = kn.sym_kernel(int(knn), int(P), int(V), int(C), SYM_MAX_POPS, MIDPOINT)
    d_i = xp.empty(req_i.shape, xp.int32)
    d_d = xp.empty(req_d.shape, xp.float32)
    d_n = xp.empty(req_n.shape, xp.int32)
    sm = 1 if xp is np else sm_count()
    blocks = int(max(1, min(nz, 4 if xp is np else sm * 64)))
    ksym = sym.shape[1]
    kern[blocks, kn.THREADS](_on_device(base, xp, "base"), _on_device(inv, xp, "inv"), kind, _on_device(graph, xp),
                             _on_device(trans, xp), lo, z0, nz, knn, ksym, _on_device(sym, xp), _on_device(cnt, xp),
                             np.float32(tau), np.float32(nn1), d_i, d_d, d_n)
    req_n[:] = d_n if xp is np else xp.asnumpy(d_n)
    req_i[:] = d_i if xp is np else xp.asnumpy(d_i)
    req_d[:] = d_d if xp is np else xp.asnumpy(d_d)
