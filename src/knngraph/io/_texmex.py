"""The TEXMEX vecs layout (``.fvecs`` / ``.ivecs`` / ``.bvecs``: SIFT1M, GIST1M, BIGANN).

Every row is a little-endian int32 dimension ``d`` followed by ``d`` float32 / int32 / uint8 values.
This module holds that layout: the header check (row count and dimension from the file size and the
first row, ``ValueError`` naming the file for a truncated or corrupt one), the NumPy record dtype of a
row (through which :func:`knngraph.io.read` memory-maps the vectors and :func:`knngraph.io.write`
writes them), and the check that every row read stores the same dimension as the first.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ._formats import _CHUNK_BYTES

_VECS_DIM_DTYPE = np.dtype("<i4")
_INT32_MAX = 2**31 - 1


def _vecs_header(p: Path, path, dtype: np.dtype) -> tuple[int, int]:
    """Return (nrows, dim); an empty file is (0, 0)."""
    size = p.stat().st_size
    if size == 0:
        return 0, 0
    if size < _VECS_DIM_DTYPE.itemsize:
        raise ValueError(
            f"{os.fspath(path)}: the file has {size} bytes, too few for the int32 dimension "
            "that starts every row"
        )
    with open(p, "rb") as f:
        dim = int(np.frombuffer(f.read(4), dtype=_VECS_DIM_DTYPE)[0])
    if dim <= 0:
        raise ValueError(
            f"{os.fspath(path)}: row 0 says its dimension is {dim}; it must be positive "
            "(the file is corrupt or not in the vecs format)"
        )
    row_bytes = _VECS_DIM_DTYPE.itemsize + dim * dtype.itemsize
    if size % row_bytes:
        raise ValueError(
            f"{os.fspath(path)}: the file has {size} bytes, not a multiple of the row size "
            f"{row_bytes} bytes (int32 dimension {dim} + {dim} {dtype.name} values); "
            "the file is truncated or corrupt"
        )
    return size // row_bytes, dim


def _vecs_record(dim: int, dtype: np.dtype) -> np.dtype:
    return np.dtype([("dim", _VECS_DIM_DTYPE), ("vec", dtype, (dim,))])


def _check_vecs_dims(dims: np.ndarray, dim: int, start: int, path) -> None:
    """Raise ValueError if any row's stored dimension differs from ``dim``."""
    step = max(1, _CHUNK_BYTES // 4)
    for lo in range(0, dims.shape[0], step):
        piece = np.asarray(dims[lo : lo + step])
        bad = np.flatnonzero(piece != dim)
        if bad.size:
            row = start + lo + int(bad[0])
            raise ValueError(
                f"{os.fspath(path)}: row {row} says its dimension is {int(piece[bad[0]])} "
                f"but row 0 says {dim}; the file is corrupt"
            )
