"""Row blocks loaded one step ahead on a worker thread: :class:`BlockPrefetcher`.

The out-of-core NN-Descent build reads data larger than its memory limit block by block, and every pass
knows its whole sequence of blocks before it starts: the shards and cluster pieces it builds
(:mod:`knngraph.nndescent._build`) and the partition's passes over the rows (:mod:`knngraph.partition`:
the assignment of every row to its nearest centroids, the projections that halve clusters too large for a
piece). So the next block loads while the current one is used.
"""

from __future__ import annotations

import concurrent.futures
import time

import numpy as np

from ._device import borrowed_streams, let_page_locked_go, page_locked

__all__ = ["BlockPrefetcher"]


class BlockPrefetcher:
    """Loads a fixed ``sequence`` of row blocks of ``data`` one step ahead on a worker thread: each item a
    ``(lo, hi)`` tuple (rows ``lo:hi``) or a sorted integer array of row ids. :meth:`next` (or iteration)
    returns the blocks in order and starts loading the one after.

    ``device_index=None``: the blocks are C-contiguous NumPy arrays (a range of a C-contiguous array is a
    view, not a copy; row lists are gathered on numba's threads, :func:`~knngraph.primitives.gather.gather_rows`).
    A GPU ordinal: the blocks are CuPy arrays on that GPU, to be used on the stream that was current
    there on the thread that made the prefetcher (the consumer stream). ``data`` is then a host array
    (memory or memory map) or a CuPy array on that GPU:

    * A host NumPy array's block (a range too) is gathered on numba's threads straight into one
      page-locked buffer, allocated once as large as the largest block (one block is loaded at a time),
      then copied in one go at the bus's speed: a copy from pageable memory is staged through the
      driver's buffers, several times slower, and one thread copying a range (``np.copyto``) moved the
      rows more slowly than the threaded gather. Where page-locked memory cannot be had, the block goes
      through pageable memory.
    * The copy runs on a side stream (:func:`~knngraph._device.borrowed_streams`), overlapping the
      consumer's kernels. Its destination is allocated on the consumer stream (from that stream's blocks of
      CuPy's pool) and the copy waits for an event recorded on the consumer stream after the allocation:
      memory freed by the consumer (the last block, say) while kernels reading it were still queued there
      is written only after them. The worker waits for the copy before handing the block over, so the
      consumer never reads a block whose copy is still running, and the page-locked buffer is filled
      again only after its copy. A block allocated on the side stream instead would go back to that
      stream's blocks when freed, and the next load could reuse it with an event recorded before the
      consumer had queued its last reads.
    * A CuPy array's blocks are gathered on the consumer stream (queued there, ordered before the
      consumer's own use of them).
    * Anything else (an object that takes index arrays) is read on the host and copied as above.

    ``load_seconds``: the worker's time loading; ``wait_seconds``: the consumer's time waiting in
    :meth:`next`. :meth:`close` (or leaving a ``with`` block) waits for the load under way and gives the
    page-locked buffer back; an error of a load is raised by the :meth:`next` that returns its block."""

    def __init__(self, data, sequence, *, device_index: int | None = None, role: str = "block-load"):
        self.data = data
        self.sequence = list(sequence)
        self.device_index = None if device_index is None else int(device_index)
        self.role = role
        self.pos = 0
        self.cp = None
        self.consumer = None
        if self.device_index is not None:
            import cupy as cp

            self.cp = cp
            with cp.cuda.Device(self.device_index):
                self.consumer = cp.cuda.get_current_stream()
        self.pinned = None  # the page-locked buffer of host blocks bound for the GPU (False: none to be had)
        self.load_seconds = 0.0  # the worker's time loading (written by the worker only)
        self.wait_seconds = 0.0  # the consumer's time waiting for loads
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="knngraph-load")
        self.next_future = self._submit(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self) -> int:
        return len(self.sequence)

    def __iter__(self):
        return self

    def __next__(self):
        """The next block of the sequence (StopIteration after the last); starts loading the one after it.
        ``wait_seconds`` adds the caller's wait for it."""
        fut = self.next_future
        if fut is None:
            raise StopIteration
        self.pos += 1
        self.next_future = self._submit(self.pos)
        t0 = time.perf_counter()
        try:
            return fut.result()
        finally:
            self.wait_seconds += time.perf_counter() - t0

    next = __next__

    def close(self):
        """Wait for the load under way (its block is dropped) and give the page-locked buffer back."""
        self.pool.shutdown(wait=True)
        self.next_future = None
        if self.pinned is not None and self.pinned is not False:
            nbytes = self.pinned.nbytes
            self.pinned = None
            let_page_locked_go(nbytes)

    # ---------------------------------------------------------------------------------------------
    # the worker

    def _submit(self, pos):
        if pos >= len(self.sequence):
            return None
        return self.pool.submit(self._load, self.sequence[pos])

    def _load(self, item):
        t0 = time.perf_counter()
        try:
            return self._load_block(item)
        finally:
            self.load_seconds += time.perf_counter() - t0

    @staticmethod
    def _rows(item) -> int:
        return item[1] - item[0] if isinstance(item, tuple) else len(item)

    def _host_block(self, item):
        if isinstance(item, tuple):
            return self.data[item[0]:item[1]]
        from .primitives.gather import gather_rows  # numba: imported when a host gather runs

        return gather_rows(self.data, item)  # on numba's threads: a piece's rows of a large base

    def _load_block(self, item):
        if self.cp is None:
            return np.ascontiguousarray(self._host_block(item))
        cp = self.cp
        if isinstance(self.data, cp.ndarray):
            with cp.cuda.Device(self.device_index), self.consumer:
                block = self.data[item[0]:item[1]] if isinstance(item, tuple) else self.data[cp.asarray(item)]
                return cp.ascontiguousarray(block)
        if isinstance(self.data, np.ndarray) and self.data.ndim == 2:
            staged = self._load_pinned(item)
            if staged is not None:
                return staged
        return self._upload(np.ascontiguousarray(self._host_block(item)))

    def _load_pinned(self, item):
        """A host array's block on the GPU through the page-locked buffer; None where page-locked memory
        cannot be had."""
        from .primitives.gather import gather_rows

        rows = self._rows(item)
        with self.cp.cuda.Device(self.device_index):
            if self.pinned is None:
                most = max(self._rows(it) for it in self.sequence)
                # False: no page-locked memory, the plain path from now on
                self.pinned = page_locked((most,) + tuple(self.data.shape[1:]), self.data.dtype)
                if self.pinned is None:
                    self.pinned = False
        if self.pinned is False:
            return None
        pinned = self.pinned[:rows]
        ids = np.arange(item[0], item[1], dtype=np.int64) if isinstance(item, tuple) else item
        gather_rows(self.data, ids, out=pinned)
        return self._upload(pinned)

    def _upload(self, host):
        """``host`` (C-contiguous) copied into a new array of the consumer stream, on the side stream after
        the consumer's queued work; returns once the copy is done."""
        cp = self.cp
        with cp.cuda.Device(self.device_index):
            with self.consumer:
                arr = cp.empty(host.shape, host.dtype)
                after = self.consumer.record()
            with borrowed_streams(self.device_index, self.role) as (stream,), stream:
                stream.wait_event(after)
                arr.set(host, stream=stream)
                stream.synchronize()  # the consumer reads it, and the buffer is filled again, only after
        return arr
