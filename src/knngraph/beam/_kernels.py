"""The fast GPU searcher (numba-cuda): warp-per-query best-first search over a sorted candidate list.

SONG's kernel (``song/_kernels.py``) follows the paper: lane 0 alone keeps a bounded priority queue, a top-k
heap and a visited table with deletion, one candidate at a time (SONG section IV-A). Profiles show that
serial maintenance, not the distance computation, bounds its speed: dozens of heap operations per
expansion while 31 lanes wait. This kernel keeps the same search (best-first from shared entry points
over any graph, stopping when the ``queue_size`` nearest vertices found are all expanded) with every
stage done by the whole warp:

* **one sorted list** of the ``queue_size`` nearest vertices seen, (distance, id) ascending, an
  "expanded" mark folded into the id. The next vertex to expand is the first unmarked one (a ballot per
  32 entries); the search ends when there is none. This list is both SONG's queue and its top-k;
* **candidates in chunks of 32** (a neighbour row, or the entry points): lane t takes id t, claims it in
  the visited table with an atomic compare-and-swap (so each id's distance is computed once, also when a
  row repeats an id), the claimed ids are compacted by ballot;
* **teams of lanes per distance**: T lanes (T = 1..32, chosen from the row length) compute one
  candidate's distance with coalesced word loads and a ``log2 T``-step shuffle reduction; a lane works
  on four candidates at once and loads two words of each before any arithmetic, so eight loads are in
  flight per lane (numba does not unroll the loop over a row, and under the kernel's register cap the
  compiler would not hoist loads across its iterations). The distance kind (L2, inner product, cosine)
  and the row length are compile-time constants, and the ids index the vectors as unsigned integers
  (no negative-index wraparound): the loop holds only the loads and the arithmetic. For 8-bit vectors whose
  queries have the same dtype, four dimensions take one ``dp4a`` instruction (integer dot products;
  L2 as ||x||^2 + ||q||^2 - 2<x, q> with the integer norms of the vectors kept by the index: exact);
* **merge by rank**: the chunk is sorted by a bitonic network across the lanes (registers and
  shuffles), then every element of the list and of the chunk finds its place in the merged order by a
  binary search in the other (merge path), and is written to the other half of a double buffer;
* **a visited table that is reset, not grown**: open addressing in shared memory, cleared when half
  full and refilled with the list's ids. Ids that fell off the list may be computed again later, but
  cannot re-enter it (the list's last entry only improves), so results equal those of a table that
  never forgets: the search is deterministic and matches the reference walk
  (``tests/beam/test_search_sim.py``).

* **an optional slack stop** (``slack=True``, compile-time): the search also ends when the first
  unexpanded entry lies beyond GGNN's bound d_kb + tau^2 min(|d_1|, nn1) (Groh et al., Eq. 2; d_kb the
  kb-th entry of the list, open while the list holds fewer; :func:`~knngraph.primitives.lists.slack_bound`)
  or after ``max_exp`` expansions. The list
  is then GGNN's cache in the authors' sorted-buffer layout (best list and priority queue in one sorted
  buffer, an "expanded" mark per entry): :func:`knngraph.ggnn.search` with ``cache='sorted'``.

* **an optional filter** (``filtered=True``, compile-time; the trailing ``allowed`` argument, the uint32
  bitset of the ids that may be returned, :mod:`knngraph.primitives.filters`, which kernels without the
  filter never read): the walk is the same (vertices that may not be returned are expanded too: they lead
  to the allowed ones) and the results are the first k allowed entries of the final list, compacted by
  the warp (a ballot and a prefix count per 32 entries), -1 / inf past the allowed entries the list holds.
  The host sizes the list from the allowed share (:func:`knngraph.beam.filtered_queue_size`). Traversal
  and filtering are separate as in CAGRA's bitset-filtered search.

A warp takes its next query from a global counter when it finishes one. Nothing is allocated in the
kernel: the list, the chunk, the table and the query live in shared memory slices sized by compile-time
capacities; per-thread state is a fixed number of scalars.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import config, cuda, float32, int32, uint32, uint64

from ..primitives.bitset import is_allowed
from ..primitives.compile import cuda_version, device_function
from ..primitives.constants import FULL_MASK, ID_NONE, INF, WARP
from ..primitives.distances import DIST_COS, DIST_IP, DIST_L2SQ
from ..primitives.intrinsics import dp4a_i8, dp4a_u8
from ..primitives.lists import slack_bound
from ..primitives.visited import EMPTY
from ..primitives.warp import finish_query_device, less_device, warp_sort32
from ._layout import (MODE_DP4A_I8, MODE_DP4A_U8, MODE_F32X2, MODE_F32X4, MODE_GENERIC, MODE_HALF2,  # noqa: F401
                      MODE_HALF4, REPORT_CLIP02, REPORT_INTERNAL, REPORT_NONNEG, REPORT_SQRT, SHARED_BUDGET,
                      report_code, row_units, shared_bytes_per_block, shared_bytes_per_warp, team_size,
                      warps_per_block)

_slack_bound = cuda_version(slack_bound)
_is_allowed = cuda_version(is_allowed)

NAN = float32(np.nan)

_HMUL = 2654435761


# --------------------------------------------------------------------------------------------------
# words of packed halves or floats, 16-byte float loads (PTX); plain Python in the simulator. dp4a is
# primitives.intrinsics'


def _half_python(high):
    def half(word):
        bits = (int(word) >> 16) & 0xFFFF if high else int(word) & 0xFFFF
        return float32(np.array([bits], np.uint16).view(np.float16)[0])

    return half


def _half_ptx(high):
    """The low or high float16 of a 32-bit word as float32 (``mov.b32`` + ``cvt.f32.f16``)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    pick = "hi" if high else "lo"

    @intrinsic
    def half(typingctx, word):
        sig = types.float32(word)

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            w = context.cast(builder, args[0], signature.args[0], types.int32)
            asm = ir.InlineAsm(ir.FunctionType(ir.FloatType(), [i32]),
                               "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $1; cvt.f32.f16 $0, " + pick + "; }", "=f,r")
            return builder.call(asm, [w])

        return sig, codegen

    return half


def _float_python(high):
    def single(word):
        bits = (int(word) >> 32) & 0xFFFFFFFF if high else int(word) & 0xFFFFFFFF
        return float32(np.array([bits], np.uint32).view(np.float32)[0])

    return single


def _float_ptx(high):
    """The low or high float32 of a 64-bit word (a shift, a truncation and a bit cast: no conversion)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def single(typingctx, word):
        sig = types.float32(word)

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            w = context.cast(builder, args[0], signature.args[0], types.uint64)
            if high:
                w = builder.lshr(w, ir.Constant(i64, 32))
            return builder.bitcast(builder.trunc(w, ir.IntType(32)), ir.FloatType())

        return sig, codegen

    return single


def _load_f32x4_python(rows, v, t):
    t4 = 4 * int(t)
    return rows[v, t4], rows[v, t4 + 1], rows[v, t4 + 2], rows[v, t4 + 3]


def _load_f32x4_ptx():
    """Floats 4t .. 4t + 3 of row v of a float32 matrix with contiguous rows, in one 16-byte vector load
    (rows aligned to 16 bytes: ``beam_mode`` checks the address, dim % 4 == 0 the row length). v and t are
    unsigned: no negative-index wraparound."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load_f32x4(typingctx, rows, v, t):
        ret = types.UniTuple(types.float32, 4)
        sig = ret(rows, v, t)

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            vi = context.cast(builder, args[1], signature.args[1], types.uint64)
            ti = context.cast(builder, args[2], signature.args[2], types.uint64)
            row_bytes = builder.extract_value(ary.strides, 0)
            off = builder.add(builder.mul(vi, row_bytes), builder.shl(ti, ir.Constant(i64, 4)))
            byte_ptr = builder.bitcast(ary.data, ir.IntType(8).as_pointer())
            vec_ptr = builder.bitcast(builder.gep(byte_ptr, [off]), ir.VectorType(ir.FloatType(), 4).as_pointer())
            vec = builder.load(vec_ptr, align=16)
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_element(vec, ir.Constant(ir.IntType(32), i)) for i in range(4)])

        return sig, codegen

    return load_f32x4


if config.ENABLE_CUDASIM:
    load_f32x4 = _load_f32x4_python
    float_lo = _float_python(False)
    float_hi = _float_python(True)
    half_lo = _half_python(False)
    half_hi = _half_python(True)
else:  # pragma: no cover - needs numba's CUDA target
    load_f32x4 = _load_f32x4_ptx()
    float_lo = _float_ptx(False)
    float_hi = _float_ptx(True)
    half_lo = _half_ptx(False)
    half_hi = _half_ptx(True)


# --------------------------------------------------------------------------------------------------
# small pieces


@device_function
def raw_id(e):
    """The vertex id of a list entry (expanded entries hold -id - 2)."""
    return -e - 2 if e < 0 else e


@device_function
def team_sum(acc, team_size):
    """Sum over the aligned group of ``team_size`` lanes (a power of two <= 32); all lanes get it."""
    off = team_size // 2
    while off > 0:
        acc += cuda.shfl_xor_sync(FULL_MASK, acc, off)
        off //= 2
    return acc


@device_function
def claim(ht, voff, hmask, v):
    """Insert id ``v`` into the visited table; True if it was not there (this lane claimed it)."""
    p = ((int(v) * _HMUL) & 0xFFFFFFFF) >> 7
    while True:
        s = voff + (p & hmask)
        old = cuda.atomic.cas(ht, s, EMPTY, int32(v))
        if old == EMPTY:
            return True
        if old == v:
            return False
        p += 1


@device_function
def count_less_chunk(ck, ci, coff, c, key, vid):
    """How many of the c sorted chunk entries ck/ci[coff:coff+c] are below (key, vid)."""
    if not less_device(ck[coff], ci[coff], key, vid):
        return 0  # the common case near the list's front
    lo = 1
    hi = c
    while lo < hi:
        mid = (lo + hi) // 2
        if less_device(ck[coff + mid], ci[coff + mid], key, vid):
            lo = mid + 1
        else:
            hi = mid
    return lo


@device_function
def count_not_above_list(lk, li, loff, m, key, vid):
    """How many of the m sorted list entries lk/li[loff:loff+m] are below (key, vid) or equal to it."""
    lo = 0
    hi = m
    while lo < hi:
        mid = (lo + hi) // 2
        if not less_device(key, vid, lk[loff + mid], raw_id(li[loff + mid])):
            lo = mid + 1
        else:
            hi = mid
    return lo


#: what the kernel writes out (``report`` argument): the internal distance, or what a metric reports
@device_function
def report_distance(report, d):
    if report == REPORT_SQRT:
        return math.sqrt(max(d, float32(0.0)))
    if report == REPORT_CLIP02:
        return min(max(d, float32(0.0)), float32(2.0))
    if report == REPORT_NONNEG:
        return max(d, float32(0.0))
    return d


# --------------------------------------------------------------------------------------------------
# distances of the compacted chunk cand[w, :c] (results in cdist[w, :c])


@device_function
def _slot(cand, w, s, c):
    """Candidate ``s`` of the chunk, or the first one (a harmless duplicate load) past its end, as an
    unsigned index: numba indexes with unsigned integers without the negative-index wraparound, which
    costs about ten instructions per load in the distance loops."""
    return uint32(cand[w, s] if s < c else cand[w, 0])


@device_function
def _four_slots(cand, w, s1, nteams, c):
    """The four candidates a team computes in one pass: slots s1 + {0, 1, 2, 3} * nteams."""
    return (_slot(cand, w, s1, c), _slot(cand, w, s1 + nteams, c), _slot(cand, w, s1 + 2 * nteams, c),
            _slot(cand, w, s1 + 3 * nteams, c))


@device_function
def _store_float4(kind, cdist, w, s1, nteams, c, a1, a2, a3, a4, v1, v2, v3, v4, inv_b, qinv, member, tsize):
    """Finish a pass of float sums: team reduction, then the team's first lane writes the distances."""
    a1 = team_sum(a1, tsize)
    a2 = team_sum(a2, tsize)
    a3 = team_sum(a3, tsize)
    a4 = team_sum(a4, tsize)
    if member == 0:
        if s1 < c:
            cdist[w, s1] = finish_query_device(kind, a1, inv_b, v1, qinv)
        if s1 + nteams < c:
            cdist[w, s1 + nteams] = finish_query_device(kind, a2, inv_b, v2, qinv)
        if s1 + 2 * nteams < c:
            cdist[w, s1 + 2 * nteams] = finish_query_device(kind, a3, inv_b, v3, qinv)
        if s1 + 3 * nteams < c:
            cdist[w, s1 + 3 * nteams] = finish_query_device(kind, a4, inv_b, v4, qinv)


@device_function
def _element_terms(kind, x, qt, acc):
    x = float32(x)
    if kind == DIST_L2SQ:
        x -= qt
        return acc + x * x
    return acc + x * qt


@device_function
def _half2_terms(kind, y, q0, q1, acc):
    return _element_terms(kind, half_hi(y), q1, _element_terms(kind, half_lo(y), q0, acc))


@device_function
def _half4_terms(kind, y, qv, w, t, acc):
    t4 = uint32(4) * t
    acc = _half2_terms(kind, uint32(y & uint64(0xFFFFFFFF)), qv[w, t4], qv[w, t4 + uint32(1)], acc)
    return _half2_terms(kind, uint32(y >> uint64(32)), qv[w, t4 + uint32(2)], qv[w, t4 + uint32(3)], acc)


@device_function
def _finish_dp4a(kind, dot, nb, v, qn, qinv):
    if kind == DIST_L2SQ:
        return float32(nb[v] + qn - 2 * dot)
    if kind == DIST_IP:
        return -float32(dot)
    return float32(1.0) - float32(dot) * nb[v] * qinv


@device_function
def _dp4a(signed, x, q, acc):
    if signed:
        return dp4a_i8(x, q, acc)
    return dp4a_u8(x, q, acc)


@device_function
def _store_dp4a4(kind, cdist, w, s1, nteams, c, a1, a2, a3, a4, v1, v2, v3, v4, nb, qn, qinv, member, tsize):
    """As :func:`_store_float4` for the int32 sums of ``dp4a``."""
    a1 = team_sum(a1, tsize)
    a2 = team_sum(a2, tsize)
    a3 = team_sum(a3, tsize)
    a4 = team_sum(a4, tsize)
    if member == 0:
        if s1 < c:
            cdist[w, s1] = _finish_dp4a(kind, a1, nb, v1, qn, qinv)
        if s1 + nteams < c:
            cdist[w, s1 + nteams] = _finish_dp4a(kind, a2, nb, v2, qn, qinv)
        if s1 + 2 * nteams < c:
            cdist[w, s1 + 2 * nteams] = _finish_dp4a(kind, a3, nb, v3, qn, qinv)
        if s1 + 3 * nteams < c:
            cdist[w, s1 + 3 * nteams] = _finish_dp4a(kind, a4, nb, v4, qn, qinv)


# --------------------------------------------------------------------------------------------------
# the stages every warp runs (shared by the warp-per-query and block-per-query kernels)


@device_function
def _stage_query(queries, j, qw, qv, w, lane, kind, dp4a, signed):
    """Copy query j into this warp's shared row; returns (squared norm as int for dp4a L2, inverse norm
    for cosine, whether it holds NaN / inf)."""
    qn = int32(0)
    qf = float32(0.0)
    bad = False
    t = lane
    while t < queries.shape[1]:
        if dp4a:
            x = queries[j, t]
            qw[w, t] = x
            if signed:
                qn = dp4a_i8(x, x, qn)
            else:
                qn = dp4a_u8(x, x, qn)
        else:
            xf = float32(queries[j, t])  # float32 or float16 queries (the latter used in place)
            qv[w, t] = xf
            qf += xf * xf
            if not math.isfinite(xf):
                bad = True
        t += WARP
    if dp4a:
        qn = team_sum(qn, WARP)
        qf = float32(qn)
    else:
        qf = team_sum(qf, WARP)
    qinv = float32(0.0)
    if kind == DIST_COS and qf > 0:
        qinv = float32(1.0) / math.sqrt(qf)
    return qn, qinv, cuda.any_sync(FULL_MASK, bad)


@functools.lru_cache(maxsize=None)
def _sorted_chunk_for(mode: int, kind: int, row_units: int):
    """Stage 1-2 of the kernels of distance mode ``mode`` and distance ``kind``: ``sorted_chunk(v, ...)``
    claims the 32 ids ``v`` of the lanes (-1: none) in the visited table, computes the distances of the
    claimed ones, sorts them across the warp and writes them ascending to ck/ci[coff:coff+32] ((inf, ID_NONE)
    after the c claimed); returns c. ``row_units``: loads per vector row (words, or elements in the
    generic mode). One device function per mode, kind and row length: they are constants of its closure,
    so numba drops the arithmetic of the other modes, which would not type for these vectors (four halves
    of a uint64 word from float32 rows), and the other distances' arithmetic is not in the loop."""
    signed = mode == MODE_DP4A_I8

    @device_function
    def load_unit(rows, v, t):
        """Row unit ``t`` of vertex ``v``: one load (four floats as a 16-byte vector load)."""
        if mode == MODE_F32X4:
            return load_f32x4(rows, v, t)
        return rows[v, t]

    @device_function
    def unit_terms(y, qv, qw, w, t, acc):
        """Row unit ``t`` of a candidate (``y``: an element, a word of two or four halves, four 8-bit
        values, or a tuple of four floats) against the staged query, added to ``acc``."""
        if mode == MODE_F32X4:
            t4 = uint32(4) * t
            acc = _element_terms(kind, y[0], qv[w, t4], acc)
            acc = _element_terms(kind, y[1], qv[w, t4 + uint32(1)], acc)
            acc = _element_terms(kind, y[2], qv[w, t4 + uint32(2)], acc)
            return _element_terms(kind, y[3], qv[w, t4 + uint32(3)], acc)
        if mode == MODE_DP4A_U8 or mode == MODE_DP4A_I8:
            return _dp4a(signed, y, qw[w, t], acc)
        if mode == MODE_HALF4:
            return _half4_terms(kind, y, qv, w, t, acc)
        if mode == MODE_HALF2:
            t2 = uint32(2) * t
            return _half2_terms(kind, y, qv[w, t2], qv[w, t2 + uint32(1)], acc)
        if mode == MODE_F32X2:
            t2 = uint32(2) * t
            acc = _element_terms(kind, float_lo(y), qv[w, t2], acc)
            return _element_terms(kind, float_hi(y), qv[w, t2 + uint32(1)], acc)
        return _element_terms(kind, y, qv[w, t], acc)

    @device_function
    def row_sums(rows, qv, qw, w, v1, v2, v3, v4, member, tsize, per_lane, zero):
        """This lane's partial sums of four candidates' rows (units member, member + T, ...; ``zero``: 0 in
        the accumulators' type). Two units of each candidate per iteration, all eight loads issued before
        the arithmetic: numba does not unroll the loop over a row, and under the kernel's register cap the
        compiler would not hoist loads across its iterations, so this is what keeps loads in flight."""
        a1 = a2 = a3 = a4 = zero
        for i in range(0, per_lane, 2):
            t = uint32(member + i * tsize)
            u = t + uint32(tsize)
            has_u = u < row_units and i + 1 < per_lane
            if t < row_units:
                y1 = load_unit(rows, v1, t)
                y2 = load_unit(rows, v2, t)
                y3 = load_unit(rows, v3, t)
                y4 = load_unit(rows, v4, t)
                z1 = z2 = z3 = z4 = y1
                if has_u:
                    z1 = load_unit(rows, v1, u)
                    z2 = load_unit(rows, v2, u)
                    z3 = load_unit(rows, v3, u)
                    z4 = load_unit(rows, v4, u)
                a1 = unit_terms(y1, qv, qw, w, t, a1)
                a2 = unit_terms(y2, qv, qw, w, t, a2)
                a3 = unit_terms(y3, qv, qw, w, t, a3)
                a4 = unit_terms(y4, qv, qw, w, t, a4)
                if has_u:
                    a1 = unit_terms(z1, qv, qw, w, u, a1)
                    a2 = unit_terms(z2, qv, qw, w, u, a2)
                    a3 = unit_terms(z3, qv, qw, w, u, a3)
                    a4 = unit_terms(z4, qv, qw, w, u, a4)
        return a1, a2, a3, a4

    @device_function
    def chunk_distances(base, qw, qv, w, cand, cdist, c, norms, qn, qinv, team, member, tsize, nteams, per_lane):
        """Distances of the c compacted candidates cand[w, :c] into cdist[w, :c]: team ``team`` takes slots
        s0 + team + {0, 1, 2, 3} * nteams of each pass."""
        s0 = int32(0)
        while s0 < c:
            s1 = s0 + team
            v1, v2, v3, v4 = _four_slots(cand, w, s1, nteams, c)
            if mode == MODE_DP4A_U8 or mode == MODE_DP4A_I8:
                i1, i2, i3, i4 = row_sums(base, qv, qw, w, v1, v2, v3, v4, member, tsize, per_lane, int32(0))
                _store_dp4a4(kind, cdist, w, s1, nteams, c, i1, i2, i3, i4, v1, v2, v3, v4, norms, qn, qinv, member,
                             tsize)
            else:
                f1, f2, f3, f4 = row_sums(base, qv, qw, w, v1, v2, v3, v4, member, tsize, per_lane, float32(0.0))
                _store_float4(kind, cdist, w, s1, nteams, c, f1, f2, f3, f4, v1, v2, v3, v4, norms, qinv, member,
                              tsize)
            s0 += 4 * nteams

    @device_function
    def sorted_chunk(v, ht, voff, hmask, base, qw, qv, w, cand, cdist, ck, ci, coff, norms, qn, qinv, lane,
                     team, member, tsize, nteams, per_lane):
        ok = v >= 0
        if ok:
            ok = claim(ht, voff, hmask, v)
        vote = cuda.ballot_sync(FULL_MASK, ok)
        c = cuda.popc(vote)
        if ok:
            cand[w, cuda.popc(vote & cuda.lanemask_lt())] = v
        cuda.syncwarp(FULL_MASK)
        key = INF
        vid = int32(ID_NONE)
        if c > 0:
            chunk_distances(base, qw, qv, w, cand, cdist, c, norms, qn, qinv, team, member, tsize, nteams, per_lane)
            cuda.syncwarp(FULL_MASK)
            if lane < c:
                key = cdist[w, lane]
                vid = cand[w, lane]
            key, vid = warp_sort32(key, vid, lane)
        ck[coff + lane] = key
        ci[coff + lane] = vid
        cuda.syncwarp(FULL_MASK)
        return c

    return sorted_chunk


@device_function
def _merge_chunk(lk, li, loff, noff, ck, ci, coff, c, qsize, lane):
    """Stage 3: merge the c sorted chunk entries into the sorted list at loff, writing the first qsize of
    the merged order at noff (each entry's place is its index plus the number of entries of the other
    side below it). Returns False, writing nothing, when the chunk's best does not beat the list's
    last entry. One warp; the caller synchronises before the list is read again."""
    if c == 0 or not less_device(ck[coff], ci[coff], lk[loff + qsize - 1], raw_id(li[loff + qsize - 1])):
        return False
    t2 = lane
    while t2 < qsize:
        ek = lk[loff + t2]
        ei = li[loff + t2]
        pos = t2 + count_less_chunk(ck, ci, coff, c, ek, raw_id(ei))
        if pos < qsize:
            lk[noff + pos] = ek
            li[noff + pos] = ei
        t2 += WARP
    if lane < c:
        key = ck[coff + lane]
        vid = ci[coff + lane]
        pos = lane + count_not_above_list(lk, li, loff, qsize, key, vid)
        if pos < qsize:
            lk[noff + pos] = key
            li[noff + pos] = vid
    return True


@device_function
def _next_unexpanded(li, loff, qsize, lane, start):
    """Position of the first unexpanded entry at or after ``start`` (-1: none), in every lane."""
    b = start
    while b < qsize:
        t2 = b + lane
        e = li[loff + t2] if t2 < qsize else int32(-1)
        vote = cuda.ballot_sync(FULL_MASK, e >= 0 and e != ID_NONE)
        if vote != 0:
            return b + cuda.ffs(vote) - 1
        b += WARP
    return int32(-1)


@device_function
def _beyond_slack(lk, li, loff, pos, kb, tau, nn1):
    """Whether list entry ``pos`` lies beyond GGNN's bound on the list's kb-th and first entries
    (:func:`knngraph.primitives.lists.slack_bound`); never while the list holds fewer than kb entries.
    tau and nn1 come as float64 arguments holding float32 values."""
    if li[loff + kb - 1] == ID_NONE:
        return False
    return lk[loff + pos] > _slack_bound(lk[loff + kb - 1], lk[loff], float32(tau), float32(nn1))


@device_function
def _reset_visited(ht, voff, hsize, li, loff, qsize, hmask, lane):
    """Empty the visited table and put the list's ids back (one warp; see the module docs)."""
    cuda.syncwarp(FULL_MASK)
    t2 = lane
    while t2 < hsize:
        ht[voff + t2] = EMPTY
        t2 += WARP
    cuda.syncwarp(FULL_MASK)
    t2 = lane
    while t2 < qsize:
        e = li[loff + t2]
        if e != ID_NONE:
            claim(ht, voff, hmask, raw_id(e))
        t2 += WARP
    cuda.syncwarp(FULL_MASK)


@device_function
def _write_results(lk, li, loff, qsize, k, j, report, out_k, out_i, lane):
    t = lane
    while t < k:
        e = li[loff + t] if t < qsize else int32(ID_NONE)
        if e != ID_NONE:
            out_k[j, t] = report_distance(report, lk[loff + t])
            out_i[j, t] = raw_id(e)
        else:
            out_k[j, t] = INF
            out_i[j, t] = -1
        t += WARP


@device_function
def _write_allowed(lk, li, loff, qsize, k, j, report, out_k, out_i, lane, allowed):
    """As :func:`_write_results` with only the list entries whose ids the bitset ``allowed`` holds: the
    first k of them, nearest first (each chunk of 32 entries compacted by a ballot and the count of allowed
    lanes before each), then -1 / inf."""
    got = int32(0)
    b = int32(0)
    while b < qsize and got < k:
        t = b + lane
        e = li[loff + t] if t < qsize else int32(ID_NONE)
        v = raw_id(e)
        ok = e != ID_NONE and _is_allowed(allowed, v)
        vote = cuda.ballot_sync(FULL_MASK, ok)
        if ok:
            pos = got + cuda.popc(vote & cuda.lanemask_lt())
            if pos < k:
                out_k[j, pos] = report_distance(report, lk[loff + t])
                out_i[j, pos] = v
        got += cuda.popc(vote)
        b += WARP
    t = min(got, k) + lane
    while t < k:
        out_k[j, t] = INF
        out_i[j, t] = -1
        t += WARP


@device_function
def _write_no_neighbours(k, j, out_k, out_i, out_nd, out_ne, lane):
    """A query holding NaN or inf has no neighbours: ids -1, distances NaN."""
    t = lane
    while t < k:
        out_k[j, t] = NAN
        out_i[j, t] = -1
        t += WARP
    if lane == 0:
        out_nd[j] = 0
        out_ne[j] = 0


# --------------------------------------------------------------------------------------------------
# the kernels


@functools.lru_cache(maxsize=None)
def beam_kernel(qcap: int, hsize: int, qwords: int, mode: int, kind: int, tsize: int, wpb: int, per_lane: int,
                width: int = 1, slack: bool = False, filtered: bool = False):
    """The search kernel for list capacity ``qcap`` (runtime queue_size <= qcap), a visited table of
    ``hsize`` slots (a power of two), a staged query of ``qwords`` 4-byte words, a distance mode and kind
    (``primitives.distances.DIST_*``; compile-time, so that the distance loop holds only its arithmetic),
    ``tsize`` lanes per distance and ``per_lane`` loads per lane and vector row (the row is at most
    ``tsize * per_lane`` loads long).

    ``width`` 1: every warp of the ``wpb`` searches its own query. ``width == wpb`` > 1: the block
    searches one query at a time, its warps expanding the ``width`` first unexpanded vertices of the
    shared list together (a search width, as CAGRA's multi-parent steps): fewer sequential steps per
    query, for batches too small to fill the GPU with one warp each.

    ``slack``: the kernel also stops a query at GGNN's bound (the arguments ``kb, tau, nn1, max_exp``, see
    the module docs); without it they are not read. ``filtered``: the kernel returns the first k entries of
    the final list whose ids the last argument, ``allowed`` (a uint32 bitset), holds
    (:func:`_write_allowed`); without it ``allowed`` is a placeholder it never reads."""
    if width > 1:
        return _block_kernel(qcap, hsize, qwords, mode, kind, tsize, per_lane, width, slack, filtered)
    LN = 2 * wpb * qcap
    HN = wpb * hsize
    CN = wpb * WARP
    dp4a = mode in (MODE_DP4A_U8, MODE_DP4A_I8)
    QWU = max(qwords, 1) if dp4a else 1   # the query as uint32 words (dp4a modes)
    QWF = max(qwords, 1) if not dp4a else 1   # or as float32 values
    nteams = WARP // tsize
    signed = mode == MODE_DP4A_I8
    sorted_chunk = _sorted_chunk_for(mode, kind, row_units(mode, qwords))
    hmask = hsize - 1
    reset_at = hsize // 2 - WARP

    @cuda.jit
    def kernel(graph, base, queries, norms, entries, k, qsize, report, counter, out_k, out_i, out_nd, out_ne, kb,
               tau, nn1, max_exp, allowed):
        lk = cuda.shared.array(LN, dtype=float32)
        li = cuda.shared.array(LN, dtype=int32)
        ht = cuda.shared.array(HN, dtype=int32)
        qw = cuda.shared.array((wpb, QWU), dtype=uint32)
        qv = cuda.shared.array((wpb, QWF), dtype=float32)
        cand = cuda.shared.array((wpb, WARP), dtype=int32)
        cdist = cuda.shared.array((wpb, WARP), dtype=float32)
        ck = cuda.shared.array(CN, dtype=float32)
        ci = cuda.shared.array(CN, dtype=int32)
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        team = lane // tsize
        member = lane % tsize
        voff = w * hsize
        coff = w * WARP
        nq = queries.shape[0]
        deg = graph.shape[1]
        ne = entries.shape[0]
        while True:
            jj = 0
            if lane == 0:
                jj = cuda.atomic.add(counter, 0, 1)
            j = cuda.shfl_sync(FULL_MASK, jj, 0)
            if j >= nq:
                return
            qn, qinv, bad = _stage_query(queries, j, qw, qv, w, lane, kind, dp4a, signed)
            if bad:
                _write_no_neighbours(k, j, out_k, out_i, out_nd, out_ne, lane)
                cuda.syncwarp(FULL_MASK)
                continue
            cur = 0
            loff = (2 * w) * qcap
            t = lane
            while t < qcap:
                lk[loff + t] = INF
                li[loff + t] = ID_NONE
                t += WARP
            t = lane
            while t < hsize:
                ht[voff + t] = EMPTY
                t += WARP
            filled = 0  # ids in the visited table (same value in every lane)
            nd = 0
            nexp = 0
            cuda.syncwarp(FULL_MASK)
            u = int32(-1)
            step = 0
            while True:
                # ---- the next chunk: entry points (u < 0) or row u, 32 ids from ``step``
                v = int32(-1)
                t = step + lane
                if u < 0:
                    if t < ne:
                        v = entries[t]
                elif t < deg:
                    v = graph[u, t]
                step += WARP
                more = step < (ne if u < 0 else deg)
                if filled > reset_at:
                    _reset_visited(ht, voff, hsize, li, loff, qsize, hmask, lane)
                    filled = qsize
                c = sorted_chunk(v, ht, voff, hmask, base, qw, qv, w, cand, cdist, ck, ci, coff, norms, qn, qinv,
                                 lane, team, member, tsize, nteams, per_lane)
                filled += c
                nd += c
                noff = (2 * w + 1 - cur) * qcap
                if _merge_chunk(lk, li, loff, noff, ck, ci, coff, c, qsize, lane):
                    cur = 1 - cur
                    loff = noff
                cuda.syncwarp(FULL_MASK)
                if not more:
                    # ---- expand the first unexpanded vertex of the list, or stop
                    pos = _next_unexpanded(li, loff, qsize, lane, int32(0))
                    if pos < 0:
                        break
                    if slack and (nexp >= max_exp or _beyond_slack(lk, li, loff, pos, kb, tau, nn1)):
                        break
                    u = li[loff + pos]
                    cuda.syncwarp(FULL_MASK)
                    if lane == 0:
                        li[loff + pos] = -u - 2
                    cuda.syncwarp(FULL_MASK)
                    nexp += 1
                    step = 0
            if filtered:
                _write_allowed(lk, li, loff, qsize, k, j, report, out_k, out_i, lane, allowed)
            else:
                _write_results(lk, li, loff, qsize, k, j, report, out_k, out_i, lane)
            if lane == 0:
                out_nd[j] = nd
                out_ne[j] = nexp
            cuda.syncwarp(FULL_MASK)

    kernel.warps_per_block = wpb
    kernel.width = 1
    return kernel


def _block_kernel(qcap: int, hsize: int, qwords: int, mode: int, kind: int, tsize: int, per_lane: int, width: int,
                  slack: bool, filtered: bool):
    """Block-per-query kernel of :func:`beam_kernel` (``width`` warps). Every step: warp 0 marks the
    ``width`` first unexpanded entries of the list as this step's parents (with ``slack``, only those
    within GGNN's bound and the expansion cap); warp w reads parent w's row 32 ids at a time, claims,
    computes and sorts them into its chunk; then warp 0 merges the chunks into the list one after
    another. The visited table and the list are the block's."""
    LN = 2 * qcap
    CN = width * WARP
    dp4a = mode in (MODE_DP4A_U8, MODE_DP4A_I8)
    QWU = max(qwords, 1) if dp4a else 1
    QWF = max(qwords, 1) if not dp4a else 1
    nteams = WARP // tsize
    signed = mode == MODE_DP4A_I8
    sorted_chunk = _sorted_chunk_for(mode, kind, row_units(mode, qwords))
    hmask = hsize - 1
    reset_at = hsize // 2 - width * WARP

    @cuda.jit
    def kernel(graph, base, queries, norms, entries, k, qsize, report, counter, out_k, out_i, out_nd, out_ne, kb,
               tau, nn1, max_exp, allowed):
        lk = cuda.shared.array(LN, dtype=float32)
        li = cuda.shared.array(LN, dtype=int32)
        ht = cuda.shared.array(hsize, dtype=int32)
        qw = cuda.shared.array((width, QWU), dtype=uint32)
        qv = cuda.shared.array((width, QWF), dtype=float32)
        cand = cuda.shared.array((width, WARP), dtype=int32)
        cdist = cuda.shared.array((width, WARP), dtype=float32)
        ck = cuda.shared.array(CN, dtype=float32)
        ci = cuda.shared.array(CN, dtype=int32)
        counts = cuda.shared.array(width, dtype=int32)
        parents = cuda.shared.array(width, dtype=int32)
        ctl = cuda.shared.array(4, dtype=int32)  # query, list offset, step state
        w = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        team = lane // tsize
        member = lane % tsize
        coff = w * WARP
        nq = queries.shape[0]
        deg = graph.shape[1]
        ne = entries.shape[0]
        while True:
            if cuda.threadIdx.x == 0:
                ctl[0] = cuda.atomic.add(counter, 0, 1)
            cuda.syncthreads()
            j = ctl[0]
            cuda.syncthreads()  # every thread has read ctl[0] before it changes
            if j >= nq:
                return
            qn, qinv, bad = _stage_query(queries, j, qw, qv, w, lane, kind, dp4a, signed)
            if bad:
                if w == 0:
                    _write_no_neighbours(k, j, out_k, out_i, out_nd, out_ne, lane)
                continue
            if w == 0:
                t = lane
                while t < qcap:
                    lk[t] = INF
                    li[t] = ID_NONE
                    t += WARP
                t = lane
                while t < hsize:
                    ht[t] = EMPTY
                    t += WARP
                ctl[1] = 0
            cur = 0  # warp 0's copy of the list offset
            filled = 0
            nd = 0
            nexp = 0
            cuda.syncthreads()
            # entry points: chunk r * width + w of each round
            r0 = 0
            while r0 < ne:
                t = r0 + w * WARP + lane
                v = entries[t] if t < ne else int32(-1)
                counts[w] = sorted_chunk(v, ht, 0, hmask, base, qw, qv, w, cand, cdist, ck, ci, coff, norms, qn,
                                         qinv, lane, team, member, tsize, nteams, per_lane)
                cuda.syncthreads()
                if w == 0:
                    for g in range(width):
                        c = counts[g]
                        filled += c
                        nd += c
                        if _merge_chunk(lk, li, cur * qcap, (1 - cur) * qcap, ck, ci, g * WARP, c, qsize, lane):
                            cur = 1 - cur
                        cuda.syncwarp(FULL_MASK)
                    if filled > reset_at:
                        _reset_visited(ht, 0, hsize, li, cur * qcap, qsize, hmask, lane)
                        filled = qsize
                cuda.syncthreads()
                r0 += width * WARP
            while True:
                # ---- warp 0 picks this step's parents
                if w == 0:
                    loff = cur * qcap
                    pos = int32(0)
                    for g in range(width):
                        pos = _next_unexpanded(li, loff, qsize, lane, pos)
                        if slack and pos >= 0 and (nexp >= max_exp or _beyond_slack(lk, li, loff, pos, kb, tau,
                                                                                    nn1)):
                            pos = int32(-1)  # the entries after it are no nearer
                        u = int32(-1)
                        if pos >= 0:
                            u = li[loff + pos]
                            cuda.syncwarp(FULL_MASK)
                            if lane == 0:
                                li[loff + pos] = -u - 2
                            cuda.syncwarp(FULL_MASK)
                            nexp += 1
                            pos += 1
                        else:
                            pos = qsize
                        if lane == 0:
                            parents[g] = u
                cuda.syncthreads()
                if parents[0] < 0:
                    break
                u = parents[w]
                step = 0
                while step < deg:
                    t = step + lane
                    v = graph[u, t] if u >= 0 and t < deg else int32(-1)
                    counts[w] = sorted_chunk(v, ht, 0, hmask, base, qw, qv, w, cand, cdist, ck, ci, coff, norms,
                                             qn, qinv, lane, team, member, tsize, nteams, per_lane)
                    cuda.syncthreads()
                    if w == 0:
                        for g in range(width):
                            c = counts[g]
                            filled += c
                            nd += c
                            if _merge_chunk(lk, li, cur * qcap, (1 - cur) * qcap, ck, ci, g * WARP, c, qsize, lane):
                                cur = 1 - cur
                            cuda.syncwarp(FULL_MASK)
                        if filled > reset_at:
                            _reset_visited(ht, 0, hsize, li, cur * qcap, qsize, hmask, lane)
                            filled = qsize
                    cuda.syncthreads()
                    step += WARP
            if w == 0:
                if filtered:
                    _write_allowed(lk, li, cur * qcap, qsize, k, j, report, out_k, out_i, lane, allowed)
                else:
                    _write_results(lk, li, cur * qcap, qsize, k, j, report, out_k, out_i, lane)
                if lane == 0:
                    out_nd[j] = nd
                    out_ne[j] = nexp
            cuda.syncthreads()

    kernel.warps_per_block = width
    kernel.width = width
    return kernel
