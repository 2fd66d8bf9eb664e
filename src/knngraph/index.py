"""The module contract every algorithm folder follows, and the pieces they share.

**The contract** (after cuVS's Python API, ``cuvs.neighbors.cagra``; parameter conventions after
scikit-learn). Every algorithm folder (``knngraph.bruteforce``, ``knngraph.nndescent``,
``knngraph.song``, and those to come) re-exports, in ``__all__``:

==============================================  ===========================================================
``IndexParams``                                 frozen, keyword-only dataclass of build parameters; every
                                                field is checked on construction (the message names the
                                                field, the allowed values and the value given); defaults
                                                in the signature, ``0`` / ``"auto"`` documented sentinels
``SearchParams``                                the same for search parameters (searchers only)
``Index``                                       the built object: ``params``, ``dataset``, ``metric``,
                                                ``shape``, ``search(queries, k, params=None, ...)``; a
                                                graph builder's index has ``graph`` (a :class:`~knngraph.Graph`)
``build(params, dataset, *, device, memory_limit, verbose)``   the index of ``dataset``
``search(index, queries, k, params=None, *, device, verbose, ...)``  ``KNNResult(distances, indices)``
``extend(index, new_vectors, *, device, memory_limit, verbose)``   a new index with the vectors added
                                                (where the algorithm can add vectors)
``from_graph(graph, dataset, params=None, *, device, ...)``  graph searchers: an index over any
                                                builder's graph, so any builder's graph with any searcher
                                                is one call
``save(path, index)`` / ``load(path, *, metric=None)``  versioned, atomic, checksummed files; ``load``
                                                refuses a ``metric`` other than the saved one
==============================================  ===========================================================

Vocabulary: ``graph_degree`` is the number of neighbours per node of a graph, everywhere; ``k`` is the
number of neighbours per query. Run-time concerns are call arguments, never params fields: ``device``
('auto', 'cpu', 'cuda', 'cuda:N'), ``memory_limit`` (bytes or "8GB"; None: free device memory minus a
margin, a quarter of RAM on the CPU) and ``verbose`` (a progress bar on a terminal).

Results are ``(distances, indices)``: float32 / int32 arrays of shape (n_queries, k), nearest first,
ties broken by the lower id, -1 / inf where fewer than k neighbours exist, returned in the framework of
the queries. Which algorithms exist, and what each can do, is :mod:`knngraph.registry`: the one table
that ``knngraph.knn_graph``, the CLI, the scikit-learn transformer and the benchmarks read.

CPU and GPU implementations sit behind one dispatch idiom (:func:`knngraph._device.implementation`);
kernels are built from the shared helpers of :mod:`knngraph.primitives` and graph operations of
:mod:`knngraph.graphops`; algorithms never import each other or the top-level API.

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
from typing import ClassVar, NamedTuple


from ._device import as_numpy
from .graph import _display_name, _jsonable, load_arrays, save_arrays

__all__ = ["KNNResult", "Index", "save_index", "load_index", "save_graph_index", "load_graph_index", "assembling",
           "RUNTIME_DOCS", "runtime_docs"]


class KNNResult(NamedTuple):
    """``(distances, indices)``: float32 distances and int32 ids, [n_queries, k], nearest first."""

    distances: object
    indices: object


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
        """Pickle (Dask, multiprocessing, copy) without the per-device caches: device copies, compiled
        launches and their raw pointers belong to the process that made them and are rebuilt on first use."""
        state = self.__dict__.copy()
        if "_cache" in state:
            state["_cache"] = {}
        return state

    def search(self, queries, k: int, params=None, **kwargs) -> KNNResult:
        """The top-``k`` of each query: the algorithm's ``search(self, queries, k, params, **kwargs)``."""
        module = importlib.import_module(self._module)
        if not hasattr(module, "search"):
            raise TypeError(f"{self.algorithm} builds graphs and has no search of its own; search its graph with "
                            "a graph searcher, e.g. knngraph.song.search(knngraph.song.from_graph(index.graph, "
                            "index.dataset), queries, k)")
        return module.search(self, queries, k, params, **kwargs)


def save_index(target, index: Index, arrays: dict, meta: dict | None = None) -> None:
    """Write ``arrays`` (name -> array, host copies are made) and the index's params to ``target``, a path
    (versioned, atomic, checksummed) or a writable binary file object; see
    :func:`knngraph.graph.save_arrays`."""
    params = {f.name: getattr(index.params, f.name) for f in dataclasses.fields(index.params)}
    header = {"metric": index.metric, "params": _jsonable(params), **(meta or {})}
    save_arrays(target, index._file_kind, {name: as_numpy(a) for name, a in arrays.items()}, header)


def load_index(source, cls: type, *, metric: str | None = None) -> tuple[dict, object, dict]:
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


def save_graph_index(target, index: Index) -> None:
    """:func:`save_index` for an index that is its vectors, its params and one graph (``dataset``,
    ``params``, ``graph``: the graph builders' indexes); the graph's scalar ``info`` is kept."""
    g = index.graph.to_host()
    info = {k: v for k, v in g.info.items() if isinstance(v, (int, float, str, bool))}
    save_index(target, index, {"indices": g.indices, "distances": g.distances, "dataset": index.dataset},
               {"info": info})


def load_graph_index(source, cls: type, *, metric: str | None = None):
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
def assembling(source, cls: type, dataset=None, graph=None):
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
}


def runtime_docs(fn):
    """Decorator: replace ``{device}``, ``{memory_limit}`` and ``{verbose}`` in ``fn``'s docstring by the
    shared descriptions (indented like the line they stand on)."""
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
