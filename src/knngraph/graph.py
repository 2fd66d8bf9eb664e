"""The :class:`Graph` every builder returns and every searcher accepts.

A graph is a fixed-degree adjacency: ``indices`` int32 [n, degree] (-1 = "no neighbour"), ``distances``
float32 [n, degree] (inf where the id is -1), sorted ascending per row, plus the metric the distances
are in. Files are versioned, written atomically (temp file + rename) and checksummed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, overload

import numpy as np
from numpy.typing import DTypeLike

from ._device import as_cupy, as_numpy
from ._typing import FileTarget
from .io import _atomic_write, _finish, _open_new, _parse_npy_header
from .metrics import canonical_metric

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

__all__ = ["Graph", "save_arrays", "load_arrays", "read_header"]

FORMAT_VERSION = 1


def _is_path(target) -> bool:
    return isinstance(target, (str, os.PathLike))


def _display_name(target) -> str:
    """How messages name ``target``: a path as given, a file object by its ``name`` (else
    ``<file object>``)."""
    name = target if _is_path(target) else getattr(target, "name", None)
    if isinstance(name, (str, bytes, os.PathLike)):
        return os.fsdecode(name)
    return "<file object>"  # no name, or the int descriptor of os.fdopen / TemporaryFile


def _check_file_object(f, name: str, *, writing: bool) -> None:
    """TypeError / ValueError unless ``f`` is an open binary file object fit for saving (``writing``)
    or loading (readable and seekable)."""
    methods = ("write",) if writing else ("read", "seek", "tell")
    if not all(callable(getattr(f, m, None)) for m in methods):
        raise TypeError(f"expected a path (str or os.PathLike) or a binary file object, got {type(f).__name__}")
    mode = "wb" if writing else "rb"
    if isinstance(f, io.TextIOBase):
        raise TypeError(f"{name}: is a text file object; open the file in binary mode ({mode!r})")
    if getattr(f, "closed", False):
        raise ValueError(f"{name}: the file object is closed")
    able = ("writable",) if writing else ("readable", "seekable")
    for check in able:
        if callable(getattr(f, check, None)) and not getattr(f, check)():
            raise TypeError(f"{name}: the file object is not {check} (open the file with {mode!r})")


def save_arrays(target: FileTarget, kind: str, arrays: dict, meta: dict) -> None:
    """Write ``arrays`` (name -> NumPy array) and ``meta`` to ``target``, with a checksum.

    The file is a zip of ``.npy`` members plus ``meta.json`` holding the format version, the object
    kind and a SHA-256 over the members, so truncation and corruption are detected on load.
    ``target`` is a path, written atomically (a temp file in its directory, created like ``open()``
    would, then renamed), or a writable binary file object, written from its current position.
    """
    name = _display_name(target)
    if not _is_path(target):
        _check_file_object(target, name, writing=True)
    digest = hashlib.sha256()
    blobs = {}
    for member in sorted(arrays):
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(arrays[member]), allow_pickle=False)
        blobs[member] = buf.getvalue()
        digest.update(member.encode())
        digest.update(blobs[member])
    header = json.dumps({"format": "knngraph", "version": FORMAT_VERSION, "kind": kind,
                         "sha256": digest.hexdigest(), "meta": meta})

    def write_zip(fh) -> None:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr("meta.json", header)
            for member, blob in blobs.items():
                zf.writestr(member + ".npy", blob)

    if not _is_path(target):
        write_zip(target)
        return

    def write_into(tmp) -> None:
        with _open_new(tmp) as fh:
            write_zip(fh)
            _finish(fh)

    _atomic_write(target, write_into)


class _Arrays(dict):
    """The arrays of a file; asking for one it lacks is a ValueError naming the file."""

    def __init__(self, arrays: dict, name: str, kind: str):
        super().__init__(arrays)
        self._name, self._kind = name, kind

    def __missing__(self, key):
        raise ValueError(f"{self._name}: the knngraph {self._kind} file has no {key!r} array; it is incomplete "
                         "or corrupt")


def _read_container(source, what: str, *, arrays: bool) -> tuple[dict, dict]:
    """(checked header, raw .npy members by name) of a knngraph file (path or file object); the one place
    that opens and validates the zip. FileNotFoundError / ValueError naming the file."""
    name = _display_name(source)
    if _is_path(source):
        if not os.path.exists(source):
            raise FileNotFoundError(f"{name}: no such file")
        if os.path.isdir(source):
            raise ValueError(f"{name}: is a directory, not a knngraph {what}file")
    else:
        _check_file_object(source, name, writing=False)
    try:
        with zipfile.ZipFile(source, "r") as zf:
            for info in zf.infolist():
                if info.compress_type != zipfile.ZIP_STORED:
                    raise ValueError(f"member {info.filename!r} is compressed (method {info.compress_type}); "
                                     "knngraph stores members uncompressed")
            header = json.loads(zf.read("meta.json"))
            blobs = {n[:-4]: zf.read(n) for n in zf.namelist() if n.endswith(".npy")} if arrays else {}
    except MemoryError:
        raise
    except Exception as exc:  # zipfile and json fail in many ways on damaged files (struct.error, ...)
        raise ValueError(f"{name}: not a knngraph {what}file or it is truncated/corrupt "
                         f"({type(exc).__name__}: {exc})") from exc
    if not isinstance(header, dict):
        raise ValueError(f"{name}: not a knngraph file (its meta.json holds a {type(header).__name__}, "
                         "not an object)")
    if header.get("format") != "knngraph":
        raise ValueError(f"{name}: not a knngraph file")
    version = header.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{name}: invalid format version {version!r} (expected a positive integer); the "
                         "file is corrupt")
    if version > FORMAT_VERSION:
        raise ValueError(f"{name}: written by a newer knngraph (format version {version}; "
                         f"this one reads up to {FORMAT_VERSION})")
    if not isinstance(header.get("kind"), str):
        raise ValueError(f"{name}: the file names no object kind (kind={header.get('kind')!r}); it is corrupt")
    if not isinstance(header.get("meta", {}), dict):
        raise ValueError(f"{name}: its meta is a {type(header['meta']).__name__}, not an object; the file "
                         "is corrupt")
    return header, blobs


def _member_array(blob: bytes, where: str) -> np.ndarray:
    """The array of one ``.npy`` member (a writeable copy); ValueError starting with ``where``."""
    shape, fortran, dtype, offset = _parse_npy_header(io.BytesIO(blob), where)
    count = int(np.prod(shape, dtype=object))
    expected = offset + count * dtype.itemsize
    if expected != len(blob):
        raise ValueError(f"{where}: header says shape {shape} of {dtype} ({expected} bytes) but the member has "
                         f"{len(blob)} bytes")
    try:
        flat = np.frombuffer(blob, dtype=dtype, count=count, offset=offset)
        return flat.reshape(shape, order="F" if fortran else "C").copy(order="K")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def read_header(source: FileTarget) -> dict:
    """The header of a knngraph file (``format``, ``version``, ``kind``, ...) without reading its arrays;
    ``source`` is a path or a seekable binary file object. ValueError naming the file when it is not
    one."""
    return _read_container(source, "", arrays=False)[0]


def load_arrays(source: FileTarget, kind: str) -> tuple[dict, dict]:
    """(arrays, meta) of a file written by :func:`save_arrays` (a path or a seekable binary file object);
    ValueError naming the file when it is not valid, also when asking the arrays for one it lacks."""
    header, blobs = _read_container(source, kind + " ", arrays=True)
    name = _display_name(source)
    if header["kind"] != kind:
        raise ValueError(f"{name}: holds a knngraph {header['kind']!r}, expected a {kind!r}")
    digest = hashlib.sha256()
    for member in sorted(blobs):
        digest.update(member.encode())
        digest.update(blobs[member])
    if digest.hexdigest() != header.get("sha256"):
        raise ValueError(f"{name}: checksum mismatch, the file is corrupt")
    arrays = {m: _member_array(b, f"{name}: member {m + '.npy'!r}") for m, b in blobs.items()}
    return _Arrays(arrays, name, kind), header.get("meta", {})


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
        self.validate_ids()

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

    def to_device(self) -> "Graph":
        """A copy whose arrays are CuPy, on the current GPU (a no-op for device graphs)."""
        if not isinstance(self.indices, np.ndarray):
            return self
        return Graph(as_cupy(self.indices), as_cupy(self.distances), self.metric, dict(self.info))

    def to_csr(self, *, include_self: bool = False, symmetrize: bool = False, mode: str = "distance",
               metric: str | None = None, dtype: DTypeLike = np.float32) -> csr_matrix:
        """The graph as a SciPy CSR matrix of shape (n, n), the sparse ``metric="precomputed"`` input of
        scikit-learn's HDBSCAN, DBSCAN, TSNE, Isomap, SpectralClustering and of ``scipy.sparse.csgraph``.

        Parameters
        ----------
        include_self : bool, default=False
            Add each node as its own neighbour at distance 0, stored as an explicit zero (as
            scikit-learn's ``KNeighborsTransformer`` does for the training data). scikit-learn's ``TSNE``
            needs it: each row must hold the point itself and at least ``3 * perplexity + 1``
            neighbours, so a graph of ``k >= 3 * perplexity + 1`` (91 at the default perplexity 30).
        symmetrize : bool, default=False
            Make the graph undirected: the union of the edges i -> j and j -> i.
        mode : {'distance', 'connectivity'}, default='distance'
            Store distances, or ones.
        metric : str, optional
            Metric of the stored distances (default: the graph's); euclidean and sqeuclidean convert.
        dtype : {numpy.float32, numpy.float64}, default=numpy.float32
            dtype of the stored values.

        Returns
        -------
        scipy.sparse.csr_matrix
            Entries of each row nearest first (ties by column); "no neighbour" (-1) entries are left
            out; zero distances (duplicates, self) are kept as explicit entries.

        Examples
        --------
        >>> import numpy as np, knngraph
        >>> x = np.array([[0], [1], [3], [7]], dtype=np.float32)
        >>> m = knngraph.knn_graph(x, k=1, device="cpu").to_csr(symmetrize=True, metric="euclidean")
        >>> m.toarray().tolist()
        [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 2.0, 0.0], [0.0, 2.0, 0.0, 4.0], [0.0, 0.0, 4.0, 0.0]]
        """
        from .handoff import graph_to_csr

        return graph_to_csr(self, include_self=include_self, symmetrize=symmetrize, mode=mode, metric=metric,
                            dtype=dtype)

    @property
    def n_nodes(self) -> int:
        """The bound of the ids: ``info["n"]`` for a block of rows of a larger graph (rows ``info["rows"]``
        of a graph over ``info["n"]`` nodes, as sharded builds write them), else the number of rows."""
        return int(self.info.get("n", self.n)) if isinstance(self.info, dict) else self.n

    def validate_ids(self, n: int | None = None) -> None:
        """ValueError when an id is outside [-1, n) (default n: :attr:`n_nodes`). Every constructor and
        converter calls it: an id out of range would make SciPy's CSR matrices write out of bounds and
        searches read past the vectors. A searcher passes the number of its vectors: a block of rows of a
        larger graph (``info["n"]`` above its rows) holds ids no search over those vectors may follow."""
        idx = self.indices
        if idx.size == 0:
            return
        n = self.n_nodes if n is None else int(n)
        xp = np if isinstance(idx, np.ndarray) else __import__("cupy")
        lo, hi = int(idx.min()), int(idx.max())
        if lo >= -1 and hi < n:
            return
        bad = (idx < -1) | (idx >= n)
        row = int(xp.argmax(bad.any(axis=1)))
        vals = as_numpy(idx[row])[as_numpy(bad[row])][:5].tolist()
        raise ValueError(f"graph row {row} holds neighbour ids outside [-1, {n}): {vals}")

    @overload
    def components(self, *, return_labels: Literal[False] = False) -> int: ...

    @overload
    def components(self, *, return_labels: Literal[True]) -> tuple[int, np.ndarray]: ...

    def components(self, *, return_labels: bool = False) -> int | tuple[int, np.ndarray]:
        """The number of weakly connected components of the graph (edges taken both ways; -1 entries are
        no edges), and with ``return_labels`` an int64 label per node (0 .. count-1, in order of each
        component's smallest id). A search graph of several components leaves vertices that a search
        from one component never reaches; :func:`knngraph.graphops.unreachable_count` counts those for
        given entry points.

        Examples
        --------
        >>> import numpy as np, knngraph
        >>> ids = np.array([[1], [0], [3], [2]], np.int32)
        >>> knngraph.Graph(ids, np.ones((4, 1), np.float32)).components(return_labels=True)
        (2, array([0, 0, 1, 1]))
        """
        from .primitives.components import weak_components

        count, labels = weak_components(self.indices)
        return (count, labels) if return_labels else count

    def save(self, target: FileTarget) -> None:
        """Write the graph to ``target``, a path (versioned, atomic, checksummed) or a writable binary
        file object."""
        g = self.to_host()
        meta = {"metric": g.metric, "info": _jsonable(g.info)}
        save_arrays(target, "graph", {"indices": g.indices, "distances": g.distances}, meta)

    @classmethod
    def load(cls, source: FileTarget) -> "Graph":
        """Read a graph written by :meth:`save` (host arrays) from a path or a seekable binary file
        object; ValueError naming the file when it does not hold a valid graph."""
        arrays, meta = load_arrays(source, "graph")
        indices, distances = arrays["indices"], arrays["distances"]
        try:
            return cls(indices, distances, meta.get("metric", "sqeuclidean"), dict(meta.get("info", {})))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{_display_name(source)}: not a valid graph file ({exc})") from exc


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
