"""Repeated small GPU calls replayed as CUDA graphs: one host launch for a whole search.

A small search is bound by the host, not the GPU. An exact search of 1,000 float16 queries against a
5,000-row index runs about 0.2 ms of kernels on an H200, while issuing its ten launches (CuPy elementwise
kernels, cuBLAS, numba kernels through the driver) costs the Python host two to three times that. A
service or an evaluation loop calls the same search with the same shapes again and again: capturing
that sequence once (CUDA stream capture) and replaying it costs one graph launch plus the copies in and
out.

:class:`CapturedCall` captures ``fn(*inputs, capturing=True)`` (a function of C-contiguous CuPy arrays that
returns ``(outputs, extra)``: a tuple of CuPy arrays and any host value, with no host synchronisation
inside; it may raise :class:`NotCapturable` when this call is not to be captured) on a lent capture
stream. The graph reads
its inputs from buffers of its own and leaves its outputs in one staging buffer; a replay copies the
caller's inputs in, launches the graph and copies the staging buffer into one new allocation, whose views
are the outputs; every step is on the caller's current stream, ordered after the previous replay on any
stream. Every block allocated during the capture is held by the call (never returned to CuPy's pool
while the graph may write it), so a graph costs the memory of its temporaries: :data:`MAX_GRAPH_BYTES`
bounds it.

:class:`GraphCache` keeps up to :data:`GRAPHS_PER_CACHE` captured calls by key, least recently used out,
and captures a key only at its second call (one-off shapes are never captured). A key whose capture
failed (a host synchronisation inside, an unsupported operation) or whose graph would be too large is
remembered and runs uncaptured from then on. ``KNNGRAPH_CUDA_GRAPHS=0`` turns replay off (every call
uncaptured).
"""

from __future__ import annotations

import collections
import logging
import os
import threading

__all__ = ["CapturedCall", "GraphCache", "GRAPHS_PER_CACHE", "MAX_GRAPH_BYTES", "NotCapturable", "graphs_enabled"]

#: the most memory (inputs, temporaries, outputs) one captured call may hold; larger calls run uncaptured
MAX_GRAPH_BYTES = 256 << 20
#: captured calls kept per cache (an index keeps one cache per GPU)
GRAPHS_PER_CACHE = 4
_ALIGN = 256
_log = logging.getLogger("knngraph")
_D2D = 3  # cudaMemcpyDeviceToDevice


def graphs_enabled() -> bool:
    """Whether repeated calls may be replayed as CUDA graphs (``KNNGRAPH_CUDA_GRAPHS``, default on)."""
    return os.environ.get("KNNGRAPH_CUDA_GRAPHS", "1").strip().lower() not in ("0", "false", "no", "off")


class NotCapturable(Exception):
    """Raised by a captured function (before any GPU work) when this call must not be captured."""


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class CapturedCall:
    """``fn(*inputs)`` captured once as a CUDA graph on GPU ``device_id`` (the current device), replayed by
    :meth:`replay`. ``example_inputs``: C-contiguous CuPy arrays with the shapes and dtypes of every later
    call's inputs (only their shapes are used: a capture runs nothing). ``extra`` is any host value the
    capture's function returned through ``fn``'s second result (e.g. statistics), kept as it was.
    ``keep_alive``: the arrays made before the capture that the graph reads (an index's resident operand),
    held as long as the graph, whatever their owner drops meanwhile.

    Raises whatever ``fn`` raised, or :class:`NotCapturable`, with nothing kept."""

    def __init__(self, fn, example_inputs, device_id: int, keep_alive=()):
        import cupy as cp

        from ._device import borrowed_streams

        self.device_id = device_id
        held: list = []  # every block allocated while capturing, held as long as the graph
        pool = cp.get_default_memory_pool()

        def allocate(size):
            mem = pool.malloc(size)
            held.append(mem)
            return mem

        self.inputs = tuple(cp.empty(a.shape, a.dtype) for a in example_inputs)
        self.graph = None
        with borrowed_streams(device_id, "capture") as (stream,):
            # the input buffers are made on the caller's stream: the capture stream must see them complete
            stream.wait_event(cp.cuda.get_current_stream().record())
            with stream, cp.cuda.using_allocator(allocate):
                stream.begin_capture()
                try:
                    outputs, self.extra = fn(*self.inputs, capturing=True)
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
        self._keep_alive = keep_alive
        self._staging = staging
        self._layout = tuple((o.shape, o.dtype, off) for o, off in zip(outputs, offsets))
        self._total = total
        self.nbytes = sum(m.mem.size for m in held) + sum(a.nbytes for a in self.inputs)
        self._lock = threading.Lock()
        self._done = None  # event recorded after the last replay's copy out

    def replay(self, inputs):
        """The outputs (new CuPy arrays, views of one allocation) of the captured function for ``inputs``
        (C-contiguous CuPy arrays of the captured shapes and dtypes), on the current stream; None when
        another thread is replaying this call at this moment (run the function uncaptured then)."""
        import cupy as cp

        if not self._lock.acquire(blocking=False):
            return None
        try:
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


class GraphCache:
    """Captured calls by key (see the module's text): :meth:`call` replays a key's graph, captures it at
    the key's second call, or runs the function uncaptured."""

    def __init__(self, capacity: int | None = None, max_bytes: int | None = None):
        self.capacity = GRAPHS_PER_CACHE if capacity is None else capacity
        self.max_bytes = MAX_GRAPH_BYTES if max_bytes is None else max_bytes
        self._graphs: collections.OrderedDict = collections.OrderedDict()
        self._seen: set = set()
        self._refused: set = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._graphs)

    def call(self, key, fn, inputs, device_id: int, keep_alive=()):
        """``(outputs, extra, replayed)`` of ``fn(*inputs)`` (see :class:`CapturedCall`): replayed from the
        key's graph, else captured now when the key was called before (``keep_alive``: see
        :class:`CapturedCall`), else run as it is. ``fn`` runs
        uncaptured whenever the key cannot be captured (and is then never tried again)."""
        if not graphs_enabled():
            outputs, extra = fn(*inputs, capturing=False)
            return outputs, extra, False
        with self._lock:
            captured = self._graphs.get(key)
            if captured is not None:
                self._graphs.move_to_end(key)
            first = key not in self._seen
            self._seen.add(key)
            refused = key in self._refused
        if captured is not None:
            outputs = captured.replay(inputs)
            if outputs is not None:
                return outputs, captured.extra, True
        elif not first and not refused:
            try:
                captured = CapturedCall(fn, inputs, device_id, keep_alive)
            except Exception as exc:  # noqa: BLE001 - anything the capture could not take: run uncaptured
                _log.debug("knngraph: %r runs uncaptured (%s: %s)", key, type(exc).__name__, exc)
                captured = None
            with self._lock:
                if captured is None or captured.nbytes > self.max_bytes:
                    self._refused.add(key)
                else:
                    self._graphs[key] = captured
                    while len(self._graphs) > self.capacity:
                        self._graphs.popitem(last=False)
            if captured is not None and key not in self._refused:
                outputs = captured.replay(inputs)
                if outputs is not None:
                    return outputs, captured.extra, True
        outputs, extra = fn(*inputs, capturing=False)
        return outputs, extra, False
