"""Per-row k-selection of matrix tiles on the GPU: the k smallest (key, id) of each row, streamed tile by
tile, with the kernels of :mod:`knngraph.primitives._kselect_kernels` (quick multi-select or warp filter).

The exact k-NN runs its GEMM tiles through a :class:`TileSelector`; :func:`smallest_per_row` applies it to
one ready tile (NN-Descent's window initialisation, brute force inside small sets). Host code: CuPy and
the kernels are imported on first use.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .._cuda_launch import launch
from .._device import kept_across_streams
from .._device import sm_count as multiprocessors

__all__ = ["SELECT_STRATEGIES", "MAX_FILTER_K", "resolve_select", "TileSelector", "sort_rows", "smallest_per_row",
           "smallest_per_row_host"]

SELECT_STRATEGIES = ("auto", "warp_filter", "quickselect")
#: the warp filter keeps its lists in shared memory: k up to this
MAX_FILTER_K = 1024


def resolve_select(select: str, k: int) -> str:
    """'warp_filter' for k <= MAX_FILTER_K and 'quickselect' above when ``select`` is 'auto'; ValueError
    when 'warp_filter' is asked for a larger k."""
    if select == "auto":
        return "warp_filter" if k <= MAX_FILTER_K else "quickselect"
    if select == "warp_filter" and k > MAX_FILTER_K:
        raise ValueError(f"select='warp_filter' supports k <= {MAX_FILTER_K}, got k={k}; "
                         "use select='quickselect' or 'auto'")
    return select


def sort_rows(keys, ids):
    """Sort each row by (key, id) using one 64-bit composite key (order-preserving float bits | id)."""
    import cupy as cp

    u = keys.view(cp.uint32)
    ordered = cp.where(u >> 31, ~u, u | cp.uint32(0x80000000))
    comp = (ordered.astype(cp.uint64) << 32) | ids.view(cp.uint32).astype(cp.uint64)
    comp = cp.sort(comp, axis=1)
    ids_s = (comp & cp.uint64(0xFFFFFFFF)).astype(cp.uint32).view(cp.int32)
    o = (comp >> 32).astype(cp.uint32)
    u2 = cp.where(o >> 31, o & cp.uint32(0x7FFFFFFF), ~o)
    return u2.view(cp.float32), ids_s


#: rows (a warp each) per multiprocessor below which a tile's rows are split into column ranges (then merged).
#: On an H200 (132 SMs), 2k rows x 18k columns, k=32: one split 0.32 ms, two 0.43, three 0.51 (the old rule
#: of 32 warps per SM chose three); 1k x 5k: 0.20 against 0.26-0.29; splitting pays only when rows leave
#: most multiprocessors idle (each split count timed on the same tile with :meth:`TileSelector.offer_tile`).
SPLIT_BELOW_ROWS_PER_SM = 4


def _splits_for(rows: int, cols: int, k: int, sm_count: int) -> int:
    """Column splits per row so that at least :data:`SPLIT_BELOW_ROWS_PER_SM` warps per SM have work."""
    target = sm_count * SPLIT_BELOW_ROWS_PER_SM
    if rows >= target:
        return 1
    splits = math.ceil(target / rows)
    # keep every split long enough that selection, not the merge, dominates
    max_splits = max(1, cols // max(4 * k, 1024))
    return int(max(1, min(splits, max_splits)))


@functools.lru_cache(maxsize=None)
def _placeholders(device_id: int):
    """The 1-element arrays passed for a launch's unused array arguments (never read or written), made once
    per device: three allocations and fills per selector were a tenth of a small exact search's host time."""
    import cupy as cp

    with cp.cuda.Device(device_id), kept_across_streams():
        return cp.zeros((1, 1), dtype=cp.float32), cp.zeros((1, 1), dtype=cp.int32), cp.zeros(1, dtype=cp.float32)


class TileSelector:
    """Runs one selection strategy over tiles, keeping each query row's running best k."""

    def __init__(self, select: str, k: int, sm_count: int):
        import cupy as cp

        from .._cuda_launch import kernel_module
        from . import _kselect_layout as layout

        kernels = kernel_module(__package__ + "._kselect_kernels")
        self.layout = layout
        self.kernels_of = kernels
        self.cp = cp
        self.select = select
        self.k = k
        self.sm_count = sm_count
        self._dummy_f, self._dummy_i, self._dummy_n = _placeholders(cp.cuda.Device().id)
        self.stream = None  # CuPy stream for launches (None: current); knn_cuda sets its selection stream
        if select == "warp_filter":
            cap = layout.list_capacity(k)
            self.kernels = {src: kernels.warp_filter_kernel(cap, src) for src in (layout.SRC_DOTS, layout.SRC_PAIRS)}
            self.wpb = layout.warps_per_block_for(cap)
        else:
            self.wpb = 4

    def _launch(self, first_src, rows, n_splits, split_len, n_cols, dots, colterm, alpha, col_offset,
                self_offset, ck, ci, init_k, init_i, use_init, out_k, out_i):
        cp = self.cp
        tasks = rows * n_splits
        blocks = (tasks + self.wpb - 1) // self.wpb
        if self.select == "warp_filter":
            launch(self.kernels[first_src], blocks, self.wpb * 32,
                   (tasks, n_splits, split_len, n_cols, self.k, dots, colterm, alpha, col_offset, self_offset, ck, ci,
                    init_k, init_i, use_init, out_k, out_i), stream=self.stream,
                   max_registers=self.layout.FILTER_MAX_REGISTERS)
        else:
            shape = (dots.shape if first_src == self.layout.SRC_DOTS else ck.shape)
            bufs = tuple(cp.empty(shape, t) for t in (cp.float32, cp.int32, cp.float32, cp.int32))
            launch(self.kernels_of.quickselect_kernel, blocks, self.wpb * 32,
                   (first_src, tasks, n_splits, split_len, n_cols, self.k, dots, colterm, alpha, col_offset,
                    self_offset, ck, ci) + bufs + (out_k, out_i), stream=self.stream)

    def offer_tile(self, dots, colterm, alpha, col_offset, self_offset, best_k, best_i, first_tile):
        """Fold the tile ``dots`` [rows, cols] (ids col_offset + j) into the running best lists."""
        cp = self.cp
        rows, cols = dots.shape
        n_splits = _splits_for(rows, cols, self.k, self.sm_count)
        split_len = (cols + n_splits - 1) // n_splits
        if self.select == "warp_filter" and n_splits == 1:
            # the running best seeds the list and receives the result: no separate merge
            self._launch(self.layout.SRC_DOTS, rows, 1, split_len, cols, dots, colterm, alpha, col_offset,
                         self_offset, self._dummy_f, self._dummy_i, best_k, best_i, 0 if first_tile else 1, best_k,
                         best_i)
            return
        part_k = cp.empty((rows * n_splits, self.k), cp.float32)
        part_i = cp.empty((rows * n_splits, self.k), cp.int32)
        self._launch(self.layout.SRC_DOTS, rows, n_splits, split_len, cols, dots, colterm, alpha, col_offset,
                     self_offset, self._dummy_f, self._dummy_i, self._dummy_f, self._dummy_i, 0, part_k, part_i)
        cand_k = part_k.reshape(rows, n_splits * self.k)
        cand_i = part_i.reshape(rows, n_splits * self.k)
        if not first_tile:
            cand_k = cp.concatenate([best_k, cand_k], axis=1)
            cand_i = cp.concatenate([best_i, cand_i], axis=1)
        if cand_k.shape[1] == self.k:
            best_k[...] = cand_k
            best_i[...] = cand_i
            return
        m = cand_k.shape[1]
        self._launch(self.layout.SRC_PAIRS, rows, 1, m, m, self._dummy_f, self._dummy_n, np.float32(0), 0, -1,
                     cand_k, cand_i, self._dummy_f, self._dummy_i, 0, best_k, best_i)

    def finish(self, best_k, best_i):
        if self.select == "quickselect":
            return sort_rows(best_k, best_i)
        return best_k, best_i


@functools.lru_cache(maxsize=16)
def _selector_for(k: int, device_id: int) -> TileSelector:
    import cupy as cp

    with cp.cuda.Device(device_id) as dev:
        return TileSelector(resolve_select("auto", k), k, multiprocessors(dev.id))


def smallest_per_row(tile, k: int):
    """Each row's ``k`` smallest values of a CuPy float32 [rows, m] array (k < m) and their column
    indices, sorted by (value, column): the exact k-NN's selection applied to a ready tile (NN-Descent's
    window initialisation uses it)."""
    import cupy as cp

    rows, m = tile.shape
    if not 1 <= k < m:
        raise ValueError(f"k must be in [1, {m}), got {k}")
    selector = _selector_for(k, cp.cuda.Device().id)
    best_k = cp.empty((rows, k), cp.float32)
    best_i = cp.empty((rows, k), cp.int32)
    selector.offer_tile(cp.ascontiguousarray(tile, cp.float32), cp.zeros(m, cp.float32), np.float32(1.0), 0, -1,
                        best_k, best_i, first_tile=True)
    return selector.finish(best_k, best_i)


def smallest_per_row_host(tile, k):
    """NumPy form of :func:`smallest_per_row` (the numba CUDA simulator's engines use it)."""
    tile = np.asarray(tile)
    part = np.argpartition(tile, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(tile, part, 1)
    o = np.lexsort((part, vals), axis=-1)
    return np.take_along_axis(vals, o, 1).astype(np.float32), np.take_along_axis(part, o, 1).astype(np.int32)
