"""Vectors for the tests of the distance helpers (tests/primitives/test_distances.py and
test_distances_sim.py)."""

import numpy as np


def with_zero_row(rng, dtype, n=6, d=45):
    """``n`` random vectors of ``d`` dimensions over the whole range of an integer ``dtype`` (standard normal for
    a float one); row 0 is the zero vector, at cosine distance 1 from everything."""
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal((n, d)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=(n, d), endpoint=True).astype(dtype)
    x[0] = 0  # a zero vector: cosine distance 1 to everything
    return x
