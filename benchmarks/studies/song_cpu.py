"""SONG on the CPU (numba, queries in parallel) next to hnswlib, same run, same threads, as runner specs.

    python benchmarks/studies/song_cpu.py --out out/ [--quick] [--threads 2]

A thin wrapper of the benchmark runner (:mod:`benchmarks.runner`; its CPU suite measures the same
methods on two datasets): sift-photos 100k (uint8, squared L2), 10k queries (2,000 with --quick), k=10.
Writes the runner's lines to ``song_cpu.jsonl`` and their recall@10 / queries-per-second curves to
``song_cpu.png``:

* SONG on the exact 96-NN graph prepared by knngraph.optimize_graph to degree 32 (``song.build``'s
  defaults: rows pruned with their reverse k-NN edges), ``fill=True`` and ``fill=False``, sweeping
  queue_size; the build time is the whole ``song.build`` (the exact graph is most of it);
* hnswlib (M=16, ef_construction=200), sweeping ef.

Searches are timed by the runner's protocol (a warm-up call, then the median of 3); builds once, after a
warm-up build on 20k rows. Results recorded before this study became runner specs
(``results/song_cpu_*.jsonl``) have another schema.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import run_specs  # noqa: E402
from benchmarks.runner.run import RunSpec  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--quick", action="store_true", help="2,000 queries, fewer points per curve")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    data = "sift-photos-100k" + (":nq=2000" if args.quick else "")
    queues = [10, 16, 32, 64, 128] if args.quick else [10, 12, 16, 24, 32, 48, 64, 96, 128, 192]
    efs = [10, 20, 40, 80, 160] if args.quick else [10, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    specs = [RunSpec(data, "search", "knngraph-song", build={"fill": [True, False]}, search={"queue_size": queues},
                     build_repeats=1),
             RunSpec(data, "search", "hnswlib", build={"M": [16], "ef_construction": [200]}, search={"ef": efs},
                     build_repeats=1)]
    out = Path(args.out)
    run_specs(specs, out / "song_cpu.jsonl", out / "song_cpu.png",
              f"SONG and hnswlib, {data}, k=10 (CPU, {args.threads} threads)", threads=args.threads, suite="song_cpu")


if __name__ == "__main__":
    main()
