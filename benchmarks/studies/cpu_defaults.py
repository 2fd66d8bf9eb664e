"""The CPU's default SONG build (``song.build(song.IndexParams())``: the 'auto' fields resolved on the CPU,
``knngraph.song.AUTO_ROUTES``) against the other routes and hnswlib, same run, same threads.

    python benchmarks/studies/cpu_defaults.py --out out/ [--threads 2] [--parts routes,first_result,cli]
        [--datasets sift-photos-100k,minilm-words] [--first-datasets clustered-100k,sift-photos-100k]
        [--routes auto,exact-96-32,nndescent-64-40,grnnd-48] [--quick]

Parts (each writes JSON lines to ``cpu_defaults.jsonl``; ``cpu_defaults.png`` draws them):

* ``routes``: per dataset (sift-photos 100k: 10k queries; minilm-words: 5k), k=10: the build and the
  recall@10 / queries-per-second curve of each route, the searcher being ``song.search`` (the fast CPU
  searcher, :mod:`knngraph.beam`) sweeping ``queue_size``, and of hnswlib (M=16, ef_construction=200)
  sweeping ``ef``. Routes: ``auto`` (the default), ``exact-96-32`` (the GPU's route, the CPU default
  before: exact 96-NN graph, ``optimize_graph`` to 32 filled rows), ``nndescent-64-40`` (the earlier CPU
  recipe: NN-Descent 64, ``optimize_graph`` to at most 40 diverse edges), ``grnnd-48`` (GRNND R=48,
  prune_alpha 1.05, 2 x 4 rounds, searched as built). Every build runs once untimed on the first 20k rows
  (kernels loaded), then ``--build-repeats`` timed builds for ``auto`` and hnswlib (alternating; median),
  one for the others; CPU seconds of the process too, and the machine's 1-minute load average
  (``load1``: above the thread count, other work shared the cores). The sweeps are interleaved (one point of every
  curve, then the next), each point timed by the runner's protocol (a warm-up call, the median of
  ``--repeats``). At recall 0.95 and 0.99: each curve's queries/s (linear between the two settings around
  it, :func:`benchmarks._common.qps_at`), per CPU-second of the process too (steadier on a shared
  machine), the ratio to hnswlib, and knngraph's distance computations per query.
* ``first_result``: time to first result, build + 1,000 queries, in a new process with warm caches (the
  parent ran the same work first, so numba's kernels and the data are cached; the new process loads the
  data untimed and pays the loading of the kernels): knngraph's default against hnswlib, at the setting
  (``queue_size`` / ``ef``) that the parent found to reach recall@10 >= 0.95 on those queries; the two
  alternate, ``--first-repeats`` runs each, the median reported. Datasets: ``clustered-100k`` (100k x 128
  float32 from :func:`benchmarks._common.clustered`, NumPy stream, seed 0, 100 separated Gaussian
  clusters; the 1,000 queries are 1,000 more points of the same call) and sift-photos 100k. The import
  of each library in a new process is timed apart (``import_seconds``, also added in
  ``with_import_vs_hnswlib``).
* ``cli``: ``knngraph search`` and ``knngraph knn`` on the bundled sample (a new process each, ``--json``):
  the queries/s they report against the same search timed in this process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered, qps_at  # noqa: E402
from benchmarks.runner import data, methods, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402

TARGETS = (0.95, 0.99)
K = 10
#: queue sizes of knngraph's sweeps and efs of hnswlib's, ascending; a sweep stops past STOP_RECALL
QUEUES = (10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256)
EFS = (10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320)
STOP_RECALL = 0.997
HNSW = {"M": 16, "ef_construction": 200}
#: route name -> (what it is, how it is built: song.IndexParams fields, or 'grnnd' for GRNND's own graph)
ROUTES = {
    "auto": ("song.build(IndexParams()): the CPU default", {}),
    "exact-96-32": ("exact 96-NN + optimize_graph 32 filled (the GPU's route; the CPU default before)",
                    {"build_algo": "exact", "intermediate_graph_degree": 96, "graph_degree": 32, "fill": True}),
    "nndescent-64-40": ("NN-Descent 64 + optimize_graph 40 diverse edges (the earlier CPU recipe)",
                        {"build_algo": "nndescent", "intermediate_graph_degree": 64, "graph_degree": 40,
                         "fill": False}),
    "grnnd-48": ("GRNND R=48, prune_alpha 1.05, 2 x 4 rounds, searched as built", "grnnd"),
}
GRNND = {"graph_degree": 48, "prune_alpha": 1.05, "outer_iterations": 2, "inner_iterations": 4}


def load(name: str, nq: int | None = None) -> data.Dataset:
    """A dataset of the runner (:mod:`benchmarks.runner.data`) or ``clustered-100k`` (module docs)."""
    if name.startswith("clustered-"):
        size = name.split("-", 1)[1].lower()
        n = int(float(size[:-1]) * 1000) if size.endswith("k") else int(size)
        nq = nq or 1000
        x = clustered(n + nq, 128, seed=0, xp=np)
        return data.Dataset(name, x[:n], x[n:], "sqeuclidean", "benchmarks._common.clustered(seed=0, xp=numpy)")
    return data.load(name + (f":nq={nq}" if nq else ""))


# ------------------------------------------------------------------------------------------------ builds


def build_route(route: str, base, metric: str):
    """The SONG index of ``route`` (see :data:`ROUTES`) on the CPU."""
    from knngraph import grnnd, song

    how = ROUTES[route][1]
    if how == "grnnd":
        g = grnnd.build(grnnd.IndexParams(metric=metric, **GRNND), base, device="cpu", verbose=False).graph
        return song.from_graph(g, base, song.IndexParams(metric=metric), device="cpu", verbose=False)
    return song.build(song.IndexParams(metric=metric, **how), base, device="cpu", verbose=False)


def routes_part(name, args, log):
    """Builds and interleaved curves of every route and hnswlib on one dataset (module docs)."""
    from knngraph import song

    ds = load(name, 2000 if args.quick else None)
    ds.truth(K)
    ctx = methods.Context(device="cpu", threads=args.threads)
    hnsw = methods.get("hnswlib")
    warm = ds.base[:20_000]
    indexes, builds = {}, {}
    for route in args.routes:  # kernels loaded, page cache warm: the timed builds measure the work
        build_route(route, warm, ds.metric)
    hnsw.build(ctx, warm, ds.metric, **HNSW)
    order = [r for r in args.routes if r != "auto"]
    for rep in range(args.build_repeats):
        for who in (["auto"] if "auto" in args.routes else []) + ["hnswlib"] + (order if rep == 0 else []):
            if who == "hnswlib":
                t = time_calls(lambda: hnsw.build(ctx, ds.base, ds.metric, **HNSW), 1, warmup=False)
            else:
                t = time_calls(lambda: build_route(who, ds.base, ds.metric), 1, warmup=False)
            idx, s, c = t.result, t.median_s, t.cpu_median_s
            indexes[who] = idx
            builds.setdefault(who, []).append((s, c))
            extra = {}
            if who != "hnswlib":
                g = idx.graph
                extra = {"params": dataclasses.asdict(idx.params), "edges_per_node": float((np.asarray(g.indices) >= 0)
                                                                                   .sum(1).mean())}
            log.write(part="build", method=who, what=ROUTES.get(who, ("hnswlib M=16 efC=200",))[0],
                      seconds=s, cpu_seconds=c, repeat=rep, threads=args.threads, load1=os.getloadavg()[0],
                      **ds.describe(), **extra)
    curves = {who: [] for who in indexes}
    queues = QUEUES[::2] if args.quick else QUEUES
    efs = EFS[::2] if args.quick else EFS
    for step in range(max(len(queues), len(efs))):
        for who, idx in indexes.items():
            pts = curves[who]
            if pts and pts[-1]["recall@10"] >= STOP_RECALL:
                continue
            if who == "hnswlib":
                if step >= len(efs):
                    continue
                knob = {"ef": efs[step]}
                t = time_calls(lambda: hnsw.search(ctx, idx, ds.queries, K, **knob), args.repeats)
                ids, stats = t.result, {}
            else:
                if step >= len(queues):
                    continue
                knob = {"queue_size": queues[step]}
                stats = {}
                sp = song.SearchParams(**knob)
                t = time_calls(lambda: song.search(idx, ds.queries, K, sp, device="cpu", verbose=False, stats=stats,
                                                   n_threads=args.threads), args.repeats)
                ids = t.result.indices
            row = log.write(part="search", method=who, **knob, **quality.search_quality(ds, ids, K),
                            qps=ds.nq / t.median_s, qps_per_cpu=ds.nq / t.cpu_median_s,
                            distances_per_query=stats.get("distances_per_query"), threads=args.threads,
                            load1=os.getloadavg()[0], **ds.describe())
            pts.append(row)
    for target in TARGETS:
        ref = {key: qps_at([(p["recall@10"], p[key]) for p in curves["hnswlib"]], target)
               for key in ("qps", "qps_per_cpu")}
        for who, pts in curves.items():
            row = {"part": "at_recall", "dataset": name, "method": who, "recall": target,
                   "build_seconds": statistics.median(s for s, _ in builds[who]),
                   "build_cpu_seconds": statistics.median(c for _, c in builds[who]),
                   "hnswlib_build_seconds": statistics.median(s for s, _ in builds["hnswlib"])}
            for key in ("qps", "qps_per_cpu"):
                row[key] = qps_at([(p["recall@10"], p[key]) for p in pts], target)
                row[f"{key}_vs_hnswlib"] = row[key] / ref[key] if row[key] and ref[key] else None
            if who != "hnswlib":
                row["distances_per_query"] = qps_at([(p["recall@10"], p["distances_per_query"]) for p in pts], target)
            log.write(**row, threads=args.threads)


# ------------------------------------------------------------------------------------------ first result


def first_setting(method: str, index, ds, threads: int) -> int:
    """The smallest queue_size (knngraph) or ef (hnswlib) of the sweep that reaches recall@10 0.95."""
    from knngraph import song

    ctx = methods.Context(device="cpu", threads=threads)
    for value in (QUEUES if method == "knngraph" else EFS):
        if method == "knngraph":
            ids = song.search(index, ds.queries, K, song.SearchParams(queue_size=value), device="cpu",
                              verbose=False).indices
        else:
            ids = methods.get("hnswlib").search(ctx, index, ds.queries, K, ef=value)
        if quality.recall(ds, ids, K) >= 0.95:
            return value
    raise RuntimeError(f"{method} does not reach recall@10 0.95 on {ds.name}")


def first_result_child(name: str, method: str, setting: int, threads: int) -> dict:
    """In a new process (``--child``): load the data (untimed), then build + search the 1,000 queries
    (timed); recall after the clock stops."""
    from knngraph import song  # (the runner's modules import knngraph: its import is timed apart, import_seconds)

    ds = load(name, 1000)
    import numba

    numba.set_num_threads(threads)
    ctx = methods.Context(device="cpu", threads=threads)
    t0 = time.perf_counter()
    if method == "knngraph":
        index = song.build(song.IndexParams(metric=ds.metric), ds.base, device="cpu", verbose=False)
        t1 = time.perf_counter()
        ids = song.search(index, ds.queries, K, song.SearchParams(queue_size=setting), device="cpu",
                          verbose=False).indices
    else:
        index = methods.get("hnswlib").build(ctx, ds.base, ds.metric, **HNSW)
        t1 = time.perf_counter()
        ids = methods.get("hnswlib").search(ctx, index, ds.queries, K, ef=setting)
    t2 = time.perf_counter()
    return {"build_s": t1 - t0, "search_s": t2 - t1, "first_result_s": t2 - t0,
            "recall@10": quality.recall(ds, ids, K)}


def import_seconds(module: str, runs: int = 3) -> float:
    """Median seconds of ``import module`` in a new process (caches warm)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    return statistics.median(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                  check=True).stdout) for _ in range(runs))


def first_result_part(name, args, log):
    """Time to first result on one dataset (module docs)."""
    from knngraph import song

    ds = load(name, 1000)
    ds.truth(K)
    ctx = methods.Context(device="cpu", threads=args.threads)
    settings = {"knngraph": first_setting("knngraph", song.build(song.IndexParams(metric=ds.metric), ds.base,
                                                                 device="cpu", verbose=False), ds, args.threads),
                "hnswlib": first_setting("hnswlib", methods.get("hnswlib").build(ctx, ds.base, ds.metric, **HNSW),
                                         ds, args.threads)}
    runs = {"knngraph": [], "hnswlib": []}
    for rep in range(args.first_repeats):
        for method in ("knngraph", "hnswlib"):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, method, str(settings[method]),
                   "--threads", str(args.threads)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
            res = json.loads(done.stdout.strip().splitlines()[-1])
            runs[method].append(res)
            log.write(part="first_result_run", dataset=name, method=method, repeat=rep,
                      setting={"knngraph": "queue_size", "hnswlib": "ef"}[method] + f"={settings[method]}",
                      threads=args.threads, n=ds.n, nq=ds.nq, load1=os.getloadavg()[0], **res)
    med = {m: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for m, rs in runs.items()}
    imports = {"knngraph": import_seconds("knngraph"), "hnswlib": import_seconds("hnswlib")}
    for method, m in med.items():
        log.write(part="first_result", dataset=name, method=method, runs=len(runs[method]), threads=args.threads,
                  setting={"knngraph": "queue_size", "hnswlib": "ef"}[method] + f"={settings[method]}", **m,
                  vs_hnswlib=m["first_result_s"] / med["hnswlib"]["first_result_s"], import_seconds=imports[method],
                  with_import_vs_hnswlib=(m["first_result_s"] + imports[method])
                  / (med["hnswlib"]["first_result_s"] + imports["hnswlib"]))


# ------------------------------------------------------------------------------------------------- CLI


def cli_part(args, log, out: Path):
    """The command line's reported queries/s against the in-process figure (module docs)."""
    import knngraph
    from knngraph import song

    s = knngraph.datasets.load_sample()
    folder = out / "cli_files"
    folder.mkdir(parents=True, exist_ok=True)
    knngraph.io.write(str(folder / "base.u8bin"), s.base)
    np.save(folder / "queries.npy", s.queries)
    index = song.build(song.IndexParams(), s.base, device="cpu", verbose=False)
    song.save(str(folder / "base.song"), index)
    cases = {"search": (["search", str(folder / "base.song"), str(folder / "queries.npy"), "-k", str(K), "--out",
                         str(folder / "ids.npy")],
                        lambda: song.search(index, s.queries, K, device="cpu", verbose=False)),
             "knn": (["knn", str(folder / "base.u8bin"), str(folder / "queries.npy"), "-k", str(K), "--out",
                      str(folder / "exact.npy")],
                     lambda: knngraph.knn(s.base, s.queries, K, device="cpu", verbose=False))}
    for command, (argv, call) in cases.items():
        here = time_calls(call, 5)
        for rep in range(3):
            done = subprocess.run([sys.executable, "-m", "knngraph", *argv, "--json", "--quiet", "--device", "cpu"],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(done.stderr[-2000:])
            payload = json.loads(done.stdout.strip().splitlines()[-1])
            load = payload.get("search_load_seconds", payload.get("load_seconds"))
            log.write(part="cli", cli_command=command, repeat=rep, cli_qps=payload["queries_per_second"],
                      in_process_qps=s.queries.shape[0] / here.median_s,
                      cli_vs_in_process=payload["queries_per_second"] * here.median_s / s.queries.shape[0],
                      cli_load_seconds=load, n=int(s.base.shape[0]), nq=int(s.queries.shape[0]), threads=args.threads)


# ------------------------------------------------------------------------------------------------ figure


def plot(jsonl: Path, png: Path) -> None:
    """One panel per dataset of the routes part (recall@10 against queries/s), and one of the time to
    first result, from the lines of ``jsonl``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [json.loads(line) for line in open(jsonl)]
    curves: dict = {}
    for r in rows:
        if r.get("part") == "search":
            curves.setdefault(r["dataset"], {}).setdefault(r["method"], []).append((r["recall@10"], r["qps"]))
    first = {}
    for r in rows:
        if r.get("part") == "first_result":
            first.setdefault(r["dataset"], {})[r["method"]] = r
    panels = len(curves) + (1 if first else 0)
    if not panels:
        return
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.8), squeeze=False)
    threads = next((r.get("threads") for r in rows if r.get("threads")), "?")
    for ax, (name, by) in zip(axes[0], curves.items()):
        for method, pts in by.items():
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3,
                    label=f"knngraph {method}" if method != "hnswlib" else "hnswlib M=16 efC=200")
        for t in TARGETS:
            ax.axvline(t, color="grey", lw=0.5, ls="--")
        ax.set_yscale("log")
        ax.set_xlabel("recall@10")
        ax.set_ylabel(f"queries / s ({threads} threads)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if first:
        ax = axes[0][-1]
        names = list(first)
        for j, method in enumerate(("knngraph", "hnswlib")):
            vals = [first[nm].get(method, {}).get("first_result_s", 0) for nm in names]
            ax.bar(np.arange(len(names)) + 0.4 * j, vals, 0.4, label=f"{method} (build + 1000 queries)")
        ax.set_xticks(np.arange(len(names)) + 0.2, names)
        ax.set_ylabel("seconds, new process, recall@10 >= 0.95")
        ax.set_title("time to first result")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--parts", default="routes,first_result,cli")
    ap.add_argument("--datasets", default="sift-photos-100k,minilm-words")
    ap.add_argument("--first-datasets", default="clustered-100k,sift-photos-100k")
    ap.add_argument("--routes", default=",".join(ROUTES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--build-repeats", type=int, default=3)
    ap.add_argument("--first-repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2,000 queries, every other sweep point")
    ap.add_argument("--replot", default=None, help="redraw cpu_defaults.png from this jsonl and exit")
    ap.add_argument("--child", nargs=3, metavar=("DATASET", "METHOD", "SETTING"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(first_result_child(args.child[0], args.child[1], int(args.child[2]), args.threads)))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        plot(Path(args.replot), out / "cpu_defaults.png")
        return
    if methods.get("hnswlib").missing():
        raise SystemExit(f"cpu_defaults compares against hnswlib: {methods.get('hnswlib').missing()}")
    import numba

    numba.set_num_threads(args.threads)
    args.routes = [r for r in args.routes.split(",") if r]
    unknown = sorted(set(args.routes) - set(ROUTES))
    if unknown:
        raise SystemExit(f"unknown routes {unknown}; known: {', '.join(ROUTES)}")
    parts = set(args.parts.split(","))
    log = JsonLines(out / "cpu_defaults.jsonl")
    if "routes" in parts:
        for name in [d for d in args.datasets.split(",") if d]:
            routes_part(name, args, log)
            plot(out / "cpu_defaults.jsonl", out / "cpu_defaults.png")
    if "first_result" in parts:
        for name in [d for d in args.first_datasets.split(",") if d]:
            first_result_part(name, args, log)
    if "cli" in parts:
        cli_part(args, log, out)
    plot(out / "cpu_defaults.jsonl", out / "cpu_defaults.png")


if __name__ == "__main__":
    main()
