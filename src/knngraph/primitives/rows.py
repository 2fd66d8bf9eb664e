"""Row helpers of the CPU graph walks (SONG's walk in :mod:`knngraph.song.cpu`, the fast searcher's CPU
twin in :mod:`knngraph.beam.cpu`), compiled into their numba kernels.

* :func:`row_distance`: the distance between a base row and a float32 query row, chosen at compile time
  by the base's dtype: any numeric vectors, float16 vectors read as their uint16 bit patterns (half the
  bytes of a float32 copy, widened by :func:`half_bits_to_float32`), or the Hamming distance of uint32
  1-bit codes (SONG section VII, :func:`popcount32`);
* :func:`query_row` / :func:`load_query`: one query row, widened to float32 once per query, with its
  inverse norm for cosine;
* :func:`prefetch` / :func:`prefetch_row` / :func:`line_shape`: cache-line prefetches of the rows a walk
  is about to read (``prefetcht0``; no effect on results);
* :func:`write_row`: a query's output row, -1 / inf past the results found.

CPU only (numba's CPU target): importing this module does not load numba.cuda.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .distances import DIST_COS, DIST_IP, DIST_L2SQ

__all__ = ["row_distance", "half_bits_to_float32", "popcount32", "query_row", "load_query", "prefetch",
           "prefetch_row", "line_shape", "write_row"]


@numba.njit(cache=True)
def popcount32(x):
    """The number of set bits of the 32-bit value ``x``."""
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) & 0xFFFFFFFF) >> 24


def row_distance(kind, base, i, qrow, inv_b, inv_q):
    """Distance between base[i] and the float32 query row ``qrow`` (inverse norm ``inv_q``, cosine only)
    under ``kind``, or the Hamming distance when ``base`` holds uint32 codes (SONG section VII; ``qrow`` is
    then the query's codes); chosen at compile time by dtype."""
    raise NotImplementedError  # pragma: no cover - only the compiled overload runs


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the uint32 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


#: 2**112: scales a float16's exponent field, shifted into float32's, to float32's bias (and makes
#: float16 subnormals float32 normals)
_HALF_SCALE = np.float32(2.0**112)


@numba.njit(inline="always")
def half_bits_to_float32(h):
    """The value of the float16 with bit pattern ``h`` (uint16; finite values): sign, exponent and
    mantissa moved to their float32 places, then the exponent rebiased by one multiply; integer and
    float arithmetic only, so a loop of it vectorises."""
    h32 = np.uint32(h)
    bits = np.uint32(((h32 & np.uint32(0x8000)) << np.uint32(16)) | ((h32 & np.uint32(0x7FFF)) << np.uint32(13)))
    return _float32_from_bits(bits) * _HALF_SCALE


@overload(row_distance, jit_options={"fastmath": True})
def _row_distance_overload(kind, base, i, qrow, inv_b, inv_q):
    if isinstance(base, types.Array) and base.dtype == types.uint16:  # float16 vectors as their bits
        def half(kind, base, i, qrow, inv_b, inv_q):
            row = base[i]
            acc = np.float32(0.0)
            if kind == DIST_L2SQ:
                for t in range(qrow.shape[0]):
                    diff = half_bits_to_float32(row[t]) - qrow[t]
                    acc += diff * diff
                return acc
            for t in range(qrow.shape[0]):
                acc += half_bits_to_float32(row[t]) * qrow[t]
            if kind == DIST_IP:
                return -acc
            return np.float32(1.0) - acc * inv_b[i] * inv_q
        return half
    if isinstance(base, types.Array) and base.dtype == types.uint32:
        def hamming(kind, base, i, qrow, inv_b, inv_q):
            acc = 0
            for w in range(base.shape[1]):
                acc += popcount32(np.int64(base[i, w] ^ qrow[w]))
            return np.float32(acc)
        return hamming

    def metric(kind, base, i, qrow, inv_b, inv_q):
        row = base[i]
        acc = np.float32(0.0)
        if kind == DIST_L2SQ:
            for t in range(qrow.shape[0]):
                diff = np.float32(row[t]) - qrow[t]
                acc += diff * diff
            return acc
        for t in range(qrow.shape[0]):
            acc += np.float32(row[t]) * qrow[t]
        if kind == DIST_IP:
            return -acc
        return np.float32(1.0) - acc * inv_b[i] * inv_q
    return metric


def query_row(queries):
    """A buffer for one query row: uint32 for 1-bit codes, float32 otherwise."""
    raise NotImplementedError  # pragma: no cover - only the compiled overload runs


@overload(query_row, inline="always")
def _query_row_overload(queries):
    dt = np.uint32 if isinstance(queries, types.Array) and queries.dtype == types.uint32 else np.float32

    def make(queries):
        return np.empty(queries.shape[1], dt)
    return make


@intrinsic
def prefetch(typingctx, arr, i, t):
    """Hint the cache to load the line holding ``arr[i, t]`` (2-D array; LLVM's ``prefetch``, read, high
    locality). Compiles to one ``prefetcht0``; no effect on results."""
    sig = types.void(arr, i, t)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        inds = [context.cast(builder, args[a], signature.args[a], types.intp) for a in (1, 2)]
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data,
                                        shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                        inds=inds, boundscheck=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return sig, codegen


@numba.njit(inline="always")
def prefetch_row(base, v, step, lines):
    """Prefetch the first ``lines`` cache lines of row v (``step`` elements per line)."""
    for s in range(lines):
        prefetch(base, v, s * step)


@numba.njit(inline="always")
def line_shape(base):
    """(elements per 64-byte cache line, lines to prefetch per row: at most 8, the hardware streams the rest)."""
    step = max(1, 64 // base.itemsize)
    return step, min(8, (base.shape[1] + step - 1) // step)


@numba.njit(inline="always")
def write_row(out_k, out_i, j, keys, ids, m, k):
    """Row j of the output: the first k of the m sorted (key, id) pairs, then inf / -1."""
    for t in range(k):
        if t < m:
            out_k[j, t] = keys[t]
            out_i[j, t] = ids[t]
        else:
            out_k[j, t] = np.inf
            out_i[j, t] = -1


@numba.njit(inline="always")
def load_query(queries, j, qrow, kind):
    """Copy query j into ``qrow`` (widened to float32, or uint32 codes); returns its inverse norm for
    cosine (0 for a zero query, as :func:`knngraph.primitives.distances.inverse_norms`), else 0."""
    s2 = np.float32(0.0)
    for t in range(qrow.shape[0]):
        qrow[t] = queries[j, t]
        s2 += np.float32(qrow[t]) * np.float32(qrow[t])
    if kind == DIST_COS and s2 > 0:
        return np.float32(1.0) / np.sqrt(s2)
    return np.float32(0.0)
