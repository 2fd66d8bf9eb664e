"""Filtered search: recall@10 and queries per second when 1%, 10%, 50% or 90% of the ids may be returned,
on sift-photos, for SONG (the default choice between graph walk and exact search, and the graph walk
forced) and for the exact search with the same filter.

    python benchmarks/studies/filtered_search.py --out out/ [--device cpu|cuda] [--n 20000] [--queries 1000]

Writes ``filtered_search_<device>.jsonl`` and ``filtered_search_<device>.png`` to --out. The filter is
a uniformly random mask (seed 0). The truth is the exact search with the same filter, and recall@10 the
runner's against it (:mod:`benchmarks.runner.quality`: distances recomputed in float64, an id at the
true 10th distance counts), so recall 1.0 means the k nearest allowed ids. QPS counts the whole
``search`` call on host queries (the runner's timing protocol); the index (vectors and graph) is built
once and resident.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402

SHARES = (0.01, 0.10, 0.50, 0.90)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--queue-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    from knngraph import bruteforce, song

    out = Path(args.out)
    log = JsonLines(out / f"filtered_search_{args.device}.jsonl")
    ds = data.load(data.sift_photos(args.n, args.queries))
    base, queries, nq = ds.base, ds.queries, ds.nq
    index = song.build(song.IndexParams(), base, device=args.device, verbose=False)
    exact = bruteforce.build(bruteforce.IndexParams(), base, device=args.device, verbose=False)
    rng = np.random.default_rng(0)
    rows = []
    for share in SHARES:
        mask = rng.random(len(base)) < share
        t = time_calls(lambda: exact.search(queries, 10, device=args.device, verbose=False, filter=mask),
                       args.repeats)
        # the truth of this filter: the exact search's allowed ids
        allowed = data.Dataset(f"{ds.name} filtered {share}", base, queries, ds.metric, ds.source,
                               data.host(t.result.indices))
        log.write(part="exact", share=share, n=len(base), nq=nq, seconds=t.median_s, qps=nq / t.median_s,
                  recall_at_10=1.0)
        for mode, ratio in (("song_auto", 100.0), ("song_graph", 0.0)):
            sp = song.SearchParams(queue_size=args.queue_size, filtered_exact_ratio=ratio)
            stats = {}
            t = time_calls(lambda: index.search(queries, 10, sp, device=args.device, verbose=False, stats=stats,
                                                filter=mask), args.repeats)
            ids = data.host(t.result.indices)
            assert mask[ids[ids >= 0]].all()
            row = dict(part=mode, share=share, n=len(base), nq=nq, queue_size=args.queue_size, seconds=t.median_s,
                       qps=nq / t.median_s, recall_at_10=quality.recall(allowed, ids), path=stats.get("filtered_path"),
                       walk_queue=stats.get("queue_size"), distances_per_query=stats.get("distances_per_query"))
            log.write(**row)
            rows.append(row)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in ("song_auto", "song_graph"):
        pts = [r for r in rows if r["part"] == mode]
        a1.plot([p["share"] for p in pts], [p["qps"] for p in pts], "o-", label=mode)
        a2.plot([p["share"] for p in pts], [p["recall_at_10"] for p in pts], "o-", label=mode)
    ex = [r for r in log.rows if r["part"] == "exact"]
    a1.plot([p["share"] for p in ex], [p["qps"] for p in ex], "s--", label="exact")
    for a, lab in ((a1, "queries / s"), (a2, "recall@10 (k nearest allowed)")):
        a.set_xscale("log")
        a.set_xlabel("share of ids allowed")
        a.set_ylabel(lab)
        a.legend()
    a1.set_yscale("log")
    fig.suptitle(f"filtered search, sift-photos {len(base) // 1000}k, {args.device}, queue {args.queue_size}")
    fig.tight_layout()
    fig.savefig(out / f"filtered_search_{args.device}.png", dpi=100)


if __name__ == "__main__":
    main()
