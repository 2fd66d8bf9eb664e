"""Work on several GPUs queued from one host thread, and the pieces of :mod:`knngraph.multidevice` it shares
with the threaded path: the row bounds of shards, a shard's k and global ids, and errors that name their
device.

:func:`search_gpus` is a multi-device index's search when every device is a GPU: each device's copies and
kernels are queued from the calling thread, one device after another, and nothing waits until all of them
are queued (see its docs for why not one host thread per GPU).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ._device import Device, as_numpy, device_context, is_device_array, is_out_of_memory

__all__ = ["DeviceError", "shard_bounds", "naming", "named", "shard_k", "global_ids", "search_gpus", "replica_chunks",
           "search_host_queries_in_chunks"]


class DeviceError(RuntimeError):
    """Work on one device of a multi-device build or search failed; the message names the device."""


DeviceError.__module__ = "knngraph.multidevice"  # where users meet it


def shard_bounds(n: int, parts: int) -> np.ndarray:
    """Row bounds of ``parts`` contiguous shards of n rows (sizes differ by at most one)."""
    return (np.arange(parts + 1, dtype=np.int64) * n // parts).astype(np.int64)


def naming(dev: Device, exc: BaseException) -> Exception:
    """``exc``, raised by work on ``dev``, as the error to raise: the device named in its message;
    MemoryError (any out-of-memory error of the GPU stack: :func:`is_out_of_memory`), ValueError and
    TypeError keep their type, anything else becomes a :class:`DeviceError`."""
    message = f"on device {dev}: {type(exc).__name__}: {exc}"
    if is_out_of_memory(exc):
        return MemoryError(message)
    if isinstance(exc, (ValueError, TypeError)):
        return type(exc)(message)
    return DeviceError(message)


def shard_k(index, j: int, k: int) -> int:
    """The top-k asked of part ``j`` of a sharded index: at most its rows (a compacted part holds fewer)."""
    return min(k, int(index.bounds[j + 1]) - int(index.bounds[j]), len(index.parts[j]))


def global_ids(ids, offset: int):
    """A part's ids as global ids (``offset`` added; -1, no neighbour, kept), int32, NumPy or CuPy."""
    xp = __import__("cupy") if is_device_array(ids) else np
    return xp.where(ids >= 0, ids + np.int32(offset), np.int32(-1)).astype(xp.int32)


def search_gpus(module, index, q, k: int, params, first: Device, filter, masks, per_device_stats, kw,
                *, to_host: bool):
    """The search of a multi-device index (:func:`knngraph.multidevice.search`) on GPUs: every device's work
    is queued from this thread, one device after another, and nothing waits until all of it is queued;
    (distances, ids) on the host (``to_host``) or on ``first``. ``filter`` goes to every replica, ``masks``
    (one per shard) to the shards.

    Each device gets its queries by an asynchronous copy on its own stream (host queries are staged in
    page-locked memory, each device's rows just before its turn: copies from pageable memory are
    synchronous, and those of several devices wait for each other in the driver; a replicated search
    stages, searches and copies back host queries in chunks queued round robin over the devices,
    :func:`replica_chunks`, on two streams of each device taken in turn), its search is launched there, and
    its results either travel back to page-locked host buffers on the same stream (replicated, host
    queries) or are copied peer to peer to ``first`` on ``first``'s stream after an event says they are
    ready (sharded: merged there).
    Measured on 4 H200s with sift-photos 450k and 100k host queries: with one host thread per device
    (each making its device current and waiting for it) most of the call went to pageable copies waiting
    for one another and to the threads' turns at the interpreter lock; queued from one thread, the
    devices' kernels overlap (benchmarks/studies/multi_gpu.py)."""
    staged = _StagedQueries(q) if not is_device_array(q) else None
    # every device whose buffers (queries, results) copies queued on another device's stream may read
    involved = list(dict.fromkeys(index.devices))
    if staged is None and Device("cuda", q.data.device_id) not in involved:
        involved.append(Device("cuda", q.data.device_id))
    try:
        result = _queue_searches(module, index, q, staged, k, params, first, filter, masks, per_device_stats,
                                 kw, to_host=to_host)
    except BaseException:
        # what was queued finishes before its buffers go back to the pools
        if staged is not None:
            staged.release(involved, raising=False)
        else:
            _synchronize(involved)
        raise
    if staged is not None:
        staged.release(involved)
    else:
        _wait_for_first(involved, first)
    return result


def _wait_for_first(devs, first: Device) -> None:
    """After a search of device queries, which returns without waiting: the results of the other devices
    and the queries are read by copies queued on ``first``'s stream, while their memory goes back to
    their own devices' pools (ordered by those devices' streams) on return. Every device's stream waits
    for ``first``'s work so far (no host wait), so nothing allocated there later overwrites them before
    they are copied."""
    import cupy as cp

    with device_context(first):
        done = cp.cuda.Event(disable_timing=True)
        done.record()
    for dev in devs:
        if dev != first:
            with device_context(dev):
                cp.cuda.get_current_stream().wait_event(done)


def _synchronize(devs) -> BaseException | None:
    """Synchronise every device's current stream, each even if an earlier one failed; the first error."""
    import cupy as cp

    error = None
    for dev in devs:
        try:
            with device_context(dev):
                cp.cuda.get_current_stream().synchronize()
        except Exception as exc:  # noqa: BLE001 - a sticky CUDA error on one device: the others still wait
            error = error or exc
    return error


class _StagedQueries:
    """Host queries copied into page-locked memory one row range at a time, as the devices need them (the
    first device computes while the next one's rows are copied); kept until :meth:`release`, which gives
    the page-locked blocks of a large call back to the system (:func:`knngraph._device.let_page_locked_go`)."""

    def __init__(self, q):
        self.q = q
        self.ranges: dict = {}  # (a, b) -> rows a:b of the queries
        self.results: list = []  # page-locked buffers the results are copied back into

    def rows(self, a: int, b: int):
        """Rows a:b of the queries, page-locked (copied once per range)."""
        if (a, b) not in self.ranges:
            import cupyx

            buf = cupyx.empty_pinned((b - a, self.q.shape[1]), self.q.dtype)
            buf[...] = self.q[a:b]
            self.ranges[(a, b)] = buf
        return self.ranges[(a, b)]

    def page_locked(self, shape, dtype):
        """A page-locked host array for results copied back, kept (and released) with the queries."""
        import cupyx

        buf = cupyx.empty_pinned(shape, dtype)
        self.results.append(buf)
        return buf

    #: buffers of calls whose devices could not be synchronised (a CUDA error): a copy may still read
    #: them, and CuPy's page-locked pool, which knows no streams, would hand them out again
    _held: list = []

    def release(self, devs, *, raising: bool = True) -> None:
        """Wait for every device's stream (a copy still reading a buffer returned to CuPy's pool would read
        whatever is written there next), then let the buffers go; if a device fails to synchronise they are
        kept for the life of the process and (``raising``) its error is raised."""
        from ._device import let_page_locked_go

        error = _synchronize(devs)
        buffers = [*self.ranges.values(), *self.results]
        self.ranges.clear()
        self.results.clear()
        if error is not None:
            self._held.append(buffers)
            if raising:
                raise error
        else:
            nbytes = sum(buf.nbytes for buf in buffers)
            del buffers
            let_page_locked_go(nbytes)


def _queue_searches(module, index, q, staged, k: int, params, first: Device, filter, masks,
                    per_device_stats, kw, *, to_host: bool):
    """:func:`search_gpus` once the host queries (if any) are ``staged`` in page-locked memory."""
    import cupy as cp

    devs = index.devices
    nq = q.shape[0]
    if staged is None:
        with device_context(Device("cuda", q.data.device_id)):
            queries_ready = cp.cuda.Event(disable_timing=True)
            queries_ready.record()

    def rows_here(dev: Device, a: int, b: int):
        """Query rows a:b on ``dev`` (current), by a copy queued on its stream."""
        if staged is not None:
            return cp.asarray(staged.rows(a, b), blocking=False)
        cp.cuda.get_current_stream().wait_event(queries_ready)
        return cp.asarray(q[a:b]) if q.data.device_id != dev.index else q[a:b]

    def finished() -> "cp.cuda.Event":
        ev = cp.cuda.Event(disable_timing=True)
        ev.record()
        return ev

    def gathered(results):
        """The (distances, ids) of every launched part on ``first``, once each part's event has passed."""
        with device_context(first):
            stream = cp.cuda.get_current_stream()
            out = []
            for d_j, i_j, ev in results:
                stream.wait_event(ev)
                out.append((cp.asarray(d_j), cp.asarray(i_j)))
            return out

    if index.layout == "replicated":
        parts = index.parts if len(index.parts) == len(devs) else index.parts * len(devs)
        if to_host:
            return _replicated_to_host(module, parts, devs, staged, k, params, filter, per_device_stats, kw, nq)
        cuts = shard_bounds(nq, len(devs))
        busy = [j for j in range(len(devs)) if cuts[j + 1] > cuts[j]] or [0]
        launched = []
        for j in busy:
            a, b = int(cuts[j]), int(cuts[j + 1])
            with device_context(devs[j]), named(devs[j]):
                d_j, i_j = module.search(parts[j], rows_here(devs[j], a, b), k, params, device=devs[j],
                                         filter=filter, stats=per_device_stats[j], **kw)
                launched.append((d_j, i_j, finished()))
        parts_out = gathered(launched)
        with device_context(first):
            return cp.concatenate([p[0] for p in parts_out]), cp.concatenate([p[1] for p in parts_out])
    # the merge alone: the graph operations import the fast searcher, which imports this module
    from .graphops.merge import merge_topk

    launched = []
    for j, dev in enumerate(devs):
        with device_context(dev), named(dev):
            d_j, i_j = module.search(index.parts[j], rows_here(dev, 0, nq), shard_k(index, j, k), params,
                                     device=dev, filter=masks[j], stats=per_device_stats[j], **kw)
            launched.append((cp.asarray(d_j), global_ids(cp.asarray(i_j), int(index.bounds[j])), finished()))
    parts_out = gathered(launched)
    with device_context(first):
        d, i = merge_topk([p[0] for p in parts_out], [p[1] for p in parts_out], k)
        return (as_numpy(d), as_numpy(i)) if to_host else (d, i)


#: host queries of a replicated search are searched in chunks of at most this many rows (and at least
#: MIN_CHUNK_ROWS, about four per device), queued round robin over the devices: each chunk's rows are
#: staged in page-locked memory, copied, searched and copied back while the host stages the next one, so
#: that no device waits for the host to stage all of its rows and only the last chunk's copy back is not
#: hidden behind the searches (see :func:`replica_chunks`). A chunk of at least MIN_CHUNK_ROWS queries is
#: searched with the automatic search width of the whole batch (one warp per query from about 16 x SMs
#: queries on, :func:`knngraph.beam.cuda.search_width`), so chunking does not change any row's result.
#: Measured on 2 H200s (sift-photos 450k, 100k host queries, ``benchmarks/studies/multi_gpu.py``): 7.6 /
#: 12.6 ms a batch at queue 32 / 64 against 8.7 / 13.1 ms with each GPU's share staged and searched whole;
#: with the chunks taken in turn by two streams per GPU (:data:`STREAMS_PER_DEVICE`) 6.8 / 11.5 ms, 1.98x /
#: 1.90x the one-GPU search (with one stream, the same day: 7.6 / 12.4 ms). Chunks of 2k-8k rows were no
#: faster with two streams (100k and 400k queries).
#: On one GPU, chunks on one stream cost more than they hide (13.3 / 23.2 ms against 12.8 / 21.2 ms for the
#: plain search, the smaller launches' tails); on two streams they pay from about 100,000 queries on, where
#: the fast searcher takes them (:func:`search_host_queries_in_chunks`, ``knngraph.beam``'s
#: ``HOST_CHUNKS_MIN_ROWS``).
#: Copying each chunk from the caller's memory instead of staging it measured the same on one GPU.
#: Page-locking the caller's queries and the results in place for the call (``cudaHostRegister``) instead
#: of staging them was slower on the 2 H200s: 8.4-9.0 ms against 7.3 ms at queue 32 (registering 12.8 MB
#: took 0.5 ms and letting it go 0.25 ms, on top of the copies it saves).
MAX_CHUNK_ROWS = 16384
MIN_CHUNK_ROWS = 4096


def replica_chunks(nq: int, n_devices: int, *, max_rows: int = MAX_CHUNK_ROWS,
                   min_rows: int = MIN_CHUNK_ROWS) -> list:
    """The (device slot, first row, end row) of each chunk of a replicated search of ``nq`` host queries,
    in the order they are queued: the queries are cut into one contiguous share per device
    (:func:`shard_bounds`), each share into chunks of about a quarter of it (within ``min_rows`` ..
    ``max_rows``, sizes differing by at most one), and chunk c of every device is queued before chunk c+1
    of any. Devices with no rows get no chunk; no queries at all, one empty chunk on slot 0."""
    cuts = shard_bounds(nq, n_devices)
    per_device = []
    for j in range(n_devices):
        a, b = int(cuts[j]), int(cuts[j + 1])
        if b > a:
            rows = min(max(-(-(b - a) // 4), min_rows), max_rows)
            inner = shard_bounds(b - a, -(-(b - a) // rows)) + a
            per_device.append([(j, int(inner[c]), int(inner[c + 1])) for c in range(len(inner) - 1)])
    if not per_device:
        return [(0, 0, 0)]
    order = []
    for c in range(max(len(chunks) for chunks in per_device)):
        order.extend(chunks[c] for chunks in per_device if c < len(chunks))
    return order


def _replicated_to_host(module, parts, devs, staged, k: int, params, filter, per_device_stats, kw, nq: int):
    """A replicated search of host queries (``staged``), results on the host (:func:`_chunks_to_host`).
    With ``stats`` each device searches its share in one piece, so that its figures are its whole
    share's."""
    whole = any(s is not None for s in per_device_stats)

    def search_on(j: int, rows):
        return module.search(parts[j], rows, k, params, device=devs[j], filter=filter, stats=per_device_stats[j],
                             **kw)

    return _chunks_to_host(search_on, devs, staged, k, nq, whole=whole)


def search_host_queries_in_chunks(search_rows, q: np.ndarray, k: int, dev: Device):
    """Host queries ``q`` (a C-contiguous NumPy array, checked) searched on the one GPU ``dev`` as a
    replicated search's share is (:func:`_chunks_to_host`): in chunks of a quarter of the rows (within
    :data:`MIN_CHUNK_ROWS` .. :data:`MAX_CHUNK_ROWS`), taken in turn by two lent streams, each chunk's results
    copied back while the next ones compute. ``search_rows(rows)``: the (distances, ids) on ``dev`` of
    device query rows, queued on the current stream without waiting. Returns NumPy (distances, ids)."""
    staged = _StagedQueries(q)
    try:
        result = _chunks_to_host(lambda j, rows: search_rows(rows), [dev], staged, k, q.shape[0], whole=False)
    except BaseException:
        staged.release([dev], raising=False)
        raise
    staged.release([dev])
    return result


def _chunks_to_host(search_on, devs, staged, k: int, nq: int, *, whole: bool):
    """Host queries (``staged``) searched on the GPUs ``devs`` with results on the host: the chunks of
    :func:`replica_chunks` (one per device's share when ``whole``) queued round robin, each one copied to
    its device, searched by ``search_on(j, rows)`` (device slot, device rows; the device current) and
    copied back into page-locked buffers on one of the device's lent streams (:data:`STREAMS_PER_DEVICE`,
    taken in turn); then, chunk by chunk in queue order, the host waits for a chunk's event and copies
    its rows into the results (the later chunks still computing)."""
    import cupy as cp

    chunks = replica_chunks(nq, len(devs), max_rows=nq if whole else MAX_CHUNK_ROWS,
                            min_rows=nq if whole else MIN_CHUNK_ROWS)
    host_d = staged.page_locked((nq, k), np.float32)
    host_i = staged.page_locked((nq, k), np.int32)
    queued = []
    with contextlib.ExitStack() as lent:
        lanes = [lent.enter_context(_lent_lanes(dev)) for dev in devs]
        turns = [0] * len(devs)
        for j, a, b in chunks:
            stream = lanes[j][turns[j] % STREAMS_PER_DEVICE]
            turns[j] += 1
            with device_context(devs[j]), named(devs[j]), stream:
                d_j, i_j = search_on(j, cp.asarray(staged.rows(a, b), blocking=False))
                cp.asnumpy(cp.ascontiguousarray(d_j, dtype=cp.float32), stream, out=host_d[a:b], blocking=False)
                cp.asnumpy(cp.ascontiguousarray(i_j, dtype=cp.int32), stream, out=host_i[a:b], blocking=False)
                done = cp.cuda.Event(disable_timing=True)
                done.record(stream)
                queued.append((j, a, b, done))
    d = np.empty((nq, k), np.float32)
    i = np.empty((nq, k), np.int32)
    for j, a, b, done in queued:
        with named(devs[j]):
            done.synchronize()
        d[a:b] = host_d[a:b]
        i[a:b] = host_i[a:b]
    return d, i


#: streams of each GPU that a replicated search of host queries takes its chunks on, in turn: the kernels of
#: chunk c+1 start on the SMs that chunk c's last queries leave idle (a beam search ends with its slowest
#: queries: about 0.3 ms of a 12,500-query chunk's 1.55 ms on an H200 at queue 32, timed chunk by chunk with
#: CUDA events in benchmarks/studies/multi_gpu.py's setting), instead of after them
STREAMS_PER_DEVICE = 2


@contextlib.contextmanager
def _lent_lanes(dev: Device):
    """:data:`STREAMS_PER_DEVICE` lent streams of ``dev`` that start after the work queued so far on its
    current stream (the queries' searchers may have made their device copies there), and that the current
    stream waits for when the block ends (on any exit: what is queued there must finish before a caller
    that synchronises the current stream lets its buffers go). Blocks of several devices nest (an
    ``ExitStack``): the device entered last is current within them, so work for a device enters it
    itself."""
    import cupy as cp

    from ._device import borrowed_streams

    with device_context(dev), borrowed_streams(dev.index, "replica", (0,) * STREAMS_PER_DEVICE) as streams:
        current = cp.cuda.get_current_stream()
        ready = current.record()
        for s in streams:
            s.wait_event(ready)
        try:
            yield streams
        finally:
            with device_context(dev):
                for s in streams:
                    current.wait_event(s.record())


@contextlib.contextmanager
def named(dev: Device):
    """Errors of the work queued for ``dev`` in the block raised naming it (:func:`naming`)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised with the device named
        raise naming(dev, exc) from exc
