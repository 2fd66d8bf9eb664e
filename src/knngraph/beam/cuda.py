"""Host side of the fast graph searcher's GPU path: choose the kernel's distance mode and search width,
size its shared memory and launches, and prepare one launch per configuration (:class:`BeamPlan`).

Arrays may be CuPy arrays (real GPU) or NumPy arrays (the numba CUDA simulator in tests, through
:func:`search_beam_device`); ``xp`` names which. Everything here is validated already (see ``_search.py``).
"""

from __future__ import annotations

import functools
import os
import threading

import numpy as np

from .._cuda_launch import kernel_module
from ..primitives.constants import WARP, pow2_at_least
from . import _layout as bk

_kernels = kernel_module(__package__ + "._kernels")

__all__ = ["search_beam_device", "beam_config", "slack_args", "fitting_width", "BeamPlan", "search_width",
           "list_capacity", "beam_mode", "beam_max_registers", "square_norms", "COUNTER_RING", "launch_environment",
           "reread_environment"]

#: the sorted list's compile-time capacity: ``queue_size`` rounded up to a power of two, at least this
#: (one kernel build per capacity)
_MIN_LIST_CAPACITY = 32


#: queue size -> its list capacity (a search asks once per call)
_CAPACITIES: dict = {}


def list_capacity(queue_size: int) -> int:
    """The compile-time capacity of the sorted list for ``queue_size``: a power of two, at least 32."""
    cap = _CAPACITIES.get(queue_size)
    if cap is None:
        cap = _CAPACITIES.setdefault(queue_size, pow2_at_least(queue_size, _MIN_LIST_CAPACITY))
    return cap



#: bytes of the word each mode reads the vectors in (the alignment it needs)
_WORD_BYTES = {bk.MODE_F32X4: 16, bk.MODE_HALF4: 8, bk.MODE_F32X2: 8, bk.MODE_HALF2: 4, bk.MODE_DP4A_U8: 4,
               bk.MODE_DP4A_I8: 4}


def beam_mode(base_dtype, query_dtype, dim: int, base_address: int = 0, query_address: int = 0) -> int:
    """dp4a modes for 8-bit vectors searched with queries of the same dtype (dim % 4 == 0); 8-byte words of float16
    (four halves, or 4-byte words of two for dim % 4 == 2); float32 vectors as 16-byte loads of four floats (dim % 4
    == 0) or 8-byte words of two (dim % 4 == 2); else generic (element loads). A word mode needs the vectors' (and,
    for dp4a, the queries') device address aligned to its word: an offset view (``buf[1:].reshape(n, d)``) falls
    back to the generic mode rather than fault on a misaligned load."""
    key = (base_dtype, query_dtype, dim % 4)  # the word mode depends on the dimension modulo 4 only
    mode = _WORD_MODES.get(key)
    if mode is None:
        mode = _WORD_MODES.setdefault(key, _word_mode(np.dtype(base_dtype), np.dtype(query_dtype), dim))
    if mode == bk.MODE_F32X4 and base_address % 16:
        mode = bk.MODE_F32X2  # an 8-byte aligned view: two floats per load
    if base_address % _WORD_BYTES.get(mode, 1) or (_dp4a(mode) and query_address % 4):
        return bk.MODE_GENERIC
    return mode


#: (vectors' dtype, queries' dtype, dim % 4) -> :func:`_word_mode` (a search asks once per call; the dtype
#: comparisons took about two microseconds of it)
_WORD_MODES: dict = {}


def _word_mode(b, q, dim: int) -> int:
    if dim % 4 == 0 and b == q == np.uint8:
        return bk.MODE_DP4A_U8
    if dim % 4 == 0 and b == q == np.int8:
        return bk.MODE_DP4A_I8
    if dim % 4 == 0 and b == np.float16:
        return bk.MODE_HALF4
    if dim % 2 == 0 and b == np.float16:
        return bk.MODE_HALF2
    if dim % 4 == 0 and b == np.float32:
        return bk.MODE_F32X4
    if dim % 2 == 0 and b == np.float32:
        return bk.MODE_F32X2
    return bk.MODE_GENERIC


def _words(base, mode: int, xp):
    """The vectors as the kernel reads them: elements (also four floats per vector load), uint32 or (four
    halves, two floats) uint64 words."""
    if mode in (bk.MODE_GENERIC, bk.MODE_F32X4):
        return base
    return base.view(xp.uint64 if mode in (bk.MODE_HALF4, bk.MODE_F32X2) else xp.uint32)


def _dp4a(mode: int) -> bool:
    return mode in (bk.MODE_DP4A_U8, bk.MODE_DP4A_I8)


def square_norms(base, xp):
    """int32 squared norms of 8-bit vectors (the dp4a L2 distance is ||x||^2 + ||q||^2 - 2 <x, q>)."""
    return (base.astype(xp.int32) ** 2).sum(axis=1, dtype=xp.int32)


#: warps per SM that the automatic search width fills at most (of 64 resident). Measured on an H100 (132
#: SMs, sift-photos 450k, recall@10 0.95): 1000 queries took 0.485 ms at width 4 against 0.56-0.59 ms at
#: width 2, the width of a budget of 16 warps per SM; 300 queries about the same at widths 4 and 8
#: (0.42-0.45 ms); 3000 queries about the same at widths 1, 2 and 4 (0.83-0.89 ms)
WARPS_PER_SM = 32


#: the narrowest automatic width by queue size (queue_size >= key: at least that many warps per query): a
#: long queue's step (merging the expanded rows into it) is long, and wider steps take fewer of them, which
#: pays even when the batch fills the GPU. H200, sift-photos 450k, 10k queries, one run: the prepared graph
#: (``profile_search_width.py --queues 64,128,256,512 --batches 10000``) at widths 1 / 2 / 4 answered 4.17 /
#: 3.88 / 3.34M queries/s at queue 64, 2.02 / 2.07 / 1.72M at 128, 0.84 / 0.94 / 0.86M at 256 and 0.23 /
#: 0.27 / 0.37M at 512 (recall equal or higher the wider); GGNN's sorted search on its k=24 graph
#: (``ggnn_gpu.py --search-widths 1,2,4``) at queue 128, tau 1.0: 2.29M at recall@10 0.963 at width 1, 2.44M at
#: 0.970 at 2, 1.94M at 0.971 at 4; at queue 512, tau 2.0: 0.37M at 0.988, 0.38M at 0.992, 0.48M at 0.992
#: (``results/search_width_queues_h200.jsonl``)
MIN_WIDTH_BY_QUEUE = ((512, 4), (128, 2))


def search_width(nq: int, sm_count: int, requested: int = 0, queue_size: int = 0) -> int:
    """Warps per query of the fast searcher: ``requested`` (1..8), or for 0 the widest (a power of two up
    to 8) that keeps ``nq * width`` within :data:`WARPS_PER_SM` warps per SM (8 for a few queries, 4 for
    1000 on 132 SMs, 1 from about 16 x SMs queries on), at least :data:`MIN_WIDTH_BY_QUEUE`'s for
    ``queue_size``."""
    if requested:
        return int(requested)
    width = 1
    while width < 8 and nq * width * 2 <= sm_count * WARPS_PER_SM:
        width *= 2
    for least_queue, least_width in MIN_WIDTH_BY_QUEUE:
        if queue_size >= least_queue:
            return max(width, least_width)
    return width


#: loads per lane and vector row that set the team size (lanes per distance) of a distance mode (4 if not
#: listed). Four floats per load: 2, i.e. teams of 16 lanes for 128 floats, measured on an H100 (sift-photos
#: 450k as float32, 10k queries, queues 32 / 64 / 96): 5.43 / 2.98 / 2.03M queries/s against 4.77 / 2.46 /
#: 1.76M with teams of 8 and 3.71 / 2.05 / 1.41M with teams of 4 (``profile_search_width.py --per-lane``)
TEAM_LOADS_PER_LANE = {bk.MODE_GENERIC: 8, bk.MODE_HALF4: 6, bk.MODE_F32X2: 6, bk.MODE_F32X4: 2}

#: register cap per thread of the fast kernel by distance mode (64 if not listed; ``SearchParams.max_registers``
#: overrides it, and so does the environment variable KNNGRAPH_BEAM_MAX_REGISTERS for every mode). Uncapped
#: the kernel takes 150-200 registers, so only 8-12 warps fit on an SM; a cap of 64 spills 300-500 bytes
#: per thread but doubles the resident warps, which pays: minilm-words (H100, 5000 queries, queue 24) took
#: 2.34 ms capped at 64, 2.43 at 96, 2.88 at 128 and 3.40 uncapped. Four floats per load hold twice the
#: registers: sift-photos 450k as float32 (H100, 10k queries, recall@10 0.969 / 0.989 / 0.994 at queues
#: 32 / 64 / 96, teams of 16) ran at 5.43 / 2.98 / 2.03M queries/s capped at 64, 5.24 / 3.08 / 2.22M at 80
#: and 5.21 / 3.04 / 2.16M at 96 (``benchmarks/studies/profile_search_width.py --registers``)
MAX_REGISTERS = {bk.MODE_F32X4: 80}

#: the environment as GPU searches read it: (``KNNGRAPH_RAW_LAUNCH`` is not '0': prepared launches, see
#: :func:`knngraph._cuda_launch.raw_launch_enabled`; ``KNNGRAPH_BEAM_MAX_REGISTERS``, None when unset or empty),
#: read on the first search and kept (two reads of ``os.environ`` per call were about two microseconds of a
#: small search's host time); :func:`reread_environment` reads them again
_ENVIRONMENT: tuple | None = None


def launch_environment() -> tuple:
    """(prepared launches, the register cap's text from the environment or None): the environment variables
    the fast searcher's GPU path reads, as read at its first search or after :func:`reread_environment`."""
    global _ENVIRONMENT
    env = _ENVIRONMENT
    if env is None:
        from .._cuda_launch import raw_launch_enabled

        env = _ENVIRONMENT = (bool(raw_launch_enabled()), os.environ.get("KNNGRAPH_BEAM_MAX_REGISTERS") or None)
    return env


def reread_environment() -> None:
    """Read ``KNNGRAPH_RAW_LAUNCH`` and ``KNNGRAPH_BEAM_MAX_REGISTERS`` again at the next GPU search: the fast
    searcher reads them once per process (:func:`launch_environment`), so a program (or a test) that changes
    them after its first search calls this."""
    global _ENVIRONMENT
    _ENVIRONMENT = None


def beam_max_registers(mode: int) -> int:
    """The register cap of the fast kernel of distance ``mode`` (:data:`MAX_REGISTERS`), or
    ``KNNGRAPH_BEAM_MAX_REGISTERS`` for every mode (as :func:`launch_environment` read it; 0: uncapped)."""
    cap = launch_environment()[1]
    return MAX_REGISTERS.get(mode, 64) if cap is None else int(cap)


def slack_args(slack) -> tuple:
    """The kernel's trailing arguments ``(kb, tau, nn1, max_exp)`` of GGNN's slack stop
    (:mod:`._kernels`); ``slack`` None (no slack stop) gives placeholders the kernel does not read.
    tau and nn1 travel as float64 holding float32 values (a prepared launch passes 8-byte values only);
    the kernel narrows them back, so its bound is the CPU's float32 one."""
    if slack is None:
        return 0, 0.0, 0.0, 0
    kb, tau, nn1, max_exp = slack
    return int(kb), float(np.float32(tau)), float(np.float32(nn1)), int(max_exp)


def _shared_shape(queue_size: int, dim: int, mode: int, width: int):
    """(list capacity, visited-table slots, staged query words) of a kernel of search ``width``."""
    qcap = list_capacity(queue_size)
    hsize = pow2_at_least(4 * (qcap + (width * WARP if width > 1 else 0)), 512)
    qwords = dim // 4 if _dp4a(mode) else dim  # the staged query: uint32 words or float32 values
    return qcap, hsize, qwords


@functools.lru_cache(maxsize=4096)  # per call of every search: a pure function of four ints
def fitting_width(width: int, queue_size: int, dim: int, mode: int) -> int:
    """The widest search width up to ``width`` (halving) whose block-per-query kernel fits the shared
    memory a block may use (a query copy per warp: wide blocks of long vectors or queues do not); 1 when
    none does (the warp-per-query kernel then decides). Used for automatic widths only: a width the
    caller asks for that does not fit stays an error (:func:`beam_config`)."""
    while width > 1 and bk.shared_bytes_per_block(*_shared_shape(queue_size, dim, mode, width), width) \
            > bk.SHARED_BUDGET:
        width //= 2
    return width


def beam_config(queue_size: int, dim: int, mode: int, kind: int, max_warps: int = 4, width: int = 1,
                slack: bool = False, filtered: bool = False):
    """(kernel, warps per block) of the fast searcher for a queue size, dimension, distance mode and kind
    (``DIST_*``) and search width (warps per query; > 1: the block-per-query kernel); ``slack``: the
    kernel with GGNN's slack stop; ``filtered``: the kernel that returns only the ids of a bitset."""
    qcap, hsize, qwords = _shared_shape(queue_size, dim, mode, width)
    # loads per vector row: 4-byte words (dp4a, half2) or elements
    row_units = bk.row_units(mode, qwords)
    tsize = bk.team_size(row_units, TEAM_LOADS_PER_LANE.get(mode, 4))
    per_lane = -(-row_units // tsize)
    if width > 1:
        per = bk.shared_bytes_per_block(qcap, hsize, qwords, width)
        if per > bk.SHARED_BUDGET:
            raise ValueError(f"queue_size={queue_size} with dim={dim} and search_width={width} needs {per} bytes of "
                             f"shared memory, more than the {bk.SHARED_BUDGET} a block may use; lower queue_size or "
                             "search_width")
        return _kernels.beam_kernel(qcap, hsize, qwords, mode, kind, tsize, width, per_lane, width, slack, filtered), width
    per = bk.shared_bytes_per_warp(qcap, hsize, qwords)
    if per > bk.SHARED_BUDGET:
        raise ValueError(f"queue_size={queue_size} with dim={dim} needs {per} bytes of shared memory per warp, "
                         f"more than the {bk.SHARED_BUDGET} a block may use; lower queue_size")
    wpb = bk.warps_per_block(qcap, hsize, qwords, max_warps)
    return _kernels.beam_kernel(qcap, hsize, qwords, mode, kind, tsize, wpb, per_lane, 1, slack, filtered), wpb


def search_beam_device(graph_ids, base, queries, norms, kind, entries, k, queue_size, mode, *, xp,
                       max_warps: int = 4, sm_count: int = 1, out=None, launch=None, report=0, width: int = 1,
                       slack=None, allowed=None):
    """Search every query with the fast kernel; returns device arrays (internal distances, ids, number of
    distance computations, number of expanded vertices). ``queries`` is on the device, float32 or
    float16, or of the vectors' 8-bit dtype (dp4a modes); ``norms``: int32 squared norms (dp4a L2),
    inverse norms of the vectors (cosine) or a 1-element dummy. A query holding NaN or inf gets ids -1 and
    distances NaN. ``out``: optional (distances, ids, distance counts, expansion counts) arrays to fill.
    ``launch(kernel, blocks, threads, args)``: how to launch (default: :func:`knngraph._cuda_launch.launch`,
    which loads the kernel from the disk cache of compiled kernels on a GPU and hands NumPy arrays, the
    simulator's, and ``KNNGRAPH_RAW_LAUNCH=0`` to numba's launch). ``report``:
    :func:`_kernels.report_code` of the metric to return reported distances (default: internal ones).
    ``slack``: None, or ``(kb, tau, nn1, max_exp)`` to stop each query at GGNN's bound too (see
    :mod:`._kernels`). ``allowed``: None, or the uint32 bitset (on the device) of the ids that may be
    returned: the filtered kernel then returns the first k allowed entries of each final list."""
    nq = queries.shape[0]
    dim = queries.shape[1]
    kern, wpb = beam_config(queue_size, dim, mode, int(kind), max_warps, width, slack is not None, allowed is not None)
    base_arg = _words(base, mode, xp)
    q_arg = queries.view(xp.uint32) if _dp4a(mode) else queries
    if out is None:
        out = (xp.empty((nq, k), xp.float32), xp.empty((nq, k), xp.int32), xp.empty(nq, xp.int32),
               xp.empty(nq, xp.int32))
    out_k, out_i, out_nd, out_ne = out
    counter = xp.zeros(1, xp.int32)
    blocks = _blocks(nq, wpb, width, sm_count)
    # the last argument: the bitset of a filtered kernel, else a placeholder the kernel does not read
    args = (graph_ids, base_arg, q_arg, norms, entries, int(k), int(queue_size), int(report), counter, out_k, out_i,
            out_nd, out_ne, *slack_args(slack), counter if allowed is None else allowed)
    from .._cuda_launch import launch as cached_launch

    (launch or cached_launch)(kern, blocks, wpb * WARP, args)
    return out_k, out_i, out_nd, out_ne


def _blocks(nq: int, wpb: int, width: int, sm_count: int) -> int:
    """Blocks of a launch: enough to fill the GPU; blocks (or their warps) then take queries from a
    counter."""
    per_block = 1 if width > 1 else wpb
    return int(max(1, min((nq + per_block - 1) // per_block, sm_count * (32 // max(wpb, 1)))))


#: query counters a :class:`BeamPlan` cycles through before it clears them
COUNTER_RING = 4096


class BeamPlan:
    """One configuration of the fast searcher over one index, prepared once: the kernel compiled for its
    argument types with its arguments packed (:class:`~knngraph._cuda_launch.PreparedLaunch`), the launch
    shape and a ring of zeroed query counters. A call only rewrites the values of the queries, outputs and
    counter and launches, so a small batch costs little more than the launch itself
    (:func:`knngraph.beam.search` keeps plans in the view's cache). ``slack``: whether the kernel has GGNN's
    slack stop; its values ``(kb, tau, nn1, max_exp)`` come with each call, like the queries. ``filtered``:
    whether the kernel returns only the ids of a bitset; the bitset comes with each call, like the
    queries (one plan serves every filter). The list's length (``queue_size``, the kernel's ``qsize``) may
    also change per call, within the capacity the plan was compiled for (:func:`list_capacity`): a filter's
    list grows by its allowed share, so one plan serves the filters whose lists share a capacity."""

    def __init__(self, graph_ids, base, norms, entries, kind, k, queue_size, mode, report, dim, sm_count,
                 max_registers=None, width: int = 1, query_dtype=np.float32, slack: bool = False,
                 filtered: bool = False):
        import cupy as cp

        from .._cuda_launch import PreparedLaunch

        self.kern, self.wpb = beam_config(queue_size, dim, mode, int(kind), width=width, slack=bool(slack),
                                          filtered=bool(filtered))
        self.width = width
        self.qwords = dim // 4 if _dp4a(mode) else dim
        self.k = k
        self.sm_count = sm_count
        self._threads = self.wpb * WARP
        self._current_stream = cp.cuda.get_current_stream
        base_arg = _words(base, mode, cp)
        q_example = cp.empty((1, self.qwords), cp.uint32 if _dp4a(mode) else query_dtype)
        i1 = cp.zeros(1, cp.int32)
        # the last argument: a filtered kernel's bitset (rewritten per call), else a placeholder it never reads
        last = cp.zeros(1, cp.uint32 if filtered else cp.int32)
        example = (graph_ids, base_arg, q_example, norms, entries, int(k), int(queue_size), int(report),
                   cp.zeros(1, cp.int32), cp.empty((1, k), cp.float32), cp.empty((1, k), cp.int32), i1, i1,
                   *slack_args(None), last)
        self.launch = PreparedLaunch(self.kern, example, max_registers)
        self.slack = bool(slack)
        self.filtered = bool(filtered)
        self.capacity = list_capacity(queue_size)
        self._allowed_slots = np.array(self.launch.array_slots(17), np.intp)
        self._qsize_slot = self.launch.scalar_slots(6)[0]
        self._slack_slots = np.array(self.launch.scalar_slots(13, 14, 15, 16), np.intp)
        self._counts = cp.empty((2, 1024), cp.int32)  # distance computations and expansions per query
        # what a call rewrites: the query counter's pointer, then element count, pointer and row count of
        # the queries, the outputs and the counts
        self._slots = np.array([self.launch.array_slots(8)[1]]
                               + [s for a in (2, 9, 10, 11, 12) for s in self.launch.array_slots(a)], np.intp)
        # the query counters: call i takes counter i of a zeroed ring, so a call issues no memset; the ring
        # is cleared (on the stream, after the kernels that used it) once per COUNTER_RING calls
        self._counters = cp.zeros(COUNTER_RING, cp.int32)
        self._next_counter = 0
        self._queue_size_written = queue_size  # the list length in the launch's values (rewritten on change)
        self._keep = (base_arg, graph_ids, norms, entries, last)  # the arrays the flattened pointers point into
        self._lock = threading.Lock()

    def counts(self, nq: int):
        """(distance computations, expansions) per query of the last call of ``nq`` queries."""
        return self._counts[0, :nq], self._counts[1, :nq]

    def __call__(self, queries, out_k, out_i, slack=None, allowed=None, queue_size=None) -> None:
        """Search C-contiguous device ``queries`` (of the plan's query dtype, or the vectors' 8-bit dtype in
        dp4a modes) into the C-contiguous outputs, on the current stream; ``slack``: the values ``(kb,
        tau, nn1, max_exp)`` of a plan with the slack stop (required there, refused otherwise);
        ``allowed``: the device uint32 bitset of a filtered plan (required there, refused otherwise; it
        must stay alive until the kernel has run, as the queries); ``queue_size``: the list's length of this
        call (default: the last one), at most the plan's :attr:`capacity`.

        Calls from several threads are serialised from the counter's reset to the launch, so the packed
        arguments of one call never mix with another's, and calls queued on one stream are correct from
        any thread. Calls whose kernels may overlap on the GPU (several streams, CuPy's per-thread default
        streams included) need a plan each: the ring of query counters is cleared on the calling stream once
        it is used up, which would clear counters that another stream's queued kernels have yet to use, and
        the buffer of per-query counts is shared (when it grows, the old one goes back to the pool of the
        stream that made it while the other stream's kernel may still write to it). ``counts`` belongs to
        the last call."""
        if (slack is not None) != self.slack:
            raise ValueError("a plan with GGNN's slack stop needs its values, a plan without it takes none")
        if (allowed is not None) != self.filtered:
            raise ValueError("a filtered plan needs the bitset of allowed ids, a plan without a filter takes none")
        if queue_size is not None and not 1 <= queue_size <= self.capacity:
            raise ValueError(f"queue_size={queue_size} does not fit this plan's list capacity {self.capacity}")
        nq = queries.shape[0]
        k = self.k
        blocks = _blocks(nq, self.wpb, self.width, self.sm_count)
        stream = self._current_stream()
        with self._lock:
            if self.slack:
                kb, tau, nn1, max_exp = slack_args(slack)
                self.launch.values[self._slack_slots] = (np.int64(kb).view(np.uint64), np.float64(tau).view(np.uint64),
                                                         np.float64(nn1).view(np.uint64),
                                                         np.int64(max_exp).view(np.uint64))
            if nq > self._counts.shape[1]:
                import cupy as cp

                self._counts = cp.empty((2, nq), cp.int32)
            cptr = self._counts.data.ptr
            c = self._next_counter
            if c == COUNTER_RING:
                import cupy as cp

                cp.cuda.runtime.memsetAsync(self._counters.data.ptr, 0, 4 * COUNTER_RING, stream.ptr)
                c = 0
            self._next_counter = c + 1
            self.launch.values[self._slots] = (self._counters.data.ptr + 4 * c, nq * self.qwords, queries.data.ptr,
                                               nq, nq * k, out_k.data.ptr, nq, nq * k, out_i.data.ptr, nq, nq, cptr,
                                               nq, nq, cptr + 4 * self._counts.shape[1], nq)
            if self.filtered:
                self.launch.values[self._allowed_slots] = (allowed.size, allowed.data.ptr, allowed.size)
            if queue_size is not None and queue_size != self._queue_size_written:
                self.launch.values[self._qsize_slot] = queue_size  # a non-negative int64 is its own bit pattern
                self._queue_size_written = queue_size
            self.launch(blocks, self._threads, stream)
