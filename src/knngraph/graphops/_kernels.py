"""The GPU kernels of :mod:`knngraph.graphops.cuda` (numba-cuda): the pruning kernel of
:func:`knngraph.graphops.optimize_graph` (one warp per node) and the merge of sorted neighbour lists
(one warp per row); the host side launches them by name (:func:`knngraph._cuda_launch.kernel_module`).

Pruning: lane 0 sorts and merges the short lists; the warp computes each distance with
:func:`~knngraph.primitives.warp.warp_distance` (the butterfly gives every lane the same value, so the
occlusion decisions are warp-uniform).

Merge: the two rows are laid side by side in shared memory, sorted by a warp bitonic sort, and the first k
distinct ids are compacted with ballots.
"""

from __future__ import annotations

import functools

from numba import cuda, float32, int32

from ..primitives.compile import cuda_version
from ..primitives.constants import FULL_MASK, ID_NONE, INF, WARP
from ..primitives.lists import dedup_sorted, sort_pairs
from ..primitives.warp import warp_bitonic_sort, warp_distance
from ._layout import WPB

__all__ = ["prune_kernel", "merge_lists_kernel", "WPB"]

_sort_pairs = cuda_version(sort_pairs)
_dedup_sorted = cuda_version(dedup_sorted)


# --------------------------------------------------------------------------------------------------
# pruning (knngraph.graphops.optimize_graph)


@functools.lru_cache(maxsize=None)
def prune_kernel(lcap: int, rcap: int, wpb: int):
    """Warp-per-node pruning for candidate lists of up to ``lcap`` ids and rows of up to ``rcap``."""
    LN = max(lcap, 1)
    RN = max(rcap, 1)

    @cuda.jit
    def kernel(base, inv, kind, a, primary, primary2, secondary, degree, fill, out_ids, out_d):
        ids = cuda.shared.array((wpb, LN), dtype=int32)
        dd = cuda.shared.array((wpb, LN), dtype=float32)
        keep = cuda.shared.array((wpb, LN), dtype=int32)
        rid = cuda.shared.array((wpb, RN), dtype=int32)
        rd = cuda.shared.array((wpb, RN), dtype=float32)
        cnt = cuda.shared.array(wpb, dtype=int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        af = float32(a)
        u = cuda.blockIdx.x * wpb + w
        if u >= primary.shape[0]:
            return  # whole warps leave together
        # gather the primary lists (ids only), then their distances to u
        if lane == 0:
            c = 0
            for t in range(primary.shape[1]):
                x = primary[u, t]
                if x >= 0 and x != u:
                    ids[w, c] = x
                    c += 1
            for t in range(primary2.shape[1]):
                x = primary2[u, t]
                if x >= 0 and x != u:
                    ids[w, c] = x
                    c += 1
            cnt[w] = c
        cuda.syncwarp(FULL_MASK)
        npr = cnt[w]
        for t in range(npr):
            dist = warp_distance(kind, base, u, base, ids[w, t], inv, inv, lane)
            if lane == 0:
                dd[w, t] = dist
        cuda.syncwarp(FULL_MASK)
        if lane == 0:
            _sort_pairs(dd[w], ids[w], 0, npr)
            cnt[w] = _dedup_sorted(dd[w], ids[w], 0, npr)
        cuda.syncwarp(FULL_MASK)
        npr = cnt[w]
        for t in range(lane, npr, WARP):
            keep[w, t] = 0
        cuda.syncwarp(FULL_MASK)
        # diversity pruning: every lane sees the same distances, so the branches are warp-uniform
        nk = 0
        for t in range(npr):
            if nk == degree:
                break
            cc = ids[w, t]
            dc = dd[w, t]
            occluded = False
            for r in range(nk):
                if af * warp_distance(kind, base, rid[w, r], base, cc, inv, inv, lane) < dc:
                    occluded = True
                    break
            if not occluded:
                if lane == 0:
                    rid[w, nk] = cc
                    rd[w, nk] = dc
                    keep[w, t] = 1
                nk += 1
                cuda.syncwarp(FULL_MASK)
        cuda.syncwarp(FULL_MASK)
        if fill:
            if lane == 0:
                for t in range(npr):
                    if nk == degree:
                        break
                    if keep[w, t] == 0:
                        rid[w, nk] = ids[w, t]
                        rd[w, nk] = dd[w, t]
                        nk += 1
                cnt[w] = nk
            cuda.syncwarp(FULL_MASK)
            nk = cnt[w]
            cuda.syncwarp(FULL_MASK)  # every lane has read cnt before lane 0 reuses it
            if nk < degree:
                if lane == 0:
                    c = 0
                    for t in range(secondary.shape[1]):
                        x = secondary[u, t]
                        if x >= 0 and x != u:
                            ids[w, c] = x
                            c += 1
                    cnt[w] = c
                cuda.syncwarp(FULL_MASK)
                ns = cnt[w]
                for t in range(ns):
                    dist = warp_distance(kind, base, u, base, ids[w, t], inv, inv, lane)
                    if lane == 0:
                        dd[w, t] = dist
                cuda.syncwarp(FULL_MASK)
                if lane == 0:
                    _sort_pairs(dd[w], ids[w], 0, ns)
                    for t in range(ns):
                        if nk == degree:
                            break
                        dup = False
                        for r in range(nk):
                            if rid[w, r] == ids[w, t]:
                                dup = True
                                break
                        if not dup:
                            rid[w, nk] = ids[w, t]
                            rd[w, nk] = dd[w, t]
                            nk += 1
                    cnt[w] = nk
                cuda.syncwarp(FULL_MASK)
                nk = cnt[w]
        if lane == 0:
            _sort_pairs(rd[w], rid[w], 0, nk)
        cuda.syncwarp(FULL_MASK)
        for t in range(lane, degree, WARP):
            if t < nk:
                out_ids[u, t] = rid[w, t]
                out_d[u, t] = rd[w, t]
            else:
                out_ids[u, t] = -1
                out_d[u, t] = INF

    kernel.warps_per_block = wpb
    return kernel


# --------------------------------------------------------------------------------------------------
# merge of sorted lists (knngraph.graphops.merge_sorted_lists)


@functools.lru_cache(maxsize=None)
def merge_lists_kernel(c2: int):
    """Top-k distinct ids of two sorted rows a [n, ka], b [n, kb] (ka + kb <= c2, a power of two)."""

    slots = WPB * c2  # shared array sizes must be plain compile-time constants

    @cuda.jit
    def merge_two_lists(ad, ai, bd, bi, out_d, out_i):
        sd = cuda.shared.array(slots, float32)
        si = cuda.shared.array(slots, int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        n = ad.shape[0]
        ka = ad.shape[1]
        kb = bd.shape[1]
        k = out_d.shape[1]
        s = cuda.blockIdx.x * WPB + w
        base = w * c2
        while s < n:
            for j in range(lane, c2, WARP):
                dd = INF
                v = int32(ID_NONE)
                if j < ka:
                    dd = ad[s, j]
                    v = ai[s, j]
                elif j < ka + kb:
                    dd = bd[s, j - ka]
                    v = bi[s, j - ka]
                if v < 0:
                    dd = INF
                    v = int32(ID_NONE)
                sd[base + j] = dd
                si[base + j] = v
            cuda.syncwarp(FULL_MASK)
            warp_bitonic_sort(sd, si, base, c2, lane)
            below = cuda.lanemask_lt()
            c = 0
            for b0 in range(0, c2, WARP):
                j = b0 + lane
                v = si[base + j]
                keep = v != ID_NONE
                if keep:
                    for t in range(j):
                        if si[base + t] == v:
                            keep = False
                            break
                bal = cuda.ballot_sync(FULL_MASK, keep)
                pos = c + cuda.popc(bal & below)
                if keep and pos < k:
                    out_d[s, pos] = sd[base + j]
                    out_i[s, pos] = v
                c += cuda.popc(bal)
                if c >= k:
                    break
            for j in range(c + lane, k, WARP):
                out_d[s, j] = INF
                out_i[s, j] = -1
            cuda.syncwarp(FULL_MASK)
            s += cuda.gridDim.x * WPB

    return merge_two_lists
