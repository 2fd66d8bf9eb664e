"""The big-ann-benchmarks flat binary layout (``.fbin`` / ``.ibin`` / ``.u8bin`` / ``.i8bin``).

A little-endian uint32 row count, a uint32 column count, then the float32 / int32 / uint8 / int8 values
in row-major order, so any range of rows is one contiguous piece of the file that
:func:`knngraph.io.read` memory-maps at a computed offset. This module holds the header's size and
limits and its check against the file size (``ValueError`` naming the file for a truncated or corrupt
one).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

_BIN_HEADER_BYTES = 8
_UINT32_MAX = 2**32 - 1


def _bin_header(p: Path, path, dtype: np.dtype) -> tuple[int, int]:
    size = p.stat().st_size
    if size < _BIN_HEADER_BYTES:
        raise ValueError(
            f"{os.fspath(path)}: the file has {size} bytes, too few for the 8-byte header "
            "(uint32 rows, uint32 columns)"
        )
    with open(p, "rb") as f:
        head = f.read(_BIN_HEADER_BYTES)
    nrows, ncols = (int(v) for v in np.frombuffer(head, dtype="<u4"))
    expected = _BIN_HEADER_BYTES + nrows * ncols * dtype.itemsize
    if expected != size:
        raise ValueError(
            f"{os.fspath(path)}: header says {nrows} x {ncols} {dtype.name} ({expected} bytes) "
            f"but the file has {size} bytes"
        )
    if ncols == 0 and nrows > 0:
        raise ValueError(f"{os.fspath(path)}: header says {nrows} rows of 0 columns")
    return nrows, ncols
