"""Warp intrinsics for the numba CUDA simulator (test support code, never imported by the library).

numba-cuda's simulator runs each CUDA thread as a ``threading.Thread`` but implements no warp-level
intrinsics. :func:`install` adds them to the simulator's fake ``cuda`` module: the lanes of a warp meet
at a per-warp barrier, publish their value in a shared slot array, and read what they
need. As on hardware, every lane of the warp must reach a full-mask intrinsic.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()


class _Barrier:
    """A reusable barrier for the lanes of a warp. ``threading.Barrier`` wakes its waiters through a
    Condition, whose lock every woken lane then takes again in turn; here each waiter blocks on its own
    lock, released by the last arrival, which halves the thread switches of a warp intrinsic."""

    def __init__(self, parties: int):
        self.parties = parties
        self.count = 0
        self.lock = threading.Lock()
        self.waiters = []

    def wait(self):
        mine = threading.Lock()
        mine.acquire()
        with self.lock:
            self.count += 1
            if self.count == self.parties:
                waiters, self.waiters, self.count = self.waiters, [], 0
                for w in waiters:
                    w.release()
                return
            self.waiters.append(mine)
        mine.acquire()


class _Warp:
    def __init__(self, lanes: int):
        self.lanes = lanes
        self.barrier = _Barrier(lanes)
        # two slot arrays used in turn: a lane writes one only after every lane has passed the barrier of
        # the exchange that used the other, i.e. after every lane has read this one's previous values
        self.slots = ([None] * 32, [None] * 32)
        self.turn = [0] * 32  # per lane: which slot array its next exchange uses


def _current():
    t = threading.current_thread()
    warp = getattr(t, "_knngraph_warp", None)
    if warp is None:
        # the warps of a block live on its BlockManager (one per block launch): no state is shared
        # between launches
        mgr = t._manager
        bx, by, bz = mgr._block_dim
        nthreads = bx * by * bz
        w = t.thread_id // 32
        lanes = min(32, nthreads - 32 * w)
        with _lock:
            warps = mgr.__dict__.setdefault("_knngraph_warps", {})
            warp = warps.get(w)
            if warp is None:
                warp = warps[w] = _Warp(lanes)
        t._knngraph_warp = warp
    return warp, t.thread_id % 32


def _exchange(value):
    warp, lane = _current()
    turn = warp.turn[lane]
    warp.turn[lane] = 1 - turn
    slots = warp.slots[turn]
    slots[lane] = value
    warp.barrier.wait()
    # no second barrier: the next exchange writes the other slot array, and the one after it (this one
    # again) starts only after every lane has passed that exchange's barrier, so has read these values
    return list(slots), lane, warp.lanes


def _syncwarp(self, mask=0xFFFFFFFF):
    warp, _ = _current()
    warp.barrier.wait()


def _ballot_sync(self, mask, predicate):
    values, _, lanes = _exchange(bool(predicate))
    return sum(1 << i for i in range(lanes) if values[i])


def _any_sync(self, mask, predicate):
    values, _, lanes = _exchange(bool(predicate))
    return int(any(values[:lanes]))


def _all_sync(self, mask, predicate):
    values, _, lanes = _exchange(bool(predicate))
    return int(all(values[:lanes]))


def _shfl_sync(self, mask, value, src_lane):
    values, _, lanes = _exchange(value)
    return values[int(src_lane) % 32 % lanes]


def _shfl_xor_sync(self, mask, value, lane_mask):
    values, lane, lanes = _exchange(value)
    src = lane ^ int(lane_mask)
    return values[src] if src < lanes else value


def _shfl_down_sync(self, mask, value, delta):
    values, lane, lanes = _exchange(value)
    src = lane + int(delta)
    return values[src] if src < lanes else value


def _shfl_up_sync(self, mask, value, delta):
    values, lane, lanes = _exchange(value)
    src = lane - int(delta)
    return values[src] if src >= 0 else value


def _match_any_sync(self, mask, value):
    values, lane, lanes = _exchange(value)
    return sum(1 << i for i in range(lanes) if values[i] == value)


def _lanemask_lt(self):
    lane = threading.current_thread().thread_id % 32
    return (1 << lane) - 1


def _activemask(self):
    return (1 << _current()[0].lanes) - 1


def install() -> None:
    """Add the intrinsics to the simulator (idempotent). Requires NUMBA_ENABLE_CUDASIM=1."""
    from numba.cuda.simulator import kernelapi

    fake = kernelapi.FakeCUDAModule
    for name, fn in {"syncwarp": _syncwarp, "ballot_sync": _ballot_sync, "any_sync": _any_sync,
                     "all_sync": _all_sync, "shfl_sync": _shfl_sync, "shfl_xor_sync": _shfl_xor_sync,
                     "shfl_down_sync": _shfl_down_sync, "shfl_up_sync": _shfl_up_sync, "match_any_sync": _match_any_sync,
                     "lanemask_lt": _lanemask_lt, "activemask": _activemask}.items():
        setattr(fake, name, fn)
