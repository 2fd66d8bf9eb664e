"""The fold of a cluster piece's lists into the running host lists of the clustered out-of-core build
(:func:`knngraph.nndescent._build.clustered_build`): one compiled CPU kernel, serial and ``nogil``, split
over numba's threads for large pieces (:class:`~knngraph.primitives.compile.SplitKernel`), so that it runs
on a worker thread while the next piece builds. The row merge is the one of
:func:`knngraph.graphops.merge_sorted_lists` (:func:`knngraph.graphops.cpu.merge_row`)."""

from __future__ import annotations

import numpy as np

from ..graphops.cpu import merge_row
from ..primitives.compile import SplitKernel

__all__ = ["fold_piece_lists"]


def _fold(i0, i1, rows, piece_d, piece_i, res_d, res_i, done):
    """Piece rows [i0, i1): row t is global row ``rows[t]`` and its list's ids are piece rows (-1: none).
    A row not ``done`` takes the piece's list (ids made global); a done one keeps the first k distinct ids
    of its list and the piece's, merged. Marks the rows done. The rows of a piece are distinct, so parts
    write disjoint rows."""
    k = res_d.shape[1]
    old_d = np.empty(k, np.float32)
    old_i = np.empty(k, np.int32)
    new_i = np.empty(k, np.int32)
    for t in range(i0, i1):
        g = rows[t]
        # rows is sorted, so the global ids keep the lists' (distance, id) order
        for j in range(k):
            v = piece_i[t, j]
            new_i[j] = rows[v] if v >= 0 else -1
        if done[g]:
            for j in range(k):
                old_d[j] = res_d[g, j]
                old_i[j] = res_i[g, j]
            merge_row(old_d, old_i, piece_d[t], new_i, res_d[g], res_i[g])
        else:
            for j in range(k):
                res_d[g, j] = piece_d[t, j]
                res_i[g, j] = new_i[j]
            done[g] = True


_FOLD = SplitKernel(_fold)


def fold_piece_lists(rows, piece_d, piece_i, res_d, res_i, done) -> None:
    """Fold one piece's lists into the running lists ``res_d`` / ``res_i`` (n x k float32 / int32, updated
    in place) and mark its rows in ``done`` (n bools).

    ``rows``: the piece's global row ids, sorted and distinct (int64); ``piece_d`` / ``piece_i``: its
    lists (len(rows) x k, float32 / int32), each sorted by (distance, id) with (inf, -1) padding at the
    end, ids local to the piece (piece row t is global row ``rows[t]``). A row not yet done takes the
    piece's list as it is (ids made global); a done row keeps the k best distinct ids of its list and the
    piece's (:func:`knngraph.graphops.cpu.merge_row`: by (distance, id), the first copy of a repeated
    id kept). Releases the GIL; split over numba's threads from ``SERIAL_BELOW`` rows."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    n, k = res_d.shape
    m = len(rows)
    if piece_d.shape != (m, k) or piece_i.shape != (m, k):
        raise ValueError(f"piece lists of shape {piece_d.shape} / {piece_i.shape} for {m} rows of {k} entries")
    if res_i.shape != (n, k) or done.shape != (n,) or res_d.dtype != np.float32 or res_i.dtype != np.int32 \
            or done.dtype != np.bool_:
        raise ValueError("running lists must be (n, k) float32 / int32 with n done flags")
    if m == 0:
        return
    if rows[0] < 0 or rows[-1] >= n or (m > 1 and not (rows[1:] > rows[:-1]).all()):
        raise ValueError("a piece's rows must be sorted, distinct row ids of the running lists")
    _FOLD.run(m, m, rows, np.ascontiguousarray(piece_d, dtype=np.float32),
              np.ascontiguousarray(piece_i, dtype=np.int32), res_d, res_i, done)
