"""Filtered search: recall@10 against queries per second when 1%, 10%, 50% or 90% of the ids may be returned,
knngraph's fast searcher against a baseline with the same filter, same run, same threads.

    python benchmarks/studies/filtered_search.py --out DIR [--device cpu|cuda] [--n 100000] [--queries 2000]
        [--threads 2] [--repeats 3] [--calibrate | --calibrate-only] [--graph-dir DIR] [--label NAME]

For each share, a uniformly random mask (``numpy.random.default_rng(0)``, drawn in the order 1%, 10%, 50%,
90%) over sift-photos (``--n`` rows, the first ``--queries`` queries, k=10):

* truth: the exact search over the allowed rows (``bruteforce.search(..., filter=mask)``), also timed:
  part ``exact`` (recall 1), the scan the cost model weighs against the walk;
* knngraph: ``song.search(..., filter=mask)`` on the fast searcher, sweeping ``queue_size`` (the list is
  ``queue_size`` / share, at most 1024: :func:`knngraph.beam.filtered_queue_size`), once with
  ``filtered_path='graph'`` (part ``knngraph_graph``: the walk always) and once with the default
  ``'auto'`` (part ``knngraph_auto``: the path the cost model of :func:`knngraph.beam.filtered_path`
  picks, recorded as ``path``);
* baseline, in the same run: on the CPU FAISS ``IndexHNSWFlat`` (M=16, efConstruction=200) searched with
  ``SearchParametersHNSW(sel=IDSelectorBitmap(...))`` sweeping ``efSearch`` (part ``faiss_hnsw``); on a GPU
  cuVS CAGRA over knngraph's graph (``cagra.from_graph``) searched with ``filter=filters.from_bitset(...)``
  sweeping ``itopk_size`` (part ``cuvs_cagra``; skipped with a note when cuVS does not load);
* at recall 0.95 and 0.99: the highest measured QPS of each curve at or above it and the ratios of
  knngraph's (auto) to the baseline's (part ``at_recall``).

Recall@10 is counted over the allowed ids only: the runner's (:mod:`benchmarks.runner.quality`: distances
recomputed in float64, an id at the true 10th distance counts) against the exact search over the
allowed rows. QPS is the median of ``--repeats`` timed calls after a warm-up, each a whole ``search`` call
on host queries (device queries on a GPU), the mask passed as it is (the runner's timing protocol).

The CPU graph is the one of ``cpu_search.py`` (NN-Descent 64-NN graph, ``optimize_graph`` to degree 40,
``fill=False``; ``--graph-dir`` keeps it between runs), the GPU graph ``song.build``'s (exact 96-NN graph
pruned to 32), which CAGRA searches too.

``--calibrate`` first measures what :data:`knngraph.beam.COSTS` is fitted to (part ``calibrate``): the
exact scan over 1-50% of the rows in batches of 10, 200 and ``--queries`` queries, and the filtered walk
(half the rows allowed, ``filtered_path='graph'``) at lists of 64 to 1024 entries in batches of 10 and
``--queries``, each the fastest of at least 5 calls (``seconds``; the least disturbed by other work on the
machine; ``median_s`` beside it); then the least-squares fit of the model's constants (part ``fit``).
``--calibrate-only`` stops there.

Writes ``filtered_search_<label>.jsonl`` and ``.png`` (one panel per share) to ``--out``; the label is
``--label`` or the device.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data, methods, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402
from benchmarks.runner.report import pareto  # noqa: E402

SHARES = (0.01, 0.10, 0.50, 0.90)
TARGETS = (0.95, 0.99)
QUEUES = (10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256)
EFS = (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
ITOPKS = (16, 32, 64, 128, 256, 512)
#: the calibration grid: shares of the exact scan, batch sizes, lists of the walk
CAL_SHARES = (0.01, 0.02, 0.05, 0.10, 0.20, 0.30, 0.50)
CAL_BATCHES = (10, 200)
CAL_LISTS = (64, 128, 256, 512, 1024)


def best_at(points, target):
    """The highest QPS among (recall, qps) points with recall >= target; None when none reaches it."""
    qps = [q for r, q in points if r >= target]
    return max(qps) if qps else None


def build_index(ds, args):
    """knngraph's SONG index of the run's graph (see the module docs) and the seconds it took."""
    import time

    from knngraph import song

    t0 = time.perf_counter()
    if args.device == "cpu":
        from benchmarks.studies.cpu_search import build_graph

        g, _, _, _ = build_graph(ds.name.split(":")[0], ds.base, ds.metric, args.threads, args.graph_dir)
        index = song.from_graph(g, ds.base, device="cpu", verbose=False)
    else:
        index = song.build(song.IndexParams(metric=ds.metric), ds.base, device=args.device, verbose=False)
    return index, time.perf_counter() - t0


class FaissBaseline:
    """FAISS HNSW (M=16, efConstruction=200) searched with an ``IDSelectorBitmap`` of the allowed ids."""

    name = "faiss_hnsw"
    knob = "efSearch"
    values = EFS

    def __init__(self, ds, threads):
        ctx = methods.Context(device="cpu", threads=threads)
        self.method = methods.get("faiss-hnsw")
        self.threads = threads
        self.index = self.method.build(ctx, ds.base, ds.metric, M=16, efConstruction=200)
        self.n = ds.n

    def prepare(self, bits):
        import faiss

        self._bitmap = np.ascontiguousarray(bits).view(np.uint8)  # bit i of byte i // 8: the bitset's bytes
        self.selector = faiss.IDSelectorBitmap(self.n, faiss.swig_ptr(self._bitmap))

    def search(self, queries, k, ef):
        import faiss

        faiss.omp_set_num_threads(self.threads)
        params = faiss.SearchParametersHNSW(sel=self.selector, efSearch=int(ef))
        q = self.method._prepare(queries, self.index["metric"])
        return self.index["index"].search(q, k, params=params)[1]


class CagraBaseline:
    """cuVS CAGRA over knngraph's graph, searched with a bitset filter (``filters.from_bitset``)."""

    name = "cuvs_cagra"
    knob = "itopk_size"
    values = ITOPKS

    def __init__(self, ds, index):
        cagra = methods.cuvs_modules()[0]
        table, _ = methods._uint32_graph(index.graph.indices)
        self.vectors, metric = methods.cuvs_array(ds.base, ds.metric, ("float32", "float16", "int8", "uint8"))
        self.table = table
        self.cagra = cagra
        self.index = cagra.from_graph(table, self.vectors, metric=metric)
        self.dtype = self.vectors.dtype.name
        self.metric = ds.metric

    def prepare(self, bits):
        import cupy as cp
        from cuvs.neighbors import filters

        self.bits = cp.asarray(bits)
        self.prefilter = filters.from_bitset(self.bits)

    def search(self, queries, k, itopk):
        q, _ = methods.cuvs_array(queries, self.metric, ("float32", "float16", "int8", "uint8"), like=self.dtype)
        sp = self.cagra.SearchParams(itopk_size=max(int(itopk), k))
        return self.cagra.search(sp, self.index, q, k, filter=self.prefilter)[1]


def baseline_for(ds, index, args, log):
    """The baseline of the run's device, or None (a ``skipped`` line says why)."""
    try:
        if args.device == "cpu":
            note = methods.get("faiss-hnsw").missing()
            if note is None:
                return FaissBaseline(ds, args.threads)
        else:
            note = methods.get("cuvs-cagra").missing()
            if note is None:
                return CagraBaseline(ds, index)
    except Exception as exc:  # an installed library that fails to build the index
        note = f"{type(exc).__name__}: {exc}"
    log.write(part="skipped", what="faiss_hnsw" if args.device == "cpu" else "cuvs_cagra", note=note)
    return None


def calibrate(ds, exact, index, queries, args, log):
    """The measurements :data:`knngraph.beam.COSTS` is fitted to, and the fit (see the module docs)."""
    from knngraph import song

    rng = np.random.default_rng(1)
    n, dim = ds.n, ds.base.shape[1]
    rows = []
    for share in CAL_SHARES:
        mask = rng.random(n) < share
        for nq in CAL_BATCHES + (len(queries),):
            q = queries[:nq]
            t = time_calls(lambda: exact.search(q, 10, device=args.device, verbose=False, filter=mask,
                                                n_threads=args.threads), max(5, args.repeats))
            rows.append(log.write(part="calibrate", path="exact", share=share, n_allowed=int(mask.sum()), nq=nq,
                                  dim=dim, seconds=min(t.all_s), median_s=t.median_s, cpu_seconds=t.cpu_median_s))
    mask = rng.random(n) < 0.5
    for size in CAL_LISTS:
        sp = song.SearchParams(queue_size=size // 2, filtered_path="graph")
        for nq in (CAL_BATCHES[0], len(queries)):
            q = queries[:nq]
            st = {}
            t = time_calls(lambda: index.search(q, 10, sp, device=args.device, verbose=False, filter=mask, stats=st,
                                                n_threads=args.threads), max(5, args.repeats))
            rows.append(log.write(part="calibrate", path="graph", share=0.5, list_size=st["queue_size"], nq=nq,
                                  dim=dim, seconds=min(t.all_s), median_s=t.median_s, cpu_seconds=t.cpu_median_s,
                                  distances_per_query=st.get("distances_per_query")))
    log.write(part="fit", **fit_costs(rows))


def fit_costs(rows) -> dict:
    """Non-negative least-squares constants of :class:`knngraph.beam.FilteredCosts` from calibration rows
    (relative errors: each row weighted by 1 / its time)."""
    from scipy.optimize import nnls

    ex = [r for r in rows if r["path"] == "exact"]
    a = np.array([[1.0, r["n_allowed"], r["nq"], r["nq"] * r["n_allowed"] * r["dim"]] for r in ex])
    t = np.array([r["seconds"] for r in ex])
    scale = a.max(axis=0)  # columns of similar size for the solver
    coef = nnls(a / t[:, None] / scale, np.ones_like(t))[0] / scale
    exact_call, exact_row, exact_query, exact_mac = coef
    walks = [r for r in rows if r["path"] == "graph"]
    big = max(r["nq"] for r in walks)
    full = [r for r in walks if r["nq"] == big]
    x = np.log([r["list_size"] / 64 for r in full])
    y = np.log([r["seconds"] / r["nq"] * 128 / r["dim"] for r in full])
    growth, log_query = np.polyfit(x, y, 1)
    walk_query = float(np.exp(log_query))
    small = [r for r in walks if r["nq"] != big]
    # a small batch: one walk's latency (log-log line through the small batches); the cost of a call: the
    # least any small batch took
    xs = np.log([r["list_size"] / 64 for r in small])
    ys = np.log([r["seconds"] * 128 / r["dim"] for r in small])
    latency_growth, log_latency = np.polyfit(xs, ys, 1)
    walk_call = float(min(r["seconds"] for r in small))
    return {"exact_call": float(exact_call), "exact_row": float(exact_row), "exact_query": float(exact_query),
            "exact_mac": float(exact_mac), "walk_call": walk_call, "walk_query": walk_query, "walk_growth": float(growth),
            "walk_latency": float(np.exp(log_latency)), "walk_latency_growth": float(latency_growth)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--calibrate-only", action="store_true")
    ap.add_argument("--graph-dir", default=None)
    ap.add_argument("--label", default=None)
    args = ap.parse_args(argv)

    import numba

    from knngraph import bruteforce, song
    from knngraph.primitives.filters import prepare_filter

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    out = Path(args.out)
    label = args.label or args.device
    log = JsonLines(out / f"filtered_search_{label}.jsonl")
    ds = data.load(data.sift_photos(args.n, args.queries))
    queries = ds.queries
    if args.device != "cpu":
        import cupy as cp

        queries = cp.asarray(queries)
    index, build_s = build_index(ds, args)
    log.write(part="build", what="knngraph search graph", seconds=build_s, n=ds.n, threads=args.threads)
    exact = bruteforce.build(bruteforce.IndexParams(metric=ds.metric), ds.base, device=args.device, verbose=False)
    if args.calibrate or args.calibrate_only:
        calibrate(ds, exact, index, queries, args, log)
        if args.calibrate_only:
            return
    baseline = baseline_for(ds, index, args, log)
    rng = np.random.default_rng(0)
    curves = {}
    for share in SHARES:
        mask = rng.random(ds.n) < share
        common = dict(share=share, n=ds.n, nq=ds.nq, n_allowed=int(mask.sum()), threads=args.threads)
        t = time_calls(lambda: exact.search(queries, 10, device=args.device, verbose=False, filter=mask,
                                            n_threads=args.threads), args.repeats)
        truth = data.Dataset(f"{ds.name} allowed {share}", ds.base, ds.queries, ds.metric, ds.source,
                             data.host(t.result.indices).astype(np.int64))
        log.write(part="exact", **common, qps=ds.nq / t.median_s, **{"recall@10": 1.0})
        points = {"exact": [(1.0, ds.nq / t.median_s)]}
        for mode in ("graph", "auto"):
            for qs in QUEUES:
                sp = song.SearchParams(queue_size=qs, filtered_path=mode)
                st = {}
                t = time_calls(lambda: index.search(queries, 10, sp, device=args.device, verbose=False, stats=st,
                                                    filter=mask, n_threads=args.threads), args.repeats)
                ids = data.host(t.result.indices)
                assert mask[ids[ids >= 0]].all(), "a disallowed id was returned"
                r = quality.recall(truth, ids)
                log.write(part=f"knngraph_{mode}", **common, queue_size=qs, list_size=st.get("queue_size"),
                          path=st["filtered_path"], qps=ds.nq / t.median_s, qps_per_cpu=ds.nq / t.cpu_median_s,
                          **{"recall@10": r}, distances_per_query=st.get("distances_per_query"))
                points.setdefault(f"knngraph_{mode}", []).append((r, ds.nq / t.median_s))
        if baseline is not None:
            baseline.prepare(prepare_filter(mask, ds.n).bits)
            for v in baseline.values:
                t = time_calls(lambda: baseline.search(queries, 10, v), args.repeats)
                r = quality.recall(truth, t.result)
                log.write(part=baseline.name, **common, **{baseline.knob: v}, qps=ds.nq / t.median_s,
                          qps_per_cpu=ds.nq / t.cpu_median_s, **{"recall@10": r})
                points.setdefault(baseline.name, []).append((r, ds.nq / t.median_s))
        for target in TARGETS:
            row = {name: best_at(pts, target) for name, pts in points.items()}
            ours, theirs = row.get("knngraph_auto"), row.get(baseline.name) if baseline is not None else None
            log.write(part="at_recall", share=share, recall=target, **{f"{k}_qps": v for k, v in row.items()},
                      ratio_auto_to_baseline=ours / theirs if ours and theirs else None)
        curves[share] = points
    plot(curves, out / f"filtered_search_{label}.png", ds, args)


def plot(curves, path, ds, args):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 4), squeeze=False)
    styles = {"knngraph_auto": "o-", "knngraph_graph": "^--", "faiss_hnsw": "s-", "cuvs_cagra": "s-", "exact": "*"}
    for ax, (share, points) in zip(axes[0], curves.items()):
        for name, pts in points.items():
            front = pareto(pts) if name != "exact" else pts
            ax.plot([p[0] for p in front], [p[1] for p in front], styles.get(name, "o-"), label=name, ms=4)
        ax.set_xlabel("recall@10 (over the allowed ids)")
        ax.set_title(f"{share:.0%} allowed")
        ax.set_yscale("log")
        ax.set_xlim(left=max(0.5, min(p[0] for pts in points.values() for p in pts) - 0.01))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("queries / s")
    axes[0][0].legend(fontsize=8)
    where = f"{args.threads} threads" if args.device == "cpu" else args.device
    fig.suptitle(f"filtered search, sift-photos {ds.n // 1000}k, {ds.nq} queries, k=10, {where} (Pareto fronts)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
