"""GGNN build time against the graph's search quality, over the build's effort knobs: the refinement
passes r (section 5.3, 2 by default), the build slack tau_b (0.5), the cap on the vertices a merge query
expands per layer (``BUILD_MAX_POPS``, 100 in the library; not a paper constant) and the waves the
symmetric linking places its links in (``SYM_WAVES``, 8). For each setting: the build's phase split,
then GGNN's search (the sorted cache, tau and queue sizes swept) and, on the GPU, the library's fast
searcher over queue sizes on the same graph, with the queries/s at recall@10 0.95, 0.97 and 0.99 read
off each curve (the points no other point beats).

    python benchmarks/studies/ggnn_build_tradeoff.py [--device cuda|cpu] [--n 450000] [--refinements 2,0]
        [--tau-builds 0.5] [--pops 100,50] [--waves 8] [--graph-degree 24] [--inverse-links 0] [--queries 10000]
        [--out out]

recall@10 is the runner's (:mod:`benchmarks.runner.quality`: an id at the true 10th distance counts as
correct); timing its protocol (the build once after a warm-up build on 5,000 rows; searches: a warm-up
call, then the median of --repeats, one call on the CPU). ``cpu_s`` is the process CPU time of the build
(steadier than wall time on a shared machine). The effort knobs that are not parameters are set on the
private ``knngraph.ggnn._build`` module. One JSON line per setting to ``ggnn_build_tradeoff_<device>.jsonl``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import qps_at  # noqa: E402
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402
from benchmarks.runner.report import pareto as frontier  # noqa: E402  (the points no other point beats in both)

#: GGNN's search (sorted cache): queue sizes, and the taus swept at each
QUEUES = (64, 128, 256, 512)
TAUS = (0.3, 0.4, 0.5, 0.7, 1.0, 2.0)
#: the fast searcher's queue sizes
FAST_QUEUES = (32, 48, 64, 96, 128, 192, 256, 384, 512)


def _floats(text):
    return [float(v) for v in text.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=None, help="rows of sift-photos (default 450k GPU, 100k CPU)")
    ap.add_argument("--refinements", default="2,0")
    ap.add_argument("--tau-builds", default="0.5")
    ap.add_argument("--pops", default="100")
    ap.add_argument("--waves", default="8")
    ap.add_argument("--graph-degree", type=int, default=24)
    ap.add_argument("--inverse-links", default="0", help="IndexParams.inverse_links values (0: graph_degree // 2)")
    ap.add_argument("--queries", type=int, default=None, help="default 10,000 GPU, 2,000 CPU")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    on_gpu = args.device.startswith("cuda")
    n = args.n or (450_000 if on_gpu else 100_000)
    nq = args.queries or (10_000 if on_gpu else 2_000)

    from knngraph import ggnn, song
    from knngraph.ggnn import _build

    ds = data.load(data.sift_photos(n, nq))
    ds.truth(10)
    base, queries = ds.base, ds.queries
    if on_gpu:
        import cupy as cp

        base, queries = cp.asarray(base), cp.asarray(queries)
    log = JsonLines(Path(args.out) / f"ggnn_build_tradeoff_{'gpu' if on_gpu else 'cpu'}.jsonl")
    defaults = _build.BUILD_MAX_POPS, _build.SYM_WAVES
    settings = itertools.product([int(r) for r in args.refinements.split(",")], _floats(args.tau_builds),
                                 [int(p) for p in args.pops.split(",")], [int(w) for w in args.waves.split(",")],
                                 [int(v) for v in args.inverse_links.split(",")])
    compiled = set()
    try:
        for refinements, tau_b, pops, waves, inverse_links in settings:
            _build.BUILD_MAX_POPS, _build.SYM_WAVES = pops, waves
            params = ggnn.IndexParams(graph_degree=args.graph_degree, refinements=refinements, tau_build=tau_b,
                                      inverse_links=inverse_links)
            if params.k_sym not in compiled:  # the kernels are compiled per row layout (k - k_sym, k_sym)
                ggnn.build(params, base[:5000], device=args.device, verbose=False)
                compiled.add(params.k_sym)
            t = time_calls(lambda: ggnn.build(params, base, device=args.device, verbose=False), 1, warmup=False)
            index, t.result = t.result, None
            row = {"n": n, "graph_degree": args.graph_degree, "refinements": refinements, "tau_build": tau_b,
                   "build_max_pops": pops, "sym_waves": waves, "k_sym": params.k_sym,
                   "wall_s": t.median_s, "cpu_s": t.cpu_median_s, **(index.hierarchy or {}).get("timings", {})}
            curves = {"ggnn": [], "fast": []}

            def measure(name, label, fn):
                t = time_calls(fn, args.repeats if on_gpu else 1, warmup=on_gpu)
                r = quality.recall(ds, t.result.indices)
                row[f"{name} {label}"] = [r, ds.nq / t.median_s]
                curves[name].append((r, ds.nq / t.median_s))

            for qs in QUEUES:
                for tau in TAUS:
                    sp = ggnn.SearchParams(tau=tau, queue_size=qs)
                    measure("ggnn", f"queue {qs} tau {tau}",
                            lambda: ggnn.search(index, queries, 10, sp, device=args.device, verbose=False))
            if on_gpu:
                sidx = song.from_graph(index.graph, base, device=args.device, verbose=False)
                for qs in FAST_QUEUES:
                    sp = song.SearchParams(queue_size=qs)
                    measure("fast", f"queue {qs}",
                            lambda: song.search(sidx, queries, 10, sp, device=args.device, verbose=False))
            for name, pts in curves.items():
                if pts:
                    pts = frontier(pts)
                    row[f"{name} max recall"] = max(r for r, _ in pts)
                    for target in (0.95, 0.97, 0.99):
                        row[f"{name} qps at {target}"] = qps_at(pts, target)
            log.write(part="build", **row)
            index = None  # freed before the next build
    finally:
        _build.BUILD_MAX_POPS, _build.SYM_WAVES = defaults


if __name__ == "__main__":
    main()
