"""Host side of SONG's GPU path: choose the kernel specialisation, size launches, stream query batches.

:func:`search` has the signature of :func:`knngraph.song.cpu.search` (the dispatch idiom). Arrays may be
CuPy arrays (real GPU) or NumPy arrays (the numba CUDA simulator in tests); ``xp`` names which.
Everything here is validated already (see ``_index.py``). The fast searcher's GPU path is
:mod:`knngraph.beam.cuda`.
"""

from __future__ import annotations

import numpy as np

from .._cuda_launch import kernel_module, launch
from .._device import sm_count as device_sm_count
from .._progress import progress
from ..primitives.constants import WARP, pow2_at_least
from ..primitives.distances import DIST_COS, DIST_HAMMING, inverse_norms
from . import _layout as layout

_kernels = kernel_module(__package__ + "._kernels")

__all__ = ["search", "search_device", "queue_capacity", "kernel_for", "distance_mode"]

#: queue_size is rounded up to one of these compile-time capacities (one kernel build per capacity)
_MIN_QCAP = 32


def queue_capacity(queue_size: int) -> int:
    """The compile-time queue capacity for ``queue_size``: a power of two, at least 32."""
    return pow2_at_least(queue_size, _MIN_QCAP)


def distance_mode(dtype, dim: int, hashed: bool) -> int:
    if hashed:
        return layout.MODE_HAMMING
    if dim % 4 == 0 and np.dtype(dtype) == np.uint8:
        return layout.MODE_PACKED_U8
    if dim % 4 == 0 and np.dtype(dtype) == np.int8:
        return layout.MODE_PACKED_I8
    return layout.MODE_GENERIC


def kernel_for(queue_size: int, visited: str, dim: int, mode: int, max_warps: int = 4,
               max_registers: int | None = None, filtered: bool = False):
    """(kernel, warps per block, hash shift, Bloom hash count) for a search configuration."""
    qcap = queue_capacity(queue_size)
    use_bloom = visited == "bloom"
    if use_bloom:
        vsize, bnhash = layout.bloom_shape(qcap)
        hshift = 0
    else:
        vsize, hshift = layout.hash_capacity(qcap)
        bnhash = 0
    if mode == layout.MODE_HAMMING:
        dpad = 1
    elif mode in (layout.MODE_PACKED_U8, layout.MODE_PACKED_I8):
        dpad = 128 * ((dim // 4 + 31) // 32)
    else:
        dpad = dim
    wpb = layout.warps_per_block(qcap, use_bloom, vsize, dpad, max_warps, filtered)
    per_block = wpb * layout.shared_bytes_per_warp(qcap, use_bloom, vsize, dpad, filtered)
    if per_block > layout.SHARED_BUDGET:
        raise ValueError(f"queue_size={queue_size} with dim={dim} needs {per_block} bytes of shared memory per "
                         f"warp, more than the {layout.SHARED_BUDGET} a block may use; lower queue_size")
    return _kernels.search_kernel(qcap, use_bloom, vsize, dpad, mode, wpb, max_registers, filtered), wpb, hshift, bnhash


def search_device(graph_ids, base, queries, inv_b, inv_q, kind, entries, k, queue_size, visited, mode, *,
                  xp, batch_size: int = 0, max_warps: int = 4, sm_count: int = 1, verbose: bool = False,
                  query_inv_fn=None, max_registers: int | None = None, allowed=None):
    """Search every query on the device; returns device arrays (internal distances, ids, number of
    distance computations, number of expanded vertices).

    ``base`` is the vectors (or uint32 codes, mode HAMMING) on the device; ``queries`` may be on the host
    or the device and is streamed in batches of ``batch_size`` (0: all at once, at most 2^20).
    ``query_inv_fn(batch)`` gives a batch's inverse norms (cosine), else ``inv_q`` is passed through.
    ``allowed``: None or the uint32 bitset (host or device) of the ids that may be returned.
    """
    nq = queries.shape[0]
    dim = queries.shape[1]
    filtered = allowed is not None
    kern, wpb, hshift, bnhash = kernel_for(queue_size, visited, dim, mode, max_warps, max_registers, filtered)
    bits = xp.asarray(allowed) if filtered else xp.zeros(1, xp.uint32)
    if mode in (layout.MODE_PACKED_U8, layout.MODE_PACKED_I8):
        base_arg = base.view(xp.uint32)
    else:
        base_arg = base
    out_k = xp.empty((nq, k), xp.float32)
    out_i = xp.empty((nq, k), xp.int32)
    out_nd = xp.empty(nq, xp.int32)
    out_ne = xp.empty(nq, xp.int32)
    batch = int(batch_size) if batch_size else min(nq, 1 << 20)
    batches = range(0, nq, batch)
    with progress(len(batches), "song search", disable=not verbose) as bar:
        for s in batches:
            e = min(nq, s + batch)
            qb = xp.ascontiguousarray(xp.asarray(queries[s:e]))
            if mode != layout.MODE_HAMMING and qb.dtype != xp.float32:
                qb = qb.astype(xp.float32)
            qinv = query_inv_fn(qb) if query_inv_fn is not None else inv_q
            counter = xp.zeros(1, xp.int32)
            # enough blocks to fill the GPU; warps then pull queries from the counter
            blocks = int(max(1, min((e - s + wpb - 1) // wpb, sm_count * 32)))
            launch(kern, blocks, wpb * WARP, (graph_ids, base_arg, qb, inv_b, qinv, int(kind), entries, int(k),
                                                 int(queue_size), int(hshift), int(bnhash), bits, counter, out_k[s:e],
                                                 out_i[s:e], out_nd[s:e], out_ne[s:e]))
            bar.update(1)
    return out_k, out_i, out_nd, out_ne


def search(graph_ids, base, queries, inv_b, kind, entries, k, queue_size, visited, *, batch_size=0,
           max_registers=None, verbose=False, xp=None, allowed=None):
    """Search every query (see :func:`knngraph.song.cpu.search`): device arrays ``graph_ids``, ``base``
    (vectors, or uint32 codes with ``kind=DIST_HAMMING``), ``inv_b`` and ``entries``; ``queries`` on the
    host or the device, streamed in batches. Returns device arrays (internal distances, ids, distance
    computations and expanded vertices per query)."""
    if xp is None:
        import cupy as xp
    sm_count = 1 if xp is np else device_sm_count()
    hashed = kind == DIST_HAMMING
    mode = distance_mode(base.dtype, queries.shape[1], hashed)
    query_inv_fn = (lambda qb: inverse_norms(qb, xp)) if kind == DIST_COS else None
    inv_q = xp.zeros(1, xp.float32)
    return search_device(graph_ids, base, queries, inv_b, inv_q, kind, entries, k, queue_size, visited, mode, xp=xp,
                         batch_size=batch_size, sm_count=sm_count, verbose=verbose, query_inv_fn=query_inv_fn,
                         max_registers=max_registers, allowed=allowed)
