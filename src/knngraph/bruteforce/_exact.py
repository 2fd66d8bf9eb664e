"""What makes the exact k-NN exact, written once for the CPU and the GPU (NumPy or CuPy arrays).

Both paths rank a whole base by GEMM keys: ||x||^2 - 2<q, x> (L2), -<q, x> (inner product), -<q^, x^>
(cosine, on unit rows). In float32 a key is off by up to ``gamma * (||q||^2 + 2 max ||x||^2)`` (L2), with
``gamma`` about d * 2^-24 (a sum of d products, rounded): far from the origin (GPS-like coordinates,
data with a large common offset) that error exceeds the gaps between neighbours and the ranking is
garbage. Three measures, decided once per base by :func:`plan_numerics`:

1. **Centering** (L2 on float data whose mean is larger than its spread): the vectors are taken relative to
   the base mean mu, which leaves L2 distances unchanged and shrinks the keys (and their error) to the
   size of the spread.
2. **Scaling** by a power of two (exact) when magnitudes would overflow or underflow float32 in the keys;
   reported distances are scaled back, and a distance that does not fit float32 is an error, never inf.
3. **Candidates and a proof.** Each query selects ``c >= k`` candidates by key; their distances are
   recomputed exactly (float64 sums of direct differences, :mod:`knngraph.primitives.rescore`) and the
   best k kept. Every point that was not a candidate has a key at least the c-th candidate's, so its true
   distance is at least that key minus the error bound: if the k-th exact distance is below that bound,
   no missed point can beat it and the answer is exact (ties aside). Queries where it is not are marked
   unsure and searched again with more candidates (``_index.py``), up to all points.

Integer vectors whose sums stay below 2^24 in float32 have exact keys (``gamma = 0``): no margin, no
recomputation, nothing changes on their (fastest) path. So do float vectors that hold small integers
(SIFT-like descriptors stored as float32 or float16): every product, partial sum and key of theirs is an
integer below 2^24, which float32 (and the fp16 GEMM's fp32 accumulation) represents exactly, in any
summation order. The plan notes such a base (``integer_top``) and :meth:`NumericPlan.for_queries` takes
the exact-key path when the queries hold small integers too; on an H200 that made the float32 search of
sift-photos 450k x 10k queries as fast as its uint8 search (``benchmarks/studies/profile_exact.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from .._device import kept_across_streams
from .._validate import check_finite
from ..metrics import normalize_rows
from ..primitives.constants import ID_NONE, pow2_at_least
from ..primitives.distances import DIST_COS, DIST_IP, DIST_L2SQ
from ..primitives.rescore import rescore
from ._gemm import squared_norms, unit_rows

__all__ = ["NumericPlan", "plan_numerics", "finish_candidates"]

_U = 2.0 ** -24                 # unit roundoff of float32
_EXACT_INT = 2.0 ** 24          # integers below this are exact in float32
_MAX_EXACT_INT = 2048.0         # integers up to this are exact in float16 and TF32 operands too
_F32_MAX = float(np.finfo(np.float32).max)
# keep transformed squared norms within [2^-60, 2^60]: sums of d products then stay far inside float32
_NORM2_LOW, _NORM2_HIGH = 2.0 ** -60, 2.0 ** 60
_CHUNK_ROWS = 1 << 18


@dataclasses.dataclass(frozen=True)
class NumericPlan:
    """How the vectors are transformed before the GEMM and how far a key may be off.

    ``shift``: float32 vector subtracted from every vector (L2 only) or None; ``scale``: power of two
    the vectors are multiplied by; ``gamma``: relative error bound of a key (0: keys are exact);
    ``max_norm2``: largest squared norm of a transformed base vector."""

    metric: str
    shift: object
    scale: float
    gamma: float
    max_norm2: float
    #: float base only: the largest |value| when every value is an integer of at most _MAX_EXACT_INT and
    #: nothing is transformed (see :meth:`for_queries`), else None
    integer_top: float | None = None
    #: ``shift`` on each GPU that used it, by device id (made once, complete before use: a search captured
    #: as a CUDA graph must not upload it from the host)
    device_shift: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def _shift_on(self, xp):
        """``shift`` as an array of ``xp`` (on the GPU: this device's copy, made on first use)."""
        if xp is np:
            return self.shift
        dev = xp.cuda.Device().id
        held = self.device_shift.get(dev)
        if held is None:
            with kept_across_streams():
                held = self.device_shift[dev] = xp.asarray(self.shift)
        return held

    @property
    def kind(self) -> int:
        return {"inner_product": DIST_IP, "cosine": DIST_COS}.get(self.metric, DIST_L2SQ)

    @property
    def identity(self) -> bool:
        """No transformation: the GEMM runs on the vectors as given."""
        return self.shift is None and self.scale == 1.0

    def prepare(self, block, xp):
        """The block shifted and scaled (float32) for the GEMM, or as given when nothing is to be done
        (cosine rows are normalised by the GEMM plan itself)."""
        if self.identity:
            return block
        x = block.astype(xp.float32)
        if self.shift is not None:
            x = x - self._shift_on(xp)
        if self.scale != 1.0:
            x = x * xp.float32(self.scale)
        return xp.ascontiguousarray(x)

    def row_term(self, tq, xp):
        """What each query adds to its keys to give its transformed distance: ||T(q)||^2 (L2), 1 (cosine),
        0 (inner product)."""
        if self.metric in ("sqeuclidean", "euclidean"):
            return (tq.astype(xp.float64) ** 2).sum(axis=1)
        return xp.full(tq.shape[0], 1.0 if self.metric == "cosine" else 0.0)

    def transform(self, block, xp):
        """float32 T(v) of a block of vectors: shifted, scaled and, for cosine, normalised (the block
        itself when nothing is to be done)."""
        if self.metric == "cosine" and xp is not np and self.identity:
            return unit_rows(block)  # float16 rows read as they are: no float32 copy first
        x = block.astype(xp.float32, copy=False)
        if self.shift is not None:
            x = x - self._shift_on(xp)
        if self.scale != 1.0:
            x = x * xp.float32(self.scale)
        if self.metric == "cosine":
            x = normalize_rows(x) if xp is np else unit_rows(x)
        return xp.ascontiguousarray(x)

    def for_queries(self, queries) -> NumericPlan:
        """This plan for ``queries`` (NumPy, memory map or CuPy): with exact keys (``gamma`` 0: k candidates,
        no recomputation) when the base holds small integers (``integer_top``) and so do the queries,
        with every key below 2^24 in magnitude: |key| <= d t_x max(t_x, 2 t_q) for L2 (||x||^2 and
        2 q.x), d t_x t_q for inner product."""
        if self.integer_top is None or self.gamma == 0.0 or queries.shape[0] == 0:
            return self
        top_q = _integer_top(queries)
        if top_q is None:
            return self
        d = queries.shape[1]
        tx = self.integer_top
        bound = d * tx * (max(tx, 2.0 * top_q) if self.metric in ("sqeuclidean", "euclidean") else top_q)
        return dataclasses.replace(self, gamma=0.0) if bound < _EXACT_INT else self

    def candidates(self, k: int, n_available: int) -> int:
        """How many candidates each query selects: k when keys are exact, else a margin (rounded up to
        a power of two, at least 32). The GPU's warp filter holds 64 slots for any k up to 64, but it
        selects 32 of 18k columns in 0.56 ms against 0.68 ms for 64 (2k queries, H200), and the exact
        distances of fewer candidates cost less; k = 10 keeps 22 candidates of margin."""
        if self.gamma == 0.0:
            return min(k, n_available)
        want = k + max(8, k // 8)
        rounded = pow2_at_least(want, 32)
        return min(n_available, rounded if rounded <= 1024 else want)

    def key_error(self, qn2, xp):
        """Bound on |computed key - exact key| for queries with transformed squared norms ``qn2`` (cosine:
        one number for every query of unit norm; ``qn2`` is not read)."""
        if self.metric == "cosine":
            return 2.0 * self.gamma
        if self.gamma == 0.0:
            return xp.zeros_like(qn2)
        if self.metric in ("sqeuclidean", "euclidean"):
            return self.gamma * (qn2 + 2.0 * self.max_norm2)
        return self.gamma * xp.sqrt(qn2 * self.max_norm2)

    def to_reported(self, dist, ids, xp, flags=None):
        """(reported distances, ids): exact distances (squared L2, -<q, x>, or 1 - cos) -> the metric's
        reported distances (float32; ValueError when they do not fit float32), and ``ids`` as they are.
        On the GPU one launch that also writes the ids (often a view of the first k columns) as a new
        C-ordered array and, with a search's ``flags`` (:func:`new_flags`, needed there unless cosine),
        sets ``flags[FLAG_RANGE]`` instead of raising (no host sync)."""
        if xp is not np:
            if self.metric == "cosine":
                return _cosine_reported_kernel()(dist, ids)  # the clip to [0, 2] and the cast
            return _reported_kernel(self.metric)(dist, ids, flags)
        if self.metric == "cosine":
            return xp.clip(dist, 0, 2).astype(xp.float32), ids
        d = dist.astype(xp.float64)
        if self.metric == "euclidean":
            d = xp.sqrt(xp.maximum(d, 0))
        elif self.metric == "sqeuclidean":
            d = xp.maximum(d, 0)
        finite = xp.isfinite(d)
        if bool(xp.any(finite & (xp.abs(d) > _F32_MAX))):
            raise ValueError(_range_message(self.metric))
        return d.astype(xp.float32), ids


def plan_numerics(base, metric: str, xp) -> NumericPlan:
    """The :class:`NumericPlan` of ``base`` (NumPy, memory map or CuPy; read in row chunks): none for
    integer data; for float data one pass with one host transfer (again with float64 norms when a float32
    norm overflows) and, for L2 data that gets centred, one more over the centred rows."""
    n, d = base.shape
    dt = np.dtype(base.dtype)
    if dt.kind in "iu":
        top = float(max(abs(np.iinfo(dt).min), np.iinfo(dt).max))
        sums_exact = (2.0 if metric in ("sqeuclidean", "euclidean") else 1.0) * d * top * top < _EXACT_INT
        gamma = 0.0 if (sums_exact and metric != "cosine") else _gamma(d)
        return NumericPlan(metric, None, 1.0, gamma, 1.0 if metric == "cosine" else d * top * top)
    l2 = metric in ("sqeuclidean", "euclidean")
    for wide in (False, True):  # the pass again with float64 norms only when a float32 norm overflowed
        total, sq_total, max_norm2, integral, top = _base_totals(base, metric, xp, wide=wide)
        if math.isfinite(max_norm2):
            break
    shift = None
    if l2:
        mu = total / n
        spread2 = max(sq_total / n - float(mu @ mu), 0.0)
        if float(mu @ mu) > spread2:
            shift = mu.astype(np.float32)
            max_norm2 = _centred_max_norm2(base, shift, xp)
    max_norm2 *= 1.0 + 1e-4 * d  # float32 norms are off by at most d ulps
    scale = 1.0
    if max_norm2 > _NORM2_HIGH or 0 < max_norm2 < _NORM2_LOW:
        scale = 2.0 ** (-round(math.log2(max_norm2) / 2))
    if metric == "cosine":
        max_norm2 = 1.0
    else:
        max_norm2 *= scale * scale
    exact_ints = integral and shift is None and scale == 1.0 and top <= _MAX_EXACT_INT
    return NumericPlan(metric, shift, scale, _gamma(d), max_norm2, top if exact_ints else None)


def _base_totals(base, metric: str, xp, *, wide: bool):
    """One pass over ``base`` in row chunks: (column sums, sum of squared norms; both L2 only, else None
    and 0), max squared norm, whether every value is an integer and the largest |value| (both not for
    cosine: False and 0). Row norms in float32 (einsum: no n x d temporary) or, ``wide``, float64; totals
    in float64, kept on the device until one transfer at the end (each host sync of a small base's plan
    cost as much as its kernels)."""
    n, d = base.shape
    l2 = metric in ("sqeuclidean", "euclidean")
    total = xp.zeros(d, np.float64) if l2 else None
    sq_total, max_norm2, top = (xp.zeros((), np.float64) for _ in range(3))
    integral = xp.ones((), bool)
    for s in range(0, n, _CHUNK_ROWS):
        blk = xp.asarray(base[s:s + _CHUNK_ROWS]).astype(xp.float32, copy=False)
        nrm2 = _row_norms2(blk, xp, wide)
        max_norm2 = xp.maximum(max_norm2, nrm2.max())
        if l2:
            total += _column_sums(blk, xp)
            sq_total += nrm2.sum(dtype=np.float64)
        if metric != "cosine":
            blk_integral, blk_top = _integers(blk, xp)
            integral &= blk_integral
            top = xp.maximum(top, blk_top)
    parts = [xp.stack([xp.asarray(v, dtype=np.float64) for v in (sq_total, max_norm2, integral, top)])]
    values = _host(xp.concatenate(parts + ([] if total is None else [total])))
    sq, mx, whole, tp = (float(v) for v in values[:4])
    return (None if total is None else values[4:]), sq, mx, bool(whole) and metric != "cosine", tp


def _centred_max_norm2(base, shift: np.ndarray, xp) -> float:
    """max ||x - shift||^2 over the rows of ``base`` (in row chunks, one host transfer; again with float64
    norms only when a float32 norm overflowed)."""
    shift_x = xp.asarray(shift)
    for wide in (False, True):
        top = xp.zeros((), np.float64)
        for s in range(0, base.shape[0], _CHUNK_ROWS):
            blk = xp.asarray(base[s:s + _CHUNK_ROWS]).astype(xp.float32) - shift_x
            top = xp.maximum(top, _row_norms2(blk, xp, wide).max())
        top = float(top)
        if math.isfinite(top):
            break
    return top


def _integer_top(a) -> float | None:
    """The largest |value| of ``a`` (NumPy, memory map or CuPy; in row chunks) when every value is an
    integer of at most _MAX_EXACT_INT, else None."""
    xp = __import__("cupy") if hasattr(a, "__cuda_array_interface__") else np
    top = 0.0
    for s in range(0, a.shape[0], _CHUNK_ROWS):
        integral, blk_top = _integers(xp.asarray(a[s:s + _CHUNK_ROWS]).astype(xp.float32, copy=False), xp)
        top = max(top, float(blk_top))
        if not bool(integral) or top > _MAX_EXACT_INT:
            return None
    return top


def _integers(blk, xp):
    """(whether every value of the float32 block is an integer, its largest |value|), as 0-d arrays (no host
    sync)."""
    return xp.all(blk == xp.rint(blk)), xp.abs(blk).max()


def _column_sums(blk, xp):
    """float64 column sums. On the GPU in two stages (groups of 256 rows, then the groups): a one-stage
    reduction down a C-ordered array's long axis gets one thread block per column, which left the plan
    taking a third of a 1M x 128 search's time."""
    if xp is np:
        return blk.sum(axis=0, dtype=np.float64)
    m = blk.shape[0] // 256 * 256
    total = blk[:m].reshape(-1, 256, blk.shape[1]).sum(axis=1, dtype=np.float64).sum(axis=0)
    if m < blk.shape[0]:
        total += blk[m:].sum(axis=0, dtype=np.float64)
    return total


def _row_norms2(blk, xp, wide: bool):
    """Squared row norms without a host sync: float32 (einsum, no n x d temporary) or, ``wide``, float64
    (for rows whose float32 norms overflow)."""
    if wide:
        b64 = blk.astype(np.float64)
        return (b64 * b64).sum(axis=1)
    return xp.einsum("ij,ij->i", blk, blk)


def _gamma(d: int) -> float:
    """Relative error bound of a key: d products summed in float32 plus the rounding of the transformed
    vectors and of the norms, with a factor 2 of slack."""
    return 2.0 * (d + 4) * _U


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def finish_candidates(xp, keys, ids, row_term, queries, tq, rows, plan: NumericPlan, k: int, *,
                      rows_transformed: bool, flags=None):
    """Exact top-k from each query's candidates, and whether that is proven.

    ``keys`` / ``ids``: (m, c) candidates sorted by key, ``ID_NONE`` for none; ``row_term``: what each
    query adds to its keys to give its transformed distance (the GEMM plan's; :meth:`NumericPlan.row_term`
    on the CPU); ``queries``: the block's queries as given, ``tq`` transformed (float32). ``rows``: where
    candidate rows are read: the transformed base (``rows_transformed``, e.g. the resident GEMM operand;
    distances are then taken between transformed vectors and scaled back) or the base as given
    (distances of the original vectors, exact in float64). Returns (reported distances float32 (m, k),
    ids int32 (m, k), unsure bool (m,)).

    ``flags``: on the GPU, the search's check flags (:func:`new_flags`, required there): the checks set
    them instead of raising, and the caller raises with :func:`raise_flagged` after the one transfer of
    its search; nothing here waits for the device. On the CPU the checks raise here."""
    m, c = ids.shape
    gpu = xp is not np
    if gpu and flags is None:
        raise TypeError("finish_candidates on the GPU needs the search's flags (new_flags)")
    # the GPU's kernels read the row terms as they are and widen them to float64 (NumPy widens first)
    row_term = row_term if gpu else np.asarray(row_term, dtype=np.float64)
    # cosine queries are unit rows: their norms are neither needed nor checked
    qn2 = None
    if plan.metric != "cosine":
        # (on the GPU one launch; its order of summation differs from NumPy's, by far less than the
        # factor 2 of slack in the key bound)
        qn2 = (tq.astype(xp.float64) ** 2).sum(axis=1) if not gpu else squared_norms(tq, "float64")
    if not gpu and qn2 is not None and not bool(np.all(np.isfinite(qn2))):
        raise ValueError(_QUERY_NORMS_MESSAGE)  # (on the GPU: the unproven kernel's flag, below)
    s2 = plan.scale * plan.scale
    if plan.gamma == 0.0:
        # exact keys: the distances follow from them (key + row term), no recomputation
        ids = xp.where(ids == ID_NONE, -1, ids).astype(xp.int32) if not gpu else _none_to_minus_one_kernel()(ids)
        dist = keys[:, :k].astype(xp.float64) + row_term[:, None]
        dist = xp.where(ids[:, :k] < 0, np.inf, dist / (1.0 if plan.metric == "cosine" else s2))
        return *plan.to_reported(dist, ids[:, :k], xp, flags), xp.zeros(m, dtype=bool)
    # (rescore takes ID_NONE as no candidate and returns -1 for it; a scale of 1 divides nothing)
    if plan.metric == "cosine":
        # on unit vectors: identical vectors are at exactly 0 (rows transformed here when needed)
        dist, ids = rescore(tq, rows, ids, plan.kind, xp,
                            transform=None if rows_transformed else (lambda r: plan.transform(r, xp)))
        dist_t = dist
    elif rows_transformed:
        dist_t, ids = rescore(tq, rows, ids, plan.kind, xp)
        dist = dist_t / s2 if s2 != 1.0 else dist_t
    else:
        dist, ids = rescore(queries, rows, ids, plan.kind, xp)
        dist_t = dist * s2 if s2 != 1.0 else dist
    unsure = _unproven(xp, keys[:, c - 1], row_term, plan.key_error(qn2, xp), dist_t[:, k - 1], ids[:, c - 1],
                       flags)
    return *plan.to_reported(dist[:, :k], ids[:, :k], xp, flags), unsure


#: slots of a GPU search's check flags (:func:`new_flags`): int32, zero at the start, set to 1 by the
#: kernels that find the condition; the search reads them with its one transfer (each check was a host
#: sync of its own, a tenth of a small search each) and raises with :func:`raise_flagged`
FLAG_QUERIES_NONFINITE, FLAG_QUERY_NORMS, FLAG_RANGE, FLAG_UNSURE = range(4)

_QUERY_NORMS_MESSAGE = ("queries hold values too large for float32 arithmetic relative to the base; scale the "
                        "queries and the base down together")


def _range_message(metric: str) -> str:
    return (f"{metric} distances of this data exceed the float32 range (> {_F32_MAX:.3g}); knngraph reports "
            "float32 distances: scale the vectors down (or use 'euclidean' or 'cosine', whose distances stay "
            "smaller)")


def new_flags(cp):
    """A GPU search's check flags (see :data:`FLAG_UNSURE` and the others), zeroed on the current stream."""
    return cp.zeros(4, cp.int32)


def raise_flagged(flags, queries, metric: str) -> bool:
    """Raise what a search's flags (host values) say, in the order the checks come: queries with NaN or
    inf (naming the row: :func:`knngraph._validate.check_finite`), query norms too large for float32,
    distances beyond float32. Returns whether any answer is unproven."""
    if flags[FLAG_QUERIES_NONFINITE]:
        check_finite(queries, "queries")
        raise ValueError("queries contain NaN or inf; remove or fix non-finite vectors")  # (named above)
    if flags[FLAG_QUERY_NORMS]:
        raise ValueError(_QUERY_NORMS_MESSAGE)
    if flags[FLAG_RANGE]:
        raise ValueError(_range_message(metric))
    return bool(flags[FLAG_UNSURE])


def _unproven(xp, last_key, row_term, err, kth, last_id, flags=None):
    """Per query: whether its k-th exact (transformed) distance ``kth`` is not proven. Every non-candidate's
    key is >= the last candidate's key ``last_key``, so its exact distance is >= ``last_key + row_term -
    err``; the k-th distance must lie below that by the float32 rounding of exact distances (4 ulps). A
    query whose last candidate id ``last_id`` is -1 had every point as a candidate: nothing was missed.
    On the GPU one fused kernel (a dozen array operations, each a launch, before), which also sets the
    search's ``flags``: :data:`FLAG_UNSURE` when a query is unproven, :data:`FLAG_QUERY_NORMS` when a
    query's error bound is not finite (its norm overflows float32 arithmetic)."""
    if xp is np:
        bound = last_key.astype(np.float64) + row_term - err
        slack = 4.0 * _U * np.abs(kth)
        return (last_id >= 0) & ~(kth <= bound - slack) & np.isfinite(kth)
    return _unproven_kernel()(last_key, row_term, err, kth, last_id, flags)


@functools.lru_cache(maxsize=None)
def _cosine_reported_kernel():
    import cupy as cp

    # the NumPy expression's clip to [0, 2] and cast to float32; the ids copied alongside
    return cp.ElementwiseKernel("float64 d, int32 id_in", "float32 y, int32 id_out",
                                "y = (float)(d < 0.0 ? 0.0 : (d > 2.0 ? 2.0 : d)); id_out = id_in",
                                "knngraph_cosine_reported")


@functools.lru_cache(maxsize=None)
def _none_to_minus_one_kernel():
    import cupy as cp

    # int32 ids with the selection's ID_NONE as -1, in one launch (a comparison, a where and a cast before)
    return cp.ElementwiseKernel("int32 x", "int32 y", f"y = x == {ID_NONE} ? -1 : x", "knngraph_none_to_minus_one")


@functools.lru_cache(maxsize=None)
def _unproven_kernel():
    import cupy as cp

    # the same float64 operations, in the same order, as the NumPy expressions above (the row term widened
    # first, as NumPy's caller does); the flags are the search's (written through a cast: CuPy passes the
    # inputs of an elementwise kernel as const)
    return cp.ElementwiseKernel(
        "float32 last_key, R row_term, float64 err, float64 kth, int32 last_id, raw int32 flags", "bool unsure",
        f"""double bound = ((double)last_key + (double)row_term) - err;
        double slack = {4.0 * _U!r} * fabs(kth);
        unsure = last_id >= 0 && !(kth <= bound - slack) && isfinite(kth);
        if (unsure) atomicOr((int*)&flags[{FLAG_UNSURE}], 1);
        if (!isfinite(err)) atomicOr((int*)&flags[{FLAG_QUERY_NORMS}], 1);""",
        "knngraph_unproven")


@functools.lru_cache(maxsize=None)
def _reported_kernel(metric: str):
    """float64 exact distances -> the metric's float32 reported distances in one launch (the ids copied
    alongside), setting the search's ``flags[FLAG_RANGE]`` where a finite one exceeds float32: the NumPy path of
    :meth:`NumericPlan.to_reported` (clamp at 0 keeping NaN, square root for euclidean, range check,
    cast), each a launch and the check a host sync there."""
    import cupy as cp

    value = {"euclidean": "double v = d < 0.0 ? 0.0 : d; v = sqrt(v);",
             "sqeuclidean": "double v = d < 0.0 ? 0.0 : d;"}.get(metric, "double v = d;")
    return cp.ElementwiseKernel(
        "float64 d, int32 id_in, raw int32 flags", "float32 y, int32 id_out",
        value + f"""
        if (isfinite(v) && fabs(v) > {_F32_MAX!r}) atomicOr((int*)&flags[{FLAG_RANGE}], 1);
        y = (float)v;
        id_out = id_in;""",
        f"knngraph_reported_{metric}")
