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

import atexit
import errno
import operator
import os
import secrets
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np
from numpy.typing import ArrayLike

from ._typing import PathLike

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

_BIN_HEADER_BYTES = 8
_VECS_DIM_DTYPE = np.dtype("<i4")
_UINT32_MAX = 2**32 - 1
_INT32_MAX = 2**31 - 1
_CHUNK_BYTES = 1 << 26  # rows are written / checked in pieces of about 64 MiB
_INTP_MAX = int(np.iinfo(np.intp).max)
_NPY_VERSIONS = ((1, 0), (2, 0), (3, 0))

# Every file knngraph writes (here and in knngraph.graph) is first written to a temp file of this
# name in the target's directory.
_TEMP_PREFIX = ".knngraph-"
_TEMP_SUFFIX = ".tmp"
# A temp file untouched this long belongs to a save that crashed or was killed; the next save in its
# directory removes it. Long, so that a slow save in another process (whose temp file is not touched
# while it fsyncs gigabytes) is never taken for a dead one.
_STALE_TEMP_SECONDS = 3600

_HDF5_DATASETS = ("train", "test", "neighbors", "distances")
# ann-benchmarks ``distance`` attribute -> knngraph metric name
_METRIC_FROM_ANN = {
    "euclidean": "euclidean",
    "angular": "cosine",
    "dot": "inner_product",
    "ip": "inner_product",
}
_UNSUPPORTED_ANN_METRICS = ("jaccard", "hamming")
# knngraph metric name -> ann-benchmarks ``distance`` attribute
_METRIC_TO_ANN = {"euclidean": "euclidean", "cosine": "angular", "inner_product": "dot"}


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------


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


def _h5py():
    try:
        import h5py
    except ImportError as exc:  # tests/test_io.py runs this in a child process without h5py
        raise ImportError("HDF5 files (ann-benchmarks) need h5py: pip install 'knngraph[hdf5]' "
                          "(or pip install h5py)") from exc
    return h5py


# ----------------------------------------------------------------------------
# headers
# ----------------------------------------------------------------------------


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


@contextmanager
def _hdf5_errors(path):
    """Turn what h5py raises for a file it cannot parse into ValueError naming the file.

    h5py reports damage as OSError, RuntimeError, KeyError, ValueError or TypeError (and HDF5 may
    fail in other ways), so every call into h5py runs in here, and knngraph's own checks outside."""
    try:
        yield
    except MemoryError:
        raise
    except Exception as exc:
        raise ValueError(
            f"{os.fspath(path)}: not a readable HDF5 file, or it is corrupt "
            f"({type(exc).__name__}: {exc})"
        ) from exc


#: seconds a child process may spend reading an HDF5 file's metadata before the file is called damaged
HDF5_PROBE_SECONDS = 10.0

#: the probe's child: reads one JSON request per line (path, whether to read the root's attributes), answers
#: one line: "" or the error h5py raised
_PROBE_SERVER = r"""
import json, sys
import h5py
for line in sys.stdin:
    path, attributes = json.loads(line)
    try:
        with h5py.File(path, "r") as f:
            if attributes:
                dict(f.attrs)
            for key in f:
                node = f.get(key)
                getattr(node, "shape", None), getattr(node, "dtype", None)
        answer = ""
    except BaseException as exc:
        answer = f"{type(exc).__name__}: {exc}"
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""

#: files whose metadata the probe read in time: (path, size, mtime, attributes) -> True
_PROBED: dict = {}


class _Prober:
    """One long-lived child interpreter (h5py imported once) that reads HDF5 metadata on request, so a
    probe costs a pipe round trip, not an interpreter start; a child that hangs or crashes is killed and
    the next probe starts a new one. Not a fork of this process (its threads, its locks) and not
    :mod:`multiprocessing` (which would import the caller's main script again in the child)."""

    def __init__(self):
        self.proc = None
        self.lock = threading.Lock()

    def _start(self):
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", _PROBE_SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def close(self):
        """End the child (at exit): it leaves its loop when its input closes."""
        with self.lock:
            if self.proc is not None:
                try:
                    self.proc.stdin.close()
                    self.proc.wait(timeout=2)
                except (OSError, ValueError):
                    pass
                except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: kill it below
                    pass
                self._stop()

    def _stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            self.proc = None

    def probe(self, path: str, attributes: bool, limit: float):
        """'' when h5py read the metadata, the error text when it raised, None when it did not answer
        within ``limit`` seconds (or the child died: then the text says so)."""
        import json
        import select

        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._stop()
                self._start()
            try:
                self.proc.stdin.write(json.dumps([path, attributes]) + "\n")
                self.proc.stdin.flush()
                ready, _, _ = select.select([self.proc.stdout], [], [], limit)
                line = self.proc.stdout.readline() if ready else None
            except OSError:
                line = ""
            if line is None:
                self._stop()
                return None
            if not line:  # EOF: the child died reading the file
                code = self.proc.poll()
                self._stop()
                return f"the HDF5 reader crashed (exit status {code})"
            return json.loads(line)


_PROBER = _Prober()
atexit.register(_PROBER.close)


def _probe_hdf5(p: Path, path, *, attributes: bool = False) -> None:
    """Read the file's metadata (every node's shape and dtype; with ``attributes`` the root's attributes
    too) in a child process first: libhdf5 can loop forever on a damaged file (a few flipped bytes in the
    root attributes), and a loop in C cannot be interrupted in this process. A child that does not answer
    within :data:`HDF5_PROBE_SECONDS` (``KNNGRAPH_HDF5_PROBE_SECONDS``) is killed, and the file called
    damaged (ValueError naming it); so is a child that fails or crashes. The answer is kept per file
    version."""
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, attributes)
    if key in _PROBED:
        return
    limit = float(os.environ.get("KNNGRAPH_HDF5_PROBE_SECONDS") or HDF5_PROBE_SECONDS)
    why = _PROBER.probe(os.fspath(p.resolve()), attributes, limit)
    if why is None:
        raise ValueError(f"{os.fspath(path)}: the HDF5 library did not finish reading this file's metadata "
                         f"within {limit:g} s; the file is corrupt (or not an HDF5 file)")
    if why:
        raise ValueError(f"{os.fspath(path)}: not a readable HDF5 file, or it is corrupt ({why})")
    _PROBED[key] = True


def _open_hdf5(p: Path, path, *, attributes: bool = False):
    """The open file (``attributes``: the caller reads the root's attributes, probed first too)."""
    h5py = _h5py()
    _probe_hdf5(p, path, attributes=attributes)
    with _hdf5_errors(path):
        return h5py.File(p, "r")


def _hdf5_dataset(f, name: str, path):
    """The 2-D numeric dataset ``name`` of the open file ``f``; else ValueError naming the file."""
    h5py = _h5py()
    with _hdf5_errors(path):
        node = f.get(name)
        is_dataset = isinstance(node, h5py.Dataset)
        if is_dataset:
            shape, dtype = node.shape, node.dtype
        else:
            found = sorted(k for k in f if isinstance(f.get(k), h5py.Dataset))
    if not is_dataset:
        raise ValueError(
            f"{os.fspath(path)}: no dataset {name!r} in this HDF5 file; "
            f"it has {', '.join(map(repr, found)) or 'no datasets'}"
        )
    if shape is None or len(shape) != 2:
        raise ValueError(
            f"{os.fspath(path)}: dataset {name!r} has shape {shape}; expected 2-D"
        )
    if dtype.hasobject or dtype.subdtype is not None:
        raise ValueError(
            f"{os.fspath(path)}: dataset {name!r} has dtype {dtype}; expected a numeric dataset"
        )
    return node


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


def read_ann_benchmarks(path: PathLike) -> dict[str, Any]:
    """Load an ann-benchmarks HDF5 file.

    Parameters
    ----------
    path : str or os.PathLike
        ``.hdf5`` or ``.h5`` file with datasets ``train``, ``test``,
        ``neighbors``, ``distances`` and a ``distance`` attribute.

    Returns
    -------
    dict
        ``train``, ``test``, ``neighbors``, ``distances``: loaded arrays with
        the dtypes stored in the file; ``metric``: the knngraph metric name
        (``"euclidean"`` for ``euclidean``, ``"cosine"`` for ``angular``,
        ``"inner_product"`` for ``dot`` or ``ip``).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file is not HDF5, lacks a dataset or the ``distance``
        attribute, or its metric is not supported (``jaccard``, ``hamming``
        and anything not listed above).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from knngraph import io
    >>> path = os.path.join(tempfile.mkdtemp(), "toy-angular.hdf5")
    >>> x = np.eye(4, dtype=np.float32)
    >>> io.write_ann_benchmarks(path, x, x[:2], np.array([[0], [1]], dtype=np.int32),
    ...                         np.zeros((2, 1), dtype=np.float32), "cosine")
    >>> data = io.read_ann_benchmarks(path)
    >>> data["metric"], data["train"].shape, data["neighbors"].shape
    ('cosine', (4, 4), (2, 1))
    """
    metric = _ann_metric(path, required=True, caller="read_ann_benchmarks")
    p = _existing_file(path)
    with _open_hdf5(p, path) as f:
        datasets = {key: _hdf5_dataset(f, key, path) for key in _HDF5_DATASETS}
        with _hdf5_errors(path):
            out = {key: ds[()] for key, ds in datasets.items()}
    out["metric"] = metric
    return out


def is_hdf5(path: PathLike) -> bool:
    """Whether ``path`` has an HDF5 extension (``.hdf5``, ``.h5``)."""
    return Path(os.fspath(path)).suffix.lower() in _HDF5_EXTENSIONS


def ann_benchmarks_metric(path: PathLike) -> str | None:
    """The knngraph metric named by the ``distance`` attribute of an ann-benchmarks HDF5 file
    (``"euclidean"``; ``"cosine"`` for ``angular``; ``"inner_product"`` for ``dot`` or ``ip``), reading
    nothing else; None when the file has no such attribute.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file is not HDF5, or names a metric knngraph does not support (``jaccard``, ``hamming``,
        anything not listed above).
    """
    return _ann_metric(path, required=False, caller="ann_benchmarks_metric")


def _ann_metric(path, *, required: bool, caller: str) -> str | None:
    ext = _extension(path)
    if ext not in _HDF5_EXTENSIONS:
        raise ValueError(
            f"{os.fspath(path)}: {caller} reads HDF5 files (.hdf5, .h5), got {ext}; "
            "use read() for other formats"
        )
    p = _existing_file(path)
    with _open_hdf5(p, path, attributes=True) as f:
        with _hdf5_errors(path):
            raw = f.attrs.get("distance")
    if raw is None:
        if not required:
            return None
        raise ValueError(
            f"{os.fspath(path)}: no 'distance' attribute, so the metric is unknown "
            "(not an ann-benchmarks file?)"
        )
    if isinstance(raw, (bytes, np.bytes_)):
        raw = raw.decode("utf-8", "replace")
    name = str(raw).strip().lower()
    if name in _UNSUPPORTED_ANN_METRICS:
        raise ValueError(
            f"{os.fspath(path)}: metric {name!r} (set-similarity data) is not supported; "
            f"supported ann-benchmarks metrics are {', '.join(_METRIC_FROM_ANN)}"
        )
    if name not in _METRIC_FROM_ANN:
        raise ValueError(
            f"{os.fspath(path)}: unknown ann-benchmarks metric {name!r}; supported are "
            f"{', '.join(_METRIC_FROM_ANN)}"
        )
    return _METRIC_FROM_ANN[name]


# ----------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------


def _atomic_write(path, write_into: Callable[[Path], None]) -> None:
    """Call ``write_into(tmp)`` for a new temp path next to ``path``, then move it in place.

    Errors name ``path``, not the temp file, which never outlives a failed write."""
    target = Path(os.fspath(path))
    parent = target.parent
    if not parent.is_dir():
        raise FileNotFoundError(
            errno.ENOENT, f"cannot write there, directory {parent} does not exist", os.fspath(path)
        )
    tmp = parent / f"{_TEMP_PREFIX}{secrets.token_hex(8)}{_TEMP_SUFFIX}"
    try:
        write_into(tmp)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename in (tmp, os.fspath(tmp)):
            # OSError(errno, ...) gives the matching subclass (PermissionError, ...).
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc
        raise
    _remove_stale_temps(parent)


def _remove_stale_temps(directory: Path) -> None:
    """Delete temp files that crashed or killed saves left in ``directory`` (best effort)."""
    cutoff = time.time() - _STALE_TEMP_SECONDS
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not (entry.name.startswith(_TEMP_PREFIX) and entry.name.endswith(_TEMP_SUFFIX)):
                    continue
                try:
                    old = entry.stat(follow_symlinks=False).st_mtime < cutoff
                    if old and entry.is_file(follow_symlinks=False):
                        os.unlink(entry.path)
                except OSError:
                    pass
    except OSError:
        pass


def _open_new(tmp: Path):
    # O_EXCL: never follow or reuse something already there; mode 0o666 lets the umask apply.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    return os.fdopen(fd, "wb")


def _row_chunks(array: np.ndarray):
    row_bytes = max(1, array.shape[1] * array.dtype.itemsize)
    step = max(1, _CHUNK_BYTES // row_bytes)
    for lo in range(0, array.shape[0], step):
        yield array[lo : lo + step]


def _finish(f) -> None:
    f.flush()
    os.fsync(f.fileno())


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


def write_ann_benchmarks(path: PathLike, train: ArrayLike, test: ArrayLike, neighbors: ArrayLike,
                         distances: ArrayLike, metric: str) -> None:
    """Write an ann-benchmarks HDF5 file, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        Target ``.hdf5`` or ``.h5`` file.
    train : array_like
        Base vectors, shape ``(n_train, dim)``.
    test : array_like
        Queries, shape ``(n_test, dim)``.
    neighbors : array_like
        Integer ids of each query's true neighbours, shape ``(n_test, k)``.
    distances : array_like
        Floating-point distances matching ``neighbors``, shape ``(n_test, k)``.
    metric : {"euclidean", "cosine", "inner_product"}
        knngraph metric name, stored as the ``distance`` attribute
        ``euclidean``, ``angular`` or ``dot``.

    Raises
    ------
    ValueError
        If the extension is not HDF5, ``metric`` is not one of the names
        above, an array is not 2-D, or the shapes disagree.
    TypeError
        If ``neighbors`` is not an integer array or ``distances`` not a
        floating-point array.

    Examples
    --------
    See :func:`read_ann_benchmarks`.
    """
    ext = _extension(path)
    if ext not in _HDF5_EXTENSIONS:
        raise ValueError(
            f"{os.fspath(path)}: write_ann_benchmarks writes HDF5 files (.hdf5, .h5), got {ext}"
        )
    if metric not in _METRIC_TO_ANN:
        raise ValueError(
            f"metric must be one of {', '.join(map(repr, _METRIC_TO_ANN))}, got {metric!r}"
        )
    arrays = {
        "train": np.asarray(train),
        "test": np.asarray(test),
        "neighbors": np.asarray(neighbors),
        "distances": np.asarray(distances),
    }
    for name, arr in arrays.items():
        if arr.ndim != 2:
            raise ValueError(f"{name}: expected a 2-D array, got shape {arr.shape}")
    if arrays["neighbors"].dtype.kind not in "iu":
        raise TypeError(f"neighbors: expected an integer array, got {arrays['neighbors'].dtype}")
    if arrays["distances"].dtype.kind != "f":
        raise TypeError(
            f"distances: expected a floating-point array, got {arrays['distances'].dtype}"
        )
    if arrays["train"].shape[1] != arrays["test"].shape[1]:
        raise ValueError(
            f"test: expected {arrays['train'].shape[1]} columns like train, "
            f"got {arrays['test'].shape[1]}"
        )
    if arrays["neighbors"].shape != arrays["distances"].shape:
        raise ValueError(
            f"distances: expected the shape of neighbors {arrays['neighbors'].shape}, "
            f"got {arrays['distances'].shape}"
        )
    if arrays["neighbors"].shape[0] != arrays["test"].shape[0]:
        raise ValueError(
            f"neighbors: expected one row per test query ({arrays['test'].shape[0]}), "
            f"got {arrays['neighbors'].shape[0]}"
        )
    h5py = _h5py()

    def write_into(tmp: Path) -> None:
        with h5py.File(tmp, "x") as f:
            f.attrs["type"] = "dense"
            f.attrs["distance"] = _METRIC_TO_ANN[metric]
            f.attrs["dimension"] = arrays["train"].shape[1]
            f.attrs["point_type"] = "float"
            for name, arr in arrays.items():
                f.create_dataset(name, data=arr)
        with open(tmp, "rb+") as f:
            _finish(f)

    _atomic_write(path, write_into)
