"""NN-Descent on the GPU as the set grows: graph recall and time at 1M to 16M rows, knngraph against cuVS.

    python benchmarks/studies/nndescent_scale_gpu.py --out out/                       # 1M, 4M, 16M
    python benchmarks/studies/nndescent_scale_gpu.py --sizes 1000000 --variants "default;max_iterations=40"
    python benchmarks/studies/nndescent_scale_gpu.py --dataset sift-photos-450k --k 64 --no-curve   # real data

Data: ``benchmarks._common.clustered(n, 128, seed=--seed, overlapping=True, n_centers=--clusters)``, made on
the GPU and kept there: ``--clusters`` (default 1000) overlapping Gaussian clusters in a shared
12-dimensional subspace with a little isotropic noise in all 128 dimensions. The number of clusters is
fixed, so the set grows denser with n: a k-NN list spans a smaller region, its neighbours are nearer to
each other relative to the noise, and every builder's task gets harder (cuVS's recall falls too).

``--dataset`` (a runner dataset such as ``sift-photos-450k``) takes its base instead (``--sizes`` is
then ignored). For each n (k = ``--k``, default 32), one JSON line per measurement in ``nndescent_scale_gpu.jsonl``:

* ``curve``: the default build once with a per-iteration callback: graph recall@10 / @k of the sampled
  nodes and the entries inserted after every iteration (the callback's time is not in the build's);
* ``build``: one line per ``--variants`` entry (``default`` or ``field=value,...`` overrides of
  :class:`knngraph.nndescent.IndexParams`): build time (after a compile run of the same parameters on
  the first 20,000 rows), iterations, inserts per iteration, graph recall@10 and @k;
* ``cuvs``: cuVS ``nn_descent.build`` with its defaults (``graph_degree`` k + 1, the node's own id
  dropped), when cuVS is importable (``--no-cuvs`` skips it): time and the same recall.

Graph recall is the runner's :class:`benchmarks.runner.quality.GraphTruth` (``--sample`` nodes, exact
neighbours by knngraph's GPU search, ties count as hits); times are single builds after a warm-up of the
same kernels, the data resident on the GPU, the graph left there.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner import methods  # noqa: E402
from benchmarks.runner.cli import parse_overrides  # noqa: E402
from benchmarks.runner.measure import GpuPeak, JsonLines, time_calls  # noqa: E402
from benchmarks.runner.quality import GraphTruth  # noqa: E402


def _timed(fn):
    """(result, seconds) of one call of ``fn``, timed by the runner's protocol without a warm-up."""
    t = time_calls(fn, 1, warmup=False)
    return t.result, t.median_s


def _cuvs_available() -> str | None:
    return methods.get("cuvs-nn-descent").missing()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000,4000000,16000000")
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--dataset", default="", help="a runner dataset instead of the synthetic sets")
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=int, default=1000, help="nodes whose exact neighbours score recall")
    ap.add_argument("--variants", default="default", help="';'-separated: default or field=value,... overrides")
    ap.add_argument("--no-curve", action="store_true", help="skip the per-iteration recall curve")
    ap.add_argument("--no-cuvs", action="store_true")
    ap.add_argument("--cuvs-params", default="", help="field=value,... of cuVS's nn_descent.IndexParams")
    ap.add_argument("--out", default="out")
    args = ap.parse_args(argv)

    import cupy as cp

    from knngraph import nndescent

    out = JsonLines(Path(args.out) / "nndescent_scale_gpu.jsonl")
    k = args.k
    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    cuvs_missing = "skipped (--no-cuvs)" if args.no_cuvs else _cuvs_available()
    if cuvs_missing:
        print(f"cuVS: {cuvs_missing}", flush=True)
    peak = GpuPeak()
    for n in ([0] if args.dataset else [int(s) for s in args.sizes.split(",")]):
        if args.dataset:
            from benchmarks.runner import data

            (x, gen_s), what = _timed(lambda: cp.asarray(data.load(args.dataset).base)), args.dataset
            n = int(x.shape[0])
        else:
            x, gen_s = _timed(lambda: clustered(n, 128, seed=args.seed, overlapping=True, n_centers=args.clusters,
                                                on_device=True))
            what = "benchmarks._common.clustered(overlapping=True), on the GPU"
        truth = GraphTruth(x, "sqeuclidean", k, sample=args.sample, device="cuda")
        head = {"n": n, "d": int(x.shape[1]), "dtype": str(x.dtype), "clusters": 0 if args.dataset else args.clusters,
                "k": k, "data_seconds": gen_s, "gpu": out.env.get("gpu"), "data": what}
        if not args.no_curve:
            curve = []
            t_last = [time.perf_counter()]
            paused = [0.0]

            def cb(it, gd, gi):
                tc = time.perf_counter()
                rows = cp.asnumpy(gi[cp.asarray(truth.nodes)][:, :k])
                curve.append({"iteration": it + 1, "recall@10": truth.recall(rows, 10, rows_are_sample=True),
                              f"recall@{k}": truth.recall(rows, k, rows_are_sample=True),
                              "seconds": tc - t_last[0] - paused[0]})
                paused[0] += time.perf_counter() - tc

            nndescent.build(nndescent.IndexParams(graph_degree=k), x[:20_000], device="cuda", verbose=False)
            t_last[0] = time.perf_counter()
            index = nndescent.build(nndescent.IndexParams(graph_degree=k), x, device="cuda", verbose=False,
                                    _callback=cb)
            info = index.graph.info or {}
            out.write(**head, part="curve", curve=curve, updates_per_iteration=info.get("updates_per_iteration"))
            del index
        for spec in variants:
            over = parse_overrides(spec)
            params = nndescent.IndexParams(graph_degree=k, **over)
            nndescent.build(params, x[:20_000], device="cuda", verbose=False)  # compiles this variant's kernels
            peak.reset()
            index, secs = _timed(lambda: nndescent.build(params, x, device="cuda", verbose=False))
            info = index.graph.info or {}
            row = {**head, "part": "build", "variant": spec, "params": over, "seconds": secs,
                   "iterations": info.get("iterations"), "updates_per_iteration": info.get("updates_per_iteration"),
                   "phase_iterations": info.get("phase_iterations"), "widen_seconds": info.get("widen_seconds"),
                   "recall@10": truth.recall(index.graph.indices, 10),
                   f"recall@{k}": truth.recall(index.graph.indices, k),
                   "peak_gpu_bytes_above_data": peak.peak_bytes()}
            out.write(**row)
            del index
        if not cuvs_missing:
            cuvs = methods.get("cuvs-nn-descent")
            cparams = parse_overrides(args.cuvs_params) if args.cuvs_params else {}
            cuvs.graph(methods.Context("cuda"), x[:20_000], "sqeuclidean", k, **cparams)
            peak.reset()
            (ids, meta), secs = _timed(lambda: cuvs.graph(methods.Context("cuda"), x, "sqeuclidean", k, **cparams))
            ids = cuvs.finish_graph(cp.asarray(ids), k)
            row = {**head, "part": "cuvs", "params": cparams, "seconds": secs, "meta": meta,
                   "recall@10": truth.recall(ids, 10), f"recall@{k}": truth.recall(ids, k),
                   "peak_gpu_bytes_above_data": peak.peak_bytes()}
            out.write(**row)
            del ids
        del x, truth
        cp.get_default_memory_pool().free_all_blocks()
    print(f"wrote {out.path}")


if __name__ == "__main__":
    main()
