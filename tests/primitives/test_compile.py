"""How CPU kernels run threaded from one serial build: :func:`threaded_and_serial` rewrites a ``prange``
kernel of the form it splits into a kernel of parts (and keeps numba's parallel build for any other), and
:class:`SplitKernel` runs a kernel of an item range in parts; both give what the plain loop gives, with
one thread and with several."""

import numba
import numpy as np
import pytest
from numba import prange

from knngraph.primitives.compile import SERIAL_BELOW, SplitKernel, _Parts, _parts_kernel, threaded_and_serial


def _rows_kernel(x, scale, out):
    """Each row's sum times ``scale`` and its index."""
    n = x.shape[0]
    half, rest = scale, n
    for i in prange(n):
        acc = 0.0
        for j in range(x.shape[1]):
            acc += x[i, j]
        if acc < 0:
            continue
        out[i, 0] = acc * half
        out[i, 1] = i + rest - n


def _writes_before_the_loop(x, out):
    out[0, 0] = -1.0
    for i in prange(x.shape[0]):
        out[i, 1] = x[i, 0]


def _returns_a_value(x, out):
    total = 0.0
    for i in prange(x.shape[0]):
        total += x[i, 0]
    return total


def _code_after_the_loop(x, out):
    for i in prange(x.shape[0]):
        out[i, 0] = x[i, 0]
    out[0, 1] = 7.0


_ROWS = threaded_and_serial(_rows_kernel)


def _expected(x, scale):
    out = np.zeros((x.shape[0], 2))
    sums = x.sum(axis=1)
    keep = sums >= 0
    out[keep, 0] = sums[keep] * scale
    out[keep, 1] = np.arange(x.shape[0])[keep]
    return out


@pytest.mark.parametrize("rows", [1, 7, 1000])
def test_a_split_prange_kernel_gives_the_plain_loops_rows_threaded_and_serial(rows):
    x = np.random.default_rng(rows).normal(size=(rows, 5))
    threaded, serial = _ROWS
    assert isinstance(threaded, _Parts) and isinstance(serial, _Parts)
    assert threaded.dispatcher is serial.dispatcher  # one build serves both
    for build in (threaded, serial):
        for threads in (1, numba.config.NUMBA_NUM_THREADS):
            out = np.zeros((rows, 2))
            previous = numba.get_num_threads()
            numba.set_num_threads(threads)
            try:
                build(x, 2.0, out)
            finally:
                numba.set_num_threads(previous)
            np.testing.assert_array_equal(out, _expected(x, 2.0))
    assert len(threaded.signatures) == 1


@pytest.mark.parametrize("fn", [_writes_before_the_loop, _returns_a_value, _code_after_the_loop])
def test_kernels_of_another_form_keep_numbas_parallel_build(fn):
    assert _parts_kernel(fn) is None
    threaded, serial = threaded_and_serial(fn)
    assert threaded.targetoptions.get("parallel") and not serial.targetoptions.get("parallel")


def test_the_parts_of_a_split_kernel_cover_its_range_once():
    parts = _parts_kernel(_rows_kernel)
    assert parts.__name__ == "_rows_kernel_parts" and parts.__doc__ == _rows_kernel.__doc__
    x = np.ones((10, 3))
    seen = np.zeros((10, 2))
    for p in range(4):  # as plain Python: prange is range outside numba
        parts(p, 4, x, 1.0, seen)
    np.testing.assert_array_equal(seen, _expected(x, 1.0))


def _count_range(i0, i1, x, out):
    c = 0
    for i in range(i0, i1):
        out[i] = 2 * x[i]
        c += x[i] > 0
    return c


_COUNT = SplitKernel(_count_range, combine=sum)


@pytest.mark.parametrize("rows", [0, SERIAL_BELOW])
def test_a_split_kernel_runs_whole_or_in_parts_with_the_same_result(rows):
    x = np.arange(-50, 1000)
    out = np.zeros_like(x)
    assert _COUNT.run(rows, x.shape[0], x, out) == int((x > 0).sum())
    np.testing.assert_array_equal(out, 2 * x)
    assert _COUNT.signatures  # attributes of the numba dispatcher
