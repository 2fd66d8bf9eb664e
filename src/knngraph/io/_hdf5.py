"""ann-benchmarks HDF5 files (``.hdf5`` / ``.h5``): reading, the metric attribute, writing.

An ann-benchmarks file holds the datasets ``train``, ``test``, ``neighbors`` and ``distances`` and a
``distance`` attribute naming the metric, mapped here to knngraph's metric names. This module imports
h5py only when a file is touched (it is the optional ``hdf5`` extra), opens files only after the probe
of :mod:`._hdf5_probe`, turns whatever h5py raises for a damaged file into ``ValueError`` naming it, and
holds the public :func:`read_ann_benchmarks`, :func:`write_ann_benchmarks` (atomic, through
:mod:`._atomic`), :func:`ann_benchmarks_metric` and :func:`is_hdf5`, re-exported by :mod:`knngraph.io`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._typing import PathLike
from ._atomic import _atomic_write, _finish
from ._formats import _HDF5_EXTENSIONS, _existing_file, _extension
from ._hdf5_probe import _probe_hdf5

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


def _h5py():
    try:
        import h5py
    except ImportError as exc:  # tests/test_io.py runs this in a child process without h5py
        raise ImportError("HDF5 files (ann-benchmarks) need h5py: pip install 'knngraph[hdf5]' "
                          "(or pip install h5py)") from exc
    return h5py


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
