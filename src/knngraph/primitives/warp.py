"""Warp-level CUDA device helpers shared by the kernels of every algorithm: sums and minima over a warp,
distances computed by a whole warp, and the warp bitonic sort of (key, id) lists in shared memory.

Imports numba.cuda: imported by kernel modules only (on first GPU use). All 32 lanes of a warp must call
each of these (they use full-mask shuffles or ``syncwarp``).
"""

from __future__ import annotations

from numba import cuda, float32

from .compile import cuda_version, device_function
from .constants import FULL_MASK, WARP
from .distances import DIST_L2SQ
from .lists import less
from .pair_distance import finish_distance, finish_query_distance

__all__ = ["warp_sum", "warp_min", "warp_distance", "accumulate4", "warp_partials4", "warp_partials4_unrolled", "bitonic_stages", "warp_bitonic_sort",
           "warp_sort32", "less_device", "finish_device", "finish_query_device"]

#: the CUDA builds of the shared CPU/GPU helpers the warp code uses (forced inline)
less_device = cuda_version(less)
finish_device = cuda_version(finish_distance)
finish_query_device = cuda_version(finish_query_distance)


@device_function
def warp_sum(acc):
    """Sum of ``acc`` over the warp by a butterfly of shuffles; every lane gets it."""
    off = 16
    while off > 0:
        acc += cuda.shfl_xor_sync(FULL_MASK, acc, off)
        off //= 2
    return acc


@device_function
def warp_min(bd, bv):
    """(distance, id) minimum over the warp in (distance, id) order; every lane gets it."""
    off = 16
    while off > 0:
        od = cuda.shfl_xor_sync(FULL_MASK, bd, off)
        ov = cuda.shfl_xor_sync(FULL_MASK, bv, off)
        if less_device(od, ov, bd, bv):
            bd = od
            bv = ov
        off //= 2
    return bd, bv


@device_function
def warp_distance(kind, x, i, y, j, inv_x, inv_y, lane):
    """Distance between x[i] and y[j] computed by a whole warp: lane t sums dims t, t+32, ...; the
    partial sums are combined by :func:`warp_sum`, so every lane returns the result."""
    d = x.shape[1]
    acc = float32(0.0)
    if kind == DIST_L2SQ:
        for t in range(lane, d, WARP):
            diff = float32(x[i, t]) - float32(y[j, t])
            acc += diff * diff
    else:
        for t in range(lane, d, WARP):
            acc += float32(x[i, t]) * float32(y[j, t])
    return finish_device(kind, warp_sum(acc), inv_x, i, inv_y, j)


@device_function
def accumulate4(kind, qt, x0, x1, x2, x3, a0, a1, a2, a3):
    """Four partial sums with one dimension more: query value ``qt``, the four rows' values x0..x3 (float32);
    squared differences (L2) or products."""
    if kind == DIST_L2SQ:
        x0 -= qt
        x1 -= qt
        x2 -= qt
        x3 -= qt
        a0 += x0 * x0
        a1 += x1 * x1
        a2 += x2 * x2
        a3 += x3 * x3
    else:
        a0 += x0 * qt
        a1 += x1 * qt
        a2 += x2 * qt
        a3 += x3 * qt
    return a0, a1, a2, a3


@device_function
def _partials4_step(kind, base, v0, v1, v2, v3, q, qrow, t, a0, a1, a2, a3):
    """The four partial sums after dimension ``t`` (:func:`accumulate4`)."""
    return accumulate4(kind, float32(q[qrow, t]), float32(base[v0, t]), float32(base[v1, t]), float32(base[v2, t]),
                       float32(base[v3, t]), a0, a1, a2, a3)


@device_function
def warp_partials4(kind, base, v0, v1, v2, v3, q, qrow, dim, lane):
    """Per-lane partial sums (lane t: dims t, t + 32, ...) of four rows of ``base`` against q[qrow, :dim]:
    squared differences (L2) or products. The four rows' loads are in flight together, which is what
    latency-bound callers need (a graph search's candidates, NN-Descent's random initial lists); finish
    each with :func:`warp_sum`."""
    a0 = float32(0.0)
    a1 = float32(0.0)
    a2 = float32(0.0)
    a3 = float32(0.0)
    for t in range(lane, dim, WARP):
        a0, a1, a2, a3 = _partials4_step(kind, base, v0, v1, v2, v3, q, qrow, t, a0, a1, a2, a3)
    return a0, a1, a2, a3


@device_function
def warp_partials4_unrolled(kind, base, v0, v1, v2, v3, q, qrow, dim, lane, steps):
    """:func:`warp_partials4` over ``steps`` = ceil(dim / 32) steps, ``steps`` a compile-time constant of the
    caller (a kernel factory's): the compiler unrolls the loop, so that every step's loads are in flight
    together, for callers whose rows are random reads (NN-Descent's two-hop fill). Lanes past ``dim`` read
    dimension dim - 1 and keep their sums."""
    a0 = float32(0.0)
    a1 = float32(0.0)
    a2 = float32(0.0)
    a3 = float32(0.0)
    for c in range(steps):
        t = lane + c * WARP
        b0, b1, b2, b3 = _partials4_step(kind, base, v0, v1, v2, v3, q, qrow, min(t, dim - 1), a0, a1, a2, a3)
        if t < dim:
            a0 = b0
            a1 = b1
            a2 = b2
            a3 = b3
    return a0, a1, a2, a3


@device_function
def bitonic_stages(keys, ids, base, size, span, lane):
    """The compare-exchange stages of one bitonic merge of width ``span`` over keys/ids[base : base +
    size] (``size``, ``span`` powers of two): blocks of ``span`` with bit ``span`` of their start clear
    end ascending, the others descending (so ``span == size`` merges one bitonic run ascending)."""
    stride = span // 2
    while stride > 0:
        for t in range(lane, size // 2, WARP):
            # pair t of this stage: its low element i has bit ``stride`` clear (stride is a power of two)
            i = ((t & ~(stride - 1)) << 1) | (t & (stride - 1))
            j = i + stride
            ak = keys[base + i]
            ai = ids[base + i]
            bk = keys[base + j]
            bi = ids[base + j]
            if (i & span) == 0:
                swap = less_device(bk, bi, ak, ai)
            else:
                swap = less_device(ak, ai, bk, bi)
            if swap:
                keys[base + i] = bk
                ids[base + i] = bi
                keys[base + j] = ak
                ids[base + j] = ai
        cuda.syncwarp(FULL_MASK)
        stride //= 2


@device_function
def warp_bitonic_sort(keys, ids, base, size, lane):
    """Sort keys/ids[base : base + size] ascending by (key, id); ``size`` a power of two; one warp."""
    span = 2
    while span <= size:
        bitonic_stages(keys, ids, base, size, span, lane)
        span *= 2


@device_function
def warp_sort32(key, vid, lane):
    """Bitonic sort of one (key, id) per lane across the warp, ascending by (key, id) (lane 0 smallest)."""
    size = 2
    while size <= WARP:
        stride = size // 2
        while stride > 0:
            ok = cuda.shfl_xor_sync(FULL_MASK, key, stride)
            oi = cuda.shfl_xor_sync(FULL_MASK, vid, stride)
            lower = (lane & stride) == 0
            ascending = (lane & size) == 0
            # the lower lane of an ascending pair (or the upper of a descending one) keeps the smaller
            if lower == ascending:
                take = less_device(ok, oi, key, vid)
            else:
                take = less_device(key, vid, ok, oi)
            if take:
                key = ok
                vid = oi
            stride //= 2
        size *= 2
    return key, vid
