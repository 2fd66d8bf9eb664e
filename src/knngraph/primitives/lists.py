"""Sorted (distance, id) lists and heaps, written once for the CPU and the GPU (see the package docs).

Entries are (key float32, id int32) pairs in lexicographic order (:func:`less`): ties resolve by the lower
id on both targets, so results never depend on the order of equal keys. Each structure lives in a slice of
a flat array starting at ``off``; sizes are held by the caller; nothing here allocates.

* **Short sorted lists**: :func:`sort_pairs` (insertion sort: the lists are short and mostly sorted) and
  :func:`dedup_sorted`; :func:`slack_bound`, GGNN's stopping bound over a sorted best list.
* **Binary max-heap** (``maxheap_*``, root at ``off``): the best entries found so far, the root being the
  current worst (a search's stopping threshold, a k-NN scan's admission test); :func:`maxheap_sort`
  sorts it in place at the end.
* **Bounded priority queue**: a symmetric min-max heap (SMMH, Arvind and Rangan 1999). The tree's root
  holds nothing; nodes 1..n hold entries; children of node i are 2i+1 (left) and 2i+2 (right).
  Invariants: every left child <= its right sibling; for every node x with grandparent g,
  left(g) <= x <= right(g). So node 1 is the minimum and node 2 (node 1 when n = 1) the maximum; push,
  pop-min and pop-max are O(log n). Node p is stored at ``off + p - 1``: a queue of capacity Q needs Q
  slots. A search that can use only its best Q entries evicts the maximum when the queue is full.
"""

from __future__ import annotations

import numpy as np

from .compile import host_and_device

__all__ = ["less", "best_insert", "slack_bound", "sort_pairs", "dedup_sorted", "maxheap_push", "maxheap_replace_top", "maxheap_sort",
           "maxheap_offer_unique", "smmh_push", "smmh_pop_min", "smmh_pop_max", "smmh_max_slot"]


@host_and_device
def less(da, ia, db, ib):
    """(distance, id) lexicographic order: the total order every selector and list in knngraph uses."""
    return da < db or (da == db and ia < ib)


@host_and_device
def best_insert(d, v, bd, bi, nb, kb):
    """Insert (d, v) into the ascending list bd/bi of nb <= kb entries, keeping the kb smallest (ties by
    lower id); returns the new count."""
    if nb < kb or less(d, v, bd[nb - 1], bi[nb - 1]):
        j = nb if nb < kb else kb - 1
        while j > 0 and less(d, v, bd[j - 1], bi[j - 1]):
            bd[j] = bd[j - 1]
            bi[j] = bi[j - 1]
            j -= 1
        bd[j] = d
        bi[j] = v
        if nb < kb:
            return nb + 1
    return nb


@host_and_device
def slack_bound(dk, d1, tau, nn1):
    """GGNN's stopping bound over a sorted best list whose k-th and first keys are dk and d1 (Groh et al.,
    Eq. 2 on internal distances, as the authors' code applies it): d_k + tau^2 * min(|d_1|, nn1), float32.
    A candidate beyond it is neither pushed nor expanded (:mod:`knngraph.ggnn`'s caches and the fast
    searcher's slack stop, :mod:`knngraph.beam._kernels`)."""
    return np.float32(dk + tau * tau * min(abs(d1), nn1))


# --------------------------------------------------------------------------------------------------
# short (distance, id) lists (graph preparation)


@host_and_device(inline=False, cache=True)
def sort_pairs(d, ids, off, n):
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


@host_and_device(inline=False, cache=True)
def dedup_sorted(d, ids, off, n):
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
# symmetric min-max heap (bounded priority queue q)


@host_and_device(inline=False, cache=True)
def smmh_push(hk, hi, off, n, key, idx):
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


@host_and_device(inline=False, cache=True)
def smmh_pop_min(hk, hi, off, n):
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


@host_and_device(inline=False, cache=True)
def smmh_pop_max(hk, hi, off, n):
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


@host_and_device(inline=False, cache=True)
def smmh_max_slot(off, n):
    """Array position of the maximum of an SMMH of n >= 1 entries."""
    return off + 1 if n >= 2 else off


# --------------------------------------------------------------------------------------------------
# binary max-heap (topk)


@host_and_device(inline=False, cache=True)
def maxheap_push(tk, ti, off, m, key, idx):
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


@host_and_device(inline=False, cache=True)
def maxheap_replace_top(tk, ti, off, m, key, idx):
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


@host_and_device(inline=False, cache=True)
def maxheap_sort(tk, ti, off, m):
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




@host_and_device(inline=False, cache=True)
def maxheap_offer_unique(tk, ti, off, m, cap, key, idx):
    """Offer (key, idx) to a max-heap of m entries and capacity ``cap``, keeping the ``cap`` smallest by
    (key, idx) and every id at most once; returns the new m. The duplicate check scans the heap only for
    an entry that would be kept (a search offers the same id again after a visited set forgot it)."""
    if m == cap and not (key < tk[off] or (key == tk[off] and idx < ti[off])):
        return m
    for t in range(m):
        if ti[off + t] == idx:
            return m
    if m < cap:
        return maxheap_push(tk, ti, off, m, key, idx)
    maxheap_replace_top(tk, ti, off, m, key, idx)
    return m
