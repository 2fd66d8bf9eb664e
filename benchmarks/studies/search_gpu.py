"""The GPU searchers against cuVS CAGRA on the same graph, GPU and run.

    python benchmarks/studies/search_gpu.py --out out/ [--dataset sift|minilm] [--dtype float32|float16|int8]
                                            [--metric inner_product] [--minilm-dir DIR] [--no-cuvs]

Writes ``search_gpu_<dataset>[_<dtype>][_<metric>].jsonl`` and ``.png`` to --out. ``--dtype`` searches the same data
in another vector dtype with the same distances, so the ground truth holds: sift-photos (uint8) as float32,
float16 (exact for 0..255) or int8 (x - 128: L2 distances unchanged); minilm-words (float16) as float32.
``--metric inner_product`` searches minilm-words (unit vectors) by inner product, against the exact
inner-product neighbours (computed by ``knngraph.knn``). minilm-words comes from ``--minilm-dir`` (default
``$KNNGRAPH_MINILM_DIR``, else the shared datasets folder).
1. the prepared graph (``song.build`` defaults: exact 96-NN, ``optimize_graph`` to degree 32), built on the
   GPU, and its build time;
2. batch 10k (all queries, k=10): recall@10 against queries per second for knngraph's fast searcher
   (``algo='beam'``, the default), SONG's kernel (``algo='song'``) and, when cuVS imports, CAGRA's searcher
   on the same graph (``cagra.from_graph``) and on CAGRA's own graph (``cagra.build``, nn_descent);
   queries and outputs are on the GPU for every method (a call = one search of all queries, synchronised);
   per point: distance computations and expansions per query, bytes of vectors + graph rows read per
   query and the share of the GPU's copy bandwidth that reaches;
3. small batches (``--batches``, default 1, 10, 100, 1000 queries per call): per method and batch size, a
   sweep of queue / itopk sizes with the recall at that batch size (the first 2000 queries, or all from batch
   100 on, searched a batch at a time: knngraph's search width and CAGRA's algorithm both follow the batch
   size) and the median time per call; a ``small_batch_summary`` line per target recall (0.95, 0.99) and
   batch: each method's fastest setting that reaches the target, knngraph / CAGRA time ratios, and knngraph's
   time with host queries (NumPy in and out) and host time per call (device queries, ``out=``: the call
   returns before the kernel ends, :func:`benchmarks.runner.measure.host_seconds`); ``--widths 2,8`` also
   sweeps fixed search widths at batch 1000 (the automatic choice is 4);
4. a ``summary`` line: per curve, the QPS interpolated at recall 0.90, 0.95, 0.99, and knngraph / CAGRA.

Timing: the runner's protocol (a warm-up call, then the median of --repeats calls; of --calls calls for a
small batch). Recall: the runner's (:mod:`benchmarks.runner.quality`: the returned ids' distances
recomputed, ties at the true 10th distance count). CAGRA runs in child processes of this script (one per
index), so that an error inside cuVS is logged and ends only that part. cuVS comes from its wheels
(``pip install cuvs-cu13``, or carried over to a machine without network, with ``$CUVS_ENV`` naming the
script that sets their paths, sourced first); without it the CAGRA parts are skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import qps_at  # noqa: E402
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, host_seconds, portable_paths, sync, time_calls  # noqa: E402

BEAM_QUEUES = [16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256]
SONG_QUEUES = [16, 24, 32, 48, 64, 96, 128, 192, 256]
CAGRA_ITOPK = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
BATCHES = [1, 10, 100, 1000]
SMALL_QUEUES = [16, 20, 24, 32, 40, 48, 64, 96, 128]


def copy_bandwidth():
    """Device-to-device copy rate in bytes/s (bytes read + written) of a 1 GiB array."""
    import cupy as cp

    src = cp.empty(1 << 30, cp.uint8)
    dst = cp.empty_like(src)
    return 2 * src.nbytes / time_calls(lambda: dst.__setitem__(Ellipsis, src), 5).median_s


def per_call(fn, calls: int):
    """Median seconds of ``fn()`` by the runner's protocol (a warm-up call, then ``calls`` timed calls)."""
    return time_calls(fn, calls).median_s


def load_dataset(args) -> data.Dataset:
    """``args.dataset`` in ``args.dtype`` under ``args.metric`` (see the module's docstring)."""
    if getattr(args, "minilm_dir", ""):
        os.environ["KNNGRAPH_MINILM_DIR"] = args.minilm_dir
    ds = data.load("sift-photos-450k" if args.dataset == "sift" else "minilm-words")
    metric, gt = ds.metric, ds.gt_ids
    if args.metric == "inner_product":
        if args.dataset != "minilm":
            raise SystemExit("--metric inner_product: minilm-words only (unit vectors)")
        metric, gt = "inner_product", None  # the truth under inner product, computed on first use
    base, queries = ds.base, ds.queries
    if args.dtype:
        base, queries = same_distances_as(base, args.dtype), same_distances_as(queries, args.dtype)
    return data.Dataset(result_name(args), np.ascontiguousarray(base), np.ascontiguousarray(queries), metric,
                        ds.source, gt)


_LOADED: list = []  # the dataset load() read last, which score() scores against


def load(args):
    """(base, queries, true top-10 ids, their distances, metric, bytes per vector row) of
    :func:`load_dataset` (the form ``benchmarks/studies/profile_search_width.py`` reads)."""
    ds = load_dataset(args)
    _LOADED[:] = [ds]
    gt, gt_d = ds.truth(10)
    return ds.base, ds.queries, gt, gt_d, ds.metric, ds.d * ds.base.dtype.itemsize


def score(ids, dists=None, gt=None, gt_d=None):
    """recall@10 of ``ids``, the results of the first ``len(ids)`` queries of the dataset :func:`load`
    read last, by the runner's definition (:func:`benchmarks.runner.quality.recall`); the other arguments
    are ignored (the signature ``benchmarks/studies/profile_search_width.py`` calls)."""
    return quality.recall(_LOADED[0], ids, 10, first=len(ids))


def result_name(args) -> str:
    return args.dataset + (f"_{args.dtype}" if args.dtype else "") + (f"_{args.metric}" if args.metric else "")


def same_distances_as(x, dtype: str):
    """``x`` in ``dtype`` with the same L2 / cosine distances: a cast where every value is exact in
    ``dtype``, uint8 shifted by -128 for int8 (L2 only: a shift changes angles)."""
    dt = np.dtype(dtype)
    if dt == np.int8:
        if x.dtype != np.uint8:
            raise SystemExit("--dtype int8 needs uint8 vectors (sift-photos)")
        return (x.astype(np.int16) - 128).astype(np.int8)
    y = x.astype(dt)
    if not np.array_equal(y.astype(np.float32), x.astype(np.float32)):
        raise SystemExit(f"--dtype {dtype}: {x.dtype} values are not exact in {dtype}")
    return y


class SmallBatches:
    """Per (method, batch size): the sweep of settings with the recall at that batch size and the time per
    call; stops a sweep at the first setting whose recall reaches 0.99."""

    def __init__(self, log, ds, calls):
        self.log, self.ds, self.calls = log, ds, calls
        self.points = {}  # (method, batch) -> [(recall, ms, setting)]
        self.t0 = time.perf_counter()

    def recall_and_ms(self, search_fn, b):
        """(recall@10 over the first queries searched ``b`` at a time: 2000, or all from batch 100 on; the
        median ms per call of one batch). ``search_fn(s0, s1, fetch)`` -> host ids (or None: not fetched)."""
        nr = self.ds.nq if b >= 100 else min(self.ds.nq, 2000)
        ids = np.concatenate([search_fn(s0, min(s0 + b, nr), True) for s0 in range(0, nr, b)])
        return quality.recall(self.ds, ids, 10, first=nr), per_call(lambda: search_fn(0, b, False), self.calls) * 1e3

    def sweep(self, method, b, settings, make_fn):
        pts = self.points.setdefault((method, b), [])
        for setting in settings:
            r, ms = self.recall_and_ms(make_fn(setting, b), b)
            pts.append((r, ms, setting))
            self.log.write(part="small_batch", method=method, batch=b, setting=setting, recall_at_batch=r,
                           ms_per_call_device_io=ms, elapsed_s=time.perf_counter() - self.t0)
            if r >= 0.99:
                break


def fastest(pts, target):
    """The fastest (recall, ms, setting) point whose recall reaches ``target``, or None."""
    ok = [p for p in pts if p[0] >= target]
    return min(ok, key=lambda p: p[1]) if ok else None


def cagra_child(args, which: str, graph_file: str):
    """One CAGRA index (``which``: on knngraph's graph from ``graph_file``, or CAGRA's own nn_descent build):
    the batch-10k sweep and the small batches, logged; prints its curves as a last ``CURVES`` line."""
    import json

    import cupy as cp

    from benchmarks.runner.methods import cuvs_array, cuvs_modules

    cagra = cuvs_modules()[0]
    log = JsonLines(Path(args.out) / f"search_gpu_{result_name(args)}.jsonl")
    ds = load_dataset(args)
    nq = ds.nq
    xb, cmetric = cuvs_array(ds.base, ds.metric, (ds.dtype,))
    xq, _ = cuvs_array(ds.queries, ds.metric, (ds.dtype,))
    sync()
    t0 = time.perf_counter()
    if which == "cagra-on-knngraph":
        ids = np.ascontiguousarray(np.load(graph_file).astype(np.uint32))
        cidx = cagra.from_graph(ids if args.graph_on_host else cp.asarray(ids), xb, metric=cmetric)
        method = "cagra.from_graph"
    else:
        cidx = cagra.build(cagra.IndexParams(metric=cmetric, graph_degree=32, intermediate_graph_degree=64,
                                             build_algo="nn_descent"), xb)
        method = "cagra.build nn_descent 64->32"
    sync()
    log.write(part="graph", method=method, build_s=time.perf_counter() - t0)

    def make(it, b):
        sp = cagra.SearchParams(itopk_size=it)
        d_out = cp.empty((b, 10), cp.float32)
        i_out = cp.empty((b, 10), cp.uint32)

        def fn(s0, s1, fetch=True):
            if s1 - s0 == b:
                cagra.search(sp, cidx, xq[s0:s1], 10, neighbors=i_out, distances=d_out)
                ii = i_out
            else:
                _, ii = cagra.search(sp, cidx, xq[s0:s1], 10)
            return cp.asnumpy(cp.asarray(ii)).astype(np.int64) if fetch else None
        return fn

    curve = []
    for it in CAGRA_ITOPK:
        fn = make(it, nq)
        secs = per_call(lambda: fn(0, nq, False), args.repeats)
        r = quality.recall(ds, fn(0, nq, True))
        curve.append((r, nq / secs, it))
        log.write(part="batch10k", method=which, itopk_size=it, recall=r, qps=nq / secs, seconds=secs)
    small = SmallBatches(log, ds, args.calls)
    for b in parse_batches(args.batches):
        small.sweep(which, b, CAGRA_ITOPK[:8], make)
    print("CURVES " + json.dumps({"batch10k": curve,
                                  "small": [[b, pts] for (_, b), pts in small.points.items()]}), flush=True)


def parse_batches(text: str):
    return [int(b) for b in text.split(",") if b]


def run_cagra_children(args, graph_file: Path, log):
    """CAGRA on knngraph's graph and on its own, each in a child process: an error inside cuVS (cuVS 26.10
    hit an illegal address on minilm-words after knngraph's searches in one process) poisons only that
    process's CUDA context, and is logged."""
    import json
    import subprocess

    def child(which, graph_on_host=False):
        """The child's curves, or None (its failure logged)."""
        cmd = [sys.executable, __file__, "--dataset", args.dataset, "--dtype", args.dtype, "--metric", args.metric,
               "--minilm-dir", args.minilm_dir, "--out", args.out, "--repeats", str(args.repeats),
               "--calls", str(args.calls), "--batches", args.batches, "--cagra-child", which,
               "--graph-file", str(graph_file)] + (["--graph-on-host"] if graph_on_host else [])
        method = which + ("-host-graph" if graph_on_host else "")
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.cagra_timeout)
        except subprocess.TimeoutExpired:
            log.write(part="cuvs", method=method, failed=f"timed out after {args.cagra_timeout} s")
            return None
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("CURVES ")]
        if p.returncode != 0 or not lines:
            log.write(part="cuvs", method=method, failed=f"exit status {p.returncode}",
                      stderr_head=portable_paths("\n".join(p.stderr.splitlines()[:25]))[:3000],
                      stderr_tail=portable_paths("\n".join(p.stderr.splitlines()[-25:]))[-3000:])
            return None
        return json.loads(lines[-1][len("CURVES "):])

    curves, small = {}, {}
    for which in ("cagra-on-knngraph", "cagra-own-graph"):
        got = child(which)
        if got is None and which == "cagra-on-knngraph":
            got = child(which, graph_on_host=True)  # cuVS 26.10 failed on float32 with the graph on the device
        if got is None:
            continue
        curves[which] = [tuple(p) for p in got["batch10k"]]
        for b, pts in got["small"]:
            small[(which, b)] = [tuple(p) for p in pts]
    return curves, small


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--dataset", choices=["sift", "minilm"], default="sift")
    ap.add_argument("--dtype", default="", choices=["", "float32", "float16", "int8"],
                    help="the same vectors in another dtype (default: the dataset's own)")
    ap.add_argument("--metric", default="", choices=["", "inner_product"],
                    help="minilm-words by inner product (its vectors are unit length; default: the dataset's metric)")
    ap.add_argument("--minilm-dir", default=os.environ.get("KNNGRAPH_MINILM_DIR", ""),
                    help="minilm-words folder (default $KNNGRAPH_MINILM_DIR, else the shared datasets)")
    ap.add_argument("--no-cuvs", action="store_true")
    ap.add_argument("--algos", default="beam,song", help="knngraph searchers to sweep")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50, help="calls per small-batch point")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)), help="small batch sizes")
    ap.add_argument("--widths", default="", help="fixed search widths also swept at batch 1000, e.g. 2,8")
    ap.add_argument("--cagra-timeout", type=float, default=400)
    ap.add_argument("--cagra-child", help=argparse.SUPPRESS)
    ap.add_argument("--graph-file", help=argparse.SUPPRESS)
    ap.add_argument("--graph-on-host", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cagra_child:
        return cagra_child(args, args.cagra_child, args.graph_file)
    import cupy as cp

    import knngraph
    from knngraph import song

    out = Path(args.out)
    log = JsonLines(out / f"search_gpu_{result_name(args)}.jsonl")
    ds = load_dataset(args)
    ds.truth(10)
    base, queries, metric, nq = ds.base, ds.queries, ds.metric, ds.nq
    row_bytes = ds.d * base.dtype.itemsize
    bw = copy_bandwidth()
    log.write(part="env", dataset=args.dataset, n=ds.n, dim=ds.d, dtype=ds.dtype, queries=nq,
              copy_bandwidth_gbs=bw / 1e9, gpu=log.env.get("gpu"))

    # 1. the prepared graph
    xb = cp.asarray(base)
    xq = cp.asarray(queries)

    def prepare():
        raw = knngraph.knn_graph(xb, 96, metric=metric, device="cuda", verbose=False)
        return knngraph.optimize_graph(raw, xb, graph_degree=32, device="cuda", verbose=False)

    t = time_calls(prepare, 1)
    graph = t.result
    index = song.from_graph(graph, xb, song.IndexParams(metric=metric), device="cuda")
    log.write(part="graph", method="knngraph exact96+optimize32", build_s=t.median_s, first_call_s=t.first_call_s)
    degree = graph.degree

    curves = {}

    # 2. batch 10k, knngraph
    for algo, queues in [(a, q) for a, q in (("beam", BEAM_QUEUES), ("song", SONG_QUEUES))
                         if a in args.algos.split(",")]:
        name = f"knngraph-{algo}"
        curves[name] = []
        for qs in queues:
            sp = song.SearchParams(queue_size=qs, algo=algo)
            o = (cp.empty((nq, 10), cp.float32), cp.empty((nq, 10), cp.int32))
            stats = {}
            song.search(index, xq, 10, sp, device="cuda", verbose=False, stats=stats, out=o)
            secs = per_call(lambda: song.search(index, xq, 10, sp, device="cuda", verbose=False, out=o),
                            args.repeats)
            r = quality.recall(ds, o[1])
            qps = nq / secs
            nd, ne = stats["distances_per_query"], stats["expansions_per_query"]
            bytes_q = nd * row_bytes + ne * 4 * degree
            curves[name].append((r, qps, qs))
            log.write(part="batch10k", method=name, queue_size=qs, recall=r, qps=qps, seconds=secs,
                      distances_per_query=nd, expansions_per_query=ne, bytes_per_query=bytes_q,
                      bandwidth_share=bytes_q * qps / bw)

    # 3. small batches: per batch size and method, the setting sweep with the recall *at that batch size*
    # (knngraph's search width and CAGRA's algorithm both follow the batch size)
    small = SmallBatches(log, ds, args.calls)

    def beam_fn(width):
        def make(qs, b):
            sp = song.SearchParams(queue_size=qs, search_width=width)
            o = (cp.empty((b, 10), cp.float32), cp.empty((b, 10), cp.int32))

            def fn(s0, s1, fetch=True):
                _, i_ = song.search(index, xq[s0:s1], 10, sp, device="cuda", verbose=False,
                                    out=o if s1 - s0 == b else None)
                return cp.asnumpy(i_) if fetch else None
            return fn
        return make

    batches = parse_batches(args.batches)
    for b in batches:
        small.sweep("knngraph-beam", b, SMALL_QUEUES, beam_fn(0))
        if b >= 1000:  # the automatic search width against fixed ones
            for w in parse_batches(args.widths):
                small.sweep(f"knngraph-beam-width{w}", b, SMALL_QUEUES, beam_fn(w))

    # 2b + 3b. CAGRA, in child processes
    if not args.no_cuvs:
        import importlib.util

        if importlib.util.find_spec("cuvs") is None:
            log.write(part="cuvs", skipped="cuVS not importable (source $CUVS_ENV first)")
        else:
            graph_file = out / "_search_gpu_graph.npy"
            ids = np.asarray(graph.to_host().indices)
            bad = (ids < 0) | (ids >= len(base))
            log.write(part="graph_check", ids_outside_0_n=int(bad.sum()), rows_with_them=int(bad.any(axis=1).sum()))
            np.save(graph_file, ids)
            cagra_curves, cagra_small = run_cagra_children(args, graph_file, log)
            graph_file.unlink()
            curves.update(cagra_curves)
            small.points.update(cagra_small)

    # 4. per target and batch: each method's fastest setting reaching the target, knngraph / CAGRA ratios,
    # knngraph's time with host queries and its host time per call
    small_summary = []
    for target in (0.95, 0.99):
        for b in batches:
            row = {"target": target, "batch": b}
            for (method, bb), pts in small.points.items():
                if bb == b:
                    best = fastest(pts, target)
                    row[method] = None if best is None else {"ms": best[1], "recall": best[0], "setting": best[2]}
            ours = row.get("knngraph-beam")
            if ours is not None:
                sp = song.SearchParams(queue_size=ours["setting"])
                qd = xq[:b]
                o = (cp.empty((b, 10), cp.float32), cp.empty((b, 10), cp.int32))
                host = host_seconds(lambda: song.search(index, qd, 10, sp, device="cuda", verbose=False, out=o),
                                    args.calls)
                ours["host_ms_per_call"] = statistics.median(host) * 1e3
                ours["ms_per_call_host_io"] = per_call(
                    lambda: song.search(index, queries[:b], 10, sp, device="cuda", verbose=False), args.calls) * 1e3
                for other in ("cagra-on-knngraph", "cagra-own-graph"):
                    if row.get(other):
                        row[f"time_ratio_beam/{other}"] = ours["ms"] / row[other]["ms"]
            small_summary.append(row)
            log.write(part="small_batch_summary", **row)

    # 5. summary
    summary = {}
    for name, pts in curves.items():
        summary[name] = {str(t): qps_at([(r, q) for r, q, _ in pts], t) for t in (0.90, 0.95, 0.99)}
    ratios = {}
    for other in ("cagra-on-knngraph", "cagra-own-graph"):
        if other in summary and "knngraph-beam" in summary:
            ratios[f"beam/{other}"] = {t: (summary["knngraph-beam"][t] / summary[other][t]
                                          if summary["knngraph-beam"][t] and summary[other][t] else None)
                                       for t in summary["knngraph-beam"]}
    log.write(part="summary", qps_at_recall=summary, ratios=ratios, small_batches=small_summary)
    plot(out / f"search_gpu_{result_name(args)}.png", curves, args.dataset)


def plot(path, curves, dataset):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        print("plot skipped:", exc)
        return
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, pts in curves.items():
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name)
    ax.set_yscale("log")
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second (batch 10k)")
    ax.set_title(f"{dataset}: knngraph vs cuVS CAGRA, same graph and GPU")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
