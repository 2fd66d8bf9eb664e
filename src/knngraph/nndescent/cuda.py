"""GNND on the GPU: the engine of :mod:`knngraph.nndescent._build` with CuPy arrays and numba-cuda
kernels (see ``_kernels.py``), few large launches (:mod:`knngraph.nndescent.cpu` has the CPU engine, with
the same methods).

An iteration is two kernel launches (sample, join with in-place locked inserts; a third, merge, with
the candidate-slot insert variant) plus CuPy fills and one 8-byte read of the insert counter (the
convergence test). Arrays are allocated once per build (or per GGM merge).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from .._cuda_launch import kernel_module, launch
from ..primitives.constants import pow2_at_least
from ..primitives.distances import DIST_COS, DIST_L2SQ, inverse_norms
from . import _common as C

K = kernel_module(__package__ + "._kernels")

__all__ = ["Engine", "packed_words", "JOIN_MAX_REGISTERS"]

#: threads per join block: one 4 x 4 tile each covers the 392 tiles of p=32 in one round
JOIN_THREADS = 512
#: registers per thread of the join kernel: 64 lets 2 blocks of 512 threads share an SM (uncapped it
#: took 94 and only 1 fits); capped it runs much faster despite a few bytes of spills
#: (``benchmarks/studies/profile_join.py --max-registers``, ``benchmarks/results/nndescent_gpu_h200.json``)
JOIN_MAX_REGISTERS = 64
WARP_SIM = 32


#: rows per block when packed_words computes squared norms (bounds its temporaries)
_NORM_ROWS = 1 << 16


def packed_words(x, kind):
    """(mode, 32-bit words, squared norms) for the join's dp4a path, or None: uint8 (mode 1) or int8 (2)
    vectors whose dimension is a multiple of 4, viewed as int32 words of 4 bytes. For L2 also their
    float32 squared norms, and only while 2 d max|x_i|^2 <= 2^24 (d <= 129 for uint8, 512 for int8), so
    that |x|^2 + |y|^2 - 2 x.y is exact in float32; larger d takes the float path (a 1-element dummy
    stands for the norms of the other metrics)."""
    if x.dtype not in (np.uint8, np.int8) or x.shape[1] % 4 or not x.flags.c_contiguous:
        return None
    top = 255 if x.dtype == np.uint8 else 128
    if kind == DIST_L2SQ and 2 * x.shape[1] * top * top > 2**24:
        return None
    xp = np if isinstance(x, np.ndarray) else __import__("cupy")
    words = x.view(np.int32)
    mode = 1 if x.dtype == np.uint8 else 2
    if kind != DIST_L2SQ:
        return mode, words, xp.zeros(1, np.float32)
    sqn = xp.empty(x.shape[0], np.float32)
    for lo in range(0, x.shape[0], _NORM_ROWS):
        block = x[lo:lo + _NORM_ROWS].astype(np.float32)
        sqn[lo:lo + len(block)] = (block * block).sum(1, dtype=np.float32)
    return mode, words, sqn


@dataclasses.dataclass
class _RefineState:
    """What one refinement allocates once and its iterations reuse (see :meth:`Engine.start_refine`)."""

    arrays: dict
    #: the arrays the kernels take, in the order :meth:`Engine.iterate` unpacks them
    kernel_arrays: tuple
    join: object
    merge: object
    use_slots: bool
    grid_w: int
    grid_j: int
    join_threads: int
    profile: bool
    kind: int
    p: int
    split: int
    kernel_seconds: dict


class Engine:
    """The GPU implementation of the engine interface that ``_build.py`` drives (``cpu.Engine`` has the
    same methods)."""

    is_cuda = True
    join_chunk = C.DC

    def __init__(self, device_index: int = 0, *, simulate: bool = False):
        """``simulate=True`` runs the same orchestration on NumPy arrays (numba CUDA simulator, tests)."""
        self.simulate = simulate
        if simulate:
            self.cp = np
            self.sm_count = 1
            self._device = None
        else:
            import cupy as cp

            self.cp = cp
            self._device = cp.cuda.Device(device_index)
            self.sm_count = int(self._device.attributes["MultiProcessorCount"])
            # the join's staging chunk: 32 (measured on sm_90); 16 before Hopper, whose static shared
            # memory may stop at 48 KB (see _kernels.DC)
            try:
                if int(self._device.compute_capability) < 90:
                    self.join_chunk = 16
            except (AttributeError, ValueError):
                pass
        self.xp = self.cp
        self.device_index = device_index

    def __enter__(self):
        if self._device is not None:
            self._device.__enter__()
        return self

    def __exit__(self, *exc):
        if self._device is not None:
            self._device.__exit__(*exc)

    # ---------------------------------------------------------------------------------------------
    # arrays

    def prepare(self, x, kind):
        """(vectors on this GPU, inverse norms or a 1-element dummy)."""
        cp = self.cp
        xd = cp.ascontiguousarray(cp.asarray(x))
        if xd.dtype == np.float64:
            xd = xd.astype(cp.float32)
        inv = inverse_norms(xd, cp) if kind == DIST_COS else cp.zeros(1, cp.float32)
        return xd, inv

    def asarray(self, a):
        return self.cp.asarray(a)

    def to_host(self, a):
        return np.asarray(a) if self.simulate else self.cp.asnumpy(a)

    def new_graph(self, n, k):
        cp = self.cp
        return cp.empty((n, k), cp.float32), cp.empty((n, k), cp.int32), cp.empty((n, k), cp.uint8)

    def synchronize(self):
        if not self.simulate:
            self.cp.cuda.runtime.deviceSynchronize()

    def memory_per_node(self, d, itemsize, k, p, cosine):
        """Device bytes per node of a build or merge (vectors, lists, samples, candidate slots, outputs,
        squared norms of the dp4a path)."""
        return d * itemsize + (4 if cosine else 0) + 9 * k + 16 * p + 24 + 8 * k

    # ---------------------------------------------------------------------------------------------
    # launches

    def _warp_grid(self, n):
        if self.simulate:
            return 1  # the simulator runs a block's threads as Python threads: keep them few
        return max(1, min(math.ceil(n / C.WPB), self.sm_count * 64))

    def init(self, x, inv, kind, gd, gi, gf, keep, split, seed):
        n, k = gd.shape
        launch(K.init_kernel(pow2_at_least(k, 32)), self._warp_grid(n), C.WPB * 32,
               (x, inv, int(kind), gd, gi, gf, int(keep), int(split), np.int64(seed)))

    def widen(self, x, inv, kind, gd1, gi1, gf1, width, hops):
        """(gd, gi, gf) of ``width`` columns: each short list and the nearest of the first ``hops`` entries
        of the lists of its first ``hops`` entries (:func:`_kernels.widen_kernel`; ``cpu.widen_lists`` has
        the rule)."""
        n, k1 = gd1.shape
        C.check_widen(k1, width, hops)
        gd, gi, gf = self.new_graph(n, width)
        sc = pow2_at_least(width + 2 * C.HOPS, 32)
        wpb = C.WPB if sc <= 256 else 2  # the shared sets and lists of a block stay within 48 KB
        grid = 1 if self.simulate else max(1, min(math.ceil(n / wpb), self.sm_count * 64))
        chunks = math.ceil(x.shape[1] / 32)
        launch(K.widen_kernel(sc, pow2_at_least(k1, 32), wpb, chunks if chunks <= C.HOP_UNROLL_CHUNKS else 0), grid,
               wpb * 32,
               (x, inv, int(kind), gd1, gi1, gf1, gd, gi, gf, int(hops)))
        return gd, gi, gf

    def smallest_per_row(self, tile, k):
        """(values, columns) of each row's k smallest entries, sorted by (value, column)."""
        from ..primitives import kselect

        if self.simulate:
            return kselect.smallest_per_row_host(tile, k)
        return kselect.smallest_per_row(tile, k)

    def init_windows(self, x, inv, kind, gd, gi, gf, seed):
        """Initial lists from cluster windows (``_windows.py``)."""
        from ._windows import window_graph

        window_graph(self, x, kind, gd, gi, gf, seed)

    def merge_lists(self, ad, ai, bd, bi, k):
        from ..graphops import cuda as graphops_cuda

        return graphops_cuda.merge_sorted_lists(ad, ai, bd, bi, k, xp=self.cp, sm_count=self.sm_count)

    def start_refine(self, x, inv, kind, gd, gi, gf, *, p, seed, split=0, selective=True, profile=False,
                     insert="lock", max_registers=JOIN_MAX_REGISTERS):
        """Allocate what GNND's iterations on this initialised graph need (once).

        ``seed`` is unused on the GPU (the reverse samples come from the atomic race order). ``insert``:
        "lock" inserts selected pairs into the lists under per-list spinlocks during the join; "slots"
        offers them to packed 64-bit atomic candidate slots merged by a third kernel (kept for the
        measurement; it loses offers that collide in a slot and converges more slowly). ``profile``
        synchronises after every launch and records per-kernel seconds (benchmarks only)."""
        if insert not in ("lock", "slots", "none"):  # "none": the join without inserts (profiling only)
            raise ValueError(f"insert must be 'lock', 'slots' or 'none', got {insert!r}")
        if not selective:
            raise ValueError("update='all' is only implemented on the CPU; the GPU path uses GNND's "
                             "selective update (update='auto' or 'selective')")
        cp = self.cp
        n, k = gd.shape
        use_slots = insert == "slots"
        a = {"new_f": cp.empty((n, p), cp.int32), "old_f": cp.empty((n, p), cp.int32),
             "new_r": cp.empty((n, p), cp.int32), "old_r": cp.empty((n, p), cp.int32),
             "nf": cp.zeros(n, cp.int32), "nof": cp.zeros(n, cp.int32), "nr": cp.zeros(n, cp.int32),
             "nor": cp.zeros(n, cp.int32), "counter": cp.zeros(1, cp.int64),
             "cand": cp.full((n if use_slots else 1, C.SLOTS), C.EMPTY, cp.uint64),
             "locks": cp.zeros(1 if use_slots else n, cp.int32)}
        packed = packed_words(x, kind)
        xw, sqn = (x, inv) if not packed else packed[1:]
        kernel_arrays = (x, inv, gd, gi, gf, a["new_f"], a["nf"], a["old_f"], a["nof"], a["new_r"], a["nr"],
                         a["old_r"], a["nor"], a["cand"], a["locks"], a["counter"], xw, sqn)
        join = K.join_kernel(p, insert, max_registers or None, 32 * math.ceil(k / 32), packed[0] if packed else 0,
                             self.join_chunk)
        return _RefineState(arrays=a, kernel_arrays=kernel_arrays, join=join,
                            merge=K.merge_kernel(32 * math.ceil(k / 32)), use_slots=use_slots,
                            grid_w=self._warp_grid(n),
                            grid_j=1 if self.simulate else max(1, min(n, self.sm_count * 32)),
                            join_threads=WARP_SIM if self.simulate else JOIN_THREADS, profile=profile, kind=int(kind),
                            p=int(p), split=int(split), kernel_seconds={"sample": 0.0, "join": 0.0, "merge": 0.0})

    def iterate(self, st: _RefineState, it: int) -> int:
        """One GNND iteration (sample, local join with selective update); returns the entries inserted."""
        a = st.arrays
        (x_, inv_, gd_, gi_, gf_, new_f_, nf_, old_f_, nof_, new_r_, nr_, old_r_, nor_, cand_, locks_, counter_, xw_,
         sqn_) = st.kernel_arrays
        a["nr"].fill(0)
        a["nor"].fill(0)
        a["counter"].fill(0)
        tk = self._tick(st, "sample", time.perf_counter())
        launch(K.sample_kernel, st.grid_w, C.WPB * 32,
               (gi_, gf_, st.p, st.split, new_f_, nf_, old_f_, nof_, new_r_, nr_, old_r_, nor_))
        tk = self._tick(st, "sample", tk)
        launch(st.join, st.grid_j, st.join_threads, (x_, inv_, st.kind, gd_, gi_, gf_, new_f_, nf_, new_r_, nr_,
                                                     old_f_, nof_, old_r_, nor_, st.p, st.split, cand_, locks_,
                                                     counter_, xw_, sqn_))
        tk = self._tick(st, "join", tk)
        if st.use_slots:
            launch(st.merge, st.grid_w, C.WPB * 32, (gd_, gi_, gf_, cand_, counter_))
            self._tick(st, "merge", tk)
        counter = a["counter"]
        return int(counter[0]) if self.simulate else int(counter.get()[0])

    def refine_stats(self, st: _RefineState) -> dict:
        return {"kernel_seconds": dict(st.kernel_seconds)} if st.profile else {}

    def _tick(self, st, name, t):
        if st.profile:
            self.synchronize()
            now = time.perf_counter()
            st.kernel_seconds[name] += now - t
            return now
        return t
