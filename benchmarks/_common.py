"""What the studies (:mod:`benchmarks.studies`) share that the runner (:mod:`benchmarks.runner`) lacks.

Timing, data loading, recall and JSON lines are the runner's (:mod:`benchmarks.runner.measure`,
:mod:`~benchmarks.runner.data`, :mod:`~benchmarks.runner.quality`); this module holds the rest:

* :func:`qps_at`: a curve's queries per second at a recall, interpolated between its points;
* :func:`clustered`: the clustered synthetic set of the sharded GGNN and out-of-core NN-Descent studies
  (their recorded results were measured on it);
* :func:`run_specs`: a study made of runner specs (its lines are the runner's) and its plot;
* :func:`read_plot_input`: a study's JSON lines and matplotlib's pyplot, for its own plot.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

if "benchmarks" not in sys.modules:  # imported as a script's neighbour (python benchmarks/NAME.py)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = ["qps_at", "clustered", "run_specs", "read_plot_input"]


def read_plot_input(jsonl):
    """``(rows, pyplot)`` for a study's plot: the JSON lines of ``jsonl`` and matplotlib's pyplot on the
    file backend, or ``(rows, None)`` where matplotlib is not installed (the study then writes no plot)."""
    import json

    rows = [json.loads(line) for line in Path(jsonl).read_text().splitlines() if line.strip()]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return rows, None
    return rows, plt


def qps_at(points, target, log: bool = False):
    """QPS at recall ``target`` on a sweep of (recall, qps) points: linear between the two settings
    around it (a coarse sweep's first point past the target would flatter the sparser graphs); None when
    the sweep never reaches it. ``log``: log QPS linear in recall instead (the CPU study's curves span
    decades of QPS, and its recorded ratios at a recall were interpolated so)."""
    pts = sorted(points)
    for (r0, q0), (r1, q1) in zip(pts, pts[1:]):
        if r0 <= target <= r1:
            if r1 == r0:
                return q0
            w = (target - r0) / (r1 - r0)
            if log:
                return float(np.exp((1 - w) * np.log(q0) + w * np.log(q1)))
            return q0 + (q1 - q0) * w
    return max([q for r, q in pts if r >= target], default=None)


def run_specs(specs, out_jsonl, png, title: str, *, threads: int | None = None, budget_s: float | None = None,
              suite: str | None = None) -> list[dict]:
    """Measure runner specs (:class:`benchmarks.runner.run.RunSpec`) into ``out_jsonl`` (the runner's lines)
    and draw their recall@10 / queries-per-second curves (one call per pass; one curve per method and
    build setting) into ``png``. Specs that would start after ``budget_s`` seconds are left out (printed)."""
    from benchmarks.runner.report import Figure, draw
    from benchmarks.runner.run import Runner

    runner = Runner(out_jsonl, threads=threads or os.cpu_count() or 1, suite=suite)
    t0 = time.perf_counter()
    for spec in specs:
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            print(f"# budget of {budget_s:.0f} s spent: {spec.method} {spec.build or ''} not measured", flush=True)
            continue
        runner.run(spec)
    rows = [r for r in runner.lines if r["status"] == "ok" and r["task"] == "search" and r.get("batch_size") is None]
    if rows:
        draw(Figure(Path(png).stem, "pareto", title, rows[0]["device"], rows[0]["dataset"]), rows, Path(png))
        print(f"wrote {png}", flush=True)
    return runner.lines


def clustered(n, d, seed=0, latent=12, overlapping=False, xp=None, n_centers=None, on_device=False):
    """A clustered set (float32, host memory), generated chunk by chunk on the GPU (``xp`` = CuPy, the
    default) or with NumPy (``xp=np``, the CPU studies; another random stream, the same kind of set):
    n/2000 Gaussian clusters (at least 100) whose points vary along a shared random 12-dimensional subspace
    plus a little isotropic noise, i.e. low intrinsic dimension like real descriptors (isotropic 128-d
    Gaussian noise would make every neighbour nearly equidistant). The centres lie anywhere in d
    dimensions, about 40 apart against a spread of about 14 within a cluster: islands that no k-NN edge
    joins. With ``overlapping`` they lie in the latent subspace too (scale 2): neighbouring clusters
    overlap and the k-NN graph is connected (``benchmarks/studies/ggnn_islands_cpu.py`` compares the two).
    The runner's :class:`benchmarks.runner.synthetic.GaussianMixture` is a set of the same kind whose
    values do not depend on the device or the chunking; this one stays for the results measured on it.

    ``n_centers``: a fixed number of clusters instead of n/2000 (the set then grows denser with n, as a
    real collection does when more of the same kind of data arrives). ``on_device``: return the CuPy array
    (``xp`` must be CuPy): sets of several GB need no host copy."""
    if xp is None:
        import cupy as xp
    rs = xp.random.RandomState(seed)

    def normal(shape):  # float32 draws: CuPy draws them so, NumPy's legacy generator only in float64
        if xp is np:
            return rs.standard_normal(shape).astype(np.float32)
        return rs.standard_normal(shape, dtype=xp.float32)

    if on_device and xp is np:
        raise ValueError("on_device=True needs xp=cupy")
    n_centers = int(n_centers) if n_centers else max(100, n // 2000)
    centers = normal((n_centers, d)) * 3
    basis = normal((latent, d)) / np.float32(np.sqrt(latent))
    if overlapping:
        centers = (normal((n_centers, latent)) * 2) @ basis
    out = xp.empty((n, d), np.float32) if on_device else np.empty((n, d), np.float32)
    chunk = 1 << 20
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        lab = rs.randint(0, n_centers, e - s)
        block = centers[lab] + normal((e - s, latent)) @ basis + normal((e - s, d)) * np.float32(0.05)
        out[s:e] = block if (xp is np or on_device) else block.get()
    return out
