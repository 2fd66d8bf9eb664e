"""The layout of SONG's GPU search kernel for host code (modes, shared memory per warp, warps per block):
this module does not import numba (the kernels, :mod:`knngraph.song._kernels`, are launched by name, see
:func:`knngraph._cuda_launch.kernel_module`)."""

from __future__ import annotations

from ..primitives.constants import WARP

MODE_GENERIC = 0     # any dtype, element loads
MODE_PACKED_U8 = 1   # uint8, dim % 4 == 0: uint32 word loads
MODE_PACKED_I8 = 2   # int8, dim % 4 == 0
MODE_HAMMING = 3     # uint32 codes, Hamming distance

#: shared memory one block may use (static allocations stay under the 48 KiB default limit)
SHARED_BUDGET = 48 * 1024


def shared_bytes_per_warp(qcap, use_bloom, vsize, dpad, filtered=False):
    """Shared memory bytes of one warp's query (queue, visited set, query vector, staging)."""
    return qcap * (24 if filtered else 16) + vsize * 4 + dpad * 4 + WARP * 8 + 16


def warps_per_block(qcap, use_bloom, vsize, dpad, max_warps=4, filtered=False):
    """Warps (queries) per block within :data:`SHARED_BUDGET`."""
    per = shared_bytes_per_warp(qcap, use_bloom, vsize, dpad, filtered)
    return max(1, min(max_warps, SHARED_BUDGET // per))
