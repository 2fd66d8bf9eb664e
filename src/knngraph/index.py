"""The module contract every algorithm folder follows, and the pieces they share.

**The contract** (after cuVS's Python API, ``cuvs.neighbors.cagra``; parameter conventions after
scikit-learn). Every algorithm folder (``knngraph.bruteforce``, ``knngraph.nndescent``,
``knngraph.song``, and those to come) re-exports, in ``__all__``:

``IndexParams``
    frozen, keyword-only dataclass of build parameters; every field is checked on construction (the
    message names the field, the allowed values and the value given); defaults in the signature, ``0`` /
    ``"auto"`` documented sentinels
``SearchParams``
    the same for search parameters (searchers only)
``Index``
    the built object: ``params``, ``dataset``, ``metric``, ``shape``, ``search(queries, k, params=None,
    ...)``; a graph builder's index has ``graph`` (a :class:`~knngraph.Graph`)
``build(params, dataset, *, device, memory_limit, verbose)``
    the index of ``dataset``
``search(index, queries, k, params=None, *, device, verbose, filter, stats, memory_limit, out, n_threads)``
    ``KNNResult(distances, indices)``; the keywords after ``verbose`` are :data:`SEARCH_KEYWORDS` (below)
``extend(index, new_vectors, *, device, memory_limit, verbose)``
    a new index with the vectors added (where the algorithm can add vectors)
``from_graph(graph, dataset, params=None, *, device, ...)``
    graph searchers: an index over any builder's graph, so any builder's graph with any searcher is one
    call
``save(path, index)`` / ``load(path, *, metric=None)``
    versioned, atomic, checksummed files; ``load`` refuses a ``metric`` other than the saved one

Vocabulary: ``graph_degree`` is the number of neighbours per node of a graph, everywhere; ``k`` is the
number of neighbours per query. Run-time concerns are call arguments, never params fields: ``device``
('auto', 'cpu', 'cuda', 'cuda:N'), ``memory_limit`` (bytes or "8GB"; None: free device memory minus a
margin, a quarter of RAM on the CPU) and ``verbose`` (a progress bar on a terminal).

**Search keywords.** Every searcher's ``search`` takes the same keywords, :data:`SEARCH_KEYWORDS`:
``filter`` (the ids that may be returned), ``stats`` (a dict the call fills, ``seconds`` at least),
``memory_limit`` (as for builds), ``out`` (a ``(distances, indices)`` pair of arrays to fill and return,
checked by :func:`check_out`) and ``n_threads`` (threads of the CPU kernels of this call,
:func:`cpu_threads`); GGNN adds ``devices`` (its shards spread over GPUs). Each searcher honours each
keyword or refuses a value other than None with a ValueError that names it ("ggnn.search does not
support filter= ..."); none is accepted and ignored. Their docstrings share the descriptions of
:data:`RUNTIME_DOCS`.

Results are ``(distances, indices)``: float32 / int32 arrays of shape (n_queries, k), nearest first,
ties broken by the lower id, -1 / inf where fewer than k neighbours exist, returned in the framework of
the queries. Which algorithms exist, and what each can do, is :mod:`knngraph.registry`: the one table
that ``knngraph.knn_graph``, the CLI, the scikit-learn transformer and the benchmarks read.

CPU and GPU implementations sit behind one dispatch idiom (:func:`knngraph._device.implementation`);
kernels are built from the shared helpers of :mod:`knngraph.primitives` and graph operations of
:mod:`knngraph.graphops`; graph searchers share the fast graph searcher :mod:`knngraph.beam` through its
public functions. Algorithms never import each other's private modules or the top-level API.

**References** (cited by short name in the code): Komarov, Dashti, D'Souza, "Fast k-NNG Construction
with GPU-Based Quick Multi-Select" (exact k-NN); Wang, Zhao, Zeng, "Fast k-NN Graph Construction by GPU
based NN-Descent" (GNND, GGM); Zhao, Tan, Li, "SONG: Approximate Nearest Neighbor Search on GPU"
(SONG); Groh, Ruppert, Wieschollek, Lensch, "GGNN: Graph-Based GPU Nearest Neighbor Search" (GGNN);
Li, Li, Chang et al., "GRNND: A GPU-Parallel Relative NN-Descent Algorithm for Efficient Approximate
Nearest Neighbor Graph Construction" (GRNND).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np

from ._device import Device, as_numpy, is_device_array
from ._typing import Array, FileTarget
from .graph import _display_name, _jsonable, load_arrays, save_arrays

#: a function, kept as it is by decorators that only edit its docstring
_F = TypeVar("_F", bound=Callable[..., Any])
#: an index class
_I = TypeVar("_I", bound="Index")

__all__ = ["KNNResult", "Index", "save_index", "load_index", "save_graph_index", "load_graph_index", "assembling",
           "RUNTIME_DOCS", "runtime_docs", "SEARCH_KEYWORDS", "check_out", "fill_out",
           "check_n_threads", "cpu_threads", "check_index_type"]


class KNNResult(NamedTuple):
    """``(distances, indices)``: float32 distances and int32 ids, [n_queries, k], nearest first."""

    distances: Array
    indices: Array


class Index:
    """Base of every algorithm's ``Index`` (subclasses are dataclasses with ``params`` and ``dataset``).

    Subclasses set ``algorithm`` (the :mod:`knngraph.registry` name), ``_file_kind`` (the index file's
    kind) and ``_params_class``."""

    algorithm: ClassVar[str] = ""
    _module: ClassVar[str] = ""
    _file_kind: ClassVar[str] = ""
    _params_class: ClassVar[type] = object

    @property
    def metric(self) -> str:
        """The metric the index was built with (see :mod:`knngraph.metrics`)."""
        return self.params.metric

    @property
    def shape(self) -> tuple:
        """(number of vectors, dimension)."""
        n, d = self.dataset.shape
        return int(n), int(d)

    def __len__(self) -> int:
        return self.shape[0]

    def __getstate__(self) -> dict:
        """Pickle (Dask, multiprocessing, copy) without the per-device caches (``_cache``, ``_prepared``) and a
        searcher's view of them (``_view``): device copies, compiled launches and their raw pointers belong to
        the process that made them and are rebuilt on first use."""
        state = self.__dict__.copy()
        for cache in ("_cache", "_prepared"):
            if cache in state:
                state[cache] = {}
        if "_view" in state:
            state["_view"] = None
        return state

    def search(self, queries: Array, k: int, params: Any = None, **kwargs: Any) -> KNNResult:
        """The top-``k`` of each query: the algorithm's ``search(self, queries, k, params, **kwargs)``."""
        module = importlib.import_module(self._module)
        if not hasattr(module, "search"):
            raise TypeError(f"{self.algorithm} builds graphs and has no search of its own; search its graph with "
                            "a graph searcher, e.g. knngraph.song.search(knngraph.song.from_graph(index.graph, "
                            "index.dataset), queries, k)")
        return module.search(self, queries, k, params, **kwargs)


def save_index(target: FileTarget, index: Index, arrays: dict, meta: dict | None = None) -> None:
    """Write ``arrays`` (name -> array, host copies are made), the index's params and, for an index with
    deleted rows, its ``row_ids`` (:meth:`~knngraph.primitives.filters.RowIds.arrays`) to ``target``, a path
    (versioned, atomic, checksummed) or a writable binary file object; see
    :func:`knngraph.graph.save_arrays`."""
    params = {f.name: getattr(index.params, f.name) for f in dataclasses.fields(index.params)}
    header = {"metric": index.metric, "params": _jsonable(params), **(meta or {})}
    rows = getattr(index, "row_ids", None)
    if rows is not None:  # deleted rows and user ids (files without them load as nothing deleted)
        row_arrays, row_meta = rows.arrays()
        arrays = {**arrays, **row_arrays}
        header.update(row_meta)
    save_arrays(target, index._file_kind, {name: as_numpy(a) for name, a in arrays.items()}, header)


def load_index(source: FileTarget, cls: type, *, metric: str | None = None) -> tuple[dict, Any, dict]:
    """(arrays, params, meta) of an index file written by :func:`save_index` for ``cls`` (a path or a
    seekable binary file object); ValueError naming the file when it holds another kind of object, misses
    parts (also when asking ``arrays`` for one it lacks), or was saved with a metric other than ``metric``
    (when given)."""
    from .metrics import canonical_metric

    arrays, meta = load_arrays(source, cls._file_kind)
    name = _display_name(source)
    try:
        params = cls._params_class(**meta["params"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not a complete {cls.algorithm} index ({type(exc).__name__}: {exc})") from None
    if metric is not None and canonical_metric(metric) != params.metric:
        raise ValueError(f"{name}: index was saved with metric {params.metric!r}, not {metric!r}")
    return arrays, params, meta


def save_graph_index(target: FileTarget, index: Index) -> None:
    """:func:`save_index` for an index that is its vectors, its params and one graph (``dataset``,
    ``params``, ``graph``: the graph builders' indexes); the graph's scalar ``info`` is kept."""
    g = index.graph.to_host()
    info = {k: v for k, v in g.info.items() if isinstance(v, (int, float, str, bool))}
    save_index(target, index, {"indices": g.indices, "distances": g.distances, "dataset": index.dataset},
               {"info": info})


def load_graph_index(source: FileTarget, cls: type[_I], *, metric: str | None = None) -> _I:
    """The ``cls(dataset, params, graph)`` written by :func:`save_graph_index` (host arrays), with the
    checks of :func:`load_index` and :func:`assembling`."""
    from .graph import Graph

    arrays, params, meta = load_index(source, cls, metric=metric)
    with assembling(source, cls):
        graph = Graph(arrays["indices"], arrays["distances"], params.metric, dict(meta.get("info", {})))
        dataset = arrays["dataset"]
    with assembling(source, cls, dataset, graph):
        return cls(dataset, params, graph)


@contextlib.contextmanager
def assembling(source: FileTarget, cls: type, dataset: Array | None = None, graph: Any = None) -> Iterator[None]:
    """Build an index from the parts :func:`load_index` returned inside this block: a missing or ill-formed
    part becomes a ValueError naming the file. ``dataset`` and ``graph``, when given, are checked first to
    belong together (a hand-made or damaged file can carry a valid checksum): 2-D numeric vectors, one
    graph row per vector, every id in [-1, n)."""
    try:
        if dataset is not None:
            _check_parts(dataset, graph)
        yield
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{_display_name(source)}: not a complete {cls.algorithm} index "
                         f"({type(exc).__name__}: {exc})") from None


def _check_parts(dataset, graph) -> None:
    if dataset.ndim != 2 or dataset.shape[0] < 1 or dataset.dtype.kind not in "fiu":
        raise ValueError(f"its vectors are {dataset.dtype} of shape {dataset.shape}, not a 2-D numeric array")
    if graph is None:
        return
    n = dataset.shape[0]
    if graph.indices.shape[0] != n:
        raise ValueError(f"its graph has {graph.indices.shape[0]} rows for {n} vectors")
    if graph.indices.size and (int(graph.indices.min()) < -1 or int(graph.indices.max()) >= n):
        raise ValueError(f"its graph holds neighbour ids outside [-1, {n})")


#: docstring fragments of the run-time call arguments, shared by every public function
RUNTIME_DOCS = {
    "devices": """devices : list of int or str, or 'all', optional
        Several devices of this host at once (:mod:`knngraph.multidevice`): GPU ids (``[0, 1]``,
        ``'cuda:1'``), ``'all'``, or ``'cpu'`` entries (logical CPU devices). The index is spread over them
        as ``layout`` says, built on all at once, and a
        :class:`~knngraph.multidevice.MultiDeviceIndex` is returned.""",
    "layout": """layout : {'auto', 'sharded', 'replicated'}, default='auto'
        With ``devices``: the rows split over the devices, every query searched on each and the top-k
        merged (sharded), or the whole index on each device and the queries split between them
        (replicated); 'auto' replicates when the vectors take at most a quarter of each device's memory
        budget.""",
    "devices_search": """devices : list of int or str, or 'all', optional
        Search a one-device index on several devices at once, the queries split between them (a
        replicated search, :mod:`knngraph.multidevice`). A
        :class:`~knngraph.multidevice.MultiDeviceIndex` (``build(..., devices=...)``) is searched on its
        own devices without it.""",
    "device": """device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Where to run: 'auto' uses the GPU when CuPy and numba-cuda can run on one (the GPU holding a
        device input first), else the CPU.""",
    "memory_limit": """memory_limit : int or str or None, default=None
        Most bytes of working memory ("8GB" works): device memory on the GPU. None: free device memory
        minus a margin (GPU), a quarter of RAM (CPU). Work is cut to fit.""",
    "verbose": """verbose : bool, default=True
        A progress bar for long work (only on a terminal).""",
    "filter": """filter : array, optional
        The ids that may be returned (also how deleted vectors are expressed): a boolean mask of length
        n (True: allowed) or a bitset of ceil(n / 32) uint32 words, id i being bit i % 32 of word
        i // 32 (:mod:`knngraph.primitives.filters`). Rows get -1 / inf where fewer than k ids are
        allowed.""",
    "stats": """stats : dict, optional
        Filled with facts of the call: ``seconds`` always; graph searchers add ``distances_per_query``
        (mean distance computations) and ``expansions_per_query`` (mean vertices whose row was read).""",
    "out": """out : (distances, indices), optional
        Arrays to fill and return: C-contiguous, shape (n_queries, k), float32 and int32, on the device
        that runs the search (CuPy on a GPU, NumPy on the CPU).""",
    "n_threads": """n_threads : int, optional
        Threads of this call's CPU kernels (default: numba's setting, all cores unless
        ``NUMBA_NUM_THREADS`` or :func:`numba.set_num_threads` says otherwise; the setting is restored
        afterwards); on a GPU only the call's CPU work, if any, runs on them.""",
}

#: the keywords every searcher's ``search`` takes after ``device`` and ``verbose`` (the contract, see the
#: module docs): each is honoured, or a value other than None is refused with a ValueError
#: "<searcher>.search does not support <keyword>=; <what to use instead>"
SEARCH_KEYWORDS = ("filter", "stats", "memory_limit", "out", "n_threads")


def check_out(out: object, n_queries: int, k: int, device: Device) -> None:
    """``out=``: a (distances, indices) pair of C-contiguous arrays of shape (n_queries, k), float32 and
    int32, on the device that runs the search (CuPy on a GPU, NumPy on the CPU); TypeError or ValueError
    naming the part otherwise."""
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError("out must be a (distances, indices) tuple of arrays")
    for a, name, dt in ((out[0], "out[0] (distances)", np.float32), (out[1], "out[1] (indices)", np.int32)):
        if not hasattr(a, "shape") or not hasattr(a, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(a).__name__}")
        if tuple(a.shape) != (n_queries, k) or np.dtype(a.dtype) != dt:
            raise ValueError(f"{name} must have shape ({n_queries}, {k}) and dtype {np.dtype(dt).name}, got shape "
                             f"{tuple(a.shape)} and dtype {a.dtype}")
        if is_device_array(a) != device.is_cuda:
            raise ValueError(f"{name} must be a {'CuPy' if device.is_cuda else 'NumPy'} array: the search runs on "
                             f"{device}")
        if device.is_cuda and getattr(getattr(a, "device", None), "id", device.index) != device.index:
            raise ValueError(f"{name} is on GPU {a.device.id}, but the search's results are on {device}: "
                             f"pass arrays made under cupy.cuda.Device({device.index})")
        if not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")


def fill_out(out: tuple[Array, Array], distances: Array, indices: Array) -> KNNResult:
    """Copy a search's results (NumPy or CuPy) into ``out`` (checked by :func:`check_out`) and return it as
    the :class:`KNNResult`."""
    for target, values in zip(out, (distances, indices)):
        if is_device_array(target):
            import cupy

            target[...] = cupy.asarray(values)
        else:
            target[...] = as_numpy(values)
    return KNNResult(*out)


def check_n_threads(n_threads: object) -> int | None:
    """``n_threads=``: None or a positive integer, else ValueError naming it."""
    if n_threads is None:
        return None
    if isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer)) or not 1 <= n_threads:
        import numba

        raise ValueError(f"n_threads must be a positive integer (at most {numba.config.NUMBA_NUM_THREADS}) or None, "
                         f"got {n_threads!r}")
    return int(n_threads)


@contextlib.contextmanager
def cpu_threads(n_threads: int | None) -> Iterator[None]:
    """Run the numba CPU kernels inside with ``n_threads`` threads (None: leave the setting as it is; at
    most ``NUMBA_NUM_THREADS`` are used); the previous setting is restored on exit. ValueError unless
    ``n_threads`` is None or a positive integer (:func:`check_n_threads`)."""
    if check_n_threads(n_threads) is None:
        yield
        return
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(min(int(n_threads), numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(old)


def runtime_docs(fn: _F) -> _F:
    """Decorator: replace a line ``{name}`` of ``fn``'s docstring (``{device}``, ``{memory_limit}``,
    ``{verbose}``, ``{filter}``, ``{stats}``, ``{out}``, ``{n_threads}``: :data:`RUNTIME_DOCS`) by the shared
    description (indented like the line it stands on)."""
    doc = fn.__doc__
    if doc:
        lines = []
        for line in doc.split("\n"):
            stripped = line.strip()
            if stripped.startswith("{") and stripped.endswith("}") and stripped[1:-1] in RUNTIME_DOCS:
                indent = line[:len(line) - len(line.lstrip())]
                text = RUNTIME_DOCS[stripped[1:-1]]
                lines += [indent + t.strip() if i == 0 else indent + "    " + t.strip()
                          for i, t in enumerate(text.split("\n"))]
            else:
                lines.append(line)
        fn.__doc__ = "\n".join(lines)
    return fn


# --------------------------------------------------------------------------------------------------
# deletion, shared by the indexes that delete (song, ggnn)


def check_index_type(index: Any, index_type: type) -> None:
    """TypeError naming the expected class (``knngraph.<algorithm>.Index``) when ``index`` is not an
    ``index_type``."""
    if not isinstance(index, index_type):
        raise TypeError(f"index must be a knngraph.{index_type.algorithm}.Index, got {type(index).__name__}")
