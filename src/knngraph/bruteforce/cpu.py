"""Exact k-NN on the CPU: BLAS GEMM tiles + parallel bounded-heap selection in numba, made exact by
:mod:`knngraph.bruteforce._exact`.

Same scheme as the GPU path (Komarov et al., section "Distance Calculation"): dot products of a
query block against a base tile come from one GEMM (NumPy's BLAS); each query row then scans the tile,
ranking candidates by the key ||x||^2 - 2<q, x> (or -<q, x>), and keeps its k best in a bounded
max-heap ordered by (key, id) (:mod:`knngraph.primitives.lists`). Heaps persist across base tiles, so the base streams through memory
tile by tile (memory-mapped files work) and the result is exact, ties broken by lower id.
"""

from __future__ import annotations

import numba
import numpy as np

from .._progress import progress
from ..metrics import KEY_L2, expanded_key_kind
from ..primitives.constants import ID_NONE
from ..primitives.cpu_inputs import writable_view
from ..primitives.lists import less, maxheap_replace_top, maxheap_sort
from ._exact import NumericPlan, finish_candidates, plan_numerics

__all__ = ["exact_knn", "exact_few_l2", "FEW_QUERIES"]


@numba.njit(parallel=True, fastmath=False, cache=True)
def _scan_tile(dots, base_norm2, col_offset, key_kind, self_offset, heap_k, heap_i):
    """Offer every column of ``dots`` [rows, cols] to each row's heap.

    key = ||x||^2 - 2 dot (key_kind 0) or -dot (key_kind 1); column j is id col_offset + j; row r is
    query id self_offset + r when building a graph (self_offset >= 0), and that id is skipped.
    """
    rows, cols = dots.shape
    k = heap_k.shape[1]
    for r in numba.prange(rows):
        hk = heap_k[r]
        hi = heap_i[r]
        self_id = self_offset + r if self_offset >= 0 else -1
        for j in range(cols):
            if key_kind == 0:
                key = base_norm2[j] - np.float32(2.0) * dots[r, j]
            else:
                key = -dots[r, j]
            if key <= hk[0]:
                gid = col_offset + j
                if gid != self_id and less(key, gid, hk[0], hi[0]):
                    maxheap_replace_top(hk, hi, 0, k, key, np.int32(gid))


@numba.njit(parallel=True, cache=True)
def _sort_heaps(heap_k, heap_i):
    """Heap-sort each row in place into ascending (key, id) order."""
    rows, k = heap_k.shape
    for r in numba.prange(rows):
        maxheap_sort(heap_k[r], heap_i[r], 0, k)


def _norm2(x: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", x, x, dtype=np.float32)


def exact_knn(base, queries, k: int, metric: str, *, graph: bool = False, memory_limit: int | None = None,
              select: str = "auto", device_index: int = 0, verbose: bool = True, stats: dict | None = None,
              plan: NumericPlan | None = None, candidates: int | None = None):
    """Exact top-k of ``queries`` among ``base`` (host arrays): (distances float32, ids int32, unsure bool).

    Each query selects ``candidates`` by GEMM key (default: the plan's), then the best k are recomputed
    exactly and checked (:mod:`._exact`); ``unsure`` marks the queries whose check failed (search them
    again with more candidates). With ``graph=True`` ``queries`` must be ``base`` and row i never
    returns id i. ``select`` (a GPU strategy) is checked only; ``device_index`` and ``stats`` are accepted
    for the GPU's signature.
    """
    from ..primitives.kselect import resolve_select

    resolve_select(select, k)
    n, d = base.shape
    nq = queries.shape[0]
    plan = plan or plan_numerics(base, metric, np).for_queries(queries)
    c = candidates or plan.candidates(k, n - 1 if graph else n)
    budget = memory_limit or (1 << 30)
    # one dot tile of about budget/4 (at most 256 MiB): large enough for BLAS to run at full speed
    tile_bytes = max(1 << 20, min(budget // 4, 256 << 20))
    q_block = int(min(nq, 4096))
    b_tile = int(max(256, min(n, tile_bytes // (4 * max(q_block, 1)), 1 << 16)))
    key_kind = expanded_key_kind(metric)

    out_d = np.empty((nq, k), dtype=np.float32)
    out_i = np.empty((nq, k), dtype=np.int32)
    unsure = np.zeros(nq, dtype=bool)
    steps = ((nq + q_block - 1) // q_block) * ((n + b_tile - 1) // b_tile)
    with progress(total=steps, desc="exact k-NN (cpu)", disable=not verbose) as bar:
        for qs in range(0, nq, q_block):
            qe = min(nq, qs + q_block)
            q_raw = queries[qs:qe]
            tq = plan.transform(q_raw, np)
            heap_k = np.full((qe - qs, c), np.inf, dtype=np.float32)
            heap_i = np.full((qe - qs, c), ID_NONE, dtype=np.int32)
            for bs in range(0, n, b_tile):
                be = min(n, bs + b_tile)
                x = plan.transform(base[bs:be], np)
                dots = tq @ x.T
                norms = _norm2(x) if key_kind == KEY_L2 else np.empty(0, np.float32)
                _scan_tile(dots, norms, bs, key_kind, qs if graph else -1, heap_k, heap_i)
                bar.update(1)
            _sort_heaps(heap_k, heap_i)
            out_d[qs:qe], out_i[qs:qe], unsure[qs:qe] = finish_candidates(
                np, heap_k, heap_i, plan.row_term(tq, np), q_raw, tq, base, plan, k, rows_transformed=False)
    if stats is not None:
        stats.update(candidates=c, centered=plan.shift is not None, scale=plan.scale)
    return out_d, out_i, unsure


# --------------------------------------------------------------------------------------------------
# a few queries: one direct pass over the base, no GEMM

#: at most this many queries take :func:`exact_few_l2` (one pass over the base per query; GEMM wins above)
FEW_QUERIES = 4
_U32 = 2.0 ** -24
_TINY32 = float(np.finfo(np.float32).tiny)


@numba.njit(fastmath=True, cache=True)
def _l2_scan(base, q, hk, hi):
    """The c = len(hk) rows nearest to ``q`` by float32 sum_t (base[i, t] - q[t])^2, in the bounded
    max-heap hk / hi (filled with inf / -1 beforehand): each row is widened element by element in a loop
    the compiler vectorises (any summation order keeps the error bound of :func:`exact_few_l2`) and
    offered to the heap when it beats the heap's top."""
    n, d = base.shape
    c = hk.shape[0]
    for i in range(n):
        row = base[i]
        acc = np.float32(0.0)
        for t in range(d):
            diff = np.float32(row[t]) - q[t]
            acc += diff * diff
        if less(acc, np.int32(i), hk[0], hi[0]):
            maxheap_replace_top(hk, hi, 0, c, acc, np.int32(i))


def exact_few_l2(base, queries, k: int, metric: str):
    """Exact top-k of a few queries under squared / plain L2 (host arrays, validated; float32, uint8 or
    int8 base): float32 distances of every row by direct differences (no cancellation), the
    ``c = max(2k, k + 16)`` smallest as candidates, their distances recomputed exactly in float64
    (:func:`knngraph.primitives.rescore.rescore`) and sorted by (distance, id).

    Proof of the answer: each float32 distance is a sum of d non-negative rounded squares, within a
    relative ``(d + 4) u`` (u = 2^-24, twice that here for slack) of the true one, plus at most ``d``
    times the smallest normal float for underflow. A row outside the candidates has float32 distance
    >= the c-th one, so its true distance is at least that bound; when the k-th exact distance lies
    strictly below it, no other row can enter or tie. Returns (reported distances float32, ids int32),
    or None when some query is not proven this way (the caller then runs the GEMM path)."""
    from ..primitives.distances import DIST_L2SQ
    from ..primitives.rescore import rescore

    base = writable_view(base)  # a memory-mapped base runs the kernel compiled for in-memory ones
    n, d = base.shape
    nq = queries.shape[0]
    c = min(n, max(2 * k, k + 16))
    gamma = 2.0 * (d + 4) * _U32
    out_d = np.empty((nq, k), np.float32)
    out_i = np.empty((nq, k), np.int32)
    hk = np.empty(c, np.float32)
    hi = np.empty(c, np.int32)
    for j in range(nq):
        qf = writable_view(np.ascontiguousarray(queries[j], dtype=np.float32))
        hk[:] = np.inf
        hi[:] = ID_NONE
        _l2_scan(base, qf, hk, hi)
        cand = hi
        edge = float(hk[0]) if c < n else np.inf  # the largest candidate's float32 distance
        dist, ids = rescore(queries[j:j + 1], base, cand[None, :], DIST_L2SQ, np)
        kth = float(dist[0, k - 1])
        if c < n and not (np.isfinite(edge) and kth < (edge - d * _TINY32) / (1.0 + gamma)):
            return None
        if not np.isfinite(kth) or kth > float(np.finfo(np.float32).max):
            return None  # beyond float32: the general path reports it
        out_d[j] = np.sqrt(np.maximum(dist[0, :k], 0)) if metric == "euclidean" else np.maximum(dist[0, :k], 0)
        out_i[j] = ids[0, :k]
    return out_d, out_i
