r"""Recall at default parameters on separated clusters, overlapping clusters and nearly uniform data.

    python benchmarks/studies/clustered_recall.py --device cpu --n 100000 --out benchmarks/results/
    python benchmarks/studies/clustered_recall.py --device cuda --n 100000 --out $OUT

The sets come from ``benchmarks/_common.clustered`` (NumPy's generator, fixed seed 7): **separated**, 100
Gaussian clusters (at n = 100k; n / 2000 above 200k) whose centres lie about 40 apart against a spread of
about 14: islands that no k-NN edge joins; **overlapping**, the same clusters with centres inside the latent
subspace, so neighbouring clusters overlap; **uniform**, one Gaussian of the same latent spread (nearly
uniform in its subspace). 1,000 queries are drawn from the same distribution (held out), exact top-10 by
``knngraph.knn``.

Measured for each set, at default parameters (no tuning): ``song.build`` + ``song.search``, ``grnnd.build``
+ ``song.from_graph`` + ``song.search``, ``ggnn.build`` + ``ggnn.search``; and a queue-size sweep of each,
to show where recall saturates. Each line: recall@10 (ties counted, ``knngraph.evaluate``), queries per
second of the timed search (median of 3 after a warm-up), build seconds, the graph's weakly connected
component count and the vertices the linking step joined (``graph.info['connect']``). Writes
``clustered_recall_<device>.jsonl`` and a PNG of recall by set and method.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import _common  # noqa: E402
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402

SETS = ("separated", "overlapping", "uniform")


def make_set(name: str, n: int, nq: int, d: int = 128, seed: int = 7):
    """(base, queries) float32 of one of :data:`SETS`."""
    if name == "uniform":
        rs = np.random.RandomState(seed)
        basis = (rs.standard_normal((12, d)) / np.sqrt(12)).astype(np.float32)
        x = (rs.standard_normal((n + nq, 12)).astype(np.float32) * 4) @ basis
        x += rs.standard_normal((n + nq, d)).astype(np.float32) * np.float32(0.05)
    else:
        x = clustered(n + nq, d, seed=seed, overlapping=name == "overlapping", xp=np)
    return np.ascontiguousarray(x[:n]), np.ascontiguousarray(x[n:])


def routes(device: str):
    """(name, build(base) -> (searcher, index, graph), default search params) of each default route."""
    from knngraph import ggnn, grnnd, song

    def song_build(x):
        index = song.build(song.IndexParams(), x, device=device, verbose=False)
        return song, index, index.graph

    def grnnd_song(x):
        g = grnnd.build(grnnd.IndexParams(), x, device=device, verbose=False).graph
        return song, song.from_graph(g, x, device=device, verbose=False), g

    def ggnn_build(x):
        index = ggnn.build(ggnn.IndexParams(), x, device=device, verbose=False)
        return ggnn, index, index.graph

    return (("song.build", song_build, "queue_size"), ("grnnd+song", grnnd_song, "queue_size"),
            ("ggnn.build", ggnn_build, "queue_size"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--queues", default="0,64,128,256", help="queue sizes swept (0: the searcher's default)")
    ap.add_argument("--routes", default="song.build,grnnd+song,ggnn.build", help="routes measured (comma list)")
    ap.add_argument("--label", default="", help="suffix of the result files' names")
    ap.add_argument("--out", default="out")
    args = ap.parse_args(argv)
    import knngraph

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"clustered_recall_{args.device.split(':')[0]}{'_' + args.label if args.label else ''}"
    lines = JsonLines(out / f"{stem}.jsonl", echo=False)
    chosen = args.routes.split(",")
    queues = [int(v) for v in args.queues.split(",")]
    for set_name in args.sets.split(","):
        base, queries = make_set(set_name, args.n, args.queries)
        truth = knngraph.knn(base, queries, 10, device=args.device, verbose=False)
        truth_i, truth_d = (knngraph._device.as_numpy(a) for a in (truth.indices, truth.distances))
        for route, build, knob in routes(args.device):
            if route not in chosen:
                continue
            t0 = time.perf_counter()
            module, index, graph = build(base)
            build_s = time.perf_counter() - t0
            for q in queues:
                params = module.SearchParams() if q == 0 else module.SearchParams(**{knob: q})
                timing = time_calls(lambda: module.search(index, queries, 10, params, device=args.device,
                                                          verbose=False), repeats=3)
                seconds = timing.median_s
                d, i = (knngraph._device.as_numpy(a) for a in timing.result)
                rec = knngraph.recall_at_k(i, truth_i, 10, distances=d, true_distances=truth_d)
                row = {"set": set_name, "n": args.n, "route": route, "device": args.device,
                       knob: getattr(params, knob), "default_params": q == 0, "recall@10": rec,
                       "qps": args.queries / seconds, "build_s": build_s, "components": graph.components(),
                       "connect": graph.info.get("connect")}
                lines.write(**row)
                print(f"{set_name:12s} {route:11s} {knob}={getattr(params, knob):4d} recall@10={rec:.4f} "
                      f"qps={args.queries / seconds:,.0f} build={build_s:.1f}s components={row['components']}",
                      flush=True)
    _plot(lines.path, out / f"{stem}.png")


def _plot(jsonl: Path, png: Path) -> None:
    rows, plt = _common.read_plot_input(jsonl)
    if plt is None:
        return
    rows = [r for r in rows if r.get("default_params")]
    if not rows:
        return
    sets = list(dict.fromkeys(r["set"] for r in rows))
    routes_ = list(dict.fromkeys(r["route"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(routes_)
    for j, route in enumerate(routes_):
        vals = [next((r["recall@10"] for r in rows if r["set"] == s and r["route"] == route), np.nan) for s in sets]
        ax.bar(np.arange(len(sets)) + j * width, vals, width, label=route)
    ax.set_xticks(np.arange(len(sets)) + width * (len(routes_) - 1) / 2, sets)
    ax.set_ylabel("recall@10 at default parameters")
    ax.set_ylim(0, 1.02)
    ax.axhline(0.99, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"n={rows[0]['n']:,}, {rows[0]['device']}")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
