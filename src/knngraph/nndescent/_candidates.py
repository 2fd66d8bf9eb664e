"""Where NN-Descent's random initial neighbours come from, written once for the CPU and the GPU
(:mod:`knngraph.primitives.compile`).

Random initial lists take each node's first terms of a random progression over its candidate range
(:func:`knngraph.primitives.random.progression`): distinct ids, so no duplicate check (GNND Alg. 1
l.1-5 leaves self-loops and duplicates unspecified); :func:`candidate_range` says where they come from.
"""

from __future__ import annotations

from ..primitives.compile import host_and_device

__all__ = ["candidate_range"]


@host_and_device
def candidate_range(s, n, split):
    """Where node ``s`` draws random neighbours from: ids ``lo + x`` for x in [0, m), shifted past ``skip``
    (``s`` itself) when ``skip >= 0``. A build (split == 0) draws from every other node; a merge
    (GGM, GNND section 5.1) draws from the other subset: [split, n) for s < split, else [0, split)."""
    if split > 0:
        if s < split:
            return split, n - split, -1
        return 0, split, -1
    return 0, n - 1, s
