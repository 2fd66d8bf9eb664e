"""SONG graph search on the GPU: recall@10 against queries per second on sift-photos 450k, as runner specs.

    python benchmarks/studies/song_gpu.py --out out/ [--quick] [--repeats 3] [--budget-s 240]

A thin wrapper of the benchmark runner (:mod:`benchmarks.runner`): its lines (``--out/song_gpu.jsonl``)
are the runner's, its plot ``song_gpu.png`` the report's recall / QPS curves; the runner's GPU suite
(``python -m benchmarks suite gpu``) measures the main curves itself, this adds the variants of
``knngraph.song``'s parameters. sift-photos 450k, 10k queries, k=10, the index built on the GPU:

1. the register cap of the search kernel (``SearchParams.max_registers``) at queue_size 32;
2. queue_size sweep on ``song.build``'s defaults (exact 96-NN graph, ``optimize_graph`` to degree 32:
   the targets, >= 1M QPS at recall 0.95 and >= 400k at 0.99), and with ``fill=False``;
3. the same on an NN-Descent 96-NN graph (``build_algo='nndescent'``);
4. batches of 100, 1,000 and 10,000 queries per call at queue sizes 32 and 128;
5. 1-bit hashing (``hash_bits`` 128, 256, 512: codes on the GPU, exact re-rank on the host);
6. the Bloom-filter visited set (``visited='bloom'``).

Results recorded before this study became runner specs (``results/song_gpu_*.jsonl``) have another
schema; they also held the unprepared graph and an earlier preparation, which are no longer measured.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import run_specs  # noqa: E402
from benchmarks.runner.run import RunSpec  # noqa: E402


def specs(quick: bool, repeats: int) -> list[RunSpec]:
    data = "sift-photos-450k"
    queues = ([10, 16, 24, 32, 48, 64, 96, 128, 192] if quick else
              [10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 256])
    on = {"device": "cuda", "repeats": repeats, "build_repeats": 1}
    return [
        RunSpec(data, "search", "knngraph-song", search={"queue_size": [32], "max_registers": [0, 64, 96]},
                tag="registers", **on),
        RunSpec(data, "search", "knngraph-song", build={"fill": [True, False]}, search={"queue_size": queues}, **on),
        RunSpec(data, "search", "knngraph-song", build={"build_algo": ["nndescent"]},
                search={"queue_size": queues[1::2] if quick else queues}, **on),
        RunSpec(data, "search", "knngraph-song", search={"queue_size": [32, 128]}, batch_sizes=[100, 1000, 10000],
                tag="batch", **on),
        RunSpec(data, "search", "knngraph-song", build={"hash_bits": [128, 256, 512]},
                search={"queue_size": [64, 128, 256] if quick else [32, 64, 128, 256, 512]}, **on),
        RunSpec(data, "search", "knngraph-song", search={"queue_size": [16, 32, 64] if quick else [16, 32, 64, 128],
                                                          "visited": ["bloom"]}, **on),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--quick", action="store_true", help="fewer points per curve")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=240.0, help="leave out the parts that would start later")
    args = ap.parse_args()
    out = Path(args.out)
    run_specs(specs(args.quick, args.repeats), out / "song_gpu.jsonl", out / "song_gpu.png",
              "SONG, sift-photos 450k, 10k queries, k=10 (GPU)", budget_s=args.budget_s, suite="song_gpu")


if __name__ == "__main__":
    main()
