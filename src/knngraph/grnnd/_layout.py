"""GRNND's size limit and the layout of its GPU kernels (:mod:`knngraph.grnnd._kernels`) for host code:
this module does not import numba (the kernels are launched by name, see
:func:`knngraph._cuda_launch.kernel_module`)."""

from __future__ import annotations

__all__ = ["MAX_N", "WPB", "LAYOUT_ELEMENTS", "LAYOUT_WORDS_U8", "LAYOUT_WORDS_I8"]

#: most vectors a GRNND build takes (codes are 2 * id + flag in int32)
MAX_N = 2**30 - 1

#: warps per block of the warp-per-vertex kernels
WPB = 4
#: how the kernels' ``pair_distance`` reads rows: element by element, or (8-bit rows, d % 8 == 0) as
#: 64-bit words of eight bytes, each half multiplied with ``dp4a``, unsigned or signed
LAYOUT_ELEMENTS = 0
LAYOUT_WORDS_U8 = 1
LAYOUT_WORDS_I8 = 2
