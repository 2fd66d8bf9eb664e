"""Dot-product tiles through cuBLAS, on tensor cores wherever the result stays what fp32 would give.

The selection kernels rank by ``key = colterm[j] + alpha * dot(q, x_j)`` and the reported distance is
``key + rowterm[q]`` (then sqrt / 1 + key, per metric). Which GEMM makes ``dot`` depends on the data:

``int8``  uint8 or int8 vectors, sqeuclidean/euclidean/inner_product, d % 4 == 0: an int8 x int8 -> int32
          GEMM (``cublasGemmEx``, ``CUBLAS_COMPUTE_32I``): exact integer dot products on the integer
          tensor cores. uint8 vectors are shifted to int8 (x' = x - 128, a bit flip) and the shift is
          folded into the column and row terms:
          q.x = q'.x' + 128 sum(x') + 128 sum(q') + 128^2 d.
``fp16``  float16 vectors, d % 8 == 0: fp16 x fp16 -> fp32 with fp32 accumulation. The products of
          fp16 values are exact in fp32, so this equals the fp32 GEMM of the upcast data up to summation
          order (and the tensor cores' rounding of their sums, within the same bound as d float32
          additions with twice the unit roundoff). Also float32 vectors that hold integers of at most 2048
          (exact in float16) with keys below 2^24 (the exact search's numeric plan says when): their dot
          products are the same integers as SGEMM's, at tensor-core speed.
          Cosine takes the dot products of the vectors as given (normalised rows rounded to float16
          would be off by 2^-11, fifty times the float32 key's error) and one pass turns each into its
          key, -dot / (||q|| ||x||), with the inverse norms from float64 sums rounded once to float32: a
          key is then off by at most 2 (d + 4) 2^-24, within the exact search's bound for cosine keys
          (:meth:`knngraph.bruteforce._exact.NumericPlan.key_error`). On an H200, 2k x 18k x 384 float16
          (MiniLM sentence embeddings): 0.65 ms for SGEMM of the normalised float32 rows against
          about 0.03 + 0.1 ms for this GEMM and its pass.
``fp32``  everything else (float32 data, cosine of float32 vectors on their normalised rows): SGEMM
          through the same cublasGemmEx call, CUBLAS_COMPUTE_32F (what cupy.matmul computes without
          CUPY_TF32; the one call that a CUDA graph can also capture, :func:`_gemm_ex`).

A one-time self-check per process compares each tensor-core path with fp32 on a small product and
falls back to ``fp32`` if they disagree (for example on a cuBLAS without these kernels).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import warnings

import numpy as np

from .._device import kept_across_streams

__all__ = ["GemmPlan", "plan_gemm", "unit_rows", "rounded_inverse_norms", "squared_norms"]

# cuBLAS / CUDA enums (cublas_api.h, library_types.h)
_OP_N, _OP_T = 0, 1
_R_16F, _R_32F, _R_8I, _R_32I = 2, 0, 3, 10
_COMPUTE_32F, _COMPUTE_32I = 68, 72
_GEMM_DEFAULT = -1
_SHIFT = 128


#: the host scalars (1, 0) that cuBLAS reads as alpha and beta: float32, or int32 for the integer GEMM
_ONE_ZERO = {False: (np.ones(1, np.float32), np.zeros(1, np.float32)),
             True: (np.ones(1, np.int32), np.zeros(1, np.int32))}


def _gemm_ex(q, x, out, a_type, c_type, compute):
    """out[nq, nb] = q[nq, d] . x[nb, d]^T via cublasGemmEx on the current CuPy stream."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    nq, d = q.shape
    nb = x.shape[0]
    handle = cp.cuda.device.get_cublas_handle()
    alpha, beta = _ONE_ZERO[compute == _COMPUTE_32I]
    stream = cp.cuda.get_current_stream().ptr
    try:
        cublas.setStream(handle, stream)
    except NotImplementedError:
        # CuPy refuses cuBLAS calls while the stream captures a CUDA graph (knngraph._cuda_graphs), which
        # cuBLAS itself supports: the same calls, made to the library CuPy loaded
        _captured_gemm_ex(handle, stream, nb, nq, d, alpha, x, q, beta, out, a_type, c_type, compute)
        return
    mode = cublas.getPointerMode(handle)
    cublas.setPointerMode(handle, 0)  # host pointers for alpha/beta
    try:
        # row-major out = q x^T is column-major out^T = x q^T: the "TN" layout tensor cores prefer
        cublas.gemmEx(handle, _OP_T, _OP_N, nb, nq, d, alpha.ctypes.data, x.data.ptr, a_type, d,
                      q.data.ptr, a_type, d, beta.ctypes.data, out.data.ptr, c_type, nb, compute, _GEMM_DEFAULT)
    finally:
        cublas.setPointerMode(handle, mode)


def squared_norms(x, out_type: str):
    """Each row's squared norm of a 2-D CuPy array in one reduction launch: the squares summed in float64
    (in CuPy's order), the sum rounded once to ``out_type`` ("float32" or "float64"). A CUDA graph can
    capture it (CuPy's einsum calls cuBLAS, which CuPy refuses while a stream captures)."""
    return _squared_norms_kernel(out_type)(x, axis=1)


@functools.lru_cache(maxsize=None)
def _squared_norms_kernel(out_type: str):
    import cupy as cp

    return cp.ReductionKernel("T x", f"{out_type} y", "(double)x * (double)x", "a + b", "y = a", "0",
                              f"knngraph_squared_norms_{out_type}", reduce_type="double")


def _captured_gemm_ex(handle, stream, m, n, k, alpha, x, q, beta, out, a_type, c_type, compute):
    """:func:`_gemm_ex`'s cuBLAS calls (stream, host pointer mode, GemmEx) through :func:`_cublas_library`,
    the handle's stream and pointer mode restored after."""
    lib = _cublas_library()
    mode = ctypes.c_int()
    previous = ctypes.c_void_p()
    _check_cublas(lib.cublasGetStream_v2(handle, ctypes.byref(previous)), "cublasGetStream")
    _check_cublas(lib.cublasSetStream_v2(handle, stream), "cublasSetStream")
    _check_cublas(lib.cublasGetPointerMode_v2(handle, ctypes.byref(mode)), "cublasGetPointerMode")
    _check_cublas(lib.cublasSetPointerMode_v2(handle, 0), "cublasSetPointerMode")
    try:
        _check_cublas(lib.cublasGemmEx(handle, _OP_T, _OP_N, m, n, k, alpha.ctypes.data, x.data.ptr, a_type, k,
                                       q.data.ptr, a_type, k, beta.ctypes.data, out.data.ptr, c_type, m, compute,
                                       _GEMM_DEFAULT), "cublasGemmEx")
    finally:
        # the handle as CuPy left it: its later calls set their own stream, but nothing else should run on
        # the capturing one
        lib.cublasSetPointerMode_v2(handle, mode.value)
        lib.cublasSetStream_v2(handle, previous)


def _check_cublas(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"{call} failed with cuBLAS status {status}")


@functools.lru_cache(maxsize=1)
def _cublas_library():
    """The cuBLAS library that CuPy loaded, through ctypes: the one mapped into this process whose major
    version is CuPy's CUDA's (a handle CuPy made is valid only there; another cuBLAS, say a framework's
    for another CUDA, may be loaded too). RuntimeError, before any call, unless exactly one matches."""
    import cupy as cp

    major = cp.cuda.runtime.runtimeGetVersion() // 1000
    paths = set()
    with open("/proc/self/maps") as fh:
        for line in fh:
            name = line.rsplit(None, 1)[-1] if "/" in line else ""
            if os.path.basename(name).startswith(f"libcublas.so.{major}"):
                paths.add(name)
    if len(paths) != 1:
        raise RuntimeError(f"cannot tell which cuBLAS {major} library CuPy uses (mapped: {sorted(paths)})")
    lib = ctypes.CDLL(paths.pop())
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.cublasSetStream_v2.argtypes = (vp, vp)
    lib.cublasGetStream_v2.argtypes = (vp, ctypes.POINTER(vp))
    lib.cublasGetPointerMode_v2.argtypes = (vp, ctypes.POINTER(i))
    lib.cublasSetPointerMode_v2.argtypes = (vp, i)
    lib.cublasGemmEx.argtypes = (vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i)
    return lib


def unit_rows(x, *, inverse: bool = False):
    """float32 CuPy rows divided by their norms (zero rows stay zero) in one launch: a warp per row sums the
    squares in a fixed order (lanes, then a shuffle tree) and divides by the IEEE square root, so a row
    gets the same bits in any array (the base's GEMM operand and a query's transformed row must agree:
    identical vectors are then at cosine distance exactly 0). float16 rows are read as they are (each
    value converted exactly, the same arithmetic after), other dtypes through a float32 copy. It replaced
    an einsum (a fifth of a millisecond of host work per call) and a masked assignment whose boolean index
    synchronised with the device. ``inverse``: also each row's :func:`rounded_inverse_norms`, from the same
    launch (returns both)."""
    out, inv = _rows(x, unit=True, inverse=inverse)
    return (out, inv) if inverse else out


def rounded_inverse_norms(x):
    """float32 1 / ||row|| of a CuPy array (0 for a zero row) in one launch (float16 rows read as they are,
    other dtypes through a float32 copy): float64 sums of squares, one rounding to float32 at the end, so
    each is within one float32 rounding of the true value, what the exact search's key bound assumes
    (:func:`knngraph.primitives.distances.inverse_norms`, which the approximate searches use, sums in
    float32)."""
    return _rows(x, unit=False, inverse=True)[1]


def _rows(x, *, unit: bool, inverse: bool):
    """(unit rows or None, inverse norms or None) of CuPy rows from one launch of the rows kernel: float16
    rows read as they are, other dtypes through a float32 copy."""
    import cupy as cp

    x = cp.ascontiguousarray(x) if x.dtype == cp.float16 else cp.ascontiguousarray(x, dtype=cp.float32)
    m, d = x.shape
    out = cp.empty((m, d), cp.float32) if unit else None
    inv = cp.empty(m, cp.float32) if inverse else None
    if m:
        warps = 4
        # an output not asked for is never written: the other one stands in for its pointer
        _rows_kernel(x.dtype.char)(((m + warps - 1) // warps,), (32 * warps,),
                                   (x, out if unit else inv, inv if inverse else out, np.int64(m), np.int64(d),
                                    np.int32(unit), np.int32(inverse)))
    return out, inv


_ROWS_SOURCE = r"""
__device__ __forceinline__ float knngraph_value(const float* p) { return *p; }
__device__ __forceinline__ float knngraph_value(const unsigned short* p) {
    float f;
    unsigned short h = *p;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));  /* exact */
    return f;
}

extern "C" __global__ void knngraph_rows_NAME(const TYPE* __restrict__ x, float* __restrict__ y,
                                              float* __restrict__ inv, long long m, long long d,
                                              int want_unit, int want_inverse) {
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= m) return;  /* whole warps leave together */
    const TYPE* xr = x + row * d;
    if (want_unit) {
        float* yr = y + row * d;
        float s = 0.0f;
        for (long long j = lane; j < d; j += 32) { float v = knngraph_value(xr + j); s += v * v; }
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        float r = sqrtf(s);
        for (long long j = lane; j < d; j += 32) { float v = knngraph_value(xr + j); yr[j] = s > 0.0f ? v / r : v; }
    }
    if (want_inverse) {
        double s = 0.0;
        for (long long j = lane; j < d; j += 32) { double v = knngraph_value(xr + j); s += v * v; }
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) inv[row] = s > 0.0 ? (float)(1.0 / sqrt(s)) : 0.0f;
    }
}
"""


@functools.lru_cache(maxsize=None)
def _rows_kernel(char: str):
    """The unit-rows / inverse-norms kernel for float32 ('f') or float16 ('e') rows."""
    import cupy as cp

    name, ctype = {"f": ("f32", "float"), "e": ("f16", "unsigned short")}[char]
    source = _ROWS_SOURCE.replace("NAME", name).replace("TYPE", ctype)
    return cp.RawKernel(source, f"knngraph_rows_{name}")


_COSINE_KEYS_SOURCE = r"""
extern "C" __global__ void knngraph_cosine_keys(float* __restrict__ dots, const float* __restrict__ inv_q,
                                                const float* __restrict__ inv_x, long long cols, int by4) {
    long long row = blockIdx.y;
    float s = -inv_q[row];
    float* r = dots + row * cols;
    long long step = (long long)gridDim.x * blockDim.x;
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (by4) {  /* rows and inverse norms 16-byte aligned: four values per load and store */
        float4* r4 = reinterpret_cast<float4*>(r);
        const float4* x4 = reinterpret_cast<const float4*>(inv_x);
        for (long long j = first; j < cols / 4; j += step) {
            float4 v = r4[j];
            float4 w = x4[j];
            v.x = (v.x * s) * w.x;
            v.y = (v.y * s) * w.y;
            v.z = (v.z * s) * w.z;
            v.w = (v.w * s) * w.w;
            r4[j] = v;
        }
    } else {
        for (long long j = first; j < cols; j += step)
            r[j] = (r[j] * s) * inv_x[j];
    }
}
"""


@functools.lru_cache(maxsize=None)
def _cosine_keys_kernel():
    import cupy as cp

    return cp.RawKernel(_COSINE_KEYS_SOURCE, "knngraph_cosine_keys")


class GemmPlan:
    """How to turn vectors into GEMM operands, column/row terms and dot-product tiles."""

    def __init__(self, mode: str, metric: str, source_dtype):
        self.mode = mode
        self.metric = metric
        self.shift = mode == "int8" and np.dtype(source_dtype) == np.uint8
        self.alpha = -2.0 if metric in ("sqeuclidean", "euclidean") else -1.0
        #: cosine on the fp16 tensor cores: tiles of raw dot products become keys in one pass (:meth:`dots`)
        self.scaled = mode == "fp16" and metric == "cosine"

    # operands ---------------------------------------------------------------------------------------
    def operand(self, block):
        """GEMM operand for a block of vectors (CuPy array)."""
        import cupy as cp

        if self.mode == "int8":
            if self.shift:
                return cp.ascontiguousarray((block ^ np.uint8(0x80)).view(cp.int8))
            return cp.ascontiguousarray(block)
        if self.mode == "fp16":
            # float32 blocks reach this path only when they hold integers of at most 2048 (exact in float16)
            return cp.ascontiguousarray(block.astype(cp.float16, copy=False))
        x = block.astype(cp.float32, copy=False)
        if self.metric == "cosine":
            return unit_rows(x)
        return cp.ascontiguousarray(x)

    def _terms(self, block, op):
        """(norm^2, sum of shifted components) in float32 from the original block (the norms:
        :func:`squared_norms`)."""
        import cupy as cp

        norm2 = squared_norms(block, "float32")
        ssum = op.astype(cp.float32).sum(axis=1) if self.shift else None
        return norm2, ssum

    def column_term(self, block, op):
        """colterm[j] of key = colterm[j] + alpha * dot; with :attr:`scaled`, each vector's inverse norm
        (what :meth:`dots` multiplies by; :meth:`selection_terms` gives the selection's terms)."""
        import cupy as cp

        if self.scaled:
            return rounded_inverse_norms(block)
        if self.metric in ("inner_product", "cosine"):
            if self.shift:
                return (-float(_SHIFT)) * op.astype(cp.float32).sum(axis=1)
            return cp.zeros(block.shape[0], cp.float32)
        norm2, ssum = self._terms(block, op)
        if self.shift:
            return norm2 - 2.0 * _SHIFT * ssum
        return norm2

    def row_term(self, block, op):
        """rowterm[i]: what each query row adds to its keys to give the distance."""
        import cupy as cp

        d = block.shape[1]
        if self.metric == "cosine":
            return _constant(cp.cuda.Device().id, 1.0, block.shape[0])
        if self.metric == "inner_product":
            if self.shift:
                return (-float(_SHIFT)) * op.astype(cp.float32).sum(axis=1) - float(_SHIFT * _SHIFT * d)
            return cp.zeros(block.shape[0], cp.float32)
        norm2, ssum = self._terms(block, op)
        if self.shift:
            return norm2 - 2.0 * _SHIFT * ssum - 2.0 * _SHIFT * _SHIFT * d
        return norm2

    def query_scale(self, block):
        """With :attr:`scaled`: (the queries' unit rows, the exact finish's transformed queries; their inverse
        norms, what :meth:`dots` multiplies by) from one launch, else (None, None)."""
        return unit_rows(block, inverse=True) if self.scaled else (None, None)

    def rescore_rows(self, block, op):
        """The rows the exact distances of candidates are read from, transformed as the queries are
        (:meth:`knngraph.bruteforce._exact.NumericPlan.transform`: the same operations in order, so identical
        vectors are at distance exactly 0), or None where only the base as given serves (integer
        operands): the float operand itself, or for :attr:`scaled` the normalised float32 rows."""
        if self.scaled:
            return unit_rows(block)
        return op if self.mode in ("fp32", "fp16") else None

    # tiles ------------------------------------------------------------------------------------------
    def out_dtype(self):
        return np.int32 if self.mode == "int8" else np.float32

    def dots(self, q_op, x_op, out, q_scale=None, x_scale=None):
        """out = q_op . x_op^T (on the current stream); with :attr:`scaled`, the keys
        -(out[i, j] q_scale[i]) x_scale[j] instead (the inverse norms of :meth:`query_scale` and
        :meth:`column_term`)."""
        if self.mode == "int8":
            _gemm_ex(q_op, x_op, out, _R_8I, _R_32I, _COMPUTE_32I)
        elif self.mode == "fp16":
            _gemm_ex(q_op, x_op, out, _R_16F, _R_32F, _COMPUTE_32F)
        else:
            # float32 arithmetic (CUBLAS_COMPUTE_32F, as cupy.matmul without CUPY_TF32), through the one call
            # that can also be captured in a CUDA graph
            _gemm_ex(q_op, x_op, out, _R_32F, _R_32F, _COMPUTE_32F)
        if self.scaled:
            rows, cols = out.shape
            if rows and cols:
                # float4 accesses where every row and the inverse norms start on 16 bytes (a base tile's
                # slice of them may not): the scalar pass reached about a fifth of the memory bandwidth
                by4 = cols % 4 == 0 and out.data.ptr % 16 == 0 and x_scale.data.ptr % 16 == 0
                threads = 256
                per_row = cols // 4 if by4 else cols
                grid_x = min((per_row + threads - 1) // threads, 64)
                _cosine_keys_kernel()((grid_x, rows), (threads,),
                                      (out, q_scale, x_scale, np.int64(cols), np.int32(by4)))
        return out

    def selection_terms(self, colterm):
        """(column terms, alpha) the selection ranks a tile's values by: ``colterm`` and :attr:`alpha`, or
        with :attr:`scaled` (the tile holds keys already) zeros and 1."""
        import cupy as cp

        if not self.scaled:
            return colterm, np.float32(self.alpha)
        m = colterm.shape[0]
        return _constant(cp.cuda.Device().id, 0.0, m), np.float32(1.0)


_CONSTANTS: dict = {}
_CONSTANTS_LOCK = threading.Lock()
_OUTGROWN: list = []  # replaced constants, never freed


def _constant(device_id: int, value: float, m: int):
    """``m`` float32 copies of ``value`` on GPU ``device_id``, read-only, shared by every call and thread
    (the selection's zero column terms, cosine's unit row terms; making them was a fill launch per call):
    a slice of one array per device and value, made again longer when a longer one is asked for
    (complete before it is handed out, so any stream may read it; the shorter one is kept, never freed,
    for the graphs that read it)."""
    import cupy as cp

    key = (device_id, value)
    held = _CONSTANTS.get(key)
    if held is None or held.shape[0] < m:
        with _CONSTANTS_LOCK:
            held = _CONSTANTS.get(key)
            if held is None or held.shape[0] < m:
                with cp.cuda.Device(device_id), kept_across_streams():
                    held = cp.full(max(m, 1 << 16, 2 * (0 if held is None else held.shape[0])), value, cp.float32)
                if key in _CONSTANTS:
                    # CUDA graphs captured earlier (knngraph._cuda_graphs) may read the shorter array
                    _OUTGROWN.append(_CONSTANTS[key])
                _CONSTANTS[key] = held
    return held[:m]


def plan_gemm(dtype_a, dtype_b, metric: str, d: int, allow_tensor_cores: bool = True) -> GemmPlan:
    """The GEMM plan for base dtype ``dtype_a`` and query dtype ``dtype_b`` (they must agree to use a
    tensor-core path)."""
    a, b = np.dtype(dtype_a), np.dtype(dtype_b)
    mode = "fp32"
    if allow_tensor_cores and a == b:
        if a in (np.dtype(np.uint8), np.dtype(np.int8)) and metric != "cosine" and d % 4 == 0:
            mode = "int8"
        elif a == np.dtype(np.float16) and d % 8 == 0:
            mode = "fp16"
    if mode != "fp32" and not _self_check(mode):
        mode = "fp32"
    return GemmPlan(mode, metric, a)


@functools.lru_cache(maxsize=None)
def _self_check(mode: str) -> bool:
    """Compare a tensor-core GEMM with the fp32 product once per process."""
    import cupy as cp

    rng = np.random.default_rng(7)
    try:
        if mode == "int8":
            q = rng.integers(-128, 128, (37, 64)).astype(np.int8)
            x = rng.integers(-128, 128, (53, 64)).astype(np.int8)
            out = cp.empty((37, 53), cp.int32)
            _gemm_ex(cp.asarray(q), cp.asarray(x), out, _R_8I, _R_32I, _COMPUTE_32I)
            ok = np.array_equal(out.get(), q.astype(np.int64) @ x.astype(np.int64).T)
        else:
            q = rng.standard_normal((37, 64)).astype(np.float16)
            x = rng.standard_normal((53, 64)).astype(np.float16)
            out = cp.empty((37, 53), cp.float32)
            _gemm_ex(cp.asarray(q), cp.asarray(x), out, _R_16F, _R_32F, _COMPUTE_32F)
            ref = q.astype(np.float64) @ x.astype(np.float64).T
            ok = np.allclose(out.get(), ref, rtol=1e-5, atol=1e-4)
    except Exception as exc:  # a cuBLAS without the kernel, a binding that differs
        warnings.warn(f"knngraph: {mode} GEMM unavailable ({exc}); using fp32", RuntimeWarning, stacklevel=2)
        return False
    if not ok:
        warnings.warn(f"knngraph: {mode} GEMM self-check failed; using fp32", RuntimeWarning, stacklevel=2)
    return bool(ok)
