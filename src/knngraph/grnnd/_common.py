"""Helpers of the GRNND rounds written once for the CPU and the GPU (:mod:`knngraph.primitives.compile`);
the kernels' layout and size limits, which host code reads, are in :mod:`knngraph.grnnd._layout`.

**Pool entries.** A pool entry is (distance, code) with ``code = 2 * id + new``: ``new`` = 1 for an entry
that arrived this round (a redirect, a reverse edge, an initial neighbour), 0 for one that survived the
vertex's own pair tests. Sorting by (distance, code) puts two copies of one id next to each other (the
pair distance is computed in one canonical order, so copies carry the same float), the surviving copy
first; keeping the first copy of each id is the duplicate skipping. Ids must stay below 2**30.
"""

from __future__ import annotations

from ..primitives.compile import host_and_device
from ..primitives.random import mix, progression

__all__ = ["pair_order", "pair_of", "reverse_count", "random_neighbour"]


@host_and_device
def pair_order(seed, rnd, v, m):
    """(start, step) of vertex ``v``'s random order of the m * m pair grid in round ``rnd``: term t is
    cell (start + t * step) % (m * m); each cell (i, j) with i < j is one pair of pool slots, visited
    once, in an order that changes every round (the *disordered* propagation, section 3.3)."""
    return progression(mix(seed, rnd, 0x5EED), v, m * m)


@host_and_device
def pair_of(start, step, t, m):
    """Slots (i, j) of term t of the order from :func:`pair_order`; i >= j marks a cell to skip."""
    cell = (start + t * step) % (m * m)
    return cell // m, cell % m


@host_and_device
def reverse_count(rho, count):
    """How many of a pool's ``count`` nearest entries get a reverse edge: round(rho * count), halves up."""
    return int(rho * count + 0.5)


@host_and_device
def random_neighbour(seed, v, t, n):
    """Term ``t`` of vertex ``v``'s random progression over the other n - 1 ids (distinct for t < n - 1)."""
    start, step = progression(seed, v, n - 1)
    r = (start + t * step) % (n - 1)
    return r + 1 if r >= v else r
