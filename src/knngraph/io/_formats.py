"""The table of vector file formats and the checks every reader and writer shares.

Which extensions :mod:`knngraph.io` knows and the element dtype each stores (TEXMEX ``.fvecs`` /
``.ivecs`` / ``.bvecs``, the big-ann-benchmarks ``.fbin`` family, ``.npy``, ann-benchmarks HDF5), the
public :data:`SUPPORTED_EXTENSIONS`, and the argument checks used by every format: the extension of a
path, that the file exists and is not a directory, and the ``rows=`` range of :func:`knngraph.io.read`
turned into checked bounds. The layout of each format lives in its own module (``_texmex``, ``_fbin``,
``_npy``, ``_hdf5``); the dispatch by extension in the package's ``__init__``.
"""

from __future__ import annotations

import errno
import operator
import os
from pathlib import Path

import numpy as np

_VECS_DTYPES = {
    ".fvecs": np.dtype("<f4"),
    ".ivecs": np.dtype("<i4"),
    ".bvecs": np.dtype("u1"),
}
_BIN_DTYPES = {
    ".fbin": np.dtype("<f4"),
    ".ibin": np.dtype("<i4"),
    ".u8bin": np.dtype("u1"),
    ".i8bin": np.dtype("i1"),
}
_NPY_EXTENSIONS = (".npy",)
_HDF5_EXTENSIONS = (".hdf5", ".h5")

#: Every extension :func:`read` understands (:func:`write` takes all but HDF5).
SUPPORTED_EXTENSIONS = (
    tuple(_VECS_DTYPES) + tuple(_BIN_DTYPES) + _NPY_EXTENSIONS + _HDF5_EXTENSIONS
)

_CHUNK_BYTES = 1 << 26  # rows are written / checked in pieces of about 64 MiB


def _extension(path) -> str:
    ext = Path(os.fspath(path)).suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise ValueError(
            f"{os.fspath(path)}: unknown vector file extension {ext or '(none)'!r}; "
            f"supported extensions are {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    return ext


def _existing_file(path) -> Path:
    p = Path(os.fspath(path))
    if not p.exists():
        raise FileNotFoundError(errno.ENOENT, "no such vector file", os.fspath(path))
    if p.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a vector file", os.fspath(path))
    return p


def _as_int(value, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"rows: {what} must be an integer, got {value!r}") from None


def _row_range(rows, nrows: int, path) -> tuple[int, int]:
    """Turn ``rows`` (None, slice with step 1, or (start, stop)) into checked bounds."""
    if rows is None:
        return 0, nrows
    if isinstance(rows, slice):
        if rows.step is not None and _as_int(rows.step, "step") != 1:
            raise ValueError(f"rows: only slices with step 1 are supported, got step {rows.step}")
        start = 0 if rows.start is None else _as_int(rows.start, "start")
        stop = nrows if rows.stop is None else _as_int(rows.stop, "stop")
    elif isinstance(rows, tuple) and len(rows) == 2:
        start, stop = _as_int(rows[0], "start"), _as_int(rows[1], "stop")
    else:
        raise TypeError(
            "rows must be None, a slice with step 1 or a (start, stop) tuple, "
            f"got {rows!r}"
        )
    given = (start, stop)
    if start < 0:
        start += nrows
    if stop < 0:
        stop += nrows
    if not 0 <= start <= stop <= nrows:
        raise ValueError(
            f"{os.fspath(path)}: rows {given[0]}:{given[1]} are out of range for a file "
            f"with {nrows} rows (need 0 <= start <= stop <= {nrows}; negative values "
            "count from the end)"
        )
    return start, stop
