"""Graph operations on the GPU (CuPy arrays): the pruning of :func:`knngraph.graphops.optimize_graph` and
the merge of sorted neighbour lists, launching the kernels of :mod:`knngraph.graphops._kernels` (by name:
a process whose kernels are compiled already imports no numba). :mod:`knngraph.graphops.cpu` has the same
functions for the CPU.
"""

from __future__ import annotations

import numpy as np

from .._cuda_launch import kernel_module, launch
from ..primitives.constants import WARP, pow2_at_least
from ._layout import SHARED_BUDGET, WPB

__all__ = ["prune", "merge_sorted_lists"]

_kernels = kernel_module(__package__ + "._kernels")


def prune(base, inv, kind, factor, primary, primary2, secondary, degree, fill, *, xp=None, max_warps=4):
    """Run the pruning kernel for every node (see :func:`knngraph.graphops.optimize_graph`; ``factor`` is
    its occlusion factor); returns ids and internal distances (CuPy, or NumPy under the simulator with
    ``xp=numpy``)."""
    if xp is None:
        import cupy as xp
    n = primary.shape[0]
    lcap = max(primary.shape[1] + primary2.shape[1], secondary.shape[1], 1)
    per_warp = lcap * 12 + degree * 8 + 4
    wpb = max(1, min(max_warps, SHARED_BUDGET // per_warp))
    if per_warp > SHARED_BUDGET:
        raise ValueError(f"graph degree {primary.shape[1]} is too large for GPU pruning (shared memory); "
                         "use device='cpu' or a smaller input degree")
    kern = _kernels.prune_kernel(lcap, degree, wpb)
    out_ids = xp.empty((n, degree), xp.int32)
    out_d = xp.empty((n, degree), xp.float32)
    blocks = (n + wpb - 1) // wpb
    # fill travels as an int (a raw launch passes no booleans): the kernel tests it for non-zero
    launch(kern, blocks, wpb * WARP, (base, inv, int(kind), float(factor), primary, primary2, secondary, int(degree),
                                      int(bool(fill)), out_ids, out_d))
    return out_ids, out_d


# --------------------------------------------------------------------------------------------------
# merge of sorted lists (knngraph.graphops.merge_sorted_lists)


def merge_sorted_lists(ad, ai, bd, bi, k, *, xp=None, sm_count=1):
    """Per row, the first ``k`` distinct ids of the (distance, id)-sorted rows of a and b merged, -1
    entries skipped, missing ones padded with (inf, -1): device arrays in, device arrays out."""
    if xp is None:
        import cupy as xp
    n = ad.shape[0]
    out_d = xp.empty((n, k), xp.float32)
    out_i = xp.empty((n, k), xp.int32)
    kern = _kernels.merge_lists_kernel(pow2_at_least(ad.shape[1] + bd.shape[1], WARP))
    blocks = 1 if xp is np else max(1, min(-(-n // WPB), sm_count * 64))
    launch(kern, blocks, WPB * WARP, (xp.ascontiguousarray(ad), xp.ascontiguousarray(ai), xp.ascontiguousarray(bd),
                                      xp.ascontiguousarray(bi), out_d, out_i))
    return out_d, out_i
