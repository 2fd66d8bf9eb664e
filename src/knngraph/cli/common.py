"""What every command of the command line shares: option value types, the checking, reading and writing
of its files, its output (text or one JSON object), its timer and its error reporting (the exit statuses
of :mod:`knngraph.cli`).

The commands (``knngraph.cli._knn``, ...) and ``knngraph build/search --scheduler``
(``knngraph.distributed._cli``) import these names; nothing here knows a command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

__all__ = [
    "emit", "jsonable", "Timer", "warm_up", "warmup_queries", "warmup_rows", "graph_slice", "WARMUP_QUERIES",
    "WARMUP_ROWS",
    "CommandError", "CommandParser", "report_error",
    "GRAPH_EXTENSION", "file_extension", "is_graph_file", "check_output", "check_outputs", "check_input",
    "read_or_fail", "read_vectors", "file_metric", "read_graph", "write_ids", "write_graph_or_ids",
    "int_at_least", "positive_int", "non_negative_int", "finite_float", "memory_size", "metric_name",
    "METRICS_HELP", "add_common_options", "add_param_options", "given_params",
]

_log = logging.getLogger("knngraph.cli")


# ---------------------------------------------------------------------------------------------- output


def emit(args, payload: dict, text_lines) -> None:
    """A command's result: ``payload`` as one JSON object with ``--json``, else ``text_lines``."""
    if getattr(args, "json", False):
        print(json.dumps(payload, default=jsonable))
    else:
        for line in text_lines:
            print(line)


def jsonable(o):
    """``json.dumps``'s ``default``: NumPy scalars as Python numbers, paths as strings, the rest by repr."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    return repr(o)


class Timer:
    """Wall seconds of a block less the seconds numba spent compiling knngraph's kernels inside it (a first
    run: :func:`knngraph._compiling.compile_seconds`), so that reported timings are those of a
    warm run; ``compiled`` holds the compilation, reported apart (``note``). ``load``: the seconds of the
    warm-up call before the block (:func:`warm_up`), reported apart too."""

    load = 0.0
    load_compiled = 0.0

    def __enter__(self):
        from .._compiling import compile_seconds

        self._c0, self._t0 = compile_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        from .._compiling import compile_seconds

        self.compiled = compile_seconds() - self._c0
        self.seconds = max(time.perf_counter() - self._t0 - self.compiled, 1e-9)
        return False

    def warmed(self, warm: Timer) -> Timer:
        """This timer with the warm-up call ``warm`` (a :class:`Timer` of :func:`warm_up`) reported apart:
        its seconds as ``load``, its compilation added to ``compiled``."""
        self.load, self.load_compiled = warm.seconds, warm.compiled
        return self

    @property
    def compile_total(self) -> float:
        """Compilation in the warm-up call and the timed block."""
        return self.compiled + self.load_compiled

    @property
    def note(self) -> str:
        parts = [f"{self.load:.1f} s loading kernels"] if self.load >= 0.05 else []
        if self.compile_total >= 0.05:
            parts.append(f"{self.compile_total:.1f} s compiling kernels, first run only")
        return f" (+ {'; '.join(parts)})" if parts else ""


#: queries of the warm-up search before a timed one on the CPU (:func:`warm_up`): enough to take the kernels of
#: a large batch (the threaded beam search from 2 queries, the exact search's GEMM path from 5)
WARMUP_QUERIES = 64
#: rows of the warm-up build before a timed one (:func:`warm_up`)
WARMUP_ROWS = 2000
#: the most queries of a warm-up search on a GPU, which takes the whole batch (its search width and kernel
#: depend on the batch size; a GPU search of it costs milliseconds); batches this large take width 1
_GPU_WARMUP_QUERIES = 1 << 20


def warmup_queries(queries, device) -> np.ndarray:
    """The queries of the warm-up search before a timed search of ``queries`` on ``device``: the first
    :data:`WARMUP_QUERIES` on the CPU, the whole batch (at most 2^20) on a GPU."""
    from .._device import resolve_device

    rows = _GPU_WARMUP_QUERIES if resolve_device(device).is_cuda else WARMUP_QUERIES
    return queries[:rows]


def warmup_rows(n: int, k: int) -> int:
    """Rows of the warm-up build of a k-NN graph of degree ``k`` (:data:`WARMUP_ROWS`, more than ``k``)."""
    return min(n, max(WARMUP_ROWS, 4 * k + 4))


def warm_up(call) -> Timer:
    """Run ``call()`` (the same work as a timed call, on a small slice) and return its :class:`Timer`.

    A process pays on its first kernel call for loading numba's compiled kernels from its disk cache (and,
    on a GPU, for the CUDA context and the kernels' machine code): seconds that :func:`compile_seconds
    <knngraph._compiling.compile_seconds>` does not count, since nothing is compiled. The commands
    run such a call before the one they time and report its seconds apart (:meth:`Timer.warmed`), so that
    their queries per second and build times are those of the work itself. Warnings of the warm-up call
    (e.g. a slice of a graph that leaves vertices unreachable) are not shown."""
    import warnings

    with Timer() as t, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call()
    return t


def graph_slice(graph, rows: int):
    """The first ``rows`` rows of ``graph`` with their edges to later rows dropped (-1 / inf): a graph over
    ``base[:rows]`` for a warm-up call (:func:`warm_up`)."""
    from ..graph import Graph

    g = graph.to_host()
    ids = np.asarray(g.indices[:rows])
    keep = ids < rows
    return Graph(np.where(keep, ids, -1).astype(np.int32), np.where(keep, np.asarray(g.distances[:rows]), np.inf)
                 .astype(np.float32), g.metric)


# ---------------------------------------------------------------------------------------------- errors


class CommandError(Exception):
    """An error whose exit status was decided where it was raised (see :mod:`knngraph.cli`); ``type_name``
    is the exception type reported with ``--json``."""

    def __init__(self, message: str, *, status: int, type_name: str = "ValueError", command: str | None = None):
        super().__init__(message)
        self.status = status
        self.type_name = type_name
        self.command = command


class CommandParser(argparse.ArgumentParser):
    """argparse, but its errors go through :func:`report_error` like every other error."""

    def error(self, message):
        raise CommandError(f"{message} (see {self.prog} --help)", status=2, type_name="ArgumentError",
                           command=self.prog.partition(" ")[2] or None)  # prog: "knngraph build"


def report_error(exc: BaseException, command: str | None, as_json: bool) -> int:
    """Classify ``exc`` (2: usage, 1: failure while running; see :mod:`knngraph.cli`), print it as one line
    on stderr (and as one JSON object on stdout with ``--json``), and return the exit status."""
    if isinstance(exc, CommandError):
        status, type_name = exc.status, exc.type_name
    elif isinstance(exc, (ValueError, TypeError)):
        status, type_name = 2, type(exc).__name__
    else:
        status, type_name = 1, type(exc).__name__
    message = " ".join(str(exc).split()) or type_name
    if status == 1 and not isinstance(exc, CommandError):
        message = f"{type_name}: {message}" if message != type_name else message
    prog = f"knngraph {command}" if command else "knngraph"
    if as_json:
        print(json.dumps({"error": message, "type": type_name, "command": command, "exit_status": status}))
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


# --------------------------------------------------------------------------------- paths, reading, writing

GRAPH_EXTENSION = ".knng"
#: what each kind of output may be written to (ids are int32, distances float32)
_OUTPUT_EXTENSIONS = {"graph": (GRAPH_EXTENSION,), "ids": (".ibin", ".ivecs", ".npy"),
                      "distances": (".fbin", ".fvecs", ".npy")}
_INT32_FORMATS = (".ibin", ".ivecs")
_FLOAT32_FORMATS = (".fbin", ".fvecs")


def file_extension(path) -> str:
    """The extension of ``path``, lower case (``'.knng'``, ``'.fbin'``, ...; ``''`` without one)."""
    return Path(str(path)).suffix.lower()


def is_graph_file(path) -> bool:
    """Whether ``path`` names a graph file (``.knng``)."""
    return file_extension(path) == GRAPH_EXTENSION


def check_output(path, option: str, kinds) -> None:
    """Usage error unless ``path`` can be written as one of ``kinds`` ('graph', 'ids', 'distances' or
    'index'): its folder exists and is writable, it is not a directory, its extension fits."""
    from .. import io

    if path is None:
        return
    text = str(path)
    p = Path(text)
    if not text.strip():
        raise CommandError(f"{option}: empty path", status=2)
    if p.is_dir():
        raise CommandError(f"{option} {text}: is a directory; give a file name", status=2,
                           type_name="IsADirectoryError")
    parent = p.parent
    if not parent.is_dir():
        raise CommandError(f"{option} {text}: folder {str(parent)!r} does not exist", status=2,
                           type_name="FileNotFoundError")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CommandError(f"{option} {text}: folder {str(parent)!r} is not writable", status=2,
                           type_name="PermissionError")
    ext = file_extension(text)
    if "index" in kinds:  # a saved index is read back by its not being a vector or graph file
        if ext in io.SUPPORTED_EXTENSIONS or ext == GRAPH_EXTENSION:
            raise CommandError(f"{option} {text}: {ext} is a vector/graph file extension; name the index file "
                               f"otherwise (e.g. .song) so that it is read back as an index", status=2)
        return
    allowed = tuple(dict.fromkeys(e for kind in kinds for e in _OUTPUT_EXTENSIONS[kind]))
    if ext not in allowed:
        raise CommandError(f"{option} {text}: cannot write {' or '.join(kinds)} to "
                           f"{f'a {ext} file' if ext else 'a file without an extension'}; use {', '.join(allowed)}",
                           status=2)


def check_input(path, label: str, *, vectors: bool = False, dataset=None) -> None:
    """Usage error unless ``path`` names an existing file (and, for ``vectors``, one with a vector file
    extension; ``dataset`` only for HDF5)."""
    from .. import io

    text = str(path)
    p = Path(text)
    if not p.exists():
        raise CommandError(f"{label} {text}: no such file", status=2, type_name="FileNotFoundError")
    if p.is_dir():
        raise CommandError(f"{label} {text}: is a directory, not a file", status=2, type_name="IsADirectoryError")
    if vectors:
        ext = file_extension(text)
        if ext not in io.SUPPORTED_EXTENSIONS:
            raise CommandError(f"{label} {text}: unknown vector file extension {ext or '(none)'!r}; supported: "
                               f"{', '.join(io.SUPPORTED_EXTENSIONS)}", status=2)
        if dataset is not None and ext not in (".hdf5", ".h5"):
            raise CommandError(f"{label} {text}: a dataset name applies to HDF5 files only", status=2)


def read_or_fail(path, read):
    """``read()``, its errors re-raised as failures (exit 1) naming ``path``: the file exists (checked
    before) but cannot be read as what it should be."""
    try:
        return read()
    except CommandError:
        raise
    except Exception as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if str(path) not in message:
            message = f"{path}: {message}"
        raise CommandError(message, status=1, type_name=type(exc).__name__) from exc


def read_vectors(path, dataset=None, label="BASE", *, default_dataset=None):
    """The vectors of ``path``; for an HDF5 file its ``dataset`` (else ``default_dataset``, else ``train``)."""
    from .. import io

    check_input(path, label, vectors=True, dataset=dataset)
    if dataset is None and default_dataset is not None and io.is_hdf5(path):
        dataset = default_dataset
    return read_or_fail(path, lambda: io.read(path, dataset=dataset) if dataset else io.read(path))


def file_metric(args, path, option="--metric"):
    """``args.metric`` when given; else the metric an ann-benchmarks file names in its ``distance``
    attribute (logged); else sqeuclidean. A given metric that differs from the file's is logged too."""
    from .. import io

    named = None
    if path is not None and io.is_hdf5(path) and Path(str(path)).is_file():
        named = read_or_fail(path, lambda: io.ann_benchmarks_metric(path))
    if args.metric is None:
        if named is not None:
            _log.info("%s: metric %s, from the file's 'distance' attribute", path, named)
        return named or "sqeuclidean"
    if named is not None and named != args.metric:
        _log.warning("%s: the file's 'distance' attribute says %s, but %s %s was given", path, named,
                     option, args.metric)
    return args.metric


def read_graph(path, label="GRAPH"):
    """The :class:`~knngraph.Graph` saved in ``path`` (``label`` names it in errors)."""
    from ..graph import Graph

    check_input(path, label)
    return read_or_fail(path, lambda: Graph.load(path))


def write_ids(args, ids, distances) -> None:
    """Write ``ids`` to ``args.out`` and ``distances`` to ``args.out_distances`` (when given)."""
    from .. import io

    out = str(args.out)
    io.write(out, np.ascontiguousarray(ids, dtype=np.int32 if file_extension(out) in _INT32_FORMATS else None))
    if getattr(args, "out_distances", None):
        dpath = str(args.out_distances)
        dtype = np.float32 if file_extension(dpath) in _FLOAT32_FORMATS else None
        io.write(dpath, np.ascontiguousarray(distances, dtype=dtype))


def write_graph_or_ids(args, g) -> None:
    """Write the graph ``g`` to ``args.out``: a ``.knng`` file, or its ids (and distances) as :func:`write_ids`."""
    g = g.to_host()
    if is_graph_file(args.out):
        g.save(args.out)
    else:
        write_ids(args, g.indices, g.distances)


def check_outputs(args, out_kinds) -> None:
    """The output paths of a command, before it reads or computes anything: ``--out`` (one of
    ``out_kinds``), ``--out-distances`` (next to ids output only: a graph file holds its distances; not the
    same file) and ``--save-index``."""
    out, distances = args.out, getattr(args, "out_distances", None)
    check_output(out, "--out", out_kinds)
    if distances:
        if out is not None and is_graph_file(out):
            raise CommandError("--out-distances applies to ids output; a .knng graph file holds the distances",
                               status=2)
        check_output(distances, "--out-distances", ("distances",))
        if out is not None and Path(out).resolve() == Path(distances).resolve():
            raise CommandError(f"--out and --out-distances are the same file ({out})", status=2)
    check_output(getattr(args, "save_index", None), "--save-index", ("index",))


# ----------------------------------------------------------------------------------- option value types


def int_at_least(low: int):
    """An argparse type: an integer >= ``low``."""
    what = "a positive integer" if low == 1 else f"an integer >= {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def memory_size(text: str) -> int:
    from .._device import parse_memory

    try:
        value = parse_memory(text)
    except (ValueError, TypeError, ArithmeticError) as exc:  # OverflowError: e.g. 1e400GB
        raise argparse.ArgumentTypeError(str(exc) or f"expected a size such as 8GB, got {text!r}") from None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a size such as 8GB or 512MiB, got {text!r}")
    return value


def metric_name(text: str) -> str:
    from ..metrics import canonical_metric

    try:
        return canonical_metric(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None




# ----------------------------------------------------------------------------------- options of commands

METRICS_HELP = "sqeuclidean | euclidean | inner_product | cosine"


def add_common_options(parser, device: bool = True) -> None:
    """The options every command takes: ``--json`` and (unless ``device`` is false) ``--device``."""
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    if device:
        parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")


# ------------------------------------------------------------------------- algorithm options from params


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parse_json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"max_iterations\": 6}}' "
                                         f"({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _option_type(field: dataclasses.Field):
    default = field.default
    if isinstance(default, bool) or str(field.type).startswith("bool"):  # "bool | None": True, False or automatic
        return _parse_bool
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return finite_float
    if default is None:
        return _parse_json_dict
    return str


def _params_fields(cls, skip=()):
    return [f for f in dataclasses.fields(cls) if not f.name.startswith("_") and f.name not in skip]


def add_param_options(parser, prefix: str, classes: dict, skip=()):
    """One ``--field-name`` option per field of the params classes (name -> class of each algorithm), with
    its default left out (the params' own default applies) and the algorithms that take it in its help."""
    owners: dict = {}
    for method, cls in classes.items():
        for f in _params_fields(cls, skip):
            owners.setdefault(f.name, (f, []))[1].append(method)
    for name, (field, methods) in sorted(owners.items()):
        default = field.default if field.default is not dataclasses.MISSING else None
        parser.add_argument("--" + name.replace("_", "-"), dest=prefix + name, type=_option_type(field),
                            default=argparse.SUPPRESS, metavar=name.upper(),
                            help=f"{', '.join(methods)}: {_class_name(classes, methods)}.{name} (default {default!r})")


def _class_name(classes, methods):
    return classes[methods[0]].__qualname__


def given_params(args, prefix: str, cls, method: str, what: str) -> dict:
    """The ``prefix``-options given on the command line, checked against ``cls``'s fields."""
    fields = {f.name for f in _params_fields(cls)}
    given = {k[len(prefix):]: v for k, v in vars(args).items() if k.startswith(prefix)}
    wrong = sorted(set(given) - fields)
    if wrong:
        opts = ", ".join("--" + w.replace("_", "-") for w in wrong)
        valid = ", ".join("--" + f.replace("_", "-") for f in sorted(fields))
        raise ValueError(f"{opts} {'is' if len(wrong) == 1 else 'are'} not a {what} option of --method {method} "
                         f"(its options: {valid})")
    return given
