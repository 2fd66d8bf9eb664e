"""The layout of SONG's search kernels for host code (modes, the sizes of the visited sets, shared memory
per warp, warps per block): this module does not import numba (the kernels, :mod:`knngraph.song._kernels`,
are launched by name, see :func:`knngraph._cuda_launch.kernel_module`)."""

from __future__ import annotations

from ..primitives.constants import WARP

MODE_GENERIC = 0     # any dtype, element loads
MODE_PACKED_U8 = 1   # uint8, dim % 4 == 0: uint32 word loads
MODE_PACKED_I8 = 2   # int8, dim % 4 == 0
MODE_HAMMING = 3     # uint32 codes, Hamming distance

#: shared memory one block may use (static allocations stay under the 48 KiB default limit)
SHARED_BUDGET = 48 * 1024


def shared_bytes_per_warp(qcap, use_bloom, vsize, dpad, filtered=False):
    """Shared memory bytes of one warp's query (queue, visited set, query vector, staging)."""
    return qcap * (24 if filtered else 16) + vsize * 4 + dpad * 4 + WARP * 8 + 16


def warps_per_block(qcap, use_bloom, vsize, dpad, max_warps=4, filtered=False):
    """Warps (queries) per block within :data:`SHARED_BUDGET`."""
    per = shared_bytes_per_warp(qcap, use_bloom, vsize, dpad, filtered)
    return max(1, min(max_warps, SHARED_BUDGET // per))


def hash_capacity(queue_size: int) -> tuple[int, int]:
    """(slots, shift) of the visited hash table for a queue of ``queue_size``: slots is a power of two
    >= 4 * queue_size (so at most half full with the 2Q bound), shift = 32 - log2(slots)."""
    slots = 16
    while slots < 4 * queue_size:
        slots *= 2
    return slots, 32 - (slots.bit_length() - 1)


def bloom_shape(queue_size: int) -> tuple[int, int]:
    """(words, hashes) of the Bloom filter for ``queue_size``. Without deletion the filter holds every
    id ever pushed; SONG's auto-tuner expects about 13 * queue_size insertions. We give ~10 bits per
    expected insertion (false-positive rate ~1% at that load; SONG section IV-B: "300 integers, < 1% at
    1000 insertions") rounded up to a power of two, with round(ln 2 * bits / n) hash positions."""
    expected = 13 * queue_size
    words = 8
    while words * 32 < 10 * expected:
        words *= 2
    nhash = max(1, min(8, int(round(0.6931 * words * 32 / expected))))
    return words, nhash
