"""Read and write vector files in the formats ANN benchmarks use.

The format is chosen from the file extension (case-insensitive):

``.fvecs`` / ``.ivecs`` / ``.bvecs``
    TEXMEX layout (SIFT1M, GIST1M, BIGANN): every row is a little-endian int32
    dimension ``d`` followed by ``d`` float32 / int32 / uint8 values.
``.fbin`` / ``.ibin`` / ``.u8bin`` / ``.i8bin``
    big-ann-benchmarks layout: little-endian uint32 row count, uint32 column
    count, then the float32 / int32 / uint8 / int8 values in row-major order.
``.npy``
    NumPy's own format (2-D arrays only).
``.hdf5`` / ``.h5``
    ann-benchmarks files: datasets ``train``, ``test``, ``neighbors`` and
    ``distances`` plus a ``distance`` attribute naming the metric.

:func:`read` can read a range of rows without touching the rest of the file and,
with ``mmap=True`` (the default), returns read-only :class:`numpy.memmap` views.
:func:`write` and :func:`write_ann_benchmarks` write atomically: to a temporary
file in the same directory (created like :func:`open` would, so the umask applies),
which then replaces the target with :func:`os.replace`. A failed write removes its
temporary file; a successful one also removes those that crashed or killed writes
left in its directory more than an hour ago.
Every reader checks the file size against the header and raises ``ValueError``
naming the file and the problem for truncated or corrupt files.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from .._typing import PathLike

# The package, by topic: _formats (the extension table, SUPPORTED_EXTENSIONS and the argument checks every
# format shares), _texmex (.fvecs/.ivecs/.bvecs), _fbin (.fbin/.ibin/.u8bin/.i8bin), _npy (.npy headers),
# _hdf5 (ann-benchmarks HDF5 files) with _hdf5_probe (the child process that guards against files that hang
# libhdf5), _atomic (atomic writing). read_header, read and write, which pick the format by extension,
# live here, so the helpers they call are looked up in this module (tests replace knngraph.io._open_new).
# Private names used outside the package (knngraph.graph, knngraph.multidevice, knngraph.distributed:
# _atomic_write, _finish, _open_new, _parse_npy_header) are imported here too, so
# ``from knngraph.io import ...`` keeps working for them.
from . import _formats
from ._atomic import _atomic_write, _finish, _open_new, _row_chunks
from ._fbin import _BIN_HEADER_BYTES, _UINT32_MAX, _bin_header
from ._formats import (
    _BIN_DTYPES,
    _HDF5_EXTENSIONS,
    _NPY_EXTENSIONS,
    _VECS_DTYPES,
    _existing_file,
    _extension,
    _row_range,
)
from ._hdf5 import (
    _hdf5_dataset,
    _hdf5_errors,
    _open_hdf5,
    ann_benchmarks_metric,
    is_hdf5,
    read_ann_benchmarks,
    write_ann_benchmarks,
)
from ._hdf5_probe import HDF5_PROBE_SECONDS as HDF5_PROBE_SECONDS
from ._npy import _npy_header
from ._npy import _parse_npy_header as _parse_npy_header
from ._texmex import _INT32_MAX, _check_vecs_dims, _vecs_header, _vecs_record

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "ann_benchmarks_metric",
    "is_hdf5",
    "read",
    "read_ann_benchmarks",
    "read_header",
    "write",
    "write_ann_benchmarks",
]

#: Every extension :func:`read` understands (:func:`write` takes all but HDF5).
SUPPORTED_EXTENSIONS = _formats.SUPPORTED_EXTENSIONS

# the Examples of the functions defined in the submodules, run by ``doctest.testmod(knngraph.io)``
# (which only looks at functions defined in the module itself and at those listed here)
__test__ = {"read_ann_benchmarks": read_ann_benchmarks}


def read_header(path: PathLike, *, dataset: str | None = None) -> tuple[int, int, np.dtype]:
    """Read the shape and dtype of a vector file without reading its data.

    Parameters
    ----------
    path : str or os.PathLike
        File with one of the extensions in :data:`SUPPORTED_EXTENSIONS`.
    dataset : str, default=None
        For HDF5 files, the dataset to describe (``None`` means ``"train"``).
        Must be ``None`` for other formats.

    Returns
    -------
    nrows : int
    ncols : int
        For an empty vecs file (no rows, so no dimension) this is 0.
    dtype : numpy.dtype

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the extension is unknown, or the file is truncated or corrupt.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from knngraph import io
    >>> path = os.path.join(tempfile.mkdtemp(), "x.fbin")
    >>> io.write(path, np.zeros((3, 4), dtype=np.float32))
    >>> io.read_header(path)
    (3, 4, dtype('float32'))
    """
    ext = _extension(path)
    _check_dataset_arg(ext, dataset, path)
    p = _existing_file(path)
    if ext in _BIN_DTYPES:
        dtype = _BIN_DTYPES[ext]
        nrows, ncols = _bin_header(p, path, dtype)
        return nrows, ncols, dtype
    if ext in _VECS_DTYPES:
        dtype = _VECS_DTYPES[ext]
        nrows, ncols = _vecs_header(p, path, dtype)
        return nrows, ncols, dtype
    if ext in _NPY_EXTENSIONS:
        shape, _, dtype, _ = _npy_header(p, path)
        return int(shape[0]), int(shape[1]), dtype
    with _open_hdf5(p, path) as f:
        ds = _hdf5_dataset(f, dataset or "train", path)
        with _hdf5_errors(path):
            return int(ds.shape[0]), int(ds.shape[1]), ds.dtype


def _check_dataset_arg(ext: str, dataset, path) -> None:
    if dataset is not None and ext not in _HDF5_EXTENSIONS:
        raise ValueError(
            f"{os.fspath(path)}: dataset= only applies to HDF5 files (.hdf5, .h5), "
            f"got dataset={dataset!r} for a {ext} file"
        )


# ----------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------


def read(path: PathLike, *, rows: slice | tuple[int, int] | None = None, dataset: str | None = None,
         mmap: bool = True) -> np.ndarray:
    """Read a 2-D array of vectors, or a range of its rows, from a file.

    Parameters
    ----------
    path : str or os.PathLike
        File with one of the extensions in :data:`SUPPORTED_EXTENSIONS`; the
        extension picks the format (see the module docstring).
    rows : None, slice or tuple of (int, int), default=None
        Which rows to read: ``None`` reads all, ``slice(start, stop)`` (step 1)
        or ``(start, stop)`` reads rows ``start`` to ``stop - 1``. Negative values
        count from the end as in Python; bounds outside the file raise
        ``ValueError``. Only those rows are read from disk.
    dataset : str, default=None
        For HDF5 files, which dataset to read (``"train"``, ``"test"``,
        ``"neighbors"``, ``"distances"``); ``None`` means ``"train"``. Must be
        ``None`` for other formats.
    mmap : bool, default=True
        If true, return a read-only :class:`numpy.memmap` view of the rows
        instead of loading them (``.fbin``, ``.ibin``, ``.u8bin``, ``.i8bin``,
        ``.npy`` and the vecs formats). For the vecs formats the view is
        *strided*: it skips the int32 dimension stored before each row, so it is
        not C-contiguous (use :func:`numpy.ascontiguousarray` if that matters).
        A result with no rows is a plain empty array. HDF5 data is always
        loaded. If false, the rows are copied into a new writeable,
        C-contiguous array.

    Returns
    -------
    numpy.ndarray
        Shape ``(stop - start, ncols)``, the dtype of the format (float32 for
        ``.fvecs``/``.fbin``, int32 for ``.ivecs``/``.ibin``, uint8 for
        ``.bvecs``/``.u8bin``, int8 for ``.i8bin``) or as stored (``.npy``,
        HDF5). An empty vecs file gives shape ``(0, 0)``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the extension is unknown, the file is truncated or corrupt (the
        message names the file and the problem), ``rows`` is out of range or
        has a step other than 1, or ``dataset`` is given for a non-HDF5 file or
        is not in the HDF5 file.
    TypeError
        If ``rows`` is not None, a slice or a pair of integers.

    Notes
    -----
    For the vecs formats the dimension stored in every row that is read is
    checked against the first row's, which touches those rows' pages even
    with ``mmap=True``. Use the ``.fbin`` family for very large files.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from knngraph import io
    >>> path = os.path.join(tempfile.mkdtemp(), "x.u8bin")
    >>> io.write(path, np.arange(12, dtype=np.uint8).reshape(4, 3))
    >>> io.read(path, rows=(1, 3))
    memmap([[3, 4, 5],
            [6, 7, 8]], dtype=uint8)
    >>> io.read(path, rows=slice(-1, None), mmap=False)
    array([[ 9, 10, 11]], dtype=uint8)
    """
    ext = _extension(path)
    _check_dataset_arg(ext, dataset, path)
    p = _existing_file(path)

    if ext in _BIN_DTYPES:
        dtype = _BIN_DTYPES[ext]
        nrows, ncols = _bin_header(p, path, dtype)
        start, stop = _row_range(rows, nrows, path)
        if start == stop:
            return np.empty((0, ncols), dtype=dtype)
        view = np.memmap(
            p,
            dtype=dtype,
            mode="r",
            offset=_BIN_HEADER_BYTES + start * ncols * dtype.itemsize,
            shape=(stop - start, ncols),
        )
        return view if mmap else np.array(view, order="C")

    if ext in _VECS_DTYPES:
        dtype = _VECS_DTYPES[ext]
        nrows, dim = _vecs_header(p, path, dtype)
        start, stop = _row_range(rows, nrows, path)
        if start == stop:
            return np.empty((0, dim), dtype=dtype)
        record = _vecs_record(dim, dtype)
        records = np.memmap(
            p, dtype=record, mode="r", offset=start * record.itemsize, shape=(stop - start,)
        )
        _check_vecs_dims(records["dim"], dim, start, path)
        vectors = records["vec"]
        return vectors if mmap else np.array(vectors, order="C")

    if ext in _NPY_EXTENSIONS:
        (nrows, ncols), fortran, dtype, offset = _npy_header(p, path)
        start, stop = _row_range(rows, nrows, path)
        if start == stop:
            return np.empty((0, ncols), dtype=dtype)
        whole = np.memmap(
            p, dtype=dtype, mode="r", offset=offset, shape=(nrows, ncols),
            order="F" if fortran else "C",
        )
        view = whole[start:stop]
        return view if mmap else np.array(view, order="C")

    with _open_hdf5(p, path) as f:
        ds = _hdf5_dataset(f, dataset or "train", path)
        with _hdf5_errors(path):
            nrows = ds.shape[0]
        start, stop = _row_range(rows, nrows, path)
        with _hdf5_errors(path):
            return ds[start:stop]


# ----------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------


def write(path: PathLike, array: ArrayLike) -> None:
    """Write a 2-D array to a vector file, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        Target file; its extension picks the format: ``.fvecs``, ``.ivecs``,
        ``.bvecs``, ``.fbin``, ``.ibin``, ``.u8bin``, ``.i8bin`` or ``.npy``
        (use :func:`write_ann_benchmarks` for HDF5). An existing file is
        replaced only once the new one is complete.
    array : array_like
        2-D array whose dtype matches the format: float32 (``.fvecs``,
        ``.fbin``), int32 (``.ivecs``, ``.ibin``), uint8 (``.bvecs``,
        ``.u8bin``), int8 (``.i8bin``), any non-object dtype (``.npy``).
        Big-endian input is converted to the little-endian file layout.

    Raises
    ------
    TypeError
        If the dtype does not match the format (the message names the file,
        the format's dtype and the given dtype).
    ValueError
        If the extension is unknown or HDF5, the array is not 2-D, has rows
        but no columns (binary formats) or has more rows or columns than the
        header can hold.
    FileNotFoundError
        If the target directory does not exist.

    Notes
    -----
    A vecs file with no rows stores no dimension, so reading it back gives
    shape ``(0, 0)``.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from knngraph import io
    >>> path = os.path.join(tempfile.mkdtemp(), "x.fvecs")
    >>> io.write(path, np.ones((2, 3), dtype=np.float32))
    >>> os.path.getsize(path)  # 2 rows of (4-byte dim + 3 * 4 bytes)
    32
    >>> io.write(path, np.ones((2, 3)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: ...x.fvecs: .fvecs files store float32 but the array is float64; convert it first
    """
    ext = _extension(path)
    if ext in _HDF5_EXTENSIONS:
        raise ValueError(
            f"{os.fspath(path)}: write() does not write HDF5; use write_ann_benchmarks()"
        )
    arr = np.asarray(array)
    fmt = _BIN_DTYPES.get(ext, _VECS_DTYPES.get(ext))
    if fmt is not None and (
        arr.dtype.kind != fmt.kind or arr.dtype.itemsize != fmt.itemsize or arr.dtype.fields
    ):
        raise TypeError(
            f"{os.fspath(path)}: {ext} files store {fmt.name} but the array is "
            f"{arr.dtype.name}; convert it first"
        )
    if fmt is None and arr.dtype.hasobject:
        raise TypeError(f"{os.fspath(path)}: object arrays cannot be written; got dtype object")
    if arr.ndim != 2:
        raise ValueError(
            f"{os.fspath(path)}: expected a 2-D array (rows x columns), got a {arr.ndim}-D "
            f"array of shape {arr.shape}"
        )
    nrows, ncols = arr.shape
    if fmt is not None and nrows > 0 and ncols == 0:
        raise ValueError(f"{os.fspath(path)}: the array has {nrows} rows but no columns")

    if ext in _BIN_DTYPES:
        if nrows > _UINT32_MAX or ncols > _UINT32_MAX:
            raise ValueError(
                f"{os.fspath(path)}: shape {arr.shape} does not fit the uint32 header"
            )

        def write_into(tmp: Path) -> None:
            with _open_new(tmp) as f:
                f.write(np.array([nrows, ncols], dtype="<u4").tobytes())
                for chunk in _row_chunks(arr):
                    f.write(np.ascontiguousarray(chunk, dtype=fmt).data)
                _finish(f)

    elif ext in _VECS_DTYPES:
        if ncols > _INT32_MAX:
            raise ValueError(
                f"{os.fspath(path)}: {ncols} columns do not fit the int32 row dimension"
            )
        record = _vecs_record(max(ncols, 1), fmt)

        def write_into(tmp: Path) -> None:
            with _open_new(tmp) as f:
                for chunk in _row_chunks(arr):
                    rec = np.empty(chunk.shape[0], dtype=record)
                    rec["dim"] = ncols
                    rec["vec"] = chunk
                    f.write(rec.tobytes())
                _finish(f)

    else:  # .npy

        def write_into(tmp: Path) -> None:
            with _open_new(tmp) as f:
                np.save(f, arr, allow_pickle=False)
                _finish(f)

    _atomic_write(path, write_into)
