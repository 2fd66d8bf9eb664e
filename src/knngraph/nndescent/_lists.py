"""NN-Descent's list operations on the CPU (numba), shared by the iteration (``cpu.py``) and the random
projection forest that initialises it (``_rptree.py``).

Lists are rows of (distance, id, flag) sorted by (distance, id); flags mark NEW entries (GNND section 4).
"""

from __future__ import annotations

import numba
import numpy as np

from ..primitives.distances import DIST_L2SQ
from ..primitives.lists import less
from ..primitives.pair_distance import cpu_distance, finish_distance
from ._common import NEW

__all__ = ["sort_row", "distance_rows", "in_list", "insert"]


@numba.njit(inline="always")
def sort_row(gd, gi, gf, s):
    """Insertion sort of row ``s`` by (distance, id)."""
    k = gd.shape[1]
    for j in range(1, k):
        d = gd[s, j]
        v = gi[s, j]
        f = gf[s, j]
        t = j
        while t > 0 and less(d, v, gd[s, t - 1], gi[s, t - 1]):
            gd[s, t] = gd[s, t - 1]
            gi[s, t] = gi[s, t - 1]
            gf[s, t] = gf[s, t - 1]
            t -= 1
        gd[s, t] = d
        gi[s, t] = v
        gf[s, t] = f


@numba.njit(fastmath=True)
def distance_rows(kind, buf, binv, i, i1, j0, j1, dm):
    """dm[i, j] and dm[i1, j] for j in [j0, j1) (``i1`` may equal ``i``), by tiles of 2 rows x 4 columns
    that share their loads: about 1.5x the speed of one pair at a time. Rows of ``buf`` are float32.

    Compiled as a function of its own (numba's IR inlining of it into the local joins took about 20 s of
    the first run's compilation) with ``fastmath`` of its own: the flags of a compiled callee are its own,
    while inlined code takes its caller's."""
    dim = buf.shape[1]
    j = j0
    while j + 4 <= j1:
        s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = np.float32(0.0)
        if kind == DIST_L2SQ:
            for q in range(dim):
                a0 = buf[i, q]
                a1 = buf[i1, q]
                b0 = buf[j, q]
                b1 = buf[j + 1, q]
                b2 = buf[j + 2, q]
                b3 = buf[j + 3, q]
                e = a0 - b0
                s00 += e * e
                e = a0 - b1
                s01 += e * e
                e = a0 - b2
                s02 += e * e
                e = a0 - b3
                s03 += e * e
                e = a1 - b0
                s10 += e * e
                e = a1 - b1
                s11 += e * e
                e = a1 - b2
                s12 += e * e
                e = a1 - b3
                s13 += e * e
        else:
            for q in range(dim):
                a0 = buf[i, q]
                a1 = buf[i1, q]
                b0 = buf[j, q]
                b1 = buf[j + 1, q]
                b2 = buf[j + 2, q]
                b3 = buf[j + 3, q]
                s00 += a0 * b0
                s01 += a0 * b1
                s02 += a0 * b2
                s03 += a0 * b3
                s10 += a1 * b0
                s11 += a1 * b1
                s12 += a1 * b2
                s13 += a1 * b3
        dm[i, j] = finish_distance(kind, s00, binv, i, binv, j)
        dm[i, j + 1] = finish_distance(kind, s01, binv, i, binv, j + 1)
        dm[i, j + 2] = finish_distance(kind, s02, binv, i, binv, j + 2)
        dm[i, j + 3] = finish_distance(kind, s03, binv, i, binv, j + 3)
        dm[i1, j] = finish_distance(kind, s10, binv, i1, binv, j)
        dm[i1, j + 1] = finish_distance(kind, s11, binv, i1, binv, j + 1)
        dm[i1, j + 2] = finish_distance(kind, s12, binv, i1, binv, j + 2)
        dm[i1, j + 3] = finish_distance(kind, s13, binv, i1, binv, j + 3)
        j += 4
    while j < j1:
        dm[i, j] = cpu_distance(kind, buf, i, buf, j, binv, binv)
        if i1 != i:
            dm[i1, j] = cpu_distance(kind, buf, i1, buf, j, binv, binv)
        j += 1


@numba.njit(inline="always")
def in_list(gi, u, v):
    """Whether ``v`` is in row ``u`` of ``gi``: a scan with no early exit, which vectorises (3x faster
    than stopping at the first hit)."""
    f = 0
    for j in range(gi.shape[1]):
        f |= gi[u, j] == v
    return f != 0


@numba.njit(inline="always")
def insert(gd, gi, gf, u, v, d):
    """Insert (d, v) into u's sorted list unless it is not better than the last entry or already there."""
    k = gd.shape[1]
    if not less(d, v, gd[u, k - 1], gi[u, k - 1]) or in_list(gi, u, v):
        return 0
    j = k - 1
    while j > 0 and less(d, v, gd[u, j - 1], gi[u, j - 1]):
        gd[u, j] = gd[u, j - 1]
        gi[u, j] = gi[u, j - 1]
        gf[u, j] = gf[u, j - 1]
        j -= 1
    gd[u, j] = d
    gi[u, j] = v
    gf[u, j] = NEW
    return 1
