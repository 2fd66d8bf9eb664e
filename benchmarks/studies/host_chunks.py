r"""Many host queries on one GPU: the search in one piece against the search in chunks on two streams.

    python benchmarks/studies/host_chunks.py --out $OUT

A GPU search of host queries whose results go back to the host (NumPy in, NumPy out) either copies all
queries to the GPU, searches them and copies all results back, one step after another (the search in one
piece), or cuts them into chunks that two lent streams take in turn, each chunk's results copied back while
the next ones are searched (:func:`knngraph._gpu_queue.search_host_queries_in_chunks`, from
``knngraph.beam._search.HOST_CHUNKS_MIN_ROWS`` rows on). With two streams the next chunk's kernels also fill the SMs
that a chunk's slowest queries leave idle.

sift-photos 450k, SONG (``song.build`` defaults) at queue sizes 32 and 64; batches of 16,384 to 400,000
host queries (the 10,000 queries repeated). (GGNN's searches do not take the chunks: measured the same
way with its fast build setting and default search on an H200, chunks went 0.96x-0.98x as fast.) For each: queries/s of both ways (median of 5 calls after a warm-up,
:func:`benchmarks.runner.measure.time_calls`), the ratio and whether the ids are the same. Lines go to
``host_chunks.jsonl``, the plot of the ratio against the batch to ``host_chunks.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import read_plot_input  # noqa: E402
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402

BATCHES = (16_384, 32_768, 100_000, 400_000)


def measure(lines, name, search, queries, batches, label):
    from knngraph.beam import _search as beam_search

    threshold = beam_search.HOST_CHUNKS_MIN_ROWS
    try:
        for nq in batches:
            batch = np.ascontiguousarray(np.tile(queries, (-(-nq // queries.shape[0]), 1))[:nq])
            beam_search.HOST_CHUNKS_MIN_ROWS = 1 << 40
            whole = time_calls(lambda: search(batch), repeats=5)
            beam_search.HOST_CHUNKS_MIN_ROWS = 1
            chunked = time_calls(lambda: search(batch), repeats=5)
            lines.write(part=name, setting=label, batch=nq, qps_one_piece=nq / whole.median_s,
                        qps_chunks=nq / chunked.median_s, ratio=whole.median_s / chunked.median_s,
                        same_ids=bool(np.array_equal(whole.result.indices, chunked.result.indices)))
    finally:
        beam_search.HOST_CHUNKS_MIN_ROWS = threshold


def plot(jsonl: Path, png: Path) -> None:
    rows, plt = read_plot_input(jsonl)
    rows = [r for r in rows if "ratio" in r]
    if plt is None or not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in dict.fromkeys((r["part"], r["setting"]) for r in rows):
        pts = sorted((r["batch"], r["ratio"]) for r in rows if (r["part"], r["setting"]) == key)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{key[0]} {key[1]}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("host queries per call")
    ax.set_ylabel("chunks on two streams / one piece (queries/s)")
    gpu = rows[0].get("env", {}).get("gpu", "GPU")
    ax.set_title(f"sift-photos 450k, one {gpu}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    args = ap.parse_args(argv)
    from knngraph import song

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = JsonLines(out / "host_chunks.jsonl")
    batches = [int(b) for b in args.batches.split(",")]
    ds = data.load(data.sift_photos(450_000))
    index = song.build(song.IndexParams(), ds.base, device="cuda", verbose=False)
    for q in (32, 64):
        sp = song.SearchParams(queue_size=q)
        measure(lines, "song", lambda b: song.search(index, b, 10, sp, device="cuda", verbose=False),
                ds.queries, batches, f"queue {q}")
    plot(out / "host_chunks.jsonl", out / "host_chunks.png")


if __name__ == "__main__":
    main()
