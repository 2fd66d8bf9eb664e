"""GRNND rounds on the GPU: the functions of :mod:`knngraph.grnnd.cpu` over CuPy arrays, launching the
kernels of :mod:`knngraph.grnnd._kernels`. Given NumPy arrays (the numba CUDA simulator, in tests) the
same kernels run through numba's launch and the grouping uses NumPy."""

from __future__ import annotations

import numpy as np

from .._cuda_launch import kernel_module, launch
from ..primitives.constants import WARP, pow2_at_least
from . import _layout as C

K = kernel_module(__package__ + "._kernels")

__all__ = ["random_rows", "row_layout", "row_proposals", "propose", "reverse", "group", "merge", "capacity"]

#: threads per block of the one-thread-per-item kernels
TPB = 256


def _xp(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy

    return cupy


def capacity(r: int) -> int:
    """Shared-memory pool capacity of the warp kernels for pools of ``r`` entries."""
    return pow2_at_least(r, WARP)


def random_rows(n, s, seed, lo, out):
    """out[r, :s] = s distinct random ids other than lo + r."""
    launch(K.random_rows_kernel, -(-out.shape[0] // TPB), TPB, (int(n), int(s), int(seed), int(lo), out))


def row_layout(x):
    """(x as 64-bit words, layout) for the kernels' ``pair_distance``: words of eight bytes for C-contiguous 8-bit
    rows with d % 8 == 0 and d * 255^2 < 2^24 (exact integer sums that equal the CPU's float32 sums);
    else the elements (and a one-word placeholder)."""
    xp = _xp(x)
    d = x.shape[1]
    address = x.ctypes.data if xp is np else x.data.ptr
    if (x.dtype in (np.uint8, np.int8) and d % 8 == 0 and d * 255 * 255 < 2 ** 24 and x.flags.c_contiguous
            and address % 8 == 0):
        return x.view(xp.uint64), (C.LAYOUT_WORDS_U8 if x.dtype == np.uint8 else C.LAYOUT_WORDS_I8)
    return xp.zeros((1, 1), xp.uint64), C.LAYOUT_ELEMENTS


def row_proposals(x, inv, kind, rows, lo, pt, pc, pd):
    total = rows.shape[0] * rows.shape[1]
    xw, layout = row_layout(x)
    launch(K.row_proposals_kernel, -(-total // TPB), TPB,
            (x, xw, int(layout), inv, int(kind), rows, int(lo), pt, pc, pd))


def propose(x, inv, kind, seed, rnd, pool_c, pool_d, cnt, pt, pc, pd, factor=1.0):
    xp = _xp(pool_c)
    n = pool_c.shape[0]
    redirects = xp.empty(n, xp.int32)
    kern = K.propose_kernel(capacity(pool_c.shape[1]))
    xw, layout = row_layout(x)
    launch(kern, -(-n // C.WPB), C.WPB * WARP, (x, xw, int(layout), inv, int(kind), int(seed), int(rnd),
                                                   np.float32(factor), pool_c, pool_d, cnt, pt, pc, pd, redirects))
    return redirects.sum(dtype=xp.int64)  # on the device: no host sync per round


def reverse(rho, pool_c, pool_d, cnt, pt, pc, pd):
    n = pool_c.shape[0]
    launch(K.reverse_kernel, -(-n // TPB), TPB, (float(rho), pool_c, pool_d, cnt, pt, pc, pd))
    return (pt[:, pool_c.shape[1]:] >= 0).sum()


def group(pt, pc, pd, n):
    """(offsets [n + 1], codes, distances) of the proposals by target: a count (atomics), a scan and a
    scatter (atomics: a target's proposals land in any order, which :func:`merge` does not see)."""
    xp = _xp(pt)
    size = pt.size
    counts = xp.zeros(n + 1, xp.int64)
    blocks = -(-size // TPB)
    launch(K.count_kernel, blocks, TPB, (pt.ravel(), counts))
    offsets = xp.empty(n + 1, xp.int64)
    offsets[0] = 0
    xp.cumsum(counts[:n], out=offsets[1:])
    fill = offsets[:n].copy()
    sc = xp.empty(size, xp.int32)
    sd = xp.empty(size, xp.float32)
    launch(K.scatter_kernel, blocks, TPB, (pt.ravel(), pc.ravel(), pd.ravel(), fill, sc, sd))
    return offsets, sc, sd


def merge(grouping, pool_c, pool_d, cnt):
    offsets, sc, sd = grouping
    n, r = pool_c.shape
    kern = K.merge_kernel(capacity(r))
    launch(kern, -(-n // C.WPB), C.WPB * WARP, (sc, sd, offsets, int(r), pool_c, pool_d, cnt))
