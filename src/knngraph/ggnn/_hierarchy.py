"""The shape of GGNN's hierarchy (section 5.1, Fig. 1) and the top-layer selection, on the host.

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

import numba
import numpy as np

__all__ = ["Plan", "plan", "select_layer", "selection_keys", "bottom_segment"]


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


def select_layer(p: Plan, layer: int, nn1_below, seed: int) -> np.ndarray:
    """Rows of layer ``layer - 1`` (local) that form layer ``layer``, in its row order: from each child
    segment c of a group of g, ``(c + 1) * s // g - c * s // g`` rows by weighted reservoir sampling
    (Efraimidis and Spirakis, the paper's [34]) with weights ``nn1_below`` (each row's distance to its
    nearest neighbour, section 5.1: points in sparse regions are preferred). Key log(u) / w, the largest
    keys win; u is a hash of (seed, layer, row), so the choice is the same on every device."""
    below = layer - 1
    seg, key = selection_keys(p, layer, nn1_below, seed)
    seg_starts = np.searchsorted(seg, np.arange(p.segments(below) + 1), side="left")  # seg ascends with rows
    picked = _pick_per_segment(key, seg_starts, p.s, p.g, p.sizes[layer])
    if picked.shape[0] != p.sizes[layer]:  # pragma: no cover - the plan guarantees it
        raise RuntimeError(f"GGNN selection picked {picked.shape[0]} rows for a layer of {p.sizes[layer]}")
    return picked.astype(np.int32)


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


@numba.njit(cache=True)
def _pick_per_segment(key, seg_starts, s, g, size):
    """From each segment c (rows seg_starts[c] .. seg_starts[c + 1], contiguous) its ``(c % g + 1) * s // g -
    (c % g) * s // g`` rows of largest key (ties: lower row first), segment by segment, each segment's
    in that order: the rows a sort by (segment, -key, row) puts first in each segment, without the sort
    (a segment holds about s rows, its quota is about s / g)."""
    out = np.empty(size, np.int64)
    taken = np.zeros(seg_starts[-1], np.bool_)
    w = 0
    for c in range(seg_starts.shape[0] - 1):
        a, b = seg_starts[c], seg_starts[c + 1]
        cg = c % g
        quota = min((cg + 1) * s // g - cg * s // g, b - a)
        for _ in range(quota):
            best = -1
            for r in range(a, b):
                if not taken[r] and (best < 0 or key[r] > key[best]):
                    best = r
            taken[best] = True
            out[w] = best
            w += 1
    return out[:w]
