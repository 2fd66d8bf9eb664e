"""Repeated small GPU calls replayed as CUDA graphs: one host launch for a whole search.

A small search is bound by the host, not the GPU. An exact search of 1,000 float16 queries against a
5,000-row index runs about 0.2 ms of kernels on an H200, while issuing its ten launches (CuPy elementwise
kernels, cuBLAS, numba kernels through the driver) costs the Python host two to three times that. A
service or an evaluation loop calls the same search with the same shapes again and again: capturing
that sequence once (CUDA stream capture) and replaying it costs one graph launch plus the copies in and
out.

:class:`CapturedCall` captures ``fn(*inputs, capturing=True)`` on a lent capture stream: a function of
C-contiguous CuPy arrays that returns ``(outputs, extra)`` (a tuple of CuPy arrays and any host value),
with no host synchronisation inside; it may raise :class:`NotCapturable` when this call is not to be
captured. The graph reads its inputs from buffers of its own and leaves its outputs in one staging buffer.
A replay copies the caller's inputs in, launches the graph and copies the staging buffer into one new
allocation, whose views are the outputs; every step is on the caller's current stream, ordered after the
previous replay on any stream. Every block allocated for the graph is held by it (never returned to
CuPy's pool while the graph may write it), so a graph costs the memory of its temporaries.

A capture happens only while the calling thread is the process's only Python thread. While any stream of
a GPU captures, CUDA refuses a device-wide synchronisation from every other thread
(``cudaDeviceSynchronize``, ``cupy.cuda.Device().synchronize()``, ``torch.cuda.synchronize()``: "operation
not permitted when stream is capturing", measured on an H200 with CUDA 13), so a capture beside other
threads could make an unrelated thread's call fail. Replays have no such effect: graphs captured
single-threaded (a script, a notebook, a service's warm-up before it starts its workers) are replayed from
any number of threads.

:class:`GraphCache` keeps up to :data:`GRAPHS_PER_CACHE` captured calls by key, holding at most
:data:`MAX_GRAPH_BYTES` together (least recently used out), and captures a key only at its second call
(one-off shapes are never captured). A key whose capture failed (a host synchronisation inside, an
unsupported operation) or whose graph alone would pass the byte bound is remembered and runs uncaptured
from then on. ``KNNGRAPH_CUDA_GRAPHS=0`` turns replay off (every call uncaptured).
"""

from __future__ import annotations

import collections
import logging
import os
import threading

__all__ = ["CapturedCall", "GraphCache", "GRAPHS_PER_CACHE", "MAX_GRAPH_BYTES", "NotCapturable", "REPLAYS_PER_CAPTURE",
           "graphs_enabled"]

#: the most memory (inputs, temporaries, outputs) the captured calls of one cache may hold together (a
#: larger call runs uncaptured)
MAX_GRAPH_BYTES = 256 << 20
#: captured calls kept per cache (an index keeps one cache per GPU)
GRAPHS_PER_CACHE = 8
#: replays that pay for a new capture once a cache has made ``GRAPHS_PER_CACHE`` captures
REPLAYS_PER_CAPTURE = 8
_MAX_SEEN = 4096
_ALIGN = 256
_log = logging.getLogger("knngraph")
_D2D = 3  # cudaMemcpyDeviceToDevice


def graphs_enabled() -> bool:
    """Whether repeated calls may be replayed as CUDA graphs (``KNNGRAPH_CUDA_GRAPHS``, default on)."""
    return os.environ.get("KNNGRAPH_CUDA_GRAPHS", "1").strip().lower() not in ("0", "false", "no", "off")


class NotCapturable(Exception):
    """Raised by a captured function (before any GPU work) when this call must not be captured."""


def _alone() -> bool:
    """Whether this is the process's only Python thread: the condition for a capture (see the module's
    text)."""
    return threading.active_count() == 1


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class CapturedCall:
    """``fn(*inputs)`` captured once as a CUDA graph on GPU ``device_id`` (the current device), replayed by
    :meth:`replay`. ``example_inputs``: C-contiguous CuPy arrays with the shapes and dtypes of every later
    call's inputs (only their shapes are used: a capture runs nothing). ``extra`` is any host value the
    capture's function returned through ``fn``'s second result (e.g. statistics), kept as it was.
    ``keep_alive``: the arrays made before the capture that the graph reads (an index's resident operand),
    or a function that returns them (called when the captured function has returned), held as long as the
    graph, whatever their owner drops meanwhile. The graph's own blocks come from CuPy's pool on a lent
    capture stream and go back to it only through :meth:`retire`, once the last replay has finished.

    Raises whatever ``fn`` raised, or :class:`NotCapturable`, with nothing kept."""

    def __init__(self, fn, example_inputs, device_id: int, keep_alive=()):
        import cupy as cp

        from ._device import borrowed_streams

        self.device_id = device_id
        held: list = []  # every block allocated for the graph, held as long as it: its buffers and temporaries
        pool = cp.get_default_memory_pool()

        def allocate(size):
            mem = pool.malloc(size)
            held.append(mem)
            return mem

        self.graph = None
        with borrowed_streams(device_id, "capture") as (stream,):
            with stream, cp.cuda.using_allocator(allocate):
                self.inputs = tuple(cp.empty(a.shape, a.dtype) for a in example_inputs)
                stream.begin_capture()
                try:
                    outputs, self.extra = fn(*self.inputs, capturing=True)
                    self._keep_alive = tuple(keep_alive() if callable(keep_alive) else keep_alive)
                    outputs = tuple(o if o.flags.c_contiguous else cp.ascontiguousarray(o) for o in outputs)
                    offsets, total = [], 0
                    for o in outputs:
                        offsets.append(total)
                        total = _aligned(total + o.nbytes)
                    staging = cp.empty(max(total, 1), cp.uint8)
                    for o, off in zip(outputs, offsets):
                        if o.nbytes:
                            cp.cuda.runtime.memcpyAsync(staging.data.ptr + off, o.data.ptr, o.nbytes, _D2D,
                                                        stream.ptr)
                finally:
                    graph = stream.end_capture()  # (raises when the capture was invalidated)
        self.graph = graph
        self._held = held
        self._staging = staging
        self._layout = tuple((o.shape, o.dtype, off) for o, off in zip(outputs, offsets))
        self._total = total
        self.nbytes = sum(m.mem.size for m in held)
        self._lock = threading.Lock()
        self._done = None  # event recorded after the last replay's copy out

    def replay(self, inputs):
        """The outputs (new CuPy arrays, views of one allocation) of the captured function for ``inputs``
        (C-contiguous CuPy arrays of the captured shapes and dtypes), on the current stream; None when
        another thread is replaying this call at this moment, or it was retired (run the function uncaptured
        then)."""
        import cupy as cp

        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self.graph is None:
                return None  # retired meanwhile
            stream = cp.cuda.get_current_stream()
            if self._done is not None:
                stream.wait_event(self._done)  # the last replay (any stream) has read its inputs and copied out
            memcpy = cp.cuda.runtime.memcpyAsync
            for buf, a in zip(self.inputs, inputs):
                if a.nbytes:
                    memcpy(buf.data.ptr, a.data.ptr, a.nbytes, _D2D, stream.ptr)
            self.graph.launch(stream)
            out = cp.cuda.alloc(max(self._total, 1))
            if self._total:
                memcpy(out.ptr, self._staging.data.ptr, self._total, _D2D, stream.ptr)
            self._done = stream.record()
            return tuple(cp.ndarray(shape, dtype, memptr=out + off) for shape, dtype, off in self._layout)
        finally:
            self._lock.release()

    def retire(self) -> None:
        """Wait for the last replay (its copies out included) to finish on the GPU, then let the graph and its
        memory go: a dropped graph's blocks return to CuPy's pool, where any stream may take them next."""
        with self._lock:
            if self._done is not None:
                self._done.synchronize()
            self.graph = None
            self._held = self._keep_alive = self._staging = self.inputs = None


class GraphCache:
    """Captured calls by key (see the module's text): :meth:`call` replays a key's graph, captures it at
    the key's second call, or runs the function uncaptured.

    Bounds: at most ``capacity`` graphs holding at most ``max_bytes`` together (least recently used out;
    one larger than ``max_bytes`` alone is refused). A capture costs about as much as one or two uncaptured
    calls (1.2-1.9 ms for a 5k x 1k exact search on an H200, whose replay takes 0.3 ms), so callers that
    cycle through more shapes than the cache keeps would pay it on every call:
    once the cache is full, a new capture must be paid for by :data:`REPLAYS_PER_CAPTURE` replays since
    the last one, and keys then run uncaptured until it is."""

    def __init__(self, capacity: int | None = None, max_bytes: int | None = None):
        self.capacity = GRAPHS_PER_CACHE if capacity is None else capacity
        self.max_bytes = MAX_GRAPH_BYTES if max_bytes is None else max_bytes
        self._graphs: collections.OrderedDict = collections.OrderedDict()
        self._seen: set = set()
        self._refused: set = set()
        self._capturing: set = set()
        self._captures = 0  # graphs stored
        self._replays_since_capture = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._graphs)

    @property
    def nbytes(self) -> int:
        """The memory the kept graphs hold."""
        with self._lock:
            return sum(g.nbytes for g in self._graphs.values())

    def close(self) -> None:
        """Let every graph go (each once its last replay has finished)."""
        with self._lock:
            dropped = list(self._graphs.values())
            self._graphs.clear()
        for g in dropped:
            g.retire()

    def _may_capture(self, key) -> bool:
        """(Under the lock.) Whether ``key``, called before, may be captured now."""
        if key in self._refused or key in self._capturing or not _alone():
            return False
        return self._captures < self.capacity or self._replays_since_capture >= REPLAYS_PER_CAPTURE

    def call(self, key, fn, inputs, device_id: int, keep_alive=()):
        """``(outputs, extra, replayed)`` of ``fn(*inputs)`` (see :class:`CapturedCall`): replayed from the
        key's graph, else captured now when the key was called before and the bounds allow it
        (``keep_alive``: see :class:`CapturedCall`), else run as it is. ``fn`` runs uncaptured whenever the
        key cannot be captured (and is then not tried again), while another thread captures it, and while
        another thread replays its graph."""
        if not graphs_enabled():
            outputs, extra = fn(*inputs, capturing=False)
            return outputs, extra, False
        with self._lock:
            captured = self._graphs.get(key)
            capture = False
            if captured is not None:
                self._graphs.move_to_end(key)
            elif key in self._seen:
                capture = self._may_capture(key)
                if capture:
                    self._capturing.add(key)
            else:
                if len(self._seen) >= _MAX_SEEN:
                    # a caller of ever new shapes: forget them (the kept graphs stay)
                    self._seen.clear()
                    self._refused.clear()
                self._seen.add(key)
        if capture:
            try:
                captured = CapturedCall(fn, inputs, device_id, keep_alive)
            except Exception as exc:  # noqa: BLE001 - anything the capture could not take: run uncaptured
                _log.debug("knngraph: %r runs uncaptured (%s: %s)", key, type(exc).__name__, exc)
                captured = None
            dropped = []
            with self._lock:
                self._capturing.discard(key)
                if captured is None or captured.nbytes > self.max_bytes:
                    self._refused.add(key)
                    if captured is not None:
                        dropped.append(captured)
                    captured = None
                else:
                    self._graphs[key] = captured
                    self._captures += 1
                    self._replays_since_capture = 0
                    held = sum(g.nbytes for g in self._graphs.values())
                    while len(self._graphs) > self.capacity or held > self.max_bytes:
                        old = self._graphs.popitem(last=False)[1]
                        held -= old.nbytes
                        dropped.append(old)
            for old in dropped:
                old.retire()  # (outside the lock: waits for the GPU)
        if captured is not None:
            outputs = captured.replay(inputs)
            if outputs is not None:
                with self._lock:
                    self._replays_since_capture += 1
                return outputs, captured.extra, True
        outputs, extra = fn(*inputs, capturing=False)
        return outputs, extra, False
