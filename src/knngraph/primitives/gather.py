"""Rows of a large host array gathered by row ids on several threads: :func:`gather_rows`.

NumPy's fancy indexing (``data[rows]``) copies on one thread. The out-of-core builds gather a cluster's
rows (a few hundred thousand of a memory-mapped or in-memory base) for every piece and every halving of
the partition; one thread of NumPy moved about 1-2 GB/s there, which on a GPU machine made the gathers,
not the GPU, the pace of the partition. Here a compiled kernel copies the rows' bytes, split over numba's
threads (:class:`~knngraph.primitives.compile.SplitKernel`, GIL released), for every dtype at once (the
rows are copied as bytes).
"""

from __future__ import annotations

import numpy as np

from .compile import SERIAL_BELOW, SplitKernel
from .cpu_inputs import writable_view

__all__ = ["gather_rows"]


def _gather(i0, i1, src, rows, out):
    """out[t] = src[rows[t]] for t in [i0, i1) (byte rows)."""
    w = src.shape[1]
    for t in range(i0, i1):
        r = rows[t]
        for j in range(w):
            out[t, j] = src[r, j]


_GATHER = SplitKernel(_gather)


def gather_rows(data, rows, out: np.ndarray | None = None) -> np.ndarray:
    """``data[rows]`` as a C-contiguous NumPy array (``out`` when given: C-contiguous, of that shape and
    dtype, e.g. page-locked memory for a copy to a GPU): for a C-contiguous 2-d NumPy array (a memory map
    too) and a gather of at least ``SERIAL_BELOW`` KiB (8 MiB), copied by the compiled kernel (on numba's
    threads from :data:`~knngraph.primitives.compile.SERIAL_BELOW` rows); anything else (a small gather, an array of another layout, an object that takes
    index arrays) by ``data[rows]``. ``rows``: integer row ids, each in [0, len(data)) (an IndexError
    names the first one that is not)."""
    rows = np.asarray(rows)
    if out is not None and (out.shape != (len(rows),) + tuple(data.shape[1:]) or out.dtype != data.dtype
                            or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous {data.dtype} array of shape "
                         f"{(len(rows),) + tuple(data.shape[1:])}, got {out.dtype} {out.shape}")
    if rows.ndim == 1 and rows.dtype.kind in "iu" and len(rows) and (
            int(rows.min()) < 0 or int(rows.max()) >= data.shape[0]):
        bad = rows[(rows < 0) | (rows >= data.shape[0])][0]
        raise IndexError(f"row {int(bad)} is out of bounds for an array of {data.shape[0]} rows")
    if not (isinstance(data, np.ndarray) and data.ndim == 2 and data.flags.c_contiguous
            and rows.ndim == 1 and rows.dtype.kind in "iu") or len(rows) * data.shape[1] * data.itemsize < (
                SERIAL_BELOW << 10):
        if out is None:
            return np.ascontiguousarray(data[rows])
        out[...] = data[rows]
        return out
    rows = rows.astype(np.int64, copy=False)
    if out is None:
        out = np.empty((len(rows), data.shape[1]), data.dtype)
    src = writable_view(data).view(np.uint8).reshape(data.shape[0], -1)
    _GATHER.run(len(rows), len(rows), src, rows, out.view(np.uint8).reshape(len(rows), -1))
    return out
