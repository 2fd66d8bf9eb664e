"""GGNN on the CPU (numba): build time split and the recall@10 / QPS curve on sift-photos.

    python benchmarks/studies/ggnn_cpu.py --out out/ [--quick] [--n 20000] [--shards 1]

The same measurements as ``benchmarks/studies/ggnn_gpu.py`` (one run of its ``main``) with the CPU path,
which runs the GPU algorithm with one thread per query; writes ``ggnn_cpu.jsonl`` and ``ggnn_cpu.png``.
The runner's CPU suite measures GGNN's defaults on sift-photos 100k
(``python -m benchmarks suite cpu --parts search_graphs``).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.studies.ggnn_gpu import main  # noqa: E402

if __name__ == "__main__":
    main(device="cpu", n_default=20_000, name="ggnn_cpu")
