"""Per-row k-selection kernels on the GPU (numba-cuda): exact k-NN's selection, reused wherever the k
smallest entries of each row of a matrix tile are needed (see :mod:`knngraph.primitives.kselect`).

Two strategies, both one warp per task (a task = one query row, or one column split of a row when
there are too few queries to fill the GPU), both reading rows of a distance tile produced by GEMM or
rows of explicit (key, id) candidate lists:

``quickselect`` - the GPU quick multi-select of Komarov, Dashti and D'Souza ("Fast k-NNG Construction
    with GPU-Based Quick Multi-Select", section "GPU-Based Quick Multi-Select"). Each round partitions the active range of a row around a pivot with one read pass:
    lane i holds element i of a 32-wide segment, ``ballot_sync(x < pivot)`` gives the vote, and
    ``popc(vote & lanemask_lt)`` gives each lane's slot on its side, so the left part is written from
    the range start upwards and the right part from the range end downwards, both coalesced. Keeping
    the k-th element's side: if k < L recurse left, else accept the left part and recurse right for
    k - L. Buffers ping-pong (no copy back). Where we differ from the paper, on purpose:
    * the whole recursion runs inside one kernel (the paper launched one kernel per round and decided
      on the host); a warp loops over its rounds, so there is no host round trip;
    * the pivot is the median of three pseudo-random elements of the range and elements are compared
      as (key, id) pairs, which are all distinct; so every round shrinks the range by at least two and
      ties resolve deterministically (lower id first). Ranges of <= 32 elements finish with an
      in-register rank select (each lane counts, via shuffles, the lanes holding smaller elements);
    * accepted left parts are copied straight into the k-wide output (the paper kept a stack of
      fragments and gathered them at the end: the same k writes);
    * lanes write their slots directly; the paper staged each segment through a 32-wide shared array
      to get two coalesced writes, which contiguous per-lane addresses already give on current GPUs.
    The selected k are unsorted; the caller sorts them.

``warp_filter`` - a single streaming pass in the style of current GPU top-k (threshold filtering with
    warp-ballot compaction, bitonic merging, as in FAISS's WarpSelect family). Each warp keeps its
    sorted top-K list and a K-slot candidate buffer in shared memory. An element is a candidate only
    if it beats the current k-th best; candidates are compacted into the buffer with the same
    ballot/popc prefix as above; a full buffer is merged into the list by a warp bitonic sort of the
    2K slots, which also tightens the threshold. On typical data only O(k log(n/k)) elements ever pass
    the filter, so the pass runs at memory bandwidth. Output is sorted. K = next power of two >= k,
    at least 64, at most 1024 (shared memory).

Keys: element j of a GEMM tile ranks by ``colterm[j] + alpha * dot`` (e.g. ||x||^2 - 2<q,x>, see
_gemm.py for the terms of each metric and GEMM mode; dots may be float32 or int32). Element (key, id) order
is lexicographic; the row's own id (graph builds) is replaced by the filler (inf, ID_NONE), which never
enters a result; missing results are reported as that filler.
"""

from __future__ import annotations

import functools

from numba import cuda, float32, int32, uint64

from ._kselect_layout import (FILTER_MAX_REGISTERS, FILTER_UNROLL, SRC_BUF_A, SRC_BUF_B, SRC_DOTS,  # noqa: F401
                              SRC_PAIRS, list_capacity, warps_per_block_for)
from .constants import FULL_MASK, ID_NONE, INF, WARP
from .compile import cuda_version, device_function
from .random import hash32
from .warp import bitonic_stages, less_device, warp_bitonic_sort

_less = less_device
_hash32 = cuda_version(hash32)  # pivot positions: pseudo-random but reproducible



@device_function
def _load(src, row, j, dots, colterm, alpha, col_offset, self_id, ck, ci, ak, ai, bk, bi):
    """Element j of ``row`` from source ``src`` as a (key, id) pair."""
    if src == SRC_DOTS:
        gid = col_offset + j
        if gid == self_id:
            return INF, int32(ID_NONE)
        return colterm[j] + alpha * float32(dots[row, j]), int32(gid)
    if src == SRC_PAIRS:
        return ck[row, j], ci[row, j]
    if src == SRC_BUF_A:
        return ak[row, j], ai[row, j]
    return bk[row, j], bi[row, j]


@device_function
def _fetch(src, row, j, hi, dots, colterm, ck, ci):
    """The raw values of element j (clamped into the range): (dot, colterm, 0) or (key, 0, id).

    Branch-free on purpose: the caller issues several fetches back to back and only then uses the
    values, so the loads overlap instead of each waiting for the previous one."""
    jc = min(j, hi - 1)
    if src == SRC_DOTS:
        return float32(dots[row, jc]), colterm[jc], int32(0)
    return ck[row, jc], float32(0.0), ci[row, jc]


@device_function
def _store_buf(dst, row, j, key, idx, ak, ai, bk, bi):
    if dst == SRC_BUF_A:
        ak[row, j] = key
        ai[row, j] = idx
    else:
        bk[row, j] = key
        bi[row, j] = idx


# ---------------------------------------------------------------------------------------------------
# quick multi-select (Komarov et al.)


@cuda.jit
def quickselect_kernel(first_src, n_tasks, n_splits, split_len, n_cols, k,
                       dots, colterm, alpha, col_offset, self_offset,
                       ck, ci, ak, ai, bk, bi, out_k, out_i):
    """One warp per task: select the k smallest (key, id) of the task's column range (unsorted)."""
    lane = cuda.threadIdx.x % WARP
    task = cuda.blockIdx.x * (cuda.blockDim.x // WARP) + cuda.threadIdx.x // WARP
    if task >= n_tasks:
        return  # whole warps leave together: no intrinsic below is left waiting
    row = task // n_splits
    lo = (task % n_splits) * split_len
    hi = min(n_cols, lo + split_len)
    self_id = self_offset + row if self_offset >= 0 else -1
    src = first_src
    k_rem = k
    n_acc = 0
    rnd = 0
    while True:
        length = hi - lo
        if length <= k_rem:
            # everything left is in the result
            for t in range(lane, length, WARP):
                key, idx = _load(src, row, lo + t, dots, colterm, alpha, col_offset, self_id, ck, ci, ak, ai, bk, bi)
                out_k[task, n_acc + t] = key
                out_i[task, n_acc + t] = idx
            n_acc += length
            break
        if length <= WARP:
            # rank select in registers: lane t holds element t; its rank is how many lanes hold less
            key = INF
            idx = int32(ID_NONE)
            if lane < length:
                key, idx = _load(src, row, lo + lane, dots, colterm, alpha, col_offset, self_id, ck, ci, ak, ai, bk, bi)
            rank = 0
            for other in range(WARP):
                ok = cuda.shfl_sync(FULL_MASK, key, other)
                oi = cuda.shfl_sync(FULL_MASK, idx, other)
                if other < length and _less(ok, oi, key, idx):
                    rank += 1
            if lane < length and rank < k_rem:
                out_k[task, n_acc + rank] = key
                out_i[task, n_acc + rank] = idx
            n_acc += k_rem
            break

        # pivot: median of three pseudo-random elements of the range (all lanes read the same three)
        h = _hash32(task * 7919 + rnd * 104729 + 12345)
        p1 = lo + h % length
        p2 = lo + _hash32(h + 1) % length
        p3 = lo + _hash32(h + 2) % length
        if p2 == p1:
            p2 = lo + (p1 - lo + 1) % length
        if p3 == p1 or p3 == p2:
            p3 = lo + (p2 - lo + 1) % length
            if p3 == p1:
                p3 = lo + (p3 - lo + 1) % length
        k1, i1 = _load(src, row, p1, dots, colterm, alpha, col_offset, self_id, ck, ci, ak, ai, bk, bi)
        k2, i2 = _load(src, row, p2, dots, colterm, alpha, col_offset, self_id, ck, ci, ak, ai, bk, bi)
        k3, i3 = _load(src, row, p3, dots, colterm, alpha, col_offset, self_id, ck, ci, ak, ai, bk, bi)
        # median of three distinct pairs
        if _less(k1, i1, k2, i2):
            if _less(k2, i2, k3, i3):
                pk, pi = k2, i2
            elif _less(k1, i1, k3, i3):
                pk, pi = k3, i3
            else:
                pk, pi = k1, i1
        else:
            if _less(k1, i1, k3, i3):
                pk, pi = k1, i1
            elif _less(k2, i2, k3, i3):
                pk, pi = k3, i3
            else:
                pk, pi = k2, i2

        # one partition pass: src[lo, hi) -> dst, "< pivot" from lo upwards, ">= pivot" from hi downwards
        dst = SRC_BUF_B if src == SRC_BUF_A else SRC_BUF_A
        n_left = 0
        n_right = 0
        for s in range(lo, hi, WARP):
            j = s + lane
            valid = j < hi
            key = INF
            idx = int32(ID_NONE)
            if valid:
                key, idx = _load(src, row, j, dots, colterm, alpha, col_offset, self_id, ck, ci, ak, ai, bk, bi)
            go_left = valid and _less(key, idx, pk, pi)
            vote_l = cuda.ballot_sync(FULL_MASK, go_left)
            vote_r = cuda.ballot_sync(FULL_MASK, valid and not go_left)
            below = cuda.lanemask_lt()
            if go_left:
                _store_buf(dst, row, lo + n_left + cuda.popc(vote_l & below), key, idx, ak, ai, bk, bi)
            elif valid:
                _store_buf(dst, row, hi - 1 - (n_right + cuda.popc(vote_r & below)), key, idx, ak, ai, bk, bi)
            n_left += cuda.popc(vote_l)
            n_right += cuda.popc(vote_r)
        cuda.syncwarp(FULL_MASK)  # the partition's writes are visible to every lane before re-reading

        if n_left == 0:
            # nothing below the pivot: the range holds only copies of the filler (the one element
            # that may repeat in candidate rows), so the rest of the result is filler
            break
        if k_rem < n_left:
            hi = lo + n_left                      # the k-th element is on the left
        else:
            for t in range(lane, n_left, WARP):   # accept the whole left part
                key, idx = _load(dst, row, lo + t, dots, colterm, alpha, col_offset, self_id, ck, ci, ak, ai, bk, bi)
                out_k[task, n_acc + t] = key
                out_i[task, n_acc + t] = idx
            n_acc += n_left
            k_rem -= n_left
            lo = lo + n_left
            if k_rem == 0:
                break
        src = dst
        rnd += 1
        cuda.syncwarp(FULL_MASK)

    # fewer than k elements in the range: pad with the filler
    for t in range(n_acc + lane, k, WARP):
        out_k[task, t] = INF
        out_i[task, t] = int32(ID_NONE)


# ---------------------------------------------------------------------------------------------------
# warp filter + bitonic merge


# A flush of at most this many candidates inserts them one by one (2 * cap / 32 shared-memory rounds
# each) instead of sorting the buffer (about log2(cap)^2 / 2 rounds of cap / 32): the usual case once
# the list is seeded from earlier tiles, where a tile brings only a handful of candidates per row.
FEW_CANDIDATES = 8


@device_function
def _insert_few(sk, si, base, cap, count, lane):
    """Insert buffer slots [cap, cap + count) one at a time into the sorted list [0, cap)."""
    for c in range(count):
        ck = sk[base + cap + c]
        ci = si[base + cap + c]
        pos = 0  # list elements below the candidate: a ballot per 32-wide group
        for g in range(0, cap, WARP):
            below = _less(sk[base + g + lane], si[base + g + lane], ck, ci)
            pos += cuda.popc(cuda.ballot_sync(FULL_MASK, below))
        if pos < cap:
            # shift [pos, cap - 1) up by one slot, top group first (a group is read, then written)
            for g in range(cap - WARP, -1, -WARP):
                t = g + lane
                vk = sk[base + t]
                vi = si[base + t]
                cuda.syncwarp(FULL_MASK)
                if t >= pos and t + 1 < cap:
                    sk[base + t + 1] = vk
                    si[base + t + 1] = vi
                cuda.syncwarp(FULL_MASK)
            if lane == 0:
                sk[base + pos] = ck
                si[base + pos] = ci
            cuda.syncwarp(FULL_MASK)


@device_function
def _flush(sk, si, base, cap, k, count, lane):
    """Merge the first ``count`` buffer slots into the sorted list; returns the new threshold.

    A few candidates are inserted one by one. Otherwise only the ``cap`` smallest of list + buffer survive, so the buffer is sorted on its own and
    folded in with one min pass: list[t] = min(list[t], buffer[cap - 1 - t]) pairs an ascending run
    with a descending one, which leaves exactly the ``cap`` smallest as a bitonic run; one bitonic
    merge sorts it. That is about half the stages of sorting all 2 * cap slots."""
    cuda.syncwarp(FULL_MASK)
    if count <= FEW_CANDIDATES:
        _insert_few(sk, si, base, cap, count, lane)
        return sk[base + k - 1], si[base + k - 1]
    for t in range(count + lane, cap, WARP):
        sk[base + cap + t] = INF
        si[base + cap + t] = int32(ID_NONE)
    cuda.syncwarp(FULL_MASK)
    warp_bitonic_sort(sk, si, base + cap, cap, lane)
    for t in range(lane, cap, WARP):
        bk = sk[base + 2 * cap - 1 - t]
        bi = si[base + 2 * cap - 1 - t]
        if _less(bk, bi, sk[base + t], si[base + t]):
            sk[base + t] = bk
            si[base + t] = bi
    cuda.syncwarp(FULL_MASK)
    bitonic_stages(sk, si, base, cap, cap, lane)
    return sk[base + k - 1], si[base + k - 1]


@device_function
def _offer(key, idx, sk, si, base, cap, k, count, thr_k, thr_i, lane):
    """Offer one 32-wide segment (one element per lane) to the warp's list: ballot-compact the
    elements that beat the threshold into the buffer; merge when the next segment might not fit."""
    take = _less(key, idx, thr_k, thr_i)
    vote = cuda.ballot_sync(FULL_MASK, take)
    if take:
        pos = count + cuda.popc(vote & cuda.lanemask_lt())
        sk[base + cap + pos] = key
        si[base + cap + pos] = idx
    count += cuda.popc(vote)
    if count > cap - WARP:
        thr_k, thr_i = _flush(sk, si, base, cap, k, count, lane)
        count = 0
    return count, thr_k, thr_i


@device_function
def _fast_key(src, row, j, dots, colterm, alpha, ck):
    """Element j's key alone (no id, no self or bounds check): the cheap value the filter tests."""
    if src == SRC_DOTS:
        return colterm[j] + alpha * float32(dots[row, j])
    return ck[row, j]


@device_function
def _exact_element(src, urow, j, dots, colterm, alpha, col_offset, self_id, ck, ci):
    """(key, id) of in-range element j, with the row's own id replaced by the filler."""
    uj = uint64(j)
    if src == SRC_DOTS:
        gid = col_offset + j
        if gid == self_id:
            return INF, int32(ID_NONE)
        return colterm[uj] + alpha * float32(dots[urow, uj]), int32(gid)
    return ck[urow, uj], ci[urow, uj]



@functools.lru_cache(maxsize=None)
def warp_filter_kernel(cap: int, source: int = SRC_DOTS, unroll: int = FILTER_UNROLL):
    """The warp-filter kernel for lists of ``cap`` slots (a power of two in [64, 1024]) reading
    elements from ``source`` (SRC_DOTS or SRC_PAIRS; a compile-time constant, so the per-element
    source switch folds away); each lane has ``unroll`` loads in flight per step."""
    assert cap & (cap - 1) == 0 and 64 <= cap <= 1024
    assert source in (SRC_DOTS, SRC_PAIRS)
    assert unroll in (1, 2, 4, 8, 16)
    wpb = warps_per_block_for(cap)
    slots = 2 * cap  # list [0, cap) + candidate buffer [cap, 2 cap)
    shared_len = wpb * slots
    step = unroll * WARP

    @cuda.jit
    def kernel(n_tasks, n_splits, split_len, n_cols, k,
               dots, colterm, alpha, col_offset, self_offset,
               ck, ci, init_k, init_i, use_init, out_k, out_i):
        sk = cuda.shared.array(shared_len, dtype=float32)
        si = cuda.shared.array(shared_len, dtype=int32)
        keys = cuda.local.array(unroll, dtype=float32)  # indexed by unrolled constants only: registers
        warp = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        task = cuda.blockIdx.x * wpb + warp
        if task >= n_tasks:
            return  # whole warps only; the kernel has no block-wide barrier
        row = task // n_splits
        lo = (task % n_splits) * split_len
        hi = min(n_cols, lo + split_len)
        self_id = self_offset + row if self_offset >= 0 else -1
        base = warp * slots

        for t in range(lane, slots, WARP):
            if use_init != 0 and t < k:
                sk[base + t] = init_k[task, t]
                si[base + t] = init_i[task, t]
            else:
                sk[base + t] = INF
                si[base + t] = int32(ID_NONE)
        cuda.syncwarp(FULL_MASK)
        thr_k = sk[base + k - 1]
        thr_i = si[base + k - 1]
        count = 0
        # Streaming part: whole steps of ``unroll`` segments. A lane issues its ``unroll`` loads
        # back to back (independent, so they are all in flight at once) and tests only the keys
        # against the threshold (``<=``: a superset of the (key, id) test). Once the list has filled
        # almost every step ends at the first ballot. Otherwise one ballot per segment marks the
        # segments that hold a candidate, and only those are re-read (from cache) on the exact path,
        # which also handles the row's own id. (The threshold only falls, so an unmarked segment
        # cannot hold a candidate later in the step.)
        full_end = lo + (hi - lo) // step * step
        urow = uint64(row)
        for s in range(lo, full_end, step):
            # unsigned indices: numba then skips its negative-index wraparound arithmetic, which
            # otherwise costs more instructions per load than the load itself
            first = uint64(s + lane)
            for u in range(unroll):
                keys[u] = _fast_key(source, urow, first + uint64(u * WARP), dots, colterm, alpha, ck)
            maybe = False
            for u in range(unroll):
                maybe = maybe or keys[u] <= thr_k
            if cuda.ballot_sync(FULL_MASK, maybe) == 0:
                continue
            pending = 0
            for u in range(unroll):
                if cuda.ballot_sync(FULL_MASK, keys[u] <= thr_k) != 0:
                    pending |= 1 << u
            for u in range(unroll):  # not unrolled: one copy of the merge code
                if (pending >> u) & 1 == 0:
                    continue
                j = s + u * WARP + lane
                key, idx = _exact_element(source, urow, j, dots, colterm, alpha, col_offset, self_id, ck, ci)
                count, thr_k, thr_i = _offer(key, idx, sk, si, base, cap, k, count, thr_k, thr_i, lane)
        # the tail: segments with bounds checks
        for t0 in range(full_end, hi, WARP):
            j = t0 + lane
            key = INF
            idx = int32(ID_NONE)
            if j < hi:
                key, idx = _load(source, row, j, dots, colterm, alpha, col_offset, self_id,
                                 ck, ci, ck, ci, ck, ci)
            count, thr_k, thr_i = _offer(key, idx, sk, si, base, cap, k, count, thr_k, thr_i, lane)
        if count > 0:
            _flush(sk, si, base, cap, k, count, lane)
        cuda.syncwarp(FULL_MASK)
        for t in range(lane, k, WARP):
            out_k[task, t] = sk[base + t]
            out_i[task, t] = si[base + t]

    kernel.warps_per_block = wpb
    return kernel
