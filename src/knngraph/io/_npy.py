"""NumPy ``.npy`` headers, parsed without trusting them.

:func:`_parse_npy_header` reads the header of any numeric ``.npy`` array (format versions 1.0 to 3.0) and
turns whatever NumPy's parser raises for a damaged header, an object array or an impossible shape into
``ValueError`` naming the file; :mod:`knngraph.graph` uses it for the arrays inside its saved graphs.
:func:`_npy_header` adds the checks for a vector file: a 2-D array whose size matches the file, so that
:func:`knngraph.io.read` can memory-map its rows from the returned data offset.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

_INTP_MAX = int(np.iinfo(np.intp).max)
_NPY_VERSIONS = ((1, 0), (2, 0), (3, 0))


def _parse_npy_header(f, where: str) -> tuple[tuple, bool, np.dtype, int]:
    """(shape, fortran_order, dtype, data offset) of the .npy header at the start of ``f``: a
    numeric array of any shape. ValueError starting with ``where`` when the header is not one."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version not in _NPY_VERSIONS:
            raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
    except MemoryError:
        raise
    except Exception as exc:  # numpy's parser also raises TokenError, IndexError, OverflowError...
        raise ValueError(f"{where}: not a valid .npy file ({exc})") from exc
    if dtype.hasobject:
        raise ValueError(f"{where}: holds Python objects; only numeric arrays are read")
    if dtype.subdtype is not None or dtype.itemsize == 0:
        raise ValueError(f"{where}: holds elements of dtype {dtype!r}; the file is corrupt")
    if any(d < 0 or d * max(dtype.itemsize, 1) > _INTP_MAX for d in shape):
        raise ValueError(f"{where}: the header gives the impossible shape {shape}; it is corrupt")
    return shape, fortran, dtype, f.tell()


def _npy_header(p: Path, path) -> tuple[tuple[int, int], bool, np.dtype, int]:
    """Return (shape, fortran_order, dtype, data_offset) of a checked 2-D .npy file."""
    size = p.stat().st_size
    with open(p, "rb") as f:
        shape, fortran, dtype, offset = _parse_npy_header(f, os.fspath(path))
    if len(shape) != 2:
        raise ValueError(
            f"{os.fspath(path)}: holds a {len(shape)}-D array of shape {shape}; "
            "expected a 2-D (rows x columns) array"
        )
    expected = offset + shape[0] * shape[1] * dtype.itemsize
    if expected != size:
        raise ValueError(
            f"{os.fspath(path)}: header says {shape[0]} x {shape[1]} {dtype.name} "
            f"({expected} bytes) but the file has {size} bytes"
        )
    return shape, fortran, dtype, offset
