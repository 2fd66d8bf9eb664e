"""Constants and sizes shared by the kernels of every algorithm (CPU and GPU)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["WARP", "FULL_MASK", "ID_NONE", "INF", "pow2_at_least"]

#: threads of a CUDA warp
WARP = 32
#: all 32 lanes, for the ``*_sync`` warp intrinsics
FULL_MASK = 0xFFFFFFFF
#: the filler id of unused (distance, id) slots: the largest int32, so on equal distances it sorts after
#: every real id and never enters a result ahead of one; reported to users as -1
ID_NONE = 2**31 - 1
#: the filler distance
INF = np.float32(np.inf)


def pow2_at_least(x: int, minimum: int = 1) -> int:
    """The smallest power of two that is >= ``x`` and >= ``minimum`` (compile-time capacities)."""
    return max(int(minimum), 1 << max(0, math.ceil(math.log2(max(int(x), 1)))))
