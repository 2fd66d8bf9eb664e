"""Sizes and constants of GGNN's kernels (CPU and GPU) for host code: block sizes, the symmetric linking's
path searches, a search cache's layout. This module does not import numba (the GPU kernels,
:mod:`knngraph.ggnn._kernels` and :mod:`knngraph.ggnn._link_kernels`, are launched by name, see
:func:`knngraph._cuda_launch.kernel_module`)."""

from __future__ import annotations

from ..primitives.constants import WARP

#: threads of a search or build block (one warp: every barrier in those kernels is a ``syncwarp``)
THREADS = WARP
#: threads per block of the one-thread-per-item kernels of the symmetric linking
LINK_THREADS = 128
#: pops of one symmetric-linking path search (the authors' code; the paper gives none: decision A6 of
#: :mod:`knngraph.ggnn`)
SYM_MAX_POPS = 20
#: candidates kept per missing path for the link placement (the closest to z first)
SYM_CANDIDATES = 8
#: the midpoint of section 5.2.1: q_m = z + MIDPOINT * (x - z)
MIDPOINT = 0.4


def cache_layout(k: int, queue_size: int, cache_size: int):
    """(best, prioq, visited) sizes of a search cache: best = max(k, 10) (section 4.1.2), the ring gets
    the rest of ``cache_size``."""
    kb = max(k, 10)
    return kb, queue_size, cache_size - kb - queue_size
