"""The fast searcher's GPU kernel layout for host code (distance modes, reported distances, shared memory,
warps per block, team sizes): this module does not import numba (the kernels, :mod:`knngraph.beam._kernels`,
are launched by name, see :func:`knngraph._cuda_launch.kernel_module`)."""

from __future__ import annotations

from ..primitives.constants import WARP

MODE_GENERIC = 0   # any dtype: element loads, float32 arithmetic
MODE_DP4A_U8 = 1   # uint8 vectors and queries, dim % 4 == 0: uint32 words, dp4a
MODE_DP4A_I8 = 2   # int8 likewise
MODE_HALF2 = 3     # float16 vectors, dim % 2 == 0: uint32 words of two halves, float32 arithmetic
MODE_HALF4 = 4     # float16 vectors, dim % 4 == 0: uint64 words of four halves
MODE_F32X2 = 5     # float32 vectors, dim % 2 == 0: uint64 words of two floats (8-byte loads)
MODE_F32X4 = 6     # float32 vectors, dim % 4 == 0: four floats per 16-byte vector load

#: shared memory one block may use (static allocations stay under the 48 KiB default limit)
SHARED_BUDGET = 48 * 1024


REPORT_INTERNAL = 0
REPORT_SQRT = 1      # euclidean
REPORT_CLIP02 = 2    # cosine, in [0, 2]
REPORT_NONNEG = 3    # sqeuclidean, >= 0


def report_code(metric: str) -> int:
    """The ``report`` argument giving ``metric``'s reported distances (the kernels' ``report_distance``)."""
    return {"euclidean": REPORT_SQRT, "cosine": REPORT_CLIP02, "sqeuclidean": REPORT_NONNEG}.get(metric,
                                                                                              REPORT_INTERNAL)


def row_units(mode: int, qwords: int) -> int:
    """Loads per vector row of a distance mode whose staged query is ``qwords`` words long: 4-byte words
    (dp4a, two halves), 8-byte words (four halves, two floats), 16-byte vectors (four floats) or
    elements."""
    return {MODE_HALF4: qwords // 4, MODE_F32X4: qwords // 4, MODE_HALF2: qwords // 2,
            MODE_F32X2: qwords // 2}.get(mode, qwords)


def shared_bytes_per_warp(qcap: int, hsize: int, qwords: int) -> int:
    """Shared memory of one warp: the double-buffered list, the chunk, the visited table, the query."""
    return qcap * 16 + WARP * 16 + hsize * 4 + qwords * 4 + 16


def shared_bytes_per_block(qcap: int, hsize: int, qwords: int, width: int) -> int:
    """Shared memory of a block-per-query kernel of ``width`` warps: one list and visited table, a chunk
    and a staged query per warp."""
    return qcap * 16 + hsize * 4 + width * (WARP * 16 + qwords * 4 + 16) + 64


def warps_per_block(qcap: int, hsize: int, qwords: int, max_warps: int = 4) -> int:
    return max(1, min(max_warps, SHARED_BUDGET // shared_bytes_per_warp(qcap, hsize, qwords)))


def team_size(row_units: int, per_lane: int = 4) -> int:
    """Lanes per distance: a power of two giving each lane about ``per_lane`` loads per vector row of
    ``row_units`` loads (between 1 and 32)."""
    t = 1
    while t < 32 and t * per_lane < row_units:
        t *= 2
    return t
