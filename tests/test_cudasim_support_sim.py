"""The simulator support code (tests/support): the block scheduler keeps the simulator's rules, the warp
intrinsics exchange values correctly over many consecutive calls."""

import numpy as np
import pytest
from numba import cuda

pytestmark = pytest.mark.sim


@cuda.jit
def _shift_through_shared(x, out, rounds):
    """Each round every thread reads its left neighbour's value written before the barrier."""
    buf = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    v = x[t]
    for _ in range(rounds):
        buf[t] = v
        cuda.syncthreads()
        v = buf[(t + 63) % 64]
        cuda.syncthreads()
    out[t] = v


@cuda.jit
def _early_exit_then_barrier(out):
    """Threads 40.. leave at once; the others still meet at syncthreads (exited threads do not count)."""
    buf = cuda.shared.array(64, np.int32)
    t = cuda.threadIdx.x
    if t >= 40:
        return
    buf[t] = t
    cuda.syncthreads()
    out[t] = buf[39 - t]


@cuda.jit
def _raise_in_one_thread(out):
    t = cuda.threadIdx.x
    cuda.syncthreads()
    if t == 5:
        out[t] = out[1000]  # out of bounds: IndexError in the simulator
    cuda.syncthreads()
    out[t] = 1


@cuda.jit
def _warp_sums(x, out):
    """Many consecutive shuffles (one barrier each): sums over groups of 16 lanes, in a full warp and in a
    partial last warp of 16 lanes."""
    t = cuda.threadIdx.x
    v = x[t]
    for _ in range(3):
        acc = v
        off = 8
        while off > 0:
            acc += cuda.shfl_xor_sync(0xFFFFFFFF, acc, off)
            off //= 2
        v = acc - v
    out[t] = v


def test_syncthreads_orders_shared_memory(rng):
    x = rng.random(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    _shift_through_shared[2, 64](x, out, 5)
    np.testing.assert_array_equal(out, np.roll(x, 5))


def test_exited_threads_do_not_block_syncthreads():
    out = np.full(64, -1, np.int32)
    _early_exit_then_barrier[1, 64](out)
    np.testing.assert_array_equal(out[:40], np.arange(40)[::-1])
    assert (out[40:] == -1).all()


def test_an_exception_in_one_thread_fails_the_launch():
    out = np.zeros(64, np.int32)
    with pytest.raises(IndexError, match=r"tid=\[5, 0, 0\]"):
        _raise_in_one_thread[1, 64](out)


def test_warp_shuffles_in_full_and_partial_warps():
    x = np.arange(48, dtype=np.float64)
    out = np.zeros(48)
    _warp_sums[1, 48](x, out)
    want = x.copy()
    for w in (slice(0, 16), slice(16, 32), slice(32, 48)):
        for _ in range(3):
            want[w] = want[w].sum() - want[w]
    np.testing.assert_array_equal(out, want)
