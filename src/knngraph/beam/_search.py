"""The fast graph searcher's public entry: :class:`GraphView` (a graph over vectors, with the per-device state
that searches keep) and :func:`search` (the GPU kernels of :mod:`._kernels` through :mod:`.cuda`, or their
CPU twin :mod:`.cpu`)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._device import (Device, as_numpy, device_context, is_device_array, kept_across_streams, resolve_device,
                       sm_count)
from .._typing import Array, DeviceLike
from .._validate import check_finite, check_int
from ..index import check_n_threads, check_out, cpu_threads
from ..metrics import canonical_metric
from ..primitives.cpu_inputs import cpu_vectors
from ..primitives.distances import distance_kind, inverse_norms
from ..primitives.filters import AllowedIds, prepare_filter

__all__ = ["GraphView", "search", "search_checked", "filtered_queue_size", "filtered_kb", "int8_codes",
           "int8_plan", "MAX_QUEUE_SIZE", "MAX_SEARCH_WIDTH", "CPU_WALKS", "INT8_WALK_MIN_DIM", "INT8_WALK_MAX_ERROR"]

#: largest queue_size (the kernels' list lives in shared memory)
MAX_QUEUE_SIZE = 1024
#: what the CPU walk may read (``cpu_walk`` of :func:`search`)
CPU_WALKS = ("auto", "int8", "exact")
#: the fewest dimensions of float vectors whose CPU walk reads int8 codes by default (``cpu_walk='auto'``)
INT8_WALK_MIN_DIM = 128
#: the largest relative coding error (:func:`int8_plan`) at which ``cpu_walk='auto'`` walks int8 codes:
#: minilm-words (384-d) codes are at about 0.015, clustered Gaussian and sift-photos (as float32) at 0.012-0.013;
#: 256-d clusters with one dimension scaled 100x (L2) at 0.125, where the int8 walk lost recall (0.71 against the
#: exact walk's 0.79 at queue 32; at 20x, 0.089, it kept it)
INT8_WALK_MAX_ERROR = 0.05
#: queries per block of the CPU walk over int8 codes (its lists, block x queue_size entries, are kept for the
#: re-rank)
INT8_WALK_BLOCK = 16384
#: most warps that work on one query (``search_width``)
MAX_SEARCH_WIDTH = 8
#: host queries of a GPU search whose caller wants its results on the host (``host_results``) are searched in
#: chunks from this many rows on (:func:`knngraph._gpu_queue.search_host_queries_in_chunks`): two streams
#: take the chunks in turn, so the next chunk's kernels fill the SMs that a chunk's slowest queries leave
#: idle and its copies hide behind them, where one call copies all queries in, searches them and copies
#: all results out one after another. SONG on one H200 (sift-photos 450k, ``benchmarks/studies/host_chunks.py``,
#: two runs), chunks against one piece at queue 32 / 64: 0.98-1.01x / 0.99-1.03x at 16,384 queries,
#: 1.03-1.05x / 0.99-1.02x at 32,768, 1.13-1.22x / 1.05-1.07x at 100,000 and 1.19-1.29x / 1.08-1.09x at
#: 400,000, the same ids (``benchmarks/results/host_chunks_h200*``)
HOST_CHUNKS_MIN_ROWS = 100_000

_CPU = Device("cpu")


def filtered_queue_size(queue_size: int, fraction: float) -> int:
    """The list of a filtered walk: ``queue_size / fraction`` entries (rounded up; at least
    ``queue_size``, at most :data:`~knngraph.beam.MAX_QUEUE_SIZE`), so that it holds about ``queue_size``
    allowed ones when a ``fraction`` of the ids is allowed."""
    return _allowed_depth(queue_size, fraction, MAX_QUEUE_SIZE)


def filtered_kb(kb: int, fraction: float, queue: int) -> int:
    """GGNN's slack stop under a filter: the bound's ``kb``-th entry becomes the one about ``kb`` allowed
    entries deep (``kb / fraction``, at most the list's ``queue``)."""
    return _allowed_depth(kb, fraction, queue)


def _allowed_depth(count: int, fraction: float, most: int) -> int:
    """How deep into a list ``count`` allowed entries lie when a ``fraction`` of the ids is allowed:
    ``count / fraction`` rounded up, at least ``count``, at most ``most`` (``most`` when none is)."""
    if fraction <= 0:
        return int(most)
    return int(min(most, max(count, math.ceil(count / fraction - 1e-9))))


class GraphView:
    """A search graph over vectors, as the fast searcher reads it, with the state it keeps per device.

    Parameters
    ----------
    graph_ids : array of int32, shape (n, degree)
        Neighbour ids in [-1, n) per vertex, -1 = no edge (NumPy or CuPy; not copied).
    vectors : array of shape (n, dim)
        float32, float16, uint8 or int8 vectors, finite (NumPy, CuPy or a memory map; not copied).
    entry_points : 1-D array of int
        Start vertices shared by all queries, ids in [0, n).
    metric : {'sqeuclidean', 'euclidean', 'inner_product', 'cosine'}
    cache : dict, optional
        Where the per-device state is kept (default: a dict of the view's own): the graph, vectors,
        inverse norms and entry points on each device (:meth:`arrays`), the squared norms of 8-bit vectors,
        one prepared launch per search configuration (:class:`~knngraph.beam.cuda.BeamPlan`), the CPU's
        visited stamps (:meth:`borrow_scratch`) and float16 vectors as their bits (:meth:`cpu_vectors`). An owner
        that keeps a cache of its own (``song.Index``) passes it, so that one ``release`` drops both.
        Entries are made on first use and kept.
    """

    def __init__(self, graph_ids: Array, vectors: Array, entry_points: ArrayLike, metric: str, *,
                 cache: dict | None = None) -> None:
        if getattr(vectors, "ndim", None) != 2:
            raise ValueError(f"vectors must be a 2-D array, got {type(vectors).__name__} of shape "
                             f"{getattr(vectors, 'shape', None)}")
        n = vectors.shape[0]
        if getattr(graph_ids, "ndim", None) != 2 or graph_ids.shape[0] != n:
            raise ValueError(f"graph_ids must be a 2-D array with one row per vector ({n}), got shape "
                             f"{getattr(graph_ids, 'shape', None)}")
        if np.dtype(graph_ids.dtype) != np.int32:
            raise TypeError(f"graph_ids must hold int32 ids, got dtype {graph_ids.dtype}")
        e = as_numpy(entry_points)
        if e.ndim != 1 or e.shape[0] == 0 or e.dtype.kind not in "iu":
            raise ValueError(f"entry_points must be a non-empty 1-D array of integer ids, got {e.dtype} of shape "
                             f"{e.shape}")
        if int(e.min()) < 0 or int(e.max()) >= n:
            raise ValueError(f"entry_points must be ids in [0, {n}), got values from {int(e.min())} to {int(e.max())}")
        self.metric = canonical_metric(metric)
        self.kind = distance_kind(self.metric)
        self.graph_ids = graph_ids
        self.vectors = vectors
        self.entry_points = np.ascontiguousarray(e, dtype=np.int32)
        self.cache = {} if cache is None else cache

    @property
    def shape(self) -> tuple:
        """(number of vertices, dimension)."""
        return int(self.vectors.shape[0]), int(self.vectors.shape[1])

    def release(self) -> None:
        """Drop the per-device state (the whole cache)."""
        self.cache.clear()

    def arrays(self, device: DeviceLike) -> tuple[Array, Array, Array, Array]:
        """(graph ids, vectors, inverse norms, entry points) on ``device``, made once per device: on a GPU
        CuPy arrays (device arrays used in place), on the CPU the arrays its kernels read
        (:func:`~knngraph.primitives.cpu_inputs.cpu_vectors`); the inverse norms of the vectors for cosine,
        else a 1-element dummy."""
        dev = device if isinstance(device, Device) else resolve_device(device)
        key = (str(dev), "arrays")
        got = self.cache.get(key)
        if got is not None:
            return got
        cosine = self.metric == "cosine"
        if dev.is_cuda:
            import cupy as cp

            with cp.cuda.Device(dev.index), kept_across_streams():
                g_ids = cp.ascontiguousarray(cp.asarray(self.graph_ids))
                e = cp.asarray(self.entry_points)
                xb = cp.asarray(self.vectors)
                inv_b = inverse_norms(xb, cp) if cosine else cp.zeros(1, cp.float32)
        else:
            g_ids = np.ascontiguousarray(as_numpy(self.graph_ids))
            e = self.entry_points
            xb = cpu_vectors(as_numpy(self.vectors))
            inv_b = inverse_norms(xb) if cosine else np.zeros(1, np.float32)
        self.cache[key] = (g_ids, xb, inv_b, e)
        return self.cache[key]

    def borrow_scratch(self) -> AbstractContextManager[Any]:
        """A context manager lending the CPU's visited stamps for one search over this graph
        (:class:`~knngraph.primitives.stamps.Scratch`) from the view's pool
        (:class:`~knngraph.primitives.stamps.ScratchPool`): searches from several threads at once each get
        their own; one thread at a time reuses the same."""
        pool = self.cache.get("cpu-scratch")
        if pool is None:
            from ..primitives.stamps import ScratchPool  # CPU searches only (stamps imports numba)

            pool = self.cache.setdefault("cpu-scratch", ScratchPool(self.shape[0]))
        return pool.borrow()

    def int8_plan(self) -> tuple:
        """The shift, scale and relative error of the int8 codes of the vectors (:func:`int8_plan`), made once."""
        plan = self.cache.get("cpu-int8-plan")
        if plan is None:
            plan = self.cache.setdefault("cpu-int8-plan", int8_plan(as_numpy(self.vectors), self.metric))
        return plan

    def int8_codes(self) -> tuple:
        """The int8 codes the CPU walk reads with ``cpu_walk='int8'`` (:func:`int8_codes`), made once."""
        codes = self.cache.get("cpu-int8-codes")
        if codes is None:
            codes = self.cache.setdefault("cpu-int8-codes", int8_codes(as_numpy(self.vectors), self.metric,
                                                                       plan=self.int8_plan()))
        return codes

    def cpu_vectors(self) -> np.ndarray:
        """The vectors the CPU kernel reads: float16 vectors as their uint16 bit patterns (widened in the
        distance loop by :func:`~knngraph.primitives.rows.half_bits_to_float32`: half the bytes of the
        float32 copy per row, which on minilm-words (384-d) gave about 1.2x the queries per CPU-second),
        else the CPU arrays of :meth:`arrays`. Made once."""
        x = self.vectors
        if not isinstance(x, np.ndarray) or x.dtype != np.float16:
            return self.arrays(_CPU)[1]
        bits = self.cache.get("cpu-half-bits")
        if bits is None:
            bits = self.cache["cpu-half-bits"] = np.ascontiguousarray(x).view(np.uint16)
        return bits


def search(view: GraphView, queries: Array, k: int, queue_size: int, *, device: DeviceLike = "auto",
           search_width: int = 0, max_registers: int = 0, stats: dict | None = None,
           out: tuple[Array, Array] | None = None, slack: tuple[int, float, float, int] | None = None,
           n_threads: int | None = None, filter: Array | AllowedIds | None = None,
           cpu_walk: str = "auto", host_results: bool = False) -> tuple[Array, Array]:
    """The ``k`` nearest vertices of each query found by the fast graph searcher over ``view``.

    Best-first from the view's entry points over one sorted list of the ``queue_size`` nearest vertices
    seen, expanding the first unexpanded one (on a GPU: the first ``search_width``) until none is left;
    the kernels and the CPU twin are described in :mod:`knngraph.beam._kernels` and
    :mod:`knngraph.beam.cpu`.

    Parameters
    ----------
    view : GraphView
    queries : array of shape (n_queries, dim)
        NumPy or CuPy. On a GPU, device queries on the search's GPU are read in place; others are copied
        there. The kernels read float32 or float16 queries, or 8-bit ones of the vectors' dtype (dp4a);
        other dtypes are converted to float32. Host queries holding NaN or inf are refused (ValueError);
        device queries are not copied back to be checked: their rows get ids -1 and distances NaN.
    k : int
        Neighbours per query, 1 <= k <= queue_size.
    queue_size : int
        Entries of the sorted list (1..1024), the speed/recall knob.
    device : str or Device, default='auto'
    search_width : int, default=0
        GPU only: warps per query (1..8); 0: chosen from the batch size, the queue and the shared memory
        a block holds (:func:`knngraph.beam.cuda.search_width`, :func:`knngraph.beam.cuda.fitting_width`).
        The CPU expands one vertex at a time (the walk of width 1).
    max_registers : int, default=0
        GPU only: register cap per thread (0: :func:`knngraph.beam.cuda.beam_max_registers`).
    stats : dict, optional
        Filled with ``distances_per_query``, ``expansions_per_query``, ``algo`` ('beam'), ``seconds``, on a
        GPU ``search_width``, on the CPU ``cpu_walk`` ('int8' or 'exact': which ran; with 'int8' the
        distances are the walk's between codes plus the re-rank's exact ones), and with a filter
        ``queue_size`` (the list's length) and ``allowed_fraction``.
    out : (distances, indices), optional
        C-contiguous float32 / int32 arrays of shape (n_queries, k) on the search's device, filled and
        returned.
    slack : (kb, tau, nn1, max_exp), optional
        Also stop each query at GGNN's bound ``d_kb + tau^2 min(|d_1|, nn1)`` or after ``max_exp`` expansions
        (:func:`knngraph.ggnn.search` with ``cache='sorted'``).
    n_threads : int, optional
        CPU only: threads of this call (see :func:`knngraph.index.cpu_threads`).
    filter : array or AllowedIds, optional
        The vertices that may be returned: a boolean mask over the vertices, a uint32 bitset
        (:mod:`knngraph.primitives.filters`) or a validated :class:`~knngraph.primitives.filters.AllowedIds`.
        The walk is the same (vertices that may not be returned are expanded too: they lead to those that
        may) and each query returns the first k allowed entries of its final list, whose length is then
        :func:`~knngraph.beam.filtered_queue_size` (``queue_size`` / the allowed share, at most 1024: about
        ``queue_size`` allowed entries), with the slack stop's ``kb`` grown alike
        (:func:`~knngraph.beam.filtered_kb`); a ``search_width`` whose block does not hold that list is
        narrowed until it does. A filter that allows every vertex is the unfiltered search; one that allows
        none returns -1 / inf rows without searching.
    cpu_walk : {'auto', 'int8', 'exact'}, default='auto'
        CPU only: what the walk reads. 'exact': the vectors. 'int8': int8 codes of float vectors (one
        scale for all dimensions, after centring for L2 and inner product, after normalising rows for cosine:
        :func:`int8_codes`, made once per view, ``n x dim`` bytes), then the final list of each query is
        re-ranked by the exact distances, so the walk reads a quarter (float32) or half (float16) of the
        bytes per row and its arithmetic vectorises better; on minilm-words (384-d float16, 2 threads) that
        gave 1.4x-1.7x the queries per second at the same recall as 'exact' at every queue size
        (``benchmarks/studies/cpu_defaults.py``). Unfiltered searches without the slack stop only.
        'auto': 'int8' for float16 and float32 vectors of at least :data:`INT8_WALK_MIN_DIM` dimensions whose
        coding error (:func:`int8_plan`) is at most :data:`INT8_WALK_MAX_ERROR`, where it applies, else
        'exact'. The GPU reads the vectors (the option is for the CPU only); with 'exact' the
        CPU returns what the GPU does for ``search_width=1``.
    host_results : bool, default=False
        GPU only: the caller wants the results on the host. Host queries of at least
        :data:`HOST_CHUNKS_MIN_ROWS` rows (without ``stats`` or ``out``) are then searched in chunks on two
        streams, each chunk's results copied back while the next ones are searched, and the results are
        NumPy arrays; the rows are those of the search in one piece.

    Returns
    -------
    (distances, indices)
        Reported distances of the view's metric (float32) and ids (int32), shape (n_queries, k), nearest
        first, -1 / inf where fewer than k vertices were reached (or allowed); CuPy arrays on a GPU (NumPy
        for ``host_results`` when the search went in chunks), NumPy on the CPU.
    """
    if not isinstance(view, GraphView):
        raise TypeError(f"view must be a knngraph.beam.GraphView, got {type(view).__name__}")
    queue_size = check_int(queue_size, "queue_size", low=1, high=MAX_QUEUE_SIZE)
    k = check_int(k, "k", low=1)
    if k > queue_size:
        raise ValueError(f"k={k} is larger than queue_size={queue_size}; the search keeps queue_size results, so "
                         "raise queue_size to at least k")
    search_width = check_int(search_width, "search_width", low=0, high=MAX_SEARCH_WIDTH)
    max_registers = check_int(max_registers, "max_registers", low=0, high=255)
    if getattr(queries, "ndim", None) != 2 or queries.shape[1] != view.shape[1]:
        raise ValueError(f"queries must be a 2-D array of {view.shape[1]}-dimensional rows, got shape "
                         f"{getattr(queries, 'shape', None)}")
    if slack is not None and len(slack) != 4:
        raise ValueError(f"slack must be None or (kb, tau, nn1, max_exp), got {slack!r}")
    if cpu_walk not in CPU_WALKS:
        raise ValueError(f"cpu_walk must be one of {', '.join(map(repr, CPU_WALKS))}, got {cpu_walk!r}")
    allowed = prepare_filter(filter, view.shape[0])
    if allowed is not None and allowed.n_allowed == allowed.n:
        allowed = None  # every vertex allowed: the unfiltered search
    dev = resolve_device(device, view.vectors, queries)
    return search_checked(view, queries, k, queue_size, dev, search_width=search_width,
                          max_registers=max_registers, stats=stats, out=out, slack=slack, n_threads=n_threads,
                          allowed=allowed, cpu_walk=cpu_walk, host_results=host_results)


def search_checked(view: GraphView, queries: Array, k: int, queue_size: int, dev: Device, *, search_width: int = 0,
                   max_registers: int = 0, stats: dict | None = None, out: tuple[Array, Array] | None = None,
                   slack: tuple[int, float, float, int] | None = None, n_threads: int | None = None,
                   allowed: AllowedIds | None = None, cpu_walk: str = "auto",
                   host_results: bool = False) -> tuple[Array, Array]:
    """:func:`search` for a caller that has checked its arguments as :func:`search` does: ``queries`` a
    2-D array of the view's dimension, integers ``1 <= k <= queue_size <= MAX_QUEUE_SIZE``,
    ``0 <= search_width <= MAX_SEARCH_WIDTH``, ``0 <= max_registers <= 255``, ``slack`` None or four values,
    ``dev`` a resolved :class:`~knngraph._device.Device`, ``allowed`` None or a validated
    :class:`~knngraph.primitives.filters.AllowedIds` that does not allow every vertex. A searcher that
    validates its own parameters (:func:`knngraph.song.search`) calls this, so a small search does not pay
    for the same checks twice (their messages and type checks were a few percent of a one-query GPU call).
    ``out`` and ``n_threads`` are checked here, and so are the ranges and the queries' shape, which the
    kernels' bounds rest on, in one cheap test (a ValueError pointing to :func:`search` if it fails)."""
    if not (getattr(queries, "ndim", 0) == 2 and queries.shape[1] == view.vectors.shape[1]
            and 1 <= k <= queue_size <= MAX_QUEUE_SIZE and 0 <= search_width <= MAX_SEARCH_WIDTH
            and 0 <= max_registers <= 255 and (slack is None or len(slack) == 4) and cpu_walk in CPU_WALKS):
        raise ValueError(f"search_checked takes arguments already checked as beam.search checks them; got "
                         f"queries of shape {getattr(queries, 'shape', None)} for {view.vectors.shape[1]}-d "
                         f"vectors, k={k!r}, queue_size={queue_size!r}, search_width={search_width!r}, "
                         f"max_registers={max_registers!r}: call beam.search for its messages")
    if out is not None:
        check_out(out, queries.shape[0], k, dev)
    if allowed is not None:
        queue_size = filtered_queue_size(queue_size, allowed.fraction)
        if slack is not None:
            slack = (filtered_kb(int(slack[0]), allowed.fraction, queue_size), *slack[1:])
        if stats is not None:
            stats.update(queue_size=queue_size, allowed_fraction=allowed.fraction)
        if allowed.n_allowed == 0:
            check_n_threads(n_threads)
            return _no_results(dev, queries, k, stats, out)
    if dev.is_cuda:
        check_n_threads(n_threads)  # a GPU search runs no CPU kernels: nothing to set
        if host_results and stats is None and out is None and queries.shape[0] >= HOST_CHUNKS_MIN_ROWS \
                and isinstance(queries, np.ndarray):
            return _search_gpu_in_chunks(dev, view, queries, k, queue_size, search_width, max_registers, slack,
                                         allowed)
        return _search_gpu(dev, view, queries, k, queue_size, search_width, max_registers, stats, out, slack,
                           allowed)
    codes = walks_int8(view, cpu_walk, slack, allowed)
    with cpu_threads(n_threads):
        return _search_cpu(view, queries, k, queue_size, stats, out, slack, allowed, codes)


def _search_gpu_in_chunks(dev: Device, view: GraphView, queries: np.ndarray, k, queue_size, search_width,
                          max_registers, slack, allowed):
    """:func:`_search_gpu` of many host queries with NumPy results, in chunks on two streams
    (:data:`HOST_CHUNKS_MIN_ROWS`). Every chunk has at least ``MIN_CHUNK_ROWS`` queries, so the automatic
    search width is the whole batch's (one warp per query from a few thousand queries on) and every row is
    what the search in one piece gives."""
    from .._gpu_queue import search_host_queries_in_chunks

    check_finite(queries, "queries")
    q = np.ascontiguousarray(queries)
    with device_context(dev):
        view.arrays(dev)  # the device copies, made once before the streams that read them start

        def search_rows(rows):
            return _search_gpu(dev, view, rows, k, queue_size, search_width, max_registers, None, None, slack,
                               allowed)

        return search_host_queries_in_chunks(search_rows, q, k, dev)


def _no_results(dev: Device, queries, k, stats, out):
    """The answer of a filter that allows nothing: every row -1 / inf (host queries still checked)."""
    if not is_device_array(queries):
        check_finite(as_numpy(queries), "queries")
    nq = queries.shape[0]
    xp = np
    if dev.is_cuda:
        import cupy as xp
    with device_context(dev) if dev.is_cuda else contextlib.nullcontext():
        d, i = out if out is not None else (xp.empty((nq, k), xp.float32), xp.empty((nq, k), xp.int32))
        d.fill(np.inf)
        i.fill(-1)
    if stats is not None:
        stats.update(distances_per_query=0.0, expansions_per_query=0.0, algo="beam", seconds=0.0)
    return d, i


def walks_int8(view: GraphView, cpu_walk: str, slack, allowed) -> bool:
    """Whether a CPU search of ``view`` walks int8 codes (see ``cpu_walk`` of :func:`search`); 'int8' where
    it does not apply is a ValueError."""
    if cpu_walk == "exact":
        return False
    dtype = np.dtype(getattr(view.vectors, "dtype", np.float32))
    applies = slack is None and allowed is None and dtype in (np.float16, np.float32)
    if cpu_walk == "int8":
        if not applies:
            raise ValueError("cpu_walk='int8' needs float16 or float32 vectors and a search without a filter or "
                             f"GGNN's slack stop (vectors {dtype}, filter {'on' if allowed is not None else 'off'}, "
                             f"slack {'on' if slack is not None else 'off'})")
        return True
    return applies and view.shape[1] >= INT8_WALK_MIN_DIM and view.int8_plan()[2] <= INT8_WALK_MAX_ERROR


def _coded_rows(x: np.ndarray, lo: int, hi: int, cosine: bool, shift: np.ndarray) -> np.ndarray:
    """Rows ``lo:hi`` of ``x`` as the codes see them, float32: normalised (cosine) or less ``shift``."""
    b = x[lo:hi].astype(np.float32)
    if cosine:
        b *= inverse_norms(b)[:, None]
    else:
        b -= shift
    return b


def int8_plan(x: np.ndarray, metric: str, block_rows: int = 1 << 16,
              sample_rows: int = 4096) -> tuple[np.ndarray, np.float32, float]:
    """``(shift, scale, relative error)`` of the int8 codes of the float rows ``x`` (:func:`int8_codes`):
    ``shift`` the mean row (0 for cosine, whose rows are normalised instead), ``scale`` 127 over the
    largest magnitude, and the root-mean-square coding error over the root-mean-square value of up to
    ``sample_rows`` rows spread over ``x``. One dimension far larger than the others takes the code's
    range from the rest, which shows as a large error (``cpu_walk='auto'`` then walks the vectors)."""
    n, dim = x.shape
    cosine = metric == "cosine"
    shift = np.zeros(dim, np.float64)
    if not cosine:
        for lo in range(0, n, block_rows):
            shift += x[lo:lo + block_rows].astype(np.float64).sum(axis=0)
        shift /= max(n, 1)
    shift32 = shift.astype(np.float32)
    top = 0.0
    for lo in range(0, n, block_rows):
        b = _coded_rows(x, lo, lo + block_rows, cosine, shift32)
        if b.size:
            m = float(np.abs(b).max())
            top = m if not np.isfinite(m) else max(top, m)  # a NaN or inf stays (max() would drop a NaN)
            if not np.isfinite(top):
                break
    scale = np.float32(127.0 / top) if 0 < top < np.inf else np.float32(1.0)
    pick = np.unique(np.linspace(0, max(n - 1, 0), min(n, sample_rows)).astype(np.int64))
    sample = _coded_rows(x[pick], 0, len(pick), cosine, shift32)
    power = float(np.mean(sample.astype(np.float64) ** 2)) if sample.size else 0.0
    if not (np.isfinite(top) and np.isfinite(power) and np.isfinite(shift32).all()):
        return shift32, scale, float("inf")  # NaN, inf or overflow: no code stands for such rows
    coded = np.clip(np.rint(sample * scale), -127, 127) / scale
    error = float(np.sqrt(np.mean((coded - sample).astype(np.float64) ** 2) / power)) if power > 0 else 0.0
    return shift32, scale, error


def int8_codes(x: np.ndarray, metric: str, block_rows: int = 1 << 16,
               plan: tuple | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.float32]:
    """Int8 codes of the float rows ``x`` for the CPU walk: ``(codes, inverse norms of the codes (cosine;
    else a 1-element dummy), shift, scale)``. One scale for every dimension, 127 over the largest magnitude,
    so each distance kind keeps its order within a query: L2 and inner product code ``(x - shift) * scale``
    with ``shift`` the mean row (an L2 walk reads the query as ``(q - shift) * scale``; an inner product
    differs from the true one by a constant and a positive factor per query), cosine codes the normalised
    rows (``shift`` 0) and divides by the codes' norms. Rows are read in blocks of ``block_rows``, so no
    float32 copy of ``x`` is made; ``plan``: :func:`int8_plan`'s answer, if made already."""
    n, dim = x.shape
    cosine = metric == "cosine"
    shift32, scale, _ = int8_plan(x, metric, block_rows) if plan is None else plan
    codes = np.empty((n, dim), np.int8)
    for lo in range(0, n, block_rows):
        codes[lo:lo + block_rows] = np.clip(np.rint(_coded_rows(x, lo, lo + block_rows, cosine, shift32) * scale),
                                            -127, 127)
    inv_codes = inverse_norms(codes) if cosine else np.zeros(1, np.float32)
    return codes, inv_codes, shift32, scale


def _search_cpu(view: GraphView, queries, k, queue_size, stats, out, slack, allowed, codes=False):
    """The CPU twin (:func:`knngraph.beam.cpu.search_beam`) over the view's host arrays (graph, vectors the
    kernel reads, inverse norms, entry points, visited stamps: made once). Per call: the NaN check of the
    queries, the kernel and the metric's reported distances, computed in place; ``allowed``: None or the
    :class:`AllowedIds` whose bitset the kernel filters the results by."""
    from ..primitives.stamps import worker_count
    from .cpu import rerank, search_beam

    q = as_numpy(queries)
    check_finite(q, "queries")
    t0 = time.perf_counter()
    g_ids, _, inv_b, entries = view.arrays(_CPU)
    metric = view.metric
    with view.borrow_scratch() as scratch:
        if codes:
            # the walk over int8 codes keeps its whole list, which the exact distances then order; queries go
            # in blocks, so the lists take at most INT8_WALK_BLOCK x queue_size entries beside the output
            c8, inv_c, shift, scale = view.int8_codes()
            nq = q.shape[0]
            d, i = out if out is not None else (np.empty((nq, k), np.float32), np.empty((nq, k), np.int32))
            nd, ne = np.empty(nq, np.int32), np.empty(nq, np.int32)
            l2 = view.kind == distance_kind("sqeuclidean")
            for lo in range(0, nq, INT8_WALK_BLOCK):
                qb = q[lo:lo + INT8_WALK_BLOCK]
                qw = (qb.astype(np.float32) - shift) * scale if l2 else qb
                _, lists, nd[lo:lo + len(qb)], ne[lo:lo + len(qb)] = search_beam(
                    g_ids, c8, qw, inv_c, view.kind, entries, queue_size, queue_size, scratch=scratch)
                rerank(view.cpu_vectors(), qb, inv_b, view.kind, lists, k, workers=worker_count(len(qb), scratch),
                       out=(d[lo:lo + len(qb)], i[lo:lo + len(qb)]), counts=nd[lo:lo + len(qb)])
        else:
            d, i, nd, ne = search_beam(g_ids, view.cpu_vectors(), q, inv_b, view.kind, entries, k, queue_size,
                                       scratch=scratch, out=out, slack=slack,
                                       allowed=None if allowed is None else allowed.bits)
    if metric == "sqeuclidean" or metric == "euclidean":
        np.maximum(d, 0, out=d)
        if metric == "euclidean":
            np.sqrt(d, out=d)
    elif metric == "cosine":
        np.clip(d, 0, 2, out=d)
    if d.size and i[:, -1].min() < 0:  # fewer than k reached
        d[i < 0] = np.inf
    if stats is not None:
        stats["distances_per_query"] = float(nd.mean()) if nd.size else 0.0
        stats["expansions_per_query"] = float(ne.mean()) if ne.size else 0.0
        stats["algo"] = "beam"
        stats["cpu_walk"] = "int8" if codes else "exact"
        stats["seconds"] = time.perf_counter() - t0
    return d, i


_GPU_MODULES: tuple | None = None
#: the query dtypes the kernel stages as they are (other dtypes, but the dp4a modes' 8-bit ones, are converted to
#: float32); dtype objects, so that a test of a query's dtype against them is an identity test
_STAGED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def _gpu_modules() -> tuple:
    """(cupy, the kernels' layout module, knngraph.beam.cuda), imported on the first GPU search (not with this module:
    the CPU path never loads CuPy) and kept, so a small search does not pay the import statements' lookups on
    every call."""
    global _GPU_MODULES
    if _GPU_MODULES is None:
        import cupy

        from . import _layout, cuda

        _GPU_MODULES = (cupy, _layout, cuda)
    return _GPU_MODULES


def _search_gpu(dev: Device, view: GraphView, queries, k, queue_size, search_width, max_registers, stats, out,
                slack, allowed):
    """The GPU kernels (:mod:`knngraph.beam._kernels`) on ``queries`` (host or device). Per call it only
    moves host queries (and the bitset of a filter, ``allowed``) to the GPU, converts them when the kernel
    needs another dtype and launches one kernel through a :class:`~knngraph.beam.cuda.BeamPlan` kept in
    the view's cache: the graph, vectors, entry points, norms and the compiled launch stay on the GPU.
    Host queries are checked for NaN / inf on the host (ValueError); device queries are not copied back
    for that (it would stall the call): the kernel gives a row holding NaN or inf ids -1 and distances
    NaN. ``KNNGRAPH_RAW_LAUNCH=0``: numba's launch instead of the prepared one (read once, as
    ``KNNGRAPH_BEAM_MAX_REGISTERS``: :func:`knngraph.beam.cuda.reread_environment`). Returns (reported
    distances, ids) on the GPU."""
    cp, bk, gpu = _gpu_modules()
    t0 = time.perf_counter()
    g_ids, xb, inv_b, entries = view.arrays(dev)
    kind = view.kind
    # current already when song.search's entry made it so (the context is then a shared no-op one); beam.search
    # and other callers may come from another GPU
    with device_context(dev):
        qtype = type(queries)
        if qtype is not cp.ndarray and not is_device_array(queries):
            check_finite(queries, "queries")
        # device queries on this GPU are used in place; others (host, another GPU) copied here
        q = queries if qtype is cp.ndarray and queries.data.device_id == dev.index else cp.asarray(queries)
        qdtype, nq, dim = q.dtype, q.shape[0], q.shape[1]
        mode = gpu.beam_mode(xb.dtype, qdtype, dim, xb.data.ptr, q.data.ptr)
        if qdtype not in _STAGED_DTYPES and mode != bk.MODE_DP4A_U8 and mode != bk.MODE_DP4A_I8:
            q = q.astype(cp.float32)  # the kernel stages float32 or float16 queries as float32
            qdtype = q.dtype
        d, i = out if out is not None else (cp.empty((nq, k), cp.float32), cp.empty((nq, k), cp.int32))
        bits = None if allowed is None else cp.asarray(allowed.bits)  # a few KB per call, like the queries
        raw, _ = gpu.launch_environment()
        regs = max_registers or gpu.beam_max_registers(mode)
        sms = sm_count(dev.index)
        width = gpu.search_width(nq, sms, search_width, queue_size)
        if not search_width or allowed is not None:  # automatic, or a filter's longer list: no wider than fits
            width = gpu.fitting_width(width, queue_size, dim, mode)
        if raw:
            # one plan per configuration, stream and calling thread: the list's length within its capacity,
            # GGNN's slack values (tau, nn1, ...) and a filter's bitset are written per call; a plan's query
            # counters and counts are its caller's, and calls on different streams may overlap on the GPU
            # (threads with streams of their own; a replicated search's two streams per GPU). The GPU by its
            # ordinal (an int hashes in C; the device object's hash is Python code)
            key = (dev.index, "beam", gpu.list_capacity(queue_size), k, mode, qdtype.char, dim, regs, width,
                   slack is not None, bits is not None, cp.cuda.get_current_stream().ptr, threading.get_ident())
            plan = view.cache.get(key)
            if plan is None:
                make_room_for_plan(view.cache, key)
                plan = gpu.BeamPlan(g_ids, xb, _norms(dev, view, mode, inv_b), entries, kind, k, queue_size, mode,
                                    bk.report_code(view.metric), dim, sms, regs, width, qdtype, slack is not None,
                                    bits is not None)
                view.cache[key] = plan
            plan(q, d, i, slack, bits, queue_size)
            nd, ne = plan.counts(nq) if stats is not None else (None, None)
        else:
            nd, ne = cp.empty(nq, cp.int32), cp.empty(nq, cp.int32)
            gpu.search_beam_device(g_ids, xb, q, _norms(dev, view, mode, inv_b), kind, entries, k, queue_size, mode,
                                   xp=cp, sm_count=sms, out=(d, i, nd, ne), report=bk.report_code(view.metric),
                                   width=width, slack=slack, allowed=bits)
        if stats is not None:
            stats["distances_per_query"] = float(nd.mean())
            stats["expansions_per_query"] = float(ne.mean())
            stats["algo"] = "beam"
            stats["search_width"] = width
    if stats is not None:
        stats["seconds"] = time.perf_counter() - t0
    return d, i


#: plans kept per configuration and thread, one per stream it searched on (the oldest made is dropped beyond
#: it): a thread that makes a stream per call must not keep a plan, and its GPU buffers, per stream it ever
#: used. Room for the thread's own stream and two replicated searches' lanes on one GPU (``devices=[0, 0]``:
#: four lent streams) and more: a plan holds a few KB of GPU memory, and making one costs a launch's packing
PLANS_PER_THREAD_AND_CONFIGURATION = 8


def make_room_for_plan(cache: dict, key: tuple) -> None:
    """Before the plan of ``key`` (configuration..., stream, thread ident) goes into a view's ``cache``: drop
    the plans of threads that have ended (:func:`drop_plans_of_ended_threads`) and the oldest plans of the
    same configuration and thread beyond :data:`PLANS_PER_THREAD_AND_CONFIGURATION` - 1. A dropped plan's
    kernels may still run on its stream: its buffers go back to CuPy's pool for that stream, which orders
    their next use after them."""
    drop_plans_of_ended_threads(cache)
    same = [other for other in list(cache) if isinstance(other, tuple) and len(other) == len(key)
            and other[1] == "beam" and other[-1] == key[-1] and other[:-2] == key[:-2]]
    for other in same[:max(0, len(same) - PLANS_PER_THREAD_AND_CONFIGURATION + 1)]:
        cache.pop(other, None)


def drop_plans_of_ended_threads(cache: dict) -> int:
    """Remove from a view's ``cache`` the launch plans of threads that have ended (the last element of a
    plan's key is its thread's ident), so that a service whose threads come and go (a thread per request)
    does not keep a plan, and its GPU buffers, per thread it ever ran. Called when a plan is made; returns
    how many were removed."""
    live = {t.ident for t in threading.enumerate()}
    ended = [key for key in list(cache) if isinstance(key, tuple) and len(key) > 2 and key[1] == "beam"
             and key[-1] not in live]
    for key in ended:
        cache.pop(key, None)
    return len(ended)


def _norms(dev: Device, view: GraphView, mode: int, inv_b):
    """The norms the GPU kernel reads, made once per device: int32 squared norms of 8-bit vectors for the
    dp4a L2 distance, else ``inv_b`` (the inverse norms for cosine, a 1-element dummy otherwise)."""
    from . import _layout as bk

    if mode not in (bk.MODE_DP4A_U8, bk.MODE_DP4A_I8) or view.kind != distance_kind("sqeuclidean"):
        return inv_b
    key = (str(dev), "square_norms")
    if key not in view.cache:
        import cupy as cp

        from .cuda import square_norms

        xb = view.arrays(dev)[1]
        with kept_across_streams():
            view.cache[key] = square_norms(xb, cp)
    return view.cache[key]
