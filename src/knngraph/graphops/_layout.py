"""Launch sizes of the graph operations' GPU kernels for host code: this module does not import numba (the
kernels, :mod:`knngraph.graphops._kernels`, are launched by name, see
:func:`knngraph._cuda_launch.kernel_module`)."""

from __future__ import annotations

#: shared memory one block may use (static allocations stay under the 48 KiB default limit)
SHARED_BUDGET = 48 * 1024
#: warps per block of the merge kernel
WPB = 4
