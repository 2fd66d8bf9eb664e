"""SONG's per-query data structures, written once as plain functions and compiled twice: for the CPU
(``numba.njit``, prefix ``cpu_``) and as CUDA device functions (``cuda.jit(device=True)``, prefix
``gpu_``). Paper 003 (Zhao, Tan, Li), section IV.

Each structure lives in a slice of a flat array starting at ``off`` (a per-thread scratch array on the
CPU, a per-warp slice of a shared-memory array on the GPU); sizes are held by the caller. Nothing here
allocates. Entries are (key float32, id int32) pairs ordered lexicographically, so ties resolve by
lower id on both targets and results do not depend on the order of equal keys.

* **Bounded priority queue** ``q`` (section IV-C): a symmetric min-max heap (SMMH, Arvind & Rangan
  1999). The tree's root holds nothing; nodes 1..n hold entries; children of node i are 2i+1 (left) and
  2i+2 (right). Invariants: every left child <= its right sibling; for every node x with grandparent g,
  left(g) <= x <= right(g). So node 1 is the minimum and node 2 (node 1 when n = 1) the maximum; push,
  pop-min and pop-max are O(log n). Node p is stored at ``off + p - 1``: a queue of capacity Q needs Q
  slots. Section IV-C's Observation 1: only the best Q entries can ever be used, so when full the
  queue's maximum is evicted (or the newcomer dropped).
* **top-k list** ``topk``: a binary max-heap (root at ``off``) of the best entries found so far; the
  root is the current worst, the search's stopping threshold.
* **visited set**, two alternatives (section IV-B):
  - open-addressing hash table of int32 ids (-1 = empty), linear probing from a multiplicative hash,
    deletion by backward shift (no tombstones, so probe sequences stay short after many deletions).
    With selected insertion (IV-D) and visited deletion (IV-E) it holds exactly q U topk, so at most
    2Q ids; the caller sizes it to a power of two >= 4Q (load <= 1/2, every probe ends at an empty slot).
  - Bloom filter over ``nwords`` uint32 words (a power of two) with ``nhash`` bit positions per id from
    double hashing. No false negatives; no deletion.
"""

from __future__ import annotations

import numba
from numba import cuda

__all__ = ["hash_capacity", "bloom_shape"]

EMPTY = -1
_HMUL = 2654435761      # Knuth's multiplicative constant (2^32 / golden ratio)
_HMUL2 = 2246822507     # murmur3 finaliser constant, second hash of the Bloom filter


def hash_capacity(queue_size: int) -> tuple[int, int]:
    """(slots, shift) of the visited hash table for a queue of ``queue_size``: slots is a power of two
    >= 4 * queue_size (so at most half full, section IV-E's 2Q bound), shift = 32 - log2(slots)."""
    slots = 16
    while slots < 4 * queue_size:
        slots *= 2
    return slots, 32 - (slots.bit_length() - 1)


def bloom_shape(queue_size: int) -> tuple[int, int]:
    """(words, hashes) of the Bloom filter for ``queue_size``. Without deletion the filter holds every
    id ever pushed; SONG's auto-tuner expects about 13 * queue_size insertions. We give ~10 bits per
    expected insertion (false-positive rate ~1% at that load, section IV-B: "300 integers, < 1% at 1000
    insertions") rounded up to a power of two, with round(ln 2 * bits / n) hash positions."""
    expected = 13 * queue_size
    words = 8
    while words * 32 < 10 * expected:
        words *= 2
    nhash = max(1, min(8, int(round(0.6931 * words * 32 / expected))))
    return words, nhash


# --------------------------------------------------------------------------------------------------
# symmetric min-max heap (bounded priority queue q)


def _smmh_push(hk, hi, off, n, key, idx):
    """Insert (key, idx) into the SMMH of n entries (n < capacity); returns n + 1."""
    b = off - 1
    n += 1
    p = n
    if p % 2 == 0:  # a right child: keep left sibling <= right sibling
        s = p - 1
        if key < hk[b + s] or (key == hk[b + s] and idx < hi[b + s]):
            hk[b + p] = hk[b + s]
            hi[b + p] = hi[b + s]
            p = s
    while True:
        par = (p - 1) // 2
        if par == 0:
            break
        gl = 2 * ((par - 1) // 2) + 1  # left child of the grandparent (the subtree's min)
        gr = gl + 1                    # right child of the grandparent (the subtree's max)
        if key < hk[b + gl] or (key == hk[b + gl] and idx < hi[b + gl]):
            hk[b + p] = hk[b + gl]
            hi[b + p] = hi[b + gl]
            p = gl
        elif hk[b + gr] < key or (hk[b + gr] == key and hi[b + gr] < idx):
            hk[b + p] = hk[b + gr]
            hi[b + p] = hi[b + gr]
            p = gr
        else:
            break
    hk[b + p] = key
    hi[b + p] = idx
    return n


def _smmh_pop_min(hk, hi, off, n):
    """Remove the minimum (node 1, read it first) of an SMMH of n >= 1 entries; returns n - 1."""
    b = off - 1
    yk = hk[b + n]
    yi = hi[b + n]
    n -= 1
    if n == 0:
        return 0
    i = 1  # the hole, a left child; the entry y in hand is <= the hole's right sibling
    while True:
        c = 2 * i + 1
        if c > n:
            break
        s = 2 * i + 3  # left child of the hole's sibling
        if s <= n and (hk[b + s] < hk[b + c] or (hk[b + s] == hk[b + c] and hi[b + s] < hi[b + c])):
            c = s
        if not (hk[b + c] < yk or (hk[b + c] == yk and hi[b + c] < yi)):
            break
        hk[b + i] = hk[b + c]
        hi[b + i] = hi[b + c]
        i = c
        r = c + 1
        if r <= n and (hk[b + r] < yk or (hk[b + r] == yk and hi[b + r] < yi)):
            tk = hk[b + r]
            ti = hi[b + r]
            hk[b + r] = yk
            hi[b + r] = yi
            yk = tk
            yi = ti
    hk[b + i] = yk
    hi[b + i] = yi
    return n


def _smmh_pop_max(hk, hi, off, n):
    """Remove the maximum (node 2, or node 1 when n == 1) of an SMMH of n >= 1 entries; returns n - 1."""
    b = off - 1
    if n <= 2:
        return n - 1
    yk = hk[b + n]
    yi = hi[b + n]
    n -= 1
    i = 2  # the hole, a right child; the entry y in hand is >= the hole's left sibling
    while True:
        # the max of subtree(x) minus x is its right child, or its left child when that is its only one
        c = -1
        x = i - 1
        if 2 * x + 2 <= n:
            c = 2 * x + 2
        elif 2 * x + 1 <= n:
            c = 2 * x + 1
        x = i
        d = -1
        if 2 * x + 2 <= n:
            d = 2 * x + 2
        elif 2 * x + 1 <= n:
            d = 2 * x + 1
        if d != -1 and (c == -1 or hk[b + c] < hk[b + d] or (hk[b + c] == hk[b + d] and hi[b + c] < hi[b + d])):
            c = d
        if c == -1:
            break
        if not (yk < hk[b + c] or (yk == hk[b + c] and yi < hi[b + c])):
            break
        hk[b + i] = hk[b + c]
        hi[b + i] = hi[b + c]
        i = c
        if c % 2 == 0:  # a right child: its left sibling must stay <= y
            s = c - 1
            if yk < hk[b + s] or (yk == hk[b + s] and yi < hi[b + s]):
                tk = hk[b + s]
                ti = hi[b + s]
                hk[b + s] = yk
                hi[b + s] = yi
                yk = tk
                yi = ti
    hk[b + i] = yk
    hi[b + i] = yi
    return n


def _smmh_max_slot(off, n):
    """Array position of the maximum of an SMMH of n >= 1 entries."""
    return off + 1 if n >= 2 else off


# --------------------------------------------------------------------------------------------------
# binary max-heap (topk)


def _maxheap_push(tk, ti, off, m, key, idx):
    """Insert into a max-heap of m entries (m < capacity); returns m + 1."""
    p = m
    while p > 0:
        par = (p - 1) // 2
        if tk[off + par] < key or (tk[off + par] == key and ti[off + par] < idx):
            tk[off + p] = tk[off + par]
            ti[off + p] = ti[off + par]
            p = par
        else:
            break
    tk[off + p] = key
    ti[off + p] = idx
    return m + 1


def _maxheap_replace_top(tk, ti, off, m, key, idx):
    """Replace the root (the maximum) of a max-heap of m >= 1 entries by (key, idx) and sift down."""
    p = 0
    while True:
        c = 2 * p + 1
        if c >= m:
            break
        if c + 1 < m and (tk[off + c] < tk[off + c + 1] or (tk[off + c] == tk[off + c + 1] and ti[off + c] < ti[off + c + 1])):
            c += 1
        if key < tk[off + c] or (key == tk[off + c] and idx < ti[off + c]):
            tk[off + p] = tk[off + c]
            ti[off + p] = ti[off + c]
            p = c
        else:
            break
    tk[off + p] = key
    ti[off + p] = idx


def _maxheap_sort(tk, ti, off, m):
    """Heap-sort a max-heap of m entries in place into ascending order."""
    for end in range(m - 1, 0, -1):
        lk = tk[off + end]
        li = ti[off + end]
        tk[off + end] = tk[off]
        ti[off + end] = ti[off]
        p = 0
        while True:
            c = 2 * p + 1
            if c >= end:
                break
            if c + 1 < end and (tk[off + c] < tk[off + c + 1] or (tk[off + c] == tk[off + c + 1] and ti[off + c] < ti[off + c + 1])):
                c += 1
            if lk < tk[off + c] or (lk == tk[off + c] and li < ti[off + c]):
                tk[off + p] = tk[off + c]
                ti[off + p] = ti[off + c]
                p = c
            else:
                break
        tk[off + p] = lk
        ti[off + p] = li


# --------------------------------------------------------------------------------------------------
# visited: open-addressing hash table (linear probing, backward-shift deletion)


def _hash_contains(ht, off, mask, shift, v):
    p = ((int(v) * _HMUL) & 0xFFFFFFFF) >> shift
    while True:
        s = ht[off + p]
        if s == v:
            return True
        if s == EMPTY:
            return False
        p = (p + 1) & mask


def _hash_insert(ht, off, mask, shift, v):
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


def _hash_delete(ht, off, mask, shift, v):
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


def _bloom_contains(bw, off, bitmask, nhash, v):
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


def _bloom_insert(bw, off, bitmask, nhash, v):
    h1 = int(v) & 0xFFFFFFFF
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
    h1 = h1 ^ (h1 >> 16)
    h2 = (((h1 * _HMUL2) & 0xFFFFFFFF) >> 7) | 1
    for t in range(nhash):
        bit = (h1 + t * h2) & bitmask
        w = off + (bit >> 5)
        bw[w] = bw[w] | (1 << (bit & 31))


# --------------------------------------------------------------------------------------------------
# short (distance, id) lists (graph preparation)


def _sort_pairs(d, ids, off, n):
    """Insertion sort of n (d, id) pairs at ``off``, ascending (lists are short and mostly sorted)."""
    for a in range(off + 1, off + n):
        kd = d[a]
        ki = ids[a]
        b = a - 1
        while b >= off and (kd < d[b] or (kd == d[b] and ki < ids[b])):
            d[b + 1] = d[b]
            ids[b + 1] = ids[b]
            b -= 1
        d[b + 1] = kd
        ids[b + 1] = ki


def _dedup_sorted(d, ids, off, n):
    """Drop repeated ids from a (d, id)-sorted list (copies of an id have one distance, so they are
    adjacent); returns the new length."""
    w = 0
    for t in range(n):
        if w > 0 and ids[off + t] == ids[off + w - 1]:
            continue
        ids[off + w] = ids[off + t]
        d[off + w] = d[off + t]
        w += 1
    return w


# --------------------------------------------------------------------------------------------------
# compiled versions

_FUNCS = {
    "smmh_push": _smmh_push, "smmh_pop_min": _smmh_pop_min, "smmh_pop_max": _smmh_pop_max,
    "smmh_max_slot": _smmh_max_slot, "maxheap_push": _maxheap_push,
    "maxheap_replace_top": _maxheap_replace_top, "maxheap_sort": _maxheap_sort,
    "hash_contains": _hash_contains, "hash_insert": _hash_insert, "hash_delete": _hash_delete,
    "bloom_contains": _bloom_contains, "bloom_insert": _bloom_insert,
    "sort_pairs": _sort_pairs, "dedup_sorted": _dedup_sorted,
}

cpu_smmh_push = numba.njit(cache=True)(_smmh_push)
cpu_smmh_pop_min = numba.njit(cache=True)(_smmh_pop_min)
cpu_smmh_pop_max = numba.njit(cache=True)(_smmh_pop_max)
cpu_smmh_max_slot = numba.njit(cache=True)(_smmh_max_slot)
cpu_maxheap_push = numba.njit(cache=True)(_maxheap_push)
cpu_maxheap_replace_top = numba.njit(cache=True)(_maxheap_replace_top)
cpu_maxheap_sort = numba.njit(cache=True)(_maxheap_sort)
cpu_hash_contains = numba.njit(cache=True)(_hash_contains)
cpu_hash_insert = numba.njit(cache=True)(_hash_insert)
cpu_hash_delete = numba.njit(cache=True)(_hash_delete)
cpu_bloom_contains = numba.njit(cache=True)(_bloom_contains)
cpu_bloom_insert = numba.njit(cache=True)(_bloom_insert)
cpu_sort_pairs = numba.njit(cache=True)(_sort_pairs)
cpu_dedup_sorted = numba.njit(cache=True)(_dedup_sorted)

gpu_smmh_push = cuda.jit(device=True, inline=True)(_smmh_push)
gpu_smmh_pop_min = cuda.jit(device=True, inline=True)(_smmh_pop_min)
gpu_smmh_pop_max = cuda.jit(device=True, inline=True)(_smmh_pop_max)
gpu_smmh_max_slot = cuda.jit(device=True, inline=True)(_smmh_max_slot)
gpu_maxheap_push = cuda.jit(device=True, inline=True)(_maxheap_push)
gpu_maxheap_replace_top = cuda.jit(device=True, inline=True)(_maxheap_replace_top)
gpu_maxheap_sort = cuda.jit(device=True, inline=True)(_maxheap_sort)
gpu_hash_contains = cuda.jit(device=True, inline=True)(_hash_contains)
gpu_hash_insert = cuda.jit(device=True, inline=True)(_hash_insert)
gpu_hash_delete = cuda.jit(device=True, inline=True)(_hash_delete)
gpu_bloom_contains = cuda.jit(device=True, inline=True)(_bloom_contains)
gpu_bloom_insert = cuda.jit(device=True, inline=True)(_bloom_insert)
gpu_sort_pairs = cuda.jit(device=True, inline=True)(_sort_pairs)
gpu_dedup_sorted = cuda.jit(device=True, inline=True)(_dedup_sorted)
