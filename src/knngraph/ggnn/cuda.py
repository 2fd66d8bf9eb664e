"""Host side of GGNN's GPU path: pick the kernel for a cache layout, launch it over query batches.

:func:`search` has the signature of :func:`knngraph.ggnn.cpu.search` (the dispatch idiom). Arrays may
be CuPy arrays (real GPU) or NumPy arrays with ``xp=np`` (the numba CUDA simulator in tests).
Everything here is validated already (see ``_index.py``).

Build: :func:`brute_segments`, :func:`merge_queries`, :func:`sym_requests` (the path searches of the
symmetric linking), :func:`sym_place` (placing the inverse links, in the CPU's order) and
:func:`sym_write` run on the GPU on device arrays that stay there for the whole build (see
``_build.build_hierarchy``); the top-layer selection and the nearest-neighbour statistics read one
column of distances on the host.
"""

from __future__ import annotations

import threading

import numpy as np

from .._cuda_launch import kernel_module, launch, max_cooperative_blocks
from .._device import sm_count
from ..primitives.constants import ID_NONE
from ..primitives.distances import DIST_COS
from ._layout import LINK_THREADS, MIDPOINT, SYM_MAX_POPS, THREADS, cache_layout

kn = kernel_module(__package__ + "._kernels")
lk = kernel_module(__package__ + "._link_kernels")

__all__ = ["search", "brute_segments", "merge_queries", "sym_requests", "sym_place", "sym_write", "sync",
           "release_build_data"]


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
        launch(kern, blocks, THREADS, (graph_ids, base, qb, inv_b, inv_qb, int(kind), entries, int(k),
                                          np.float32(tau), np.float32(nn1), int(max_iterations), out_d[s:e],
                                          out_i[s:e], out_nd[s:e], out_ne[s:e]))
    return out_d, out_i, out_nd, out_ne


# --------------------------------------------------------------------------------------------------
# build: every array is on the device (CuPy; NumPy with ``xp=np`` in the simulator) for the whole build
# (``_build.build_hierarchy`` allocates them once); only launch sizes and a round flag cross to the host.

#: temporary arrays of the link placement, kept between waves and grown only when a wave needs more; keyed
#: by (thread, GPU, name), so builds in several threads or on several GPUs never share them
_SCRATCH: dict = {}


def _scratch_owner(xp):
    return threading.get_ident(), (-1 if xp is np else xp.cuda.Device().id)


def release_build_data() -> None:
    """Drop the temporary arrays this thread's builds kept on the device."""
    me = threading.get_ident()
    for key in [key for key in _SCRATCH if key[0] == me]:
        del _SCRATCH[key]


def sync(xp=None) -> None:
    """Wait for the device (phase timings)."""
    if xp is None:
        import cupy as xp
    if xp is not np:
        xp.cuda.Device().synchronize()


def _scratch(name, shape, dtype, xp, fill=None):
    """A temporary C-contiguous array of ``shape``, the leading part of a flat buffer allocated on first
    use / growth (filled with ``fill`` then, when given: the caller keeps the whole buffer so between
    calls, whatever the shapes it was viewed in)."""
    key = (*_scratch_owner(xp), name)
    size = int(np.prod(shape, dtype=np.int64))
    have = _SCRATCH.get(key)
    if have is None or have.dtype != np.dtype(dtype) or have.size < size or not isinstance(have, xp.ndarray):
        have = xp.empty(size, dtype) if fill is None else xp.full(size, fill, dtype)
        _SCRATCH[key] = have
    return have[:size].reshape(shape)


def _blocks(n, threads, xp):
    return max(1, (int(n) + threads - 1) // threads)


def brute_segments(base, inv, kind, trans, lo, starts, k, out_i, out_d, *, xp=None):
    """:func:`.cpu.brute_segments` on the GPU: device arrays in (``starts`` an int32 device array), the
    results written into the device arrays ``out_i/out_d``."""
    if xp is None:
        import cupy as xp
    nrows = out_i.shape[0]
    seg = _scratch("seg", (nrows,), np.int32, xp)
    seg[:] = xp.searchsorted(starts, xp.arange(nrows, dtype=np.int32), side="right") - 1
    kern = kn.brute_kernel(int(k))
    threads = 32 if xp is np else 128
    launch(kern, _blocks(nrows, threads, xp), threads,
           (base, inv, int(kind), trans, int(lo), seg, starts, int(nrows), out_i, out_d))


def merge_queries(base, inv, kind, graph, trans, sel, offsets, top_seg, lt, lm, s, k, P, V, tau, nn1, max_pops,
                  out_i, out_d, *, xp=None):
    """:func:`.cpu.merge_queries` on the GPU, one block per row (device arrays; ``offsets`` host
    integers), the results written into ``out_i/out_d``."""
    if xp is None:
        import cupy as xp
    lo_m, lo_t = int(offsets[lm]), int(offsets[lt])
    nz = int(offsets[lm + 1]) - lo_m
    kern = kn.merge_kernel(int(k), int(P), int(V))
    sm = 1 if xp is np else sm_count()
    blocks = int(max(1, min(nz, 4 if xp is np else sm * 64)))
    launch(kern, blocks, THREADS, (base, inv, int(kind), graph, trans, sel, lo_m, nz, lo_t, top_seg, int(lt),
                                      int(lm), int(s), np.float32(tau), np.float32(nn1), int(max_pops), out_i, out_d))


def sym_requests(base, inv, kind, graph, trans, lo, z0, z1, knn, sym, cnt, P, V, tau, nn1, req_i, req_d, req_n, *,
                 xp=None):
    """:func:`.cpu.sym_requests` on the GPU, one block per row (device arrays; the candidates written into
    ``req_i/req_d/req_n``, whose leading z1 - z0 rows are used)."""
    if xp is None:
        import cupy as xp
    nz = z1 - z0
    C = req_i.shape[2]
    kern = kn.sym_kernel(int(knn), int(P), int(V), int(C), SYM_MAX_POPS, MIDPOINT)
    sm = 1 if xp is np else sm_count()
    blocks = int(max(1, min(nz, 4 if xp is np else sm * 64)))
    ksym = sym.shape[1]
    launch(kern, blocks, THREADS, (base, inv, int(kind), graph, trans, int(lo), int(z0), int(nz), int(knn),
                                      int(ksym), sym, cnt, np.float32(tau), np.float32(nn1), req_i, req_d, req_n))


def sym_place(graph, lo, z0, z1, knn, ksym, sym, sym_d, cnt, req_i, req_d, req_n, *, xp=None):
    """:func:`.cpu.sym_place` on the device, the same links in the same slots (see
    :mod:`._link_kernels`: the fates of the requests as the fixed point of parallel rounds, then the
    links written by rank). The candidates ``req_i`` must be rows lo .. graph.shape[0] - 1 (the layer's;
    the path searches give only those). Returns the number of rounds."""
    if xp is None:
        import cupy as xp
    nz = z1 - z0
    nq = nz * knn
    if req_i.shape[0] < nz or req_i.shape[1] != knn or req_n.shape[:2] != req_i.shape[:2] \
            or req_d.shape != req_i.shape or not 0 < ksym <= sym.shape[1] or sym_d.shape != sym.shape \
            or lo + z1 > graph.shape[0] or cnt.shape[0] != graph.shape[0] or sym.shape[0] != graph.shape[0]:
        raise ValueError("sym_place: inconsistent shapes of the graph, link and request arrays")
    if nq >= 2**31 - 1 or req_i.shape[2] > 24:
        raise ValueError(f"sym_place: {nq} requests of {req_i.shape[2]} candidates; at most 2^31 - 2 and 24")
    if nq == 0:
        return 0
    T = LINK_THREADS if xp is not np else 32
    act = _scratch("act", (nq,), np.int32, xp)
    fates = _scratch("fates", (3, nz, knn), np.int32, xp)
    # the lists of the targets p (rows lo .. end), empty between calls
    lists = _scratch("lists", (3, graph.shape[0] - lo, ksym), np.int32, xp, fill=ID_NONE)
    flags = _scratch("flags", (4,), np.int32, xp)
    flags[:] = 0
    launch(lk.active_kernel, _blocks(nq, T, xp), T, (req_n, int(nz), int(knn), act, flags[2:]))
    na = int(flags[2])
    if na == 0:
        return 0
    static = _scratch("static", (nq,), np.int32, xp)
    args = (graph, int(knn), int(ksym), sym, sym_d, cnt, int(lo), int(z0), act, na, req_i, req_d, req_n, static, fates,
            lists, flags)
    _cooperative_launch(lk.place_kernel, args, T, _blocks(na, T, xp), xp)
    return int(flags[3])


def _cooperative_launch(kernel, args, threads, want, xp):
    """A cooperative launch of ``kernel`` (a grid barrier inside: every block resident at once) on at most
    ``want`` blocks and at most what the device holds for it (one in the simulator, whose grid barrier
    is the block's)."""
    blocks = 1 if xp is np else min(want, max_cooperative_blocks(kernel, args, threads))
    launch(kernel, max(1, blocks), threads, args, cooperative=True)


def sym_write(graph, gdist, lo, n_rows, knn, sym, sym_d, cnt, *, xp=None):
    """:func:`.cpu.sym_write` on the device, one thread per row."""
    if xp is None:
        import cupy as xp
    width = graph.shape[1] - knn
    if gdist.shape != graph.shape or lo + n_rows > graph.shape[0] or sym.shape[0] != graph.shape[0] \
            or sym_d.shape != sym.shape or cnt.shape[0] != graph.shape[0] or sym.shape[1] > width:
        raise ValueError("sym_write: inconsistent shapes of the graph and link arrays")
    if n_rows == 0 or width == 0:
        return
    T = LINK_THREADS if xp is not np else 32
    launch(lk.sym_write_kernel(int(width)), _blocks(n_rows, T, xp), T,
           (graph, gdist, int(lo), int(n_rows), int(knn), sym, sym_d, cnt))
