"""Block sizes of GGNN's GPU kernels for host code: this module does not import numba (the kernels,
:mod:`knngraph.ggnn._kernels` and :mod:`knngraph.ggnn._link_kernels`, are launched by name, see
:func:`knngraph._cuda_launch.kernel_module`)."""

from __future__ import annotations

from ..primitives.constants import WARP

#: threads of a search or build block (one warp: every barrier in those kernels is a ``syncwarp``)
THREADS = WARP
#: threads per block of the one-thread-per-item kernels of the symmetric linking
LINK_THREADS = 128
