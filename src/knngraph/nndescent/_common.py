"""What the CPU and GPU NN-Descent engines and their host code share: list flags, the GPU kernels'
layout, the default sample size and the random projection forest's size. Host code: this module does not
import numba (the kernels' shared compiled helper is :mod:`knngraph.nndescent._candidates`).

List order is (distance, id) lexicographic everywhere (:func:`knngraph.primitives.lists.less`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["NEW", "OLD", "HOP_TABLE", "HOP_SHIFT", "HOPS", "MAX_HOP_LIST", "MAX_HOP_WIDTH",
           "check_widen", "auto_sample_size", "forest_params",
           "forest_bytes_per_node"]

#: entry flags of a k-NN list (GNND section 4): NEW entries have not taken part in a local join yet
NEW = 1
OLD = 0

# the GPU kernels' layout (``_kernels.py``), here so that host code reads it without importing them
#: candidate slots per node (one per lane of the merging warp)
SLOTS = 32
#: dimensions (float path) or 4-byte words (dp4a path) staged in shared memory at a time by the join
#: kernel. At p = 32 its static shared memory is 52 KB with 32 (33 KB distance matrix, 16.5 KB staging;
#: runs on sm_90) and 44 KB with 16, which ``cuda.Engine`` uses on older GPUs, whose
#: static shared memory may be limited to 48 KB
DC = 32
#: warps per block of the warp-per-node kernels
WPB = 4
#: slots of the set of ids that a two-hop fill has seen for one node (a power of two): the node, its list
#: (at most MAX_HOP_LIST entries) and at most HOPS x HOPS ids of its neighbours' lists fill at most 0.57 of
#: it, so every probe ends at an empty slot. The visited tables of the library: on the CPU
#: (``cpu.widen_lists``) :mod:`knngraph.primitives.visited`'s, ``HOP_SHIFT`` turning its 32-bit hash into
#: a slot; on the GPU (``_kernels.widen_kernel``) the searchers' ``claim``, lanes adding ids at once.
HOP_TABLE = 2048
HOP_SHIFT = 21
#: neighbours whose lists a two-hop fill reads, and entries read from each list (the GPU: one per lane)
HOPS = 32
#: the longest short list that a two-hop fill widens, and the widest list it fills (the GPU's shared memory
#: holds a warp's working list of the next power of two >= width + 64 entries)
MAX_HOP_LIST = 128
MAX_HOP_WIDTH = 256
#: the GPU's two-hop fill unrolls its distances' loop over dimensions up to this many chunks of 32 lanes
#: (d <= 256), so that all of a row's loads are in flight at once
HOP_UNROLL_CHUNKS = 8
#: an empty slot of ``cand`` (which holds (distance, id) keys packed by the join's ``pack``): all 64 bits
#: set. A key, not an id (the id filler is ``ID_NONE``)
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)


def check_widen(k1: int, width: int, hops: int) -> None:
    """The limits of a two-hop fill (both engines): lists of at most MAX_HOP_LIST entries widened to at
    most MAX_HOP_WIDTH, at most HOPS neighbours' lists read (the id set's size, the GPU's lanes and shared
    memory)."""
    if not (1 <= k1 <= MAX_HOP_LIST and k1 <= width <= MAX_HOP_WIDTH and 1 <= hops <= HOPS):
        raise ValueError(f"a two-hop fill widens lists of 1 to {MAX_HOP_LIST} entries to at most {MAX_HOP_WIDTH}, "
                         f"reading 1 to {HOPS} neighbours' lists; got lists of {k1} to {width}, {hops} hops")


def auto_sample_size(k: int, selective: bool) -> int:
    """Default sample count p: k, at most 32 (the GNND authors used k=64, p=32). Selective update (GPU)
    inserts only each sample's nearest partners and needs many samples; on the CPU, starting from a
    random projection forest, p = k rather than k/2 costs one more iteration's worth of distance
    computations but raises the recall where the iterations stop (the p sweep of
    ``benchmarks/studies/nndescent_cpu.py``, ``benchmarks/results/nndescent_cpu_2cores.json``)."""
    return int(min(32, k))


def forest_params(n: int, k: int) -> tuple[int, int]:
    """(n_trees, leaf_size) of the random projection forest that initialises a CPU build of n points:
    max(3, min(12, round(2 log10 n))) trees with leaves of at most max(32, min(256, 5k)) points (10 and
    160 for 100k points and k=32, the sizes pynndescent picks). Across forest sizes the total build time
    barely moves: a larger forest costs about what it saves in iterations (``benchmarks/studies/nndescent_cpu.py``
    sweeps the initial graph)."""
    n_trees = max(3, min(12, int(round(2.0 * math.log10(max(n, 10))))))
    leaf_size = max(32, min(256, 5 * k))
    return n_trees, leaf_size


def forest_bytes_per_node(d: int, itemsize: int, n_trees: int, cosine: bool) -> int:
    """Host bytes per node that a build from a forest adds: the reordered copy of the vectors (float32
    for float16 input) and, while the forest is built, 14 bytes per tree (permutation, partition
    buffer, node of each point, side, leaf mark) and the renumbering."""
    return d * (4 if itemsize == 2 else itemsize) + (4 if cosine else 0) + 14 * n_trees + 8
