"""The k-selection kernels' sources, launch settings and list sizes, for host code: this module does not
import numba (the kernels, :mod:`knngraph.primitives._kselect_kernels`, are launched by name, see
:func:`knngraph._cuda_launch.kernel_module`)."""

from __future__ import annotations

from .constants import pow2_at_least

# sources a selection task can read elements from
SRC_DOTS = 0    # a GEMM tile of dot products (+ column terms): ids are col_offset + column
SRC_PAIRS = 1   # explicit (key, id) candidate rows
SRC_BUF_A = 2   # quickselect ping-pong buffers
SRC_BUF_B = 3

# Launch settings of the warp_filter kernel, from benchmarks/studies/profile_select.py on an H200
# (benchmarks/results/profile_select_h200.jsonl): loads in flight per lane (8 beat 4 and 16), and
# an optional register cap (.maxnreg). Capping (80 down to 56) measured slower than leaving ptxas
# its ~88 registers: the cap spills in the merge code, and the streaming loop does not gain enough
# resident warps to pay for it.
FILTER_UNROLL = 8
FILTER_MAX_REGISTERS = None


def warps_per_block_for(cap: int) -> int:
    """Warps per block so that a block's shared lists stay within 32 KiB."""
    per_warp = 2 * cap * 8
    return max(1, min(4, (32 << 10) // per_warp))


def list_capacity(k: int) -> int:
    """Slots of the warp_filter list for ``k``: the next power of two, at least 64."""
    return pow2_at_least(k, 64)
