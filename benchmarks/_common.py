"""Shared helpers for benchmark scripts: timing protocol, JSON lines, environment description, data.

Timing protocol: one warm-up call (its time is reported as ``first_call_s``: JIT compilation), then the
median of ``repeats`` timed calls; GPU work is synchronised before the clock is read.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np


def sync():
    try:
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
    except Exception:
        pass


def timed(fn, repeats=3, warmup=True):
    """(median seconds, first-call seconds, last result) of ``fn()``, GPU-synchronised."""
    first = None
    result = None
    if warmup:
        sync()
        t0 = time.perf_counter()
        result = fn()
        sync()
        first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        result = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), first, result


def qps_at(points, target):
    """QPS at recall ``target`` on a sweep of (recall, qps) points: linear between the two queue sizes
    around it (a coarse sweep's first point past the target would flatter the sparser graphs); None when
    the sweep never reaches it."""
    pts = sorted(points)
    for (r0, q0), (r1, q1) in zip(pts, pts[1:]):
        if r0 <= target <= r1:
            return q0 if r1 == r0 else q0 + (q1 - q0) * (target - r0) / (r1 - r0)
    return max([q for r, q in pts if r >= target], default=None)


def environment() -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
           "cpu_count": os.cpu_count()}
    try:
        import numba

        env["numba"] = numba.__version__
    except Exception:
        pass
    try:
        import knngraph

        env["knngraph"] = knngraph.__version__
    except Exception:
        pass
    try:
        import cupy

        env["cupy"] = cupy.__version__
        env["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:
        env["gpu"] = None
    return env


class JsonLines:
    """Append one JSON object per run to ``path`` (and echo a short line)."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.env = environment()
        self.rows = []

    def write(self, **row):
        row = {**row, "env": self.env}
        self.rows.append(row)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(row, default=_json_default) + "\n")
        brief = {k: v for k, v in row.items() if k != "env"}
        print(json.dumps(brief, default=_json_default), flush=True)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def device_data_dir() -> Path | None:
    """Where a GPU run finds the cut real data (.data/ carried to the machine), if anywhere."""
    for cand in (os.environ.get("KNNGRAPH_DEVICE_DATA"), Path(__file__).resolve().parents[1] / ".data"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return None


def load_minilm(d: Path):
    """(base float16, queries, top-10 ids, top-10 cosine distances) of minilm-words from folder ``d`` (the GPU
    machine: a carried .minilm copied to /root/minilm)."""
    from knngraph import io

    base = np.load(d / "base.npy")
    queries = np.load(d / "query.npy")
    gt = np.asarray(io.read(d / "gt100-cosine.ibin"))[:, :10]
    gt_d = np.asarray(io.read(d / "gt100-cosine.fbin"))[:, :10]
    return base, queries, gt, gt_d


#: rows of the whole sift-photos base
SIFT_ROWS = 770_533


def load_sift(n_base: int):
    """(base uint8, queries uint8, gt ids or None) for sift-photos with ``n_base`` rows, from .data or shared."""
    from knngraph import io

    from knngraph.datasets import shared_datasets_dir

    dd = device_data_dir()
    shared = shared_datasets_dir()
    have_shared = shared is not None and (shared / "sift-photos" / "base.u8bin").exists()
    if dd is not None and n_base == SIFT_ROWS and (dd / "sift770k-rest.u8bin").exists() and not have_shared:
        # the GPU machine: rows past 450k and their ground truth come in a second carry
        # (scripts/prepare_device_data.py --rest770)
        base = np.concatenate([io.read(dd / "sift450k-base.u8bin"), io.read(dd / "sift770k-rest.u8bin")])
        queries = np.ascontiguousarray(io.read(dd / "sift-query.u8bin"))
        return base, queries, np.asarray(io.read(dd / "sift770k-gt32.ibin"))
    if dd is not None and n_base <= 450_000 and (dd / "sift450k-base.u8bin").exists() and \
            (not have_shared or n_base == 450_000):
        base = np.ascontiguousarray(io.read(dd / "sift450k-base.u8bin", rows=(0, n_base)))
        queries = np.ascontiguousarray(io.read(dd / "sift-query.u8bin"))
        gt = io.read(dd / "sift450k-gt32.ibin") if n_base == 450_000 else None
        return base, queries, (np.asarray(gt) if gt is not None else None)
    from knngraph.datasets import load_sift_photos

    s = load_sift_photos(n_base)
    return np.ascontiguousarray(s.base), np.ascontiguousarray(s.queries), np.asarray(s.gt_indices)


def clustered(n, d, seed=0, latent=12, overlapping=False, xp=None):
    """A clustered set (float32, host memory), generated chunk by chunk on the GPU (``xp`` = CuPy, the
    default) or with NumPy (``xp=np``, the CPU benchmarks; another random stream, the same kind of set):
    n/2000 Gaussian clusters (at least 100) whose points vary along a shared random 12-dimensional subspace
    plus a little isotropic noise, i.e. low intrinsic dimension like real descriptors (isotropic 128-d
    Gaussian noise would make every neighbour nearly equidistant). The centres lie anywhere in d
    dimensions, about 40 apart against a spread of about 14 within a cluster: islands that no k-NN edge
    joins. With ``overlapping`` they lie in the latent subspace too (scale 2): neighbouring clusters
    overlap and the k-NN graph is connected (``benchmarks/ggnn_islands_cpu.py`` compares the two)."""
    if xp is None:
        import cupy as xp
    rs = xp.random.RandomState(seed)

    def normal(shape):  # float32 draws: CuPy draws them so, NumPy's legacy generator only in float64
        if xp is np:
            return rs.standard_normal(shape).astype(np.float32)
        return rs.standard_normal(shape, dtype=xp.float32)

    n_centers = max(100, n // 2000)
    centers = normal((n_centers, d)) * 3
    basis = normal((latent, d)) / np.float32(np.sqrt(latent))
    if overlapping:
        centers = (normal((n_centers, latent)) * 2) @ basis
    out = np.empty((n, d), np.float32)
    chunk = 1 << 20
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        lab = rs.randint(0, n_centers, e - s)
        block = centers[lab] + normal((e - s, latent)) @ basis + normal((e - s, d)) * np.float32(0.05)
        out[s:e] = block if xp is np else block.get()
    return out


def cagra_vectors(base, queries, metric: str):
    """(base, queries, CAGRA metric) on the GPU for cuVS CAGRA: cosine as the inner product of unit
    vectors (CAGRA's ids are then scored, not its distances); L2 and inner product as they are."""
    import cupy as cp

    xb, xq = cp.asarray(base), cp.asarray(queries)
    if metric != "cosine":
        return xb, xq, metric

    def unit(a):
        f = a.astype(cp.float32)
        return (f / cp.maximum(cp.linalg.norm(f, axis=1, keepdims=True), 1e-30)).astype(a.dtype)
    return unit(xb), unit(xq), "inner_product"


_PEAK_IN_USE = []  # the one CuPy memory hook every tracker reads (entered once, on the main thread)


def gpu_peak_tracker():
    """Peak device bytes in use through CuPy since ``reset()`` (``peak_bytes() - base``), counted by a
    memory hook on this thread (:class:`knngraph._device.PeakInUse`); None without CuPy."""
    try:
        import cupy  # noqa: F401
    except Exception:
        return None
    from knngraph._device import PeakInUse

    if not _PEAK_IN_USE:
        _PEAK_IN_USE.append(PeakInUse().__enter__())
    tracker = _PEAK_IN_USE[0]

    class Peak:
        base = 0

        def reset(self):
            sync()
            tracker.reset()

        def peak_bytes(self):
            return tracker.peak

    return Peak()
