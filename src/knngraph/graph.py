"""The :class:`Graph` every builder returns and every searcher accepts.

A graph is a fixed-degree adjacency: ``indices`` int32 [n, degree] (-1 = "no neighbour"), ``distances``
float32 [n, degree] (inf where the id is -1), sorted ascending per row, plus the metric the distances
are in. Files are versioned, written atomically (temp file + rename) and checksummed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ._device import as_numpy
from .metrics import canonical_metric

__all__ = ["Graph", "save_arrays", "load_arrays", "read_header"]

FORMAT_VERSION = 1


def save_arrays(path, kind: str, arrays: dict, meta: dict) -> None:
    """Write ``arrays`` (name -> NumPy array) and ``meta`` to ``path`` atomically, with a checksum.

    The file is a zip of ``.npy`` members plus ``meta.json`` holding the format version, the object
    kind and a SHA-256 over the members, so truncation and corruption are detected on load.
    """
    path = os.fspath(path)
    digest = hashlib.sha256()
    blobs = {}
    for name in sorted(arrays):
        import io as _io

        buf = _io.BytesIO()
        np.save(buf, np.ascontiguousarray(arrays[name]), allow_pickle=False)
        blobs[name] = buf.getvalue()
        digest.update(name.encode())
        digest.update(blobs[name])
    header = {"format": "knngraph", "version": FORMAT_VERSION, "kind": kind, "sha256": digest.hexdigest(),
              "meta": meta}
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".knngraph-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr("meta.json", json.dumps(header))
            for name, blob in blobs.items():
                zf.writestr(name + ".npy", blob)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _open(path, what: str, *, arrays: bool) -> tuple[dict, dict]:
    """(header, raw .npy members) of a knngraph file; FileNotFoundError / ValueError naming the file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with zipfile.ZipFile(path, "r") as zf:
            header = json.loads(zf.read("meta.json"))
            blobs = {n[:-4]: zf.read(n) for n in zf.namelist() if n.endswith(".npy")} if arrays else {}
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, EOFError, OSError) as exc:
        raise ValueError(f"{path}: not a knngraph {what}file or it is truncated/corrupt ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != "knngraph":
        raise ValueError(f"{path}: not a knngraph file")
    return header, blobs


def read_header(path) -> dict:
    """The header of a knngraph file (``format``, ``version``, ``kind``, ...) without reading its arrays;
    ValueError naming the file when it is not one."""
    return _open(path, "", arrays=False)[0]


def load_arrays(path, kind: str) -> tuple[dict, dict]:
    """Read a file written by :func:`save_arrays`; ValueError naming the file when it is not valid."""
    import io as _io

    header, blobs = _open(path, kind + " ", arrays=True)
    path = os.fspath(path)
    if header.get("kind") != kind:
        raise ValueError(f"{path}: holds a knngraph {header.get('kind')!r}, expected a {kind!r}")
    if int(header.get("version", -1)) > FORMAT_VERSION:
        raise ValueError(f"{path}: written by a newer knngraph (format version {header.get('version')}; "
                         f"this one reads up to {FORMAT_VERSION})")
    digest = hashlib.sha256()
    for name in sorted(blobs):
        digest.update(name.encode())
        digest.update(blobs[name])
    if digest.hexdigest() != header.get("sha256"):
        raise ValueError(f"{path}: checksum mismatch, the file is corrupt")
    arrays = {n: np.load(_io.BytesIO(b), allow_pickle=False) for n, b in blobs.items()}
    return arrays, header.get("meta", {})


@dataclass
class Graph:
    """A fixed-degree k-NN (or search) graph.

    Attributes
    ----------
    indices : ndarray of int32, shape (n, degree)
        Neighbour ids per node, nearest first; -1 marks "no neighbour".
    distances : ndarray of float32, shape (n, degree)
        Distances matching ``indices`` in the graph's metric (inf where the id is -1).
    metric : str
        The metric the distances are in (see :mod:`knngraph.metrics`).
    info : dict
        How the graph was made (method, parameters, timings); saved with it.
    """

    indices: np.ndarray
    distances: np.ndarray
    metric: str = "sqeuclidean"
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.metric = canonical_metric(self.metric)
        idx = self.indices
        dist = self.distances
        if idx.ndim != 2 or dist.shape != idx.shape:
            raise ValueError(f"Graph needs indices and distances of the same 2-D shape, got {idx.shape} and "
                             f"{dist.shape}")
        if idx.dtype != np.int32:
            raise TypeError(f"Graph indices must be int32, got {idx.dtype}")
        if dist.dtype != np.float32:
            raise TypeError(f"Graph distances must be float32, got {dist.dtype}")

    @property
    def n(self) -> int:
        return int(self.indices.shape[0])

    @property
    def degree(self) -> int:
        return int(self.indices.shape[1])

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        where = "cuda" if type(self.indices).__module__.startswith("cupy") else "cpu"
        return f"Graph(n={self.n}, degree={self.degree}, metric={self.metric!r}, on={where})"

    def to_host(self) -> "Graph":
        """A copy whose arrays are NumPy (a no-op for host graphs)."""
        if isinstance(self.indices, np.ndarray):
            return self
        return Graph(as_numpy(self.indices), as_numpy(self.distances), self.metric, dict(self.info))

    def validate_ids(self) -> None:
        """ValueError when an id is outside [-1, n) (for graphs supplied by users)."""
        idx = as_numpy(self.indices)
        bad = (idx < -1) | (idx >= self.n)
        if bad.any():
            row = int(np.argmax(bad.any(axis=1)))
            raise ValueError(f"graph row {row} holds neighbour ids outside [-1, {self.n}): "
                             f"{idx[row][bad[row]][:5].tolist()}")

    def save(self, path) -> None:
        """Write the graph to ``path`` (versioned, atomic, checksummed)."""
        g = self.to_host()
        meta = {"metric": g.metric, "info": _jsonable(g.info)}
        save_arrays(path, "graph", {"indices": g.indices, "distances": g.distances}, meta)

    @classmethod
    def load(cls, path) -> "Graph":
        """Read a graph written by :meth:`save` (host arrays)."""
        arrays, meta = load_arrays(path, "graph")
        return cls(arrays["indices"], arrays["distances"], meta.get("metric", "sqeuclidean"),
                   dict(meta.get("info", {})))


def _jsonable(obj):
    try:
        json.dumps(obj)
        return obj
    except TypeError:
        if isinstance(obj, dict):
            return {str(k): _jsonable(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [_jsonable(v) for v in obj]
        if isinstance(obj, np.generic):
            return obj.item()
        return repr(obj)
