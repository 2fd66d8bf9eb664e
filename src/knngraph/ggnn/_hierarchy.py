"""The shape of GGNN's hierarchy (section 5.1, Fig. 1) and the selection of each upper layer's rows (keys on
the host; the rows picked on the host or, in a GPU build, on the device).

All layers sit in one array of rows: layer l holds rows ``offsets[l] .. offsets[l + 1]``; a row's graph
neighbours are rows of the same layer. ``trans[row]`` is the row's position in the bottom layer's
random order, ``sel[row]`` (upper layers) the row it came from in the layer below. Bottom segment b
covers local rows ``b * n // n_seg .. (b + 1) * n // n_seg``; an upper layer's segments are ``s``
consecutive rows; segment j of layer l + 1 was selected from segments ``j * g .. j * g + g - 1`` of
layer l, so the top-layer segment over a row of layer m when the top is layer t is its segment index
divided by ``g ** (t - m)``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = ["Plan", "plan", "select_layer", "selection_keys", "pick_per_segment_sorted", "bottom_segment"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes of a hierarchy: ``layers`` (L), merge factor ``g``, segment size ``s``, rows per layer,
    bottom segments ``n_seg0`` (= g ** (L - 1))."""

    n: int
    s: int
    layers: int
    g: int
    sizes: tuple
    offsets: tuple
    n_seg0: int

    @property
    def rows(self) -> int:
        return self.offsets[-1]

    def segments(self, layer: int) -> int:
        return self.n_seg0 if layer == 0 else self.g ** (self.layers - 1 - layer)


def plan(n: int, segment_size: int, layers: int) -> Plan:
    """The hierarchy for n points: g = floor((n / s) ** (1 / (L - 1))) (decision A1 of :mod:`knngraph.ggnn`:
    the paper prints 1 / L, its examples and sizes use L - 1), so bottom segments hold at least s points;
    with g < 2 the number of layers drops until g >= 2 (one layer: a single segment, brute force)."""
    s = int(segment_size)
    L = int(layers)
    g = 1
    while L > 1:
        g = int(math.floor((n / s) ** (1.0 / (L - 1)) + 1e-9))
        while g >= 2 and g ** (L - 1) * s > n:  # guard the float root
            g -= 1
        if g >= 2:
            break
        L -= 1
    if L == 1:
        g = 1
    n_seg0 = g ** (L - 1)
    sizes = [n] + [s * g ** (L - 1 - l) for l in range(1, L)]
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    return Plan(n, s, L, g, tuple(sizes), tuple(offsets), n_seg0)


def bottom_segment(rows, n: int, n_seg: int):
    """The bottom segment of local rows ``rows``."""
    return ((rows.astype(np.int64) + 1) * n_seg - 1) // n


def select_layer(p: Plan, layer: int, nn1_below, seed: int, xp=np):
    """Rows of layer ``layer - 1`` (local) that form layer ``layer``, in its row order: from each child
    segment c of a group of g, ``(c + 1) * s // g - c * s // g`` rows by weighted reservoir sampling
    (Efraimidis and Spirakis, the paper's [34]) with weights ``nn1_below`` (each row's distance to its
    nearest neighbour, section 5.1: points in sparse regions are preferred). Key log(u) / w, the largest
    keys win; u is a hash of (seed, layer, row), so the choice is the same on every device.

    The keys are computed on the host (NumPy's float64, the same bits for every device); the rows are
    picked by the CPU kernel (:func:`knngraph.ggnn.cpu.pick_per_segment`) for ``xp`` = NumPy and by
    :func:`pick_per_segment_sorted` on the device for CuPy (a GPU build does not start numba for it).
    Both return the same rows in the same order. Returns an int32 ``xp`` array."""
    below = layer - 1
    seg, key = selection_keys(p, layer, nn1_below, seed)
    seg_starts = np.searchsorted(seg, np.arange(p.segments(below) + 1), side="left")  # seg ascends with rows
    if xp is np:
        from .cpu import pick_per_segment

        picked = pick_per_segment(key, seg_starts, p.s, p.g, p.sizes[layer])
    else:
        picked = pick_per_segment_sorted(xp.asarray(key), seg_starts, p.s, p.g, xp)
    if picked.shape[0] != p.sizes[layer]:  # pragma: no cover - the plan guarantees it
        raise RuntimeError(f"GGNN selection picked {picked.shape[0]} rows for a layer of {p.sizes[layer]}")
    return picked.astype(np.int32)


def pick_per_segment_sorted(key, seg_starts: np.ndarray, s: int, g: int, xp=np):
    """The rows :func:`knngraph.ggnn.cpu.pick_per_segment` picks, by sorting (NumPy or CuPy, ``xp``;
    ``key`` an ``xp`` array, ``seg_starts`` host offsets of the contiguous segments): rows in order of
    (segment, -key, row) by two stable sorts (the second, by segment, keeps the first's order within a
    segment: larger key first, then lower row), and from each segment c its first ``(c % g + 1) * s // g -
    (c % g) * s // g`` rows (at most the segment's size). Returns int64 row numbers, segment by segment."""
    counts = np.diff(seg_starts)
    nseg = counts.shape[0]
    seg = xp.asarray(np.repeat(np.arange(nseg, dtype=np.int64), counts))
    by_key = xp.argsort(-key, kind="stable")
    order = by_key[xp.argsort(seg[by_key], kind="stable")]
    cg = np.arange(nseg, dtype=np.int64) % g
    quota = xp.asarray(np.minimum((cg + 1) * s // g - cg * s // g, counts))
    rank = xp.arange(order.shape[0], dtype=np.int64) - xp.asarray(seg_starts[:-1].astype(np.int64))[seg]
    return order[rank < quota[seg]]


def selection_keys(p: Plan, layer: int, nn1_below, seed: int):
    """The segment of every row of layer ``layer - 1`` and its key for :func:`select_layer`."""
    below = layer - 1
    m = p.sizes[below]
    rows = np.arange(m, dtype=np.int64)
    seg = bottom_segment(rows, p.n, p.n_seg0) if below == 0 else rows // p.s
    # u in (0, 1] from a splitmix64-style hash of (seed, layer, row)
    h = (rows * np.int64(0x9E3779B1) + np.int64((seed * 1000003 + layer * 7919) & 0x7FFFFFFF)).astype(np.uint64)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    u = ((h >> np.uint64(11)).astype(np.float64) + 1.0) / float(1 << 53)
    w = np.asarray(nn1_below, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(w > 0, np.log(u) / np.where(w > 0, w, 1.0), -np.inf)
    return seg, key
