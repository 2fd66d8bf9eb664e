"""Visited sets of graph searches, written once for the CPU and the GPU (see the package docs).

* **Open-addressing hash table** of int32 ids (``EMPTY`` = -1), linear probing from a multiplicative
  hash, deletion by backward shift (no tombstones, so probe sequences stay short after many deletions).
  With selected insertion and visited deletion (SONG, section IV-D/E) it holds only the ids in the queue
  and in the results (at most 2Q); :func:`knngraph.song._layout.hash_capacity` sizes it to a power of
  two >= 4Q, so it is at most half full and every probe ends at an empty slot.
* **Bloom filter** over ``nwords`` uint32 words (a power of two) with ``nhash`` bit positions per id from
  double hashing. No false negatives; no deletion (:func:`knngraph.song._layout.bloom_shape` sizes it).

Each set lives in a slice of a flat array starting at ``off``; nothing here allocates.
"""

from __future__ import annotations

from .compile import host_and_device

__all__ = ["EMPTY", "hash_contains", "hash_insert", "hash_delete", "bloom_contains", "bloom_insert"]

EMPTY = -1
_HMUL = 2654435761      # Knuth's multiplicative constant (2^32 / golden ratio)
_HMUL2 = 2246822507     # murmur3 finaliser constant, second hash of the Bloom filter


# --------------------------------------------------------------------------------------------------
# visited: open-addressing hash table (linear probing, backward-shift deletion)


@host_and_device(inline=False, cache=True)
def hash_contains(ht, off, mask, shift, v):
    p = ((int(v) * _HMUL) & 0xFFFFFFFF) >> shift
    while True:
        s = ht[off + p]
        if s == v:
            return True
        if s == EMPTY:
            return False
        p = (p + 1) & mask


@host_and_device(inline=False, cache=True)
def hash_insert(ht, off, mask, shift, v):
    """Add v (a no-op when present). The table must keep at least one empty slot."""
    p = ((int(v) * _HMUL) & 0xFFFFFFFF) >> shift
    while True:
        s = ht[off + p]
        if s == v:
            return
        if s == EMPTY:
            ht[off + p] = v
            return
        p = (p + 1) & mask


@host_and_device(inline=False, cache=True)
def hash_delete(ht, off, mask, shift, v):
    """Remove v if present, shifting later entries of its probe run back (Knuth's Algorithm R)."""
    p = ((int(v) * _HMUL) & 0xFFFFFFFF) >> shift
    while True:
        s = ht[off + p]
        if s == EMPTY:
            return
        if s == v:
            break
        p = (p + 1) & mask
    i = p  # the hole
    j = p
    while True:
        j = (j + 1) & mask
        s = ht[off + j]
        if s == EMPTY:
            break
        h = ((int(s) * _HMUL) & 0xFFFFFFFF) >> shift  # home slot of the entry at j
        # the entry may move back into the hole unless its home lies cyclically in (i, j]
        if i <= j:
            stays = i < h and h <= j
        else:
            stays = i < h or h <= j
        if not stays:
            ht[off + i] = s
            i = j
    ht[off + i] = EMPTY


# --------------------------------------------------------------------------------------------------
# visited: Bloom filter (no deletion)


@host_and_device(inline=False, cache=True)
def bloom_contains(bw, off, bitmask, nhash, v):
    # murmur3's 32-bit finaliser: every output bit depends on every id bit (a plain multiplicative
    # hash leaves the low bits a function of the id's low bits alone, which a bit mask keeps)
    h1 = int(v) & 0xFFFFFFFF
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
    h1 = h1 ^ (h1 >> 16)
    h2 = (((h1 * _HMUL2) & 0xFFFFFFFF) >> 7) | 1
    for t in range(nhash):
        bit = (h1 + t * h2) & bitmask
        if (bw[off + (bit >> 5)] >> (bit & 31)) & 1 == 0:
            return False
    return True


@host_and_device(inline=False, cache=True)
def bloom_insert(bw, off, bitmask, nhash, v):
    h1 = int(v) & 0xFFFFFFFF
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
    h1 = h1 ^ (h1 >> 16)
    h2 = (((h1 * _HMUL2) & 0xFFFFFFFF) >> 7) | 1
    for t in range(nhash):
        bit = (h1 + t * h2) & bitmask
        w = off + (bit >> 5)
        bw[w] = bw[w] | (1 << (bit & 31))


