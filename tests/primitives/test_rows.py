"""Row helpers of the CPU graph walks (:mod:`knngraph.primitives.rows`)."""

import numba
import numpy as np

from knngraph.primitives.rows import half_bits_to_float32


def test_half_bits_widen_every_finite_float16_exactly():
    @numba.njit
    def widen(bits):
        out = np.empty(bits.shape[0], np.float32)
        for t in range(bits.shape[0]):
            out[t] = half_bits_to_float32(bits[t])
        return out

    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    halves = bits.view(np.float16)
    finite = np.isfinite(halves)
    got = widen(bits[finite])
    want = halves[finite].astype(np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # signed zeros and subnormals too
