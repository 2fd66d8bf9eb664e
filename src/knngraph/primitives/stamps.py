"""Visited sets of the CPU graph walks (SONG's walk in :mod:`knngraph.song.cpu`, the fast searcher's CPU
twin in :mod:`knngraph.beam.cpu`): generation-stamped arrays, and the workers that own them.

A vertex is visited in a query when its stamp (one uint16 per vertex) equals the query's generation;
deleting it writes 0. Each worker owns one row of n stamps and answers every W-th query of a call with
it, taking a new generation per query, so a query clears nothing; the row is cleared once every 65535
queries, when the uint16 runs out (:func:`next_generation`). A :class:`Scratch` holds the rows of an
index and is reused by every call.

CPU only (numba's CPU target): importing this module does not load numba.cuda.
"""

from __future__ import annotations

import contextlib
import threading

import numba
import numpy as np

__all__ = ["Scratch", "ScratchPool", "next_generation", "worker_count", "MAX_GENERATION", "WORKERS_PER_THREAD"]

#: largest stamp before the stamps of a worker are cleared (uint16)
MAX_GENERATION = 65535

#: workers per thread: each worker answers every W-th query with its own stamps row, and workers are
#: handed to threads one at a time as threads free up, so a thread slowed by other work on the machine
#: delays only its current worker
WORKERS_PER_THREAD = 4

#: stamps memory that extra workers may touch (beyond one row per thread)
_STAMPS_BUDGET = 1 << 28


@numba.njit(inline="always")
def next_generation(vis, gens, w):
    """The visited stamp of worker w's next query; its stamps are cleared when the uint16 runs out."""
    gn = np.int64(gens[w]) + 1
    if gn > MAX_GENERATION:
        vis[:] = 0
        gn = 1
    gens[w] = gn
    return np.uint16(gn)


def worker_count(nq: int, scratch) -> int:
    """Workers for a call of ``nq`` queries: one for a single query; else up to :data:`WORKERS_PER_THREAD`
    per thread of numba's current setting, within the stamps rows of ``scratch`` and the memory extra
    rows may touch."""
    if nq <= 1:
        return 1
    threads = numba.get_num_threads()
    per_row = 2 * scratch.stamps.shape[1]
    cap = max(threads, min(WORKERS_PER_THREAD * threads, _STAMPS_BUDGET // per_row))
    return max(1, min(nq, cap, scratch.gens.shape[0]))


class Scratch:
    """Visited stamps for searches over ``n`` vertices, one row of n uint16 per worker (4 per thread of
    ``NUMBA_NUM_THREADS``: zero pages until a worker touches its row) and each row's last generation;
    made once per index and reused by every call, so a query clears nothing."""

    def __init__(self, n: int):
        rows = max(1, WORKERS_PER_THREAD * numba.config.NUMBA_NUM_THREADS)
        self.stamps = np.zeros((rows, max(1, n)), np.uint16)
        self.gens = np.zeros(rows, np.int64)


class ScratchPool:
    """The :class:`Scratch` objects of one index for calls that may run at once (a web server's threads, a
    Dask worker's): a call borrows one that no other call holds (a new one when all are out) and gives it
    back when it returns, so concurrent searches never share visited stamps. One caller at a time keeps
    reusing a single :class:`Scratch`; the pool grows to the most calls that ever ran at once."""

    def __init__(self, n: int):
        self.n = int(n)
        self._free: list = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def borrow(self):
        with self._lock:
            scratch = self._free.pop() if self._free else None
        if scratch is None:
            scratch = Scratch(self.n)
        try:
            yield scratch
        finally:
            with self._lock:
                self._free.append(scratch)
