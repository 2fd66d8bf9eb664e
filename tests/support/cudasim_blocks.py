"""An event-driven block scheduler for the numba CUDA simulator (test support code, never imported by the
library).

numba-cuda's simulator runs a block's CUDA threads as ``threading.Thread`` s, and its ``BlockManager``
watches them from the launching thread in a busy loop: it polls whether every live thread waits in
``syncthreads`` (then releases them all) and whether one raised. That loop never blocks, so it holds the
GIL for a whole switch interval (5 ms) every time it gets it, while the simulated threads, which hand the
GIL over at every barrier of the warp intrinsics, wait; most of a warp-heavy simulator test was spent
there. :func:`install` makes the launching thread sleep on a condition variable instead, notified when a
simulated thread reaches ``syncthreads`` or finishes. The scheduling rules are those of the simulator:
the same threads, ``syncthreads`` releases the block once every live thread waits in it, and the first
exception aborts the block and is re-raised by the launch.

A block's threads also run on one core (:func:`_block_cpu`, where the platform can pin threads): they take
turns on the GIL at every warp barrier, and a lane woken on another core costs a cross-core wake-up each
time while the GIL bounces between the cores; on 2 cores pinning halved both the wall time and the CPU
time of a warp-heavy test (whose threads otherwise take CPU from the other test process as well). It
changes no scheduling rule: which runnable thread the OS runs next was never defined.
"""

from __future__ import annotations

import inspect
import os
import threading

#: the launching thread re-checks at least this often (seconds), notified or not
_SAFETY_WAIT_S = 0.05


def _syncthreads(self):
    """``BlockThread.syncthreads`` that notifies the block's scheduler when it blocks."""
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    cv = self._manager._knngraph_cv
    with cv:
        self.syncthreads_blocked = True
        cv.notify()
    self.syncthreads_event.wait()
    self.syncthreads_event.clear()
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def _make_thread_run(orig_run):
    def run(self):
        """``BlockThread.run`` that notifies the block's scheduler when the thread is done."""
        try:
            orig_run(self)
        finally:
            cv = self._manager._knngraph_cv
            with cv:
                self._knngraph_done = True
                cv.notify()

    return run


def _block_cpu() -> int | None:
    """The core a block's threads run on: one per pytest-xdist worker (``gw0`` the first allowed core,
    ``gw1`` the second, ...), so that two workers simulating at once do not share one; in a process of its
    own, the first allowed core. None where threads cannot be pinned (no ``os.sched_setaffinity``) or only
    one core is allowed anyway."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    return cpus[index % len(cpus)]


def _run(self, grid_point, *args):
    """``BlockManager.run`` on one core (:func:`_block_cpu`): the launching thread is pinned while it
    starts the block's threads (which inherit its affinity) and waits for them, then gets its own
    affinity back."""
    cpu = _block_cpu()
    if cpu is None:
        return _run_block(self, grid_point, *args)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})  # 0: the calling thread (Linux)
    try:
        return _run_block(self, grid_point, *args)
    finally:
        os.sched_setaffinity(0, allowed)


def _run_block(self, grid_point, *args):
    """Start the block's threads, release ``syncthreads`` barriers, re-raise the first exception; waits
    for notifications instead of polling."""
    import numpy as np
    from numba.cuda.simulator.kernel import BlockThread

    cv = self._knngraph_cv = threading.Condition()
    threads = []
    for block_point in np.ndindex(*self._block_dim):

        def target():
            self._f(*args)

        threads.append(BlockThread(target, self, grid_point, block_point, self._debug))
    for t in threads:
        t.start()
    live = threads
    with cv:
        while True:
            failed = next((t for t in threads if t.exception), None)
            if failed is not None:
                for t in threads:
                    t.abort = True
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                raise failed.exception[0].with_traceback(failed.exception[1])
            live = [t for t in live if not t._knngraph_done]
            if not live:
                break
            if all(t.syncthreads_blocked for t in live):
                for t in live:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                continue
            cv.wait(_SAFETY_WAIT_S)


def install() -> None:
    """Patch the simulator's ``BlockManager.run``, ``BlockThread.run`` and ``BlockThread.syncthreads``
    (idempotent). Requires NUMBA_ENABLE_CUDASIM=1.

    Only where the installed simulator still has the polling scheduler these replace (checked by the
    names they use); otherwise the simulator is left as it is (correct, just slower)."""
    from numba.cuda.simulator import kernel

    bm, bt = kernel.BlockManager, kernel.BlockThread
    if getattr(bm, "_knngraph_patched", False):
        return
    run_src = inspect.getsource(bm.run)
    sync_src = inspect.getsource(bt.syncthreads)
    params = list(inspect.signature(bt.__init__).parameters)
    if not (all(s in run_src for s in ("syncthreads_blocked", "syncthreads_event", "is_alive", "t.exception",
                                       "BlockThread(target, self, grid_point, block_point, self._debug)"))
            and all(s in sync_src for s in ("syncthreads_blocked = True", "syncthreads_event.wait()"))
            and params == ["self", "f", "manager", "blockIdx", "threadIdx", "debug"]):
        return
    bt._knngraph_done = False
    bt.syncthreads = _syncthreads
    bt.run = _make_thread_run(bt.run)
    bm.run = _run
    bm._knngraph_patched = True
