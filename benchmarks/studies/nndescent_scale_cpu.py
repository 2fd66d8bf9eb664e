"""NN-Descent graph recall against n on the CPU: does it fall as the set grows, and which knob recovers it.

    NUMBA_NUM_THREADS=2 python benchmarks/studies/nndescent_scale_cpu.py --out out/
    python benchmarks/studies/nndescent_scale_cpu.py --sizes 50000,200000 --out out/     # quicker

Data: ``benchmarks._common.clustered(n, 128, seed=--seed, overlapping=True, xp=np)`` (n/2000 overlapping
Gaussian clusters, at least 100, in a shared 12-dimensional subspace). k = 32. For each n, graph
recall@10 and @32 (the runner's :class:`benchmarks.runner.quality.GraphTruth`: a fixed sample of
``--sample-nodes`` nodes whose exact neighbours come from brute force, ties counted as hits) of:

* the initial lists alone (``init="rp_forest"``, the CPU default: the forest of ``_common.forest_params``);
* one ``nndescent.build`` per variant of ``--variants``: ``default`` (the library defaults) and parameter
  overrides such as ``max_iterations=60``, ``termination_threshold=0.0001``, ``sample_size=16`` or
  ``init=random,update=selective`` (the GPU's iteration: random initial lists, GNND's selective update).
  ``graph_degree=64`` builds longer lists and scores their first k entries. ``reverse=ascending`` (no
  parameter: an experiment) replaces the CPU's reverse sampling, a seeded uniform reservoir of at most p
  offers per list that changes every iteration, by the first p offers in ascending node order, every
  iteration the same: what the GPU's atomic appends give when a grid-stride loop visits the nodes in
  order (the larger n against the grid, the closer the race order is to ascending ids).

Each build line has its time (the per-iteration recall measurement excluded), the iterations run, why
they stopped (``threshold``: an iteration inserted fewer than ``termination_threshold * n * k`` entries;
``max_iterations``: the cap), the entries inserted per iteration (absolute and as a share of n * k) and
the graph recall@10 after every iteration. All builds are warmed up (JIT) on a small subset first. One
JSON line per measurement in ``nndescent_scale_cpu.jsonl`` under --out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner import quality  # noqa: E402
from benchmarks.runner.cli import parse_overrides  # noqa: E402
from benchmarks.runner.measure import JsonLines  # noqa: E402

DEFAULT_VARIANTS = ("default;max_iterations=60;termination_threshold=0.0001;"
                    "termination_threshold=0.00001,max_iterations=60;sample_size=16;init=random,update=selective")


def initial_recall(base, k, truth) -> dict:
    """Graph recall of the CPU default's initial lists (the random projection forest), and its time."""
    from knngraph._device import Device
    from knngraph.nndescent import _build
    from knngraph.nndescent._common import forest_params
    from knngraph.primitives.distances import distance_kind

    engine = _build.make_engine(Device("cpu"))
    kind = distance_kind("sqeuclidean")
    t0 = time.perf_counter()
    x, inv = engine.prepare(base, kind)
    gd, gi, gf = engine.new_graph(x.shape[0], k)
    n_trees, leaf_size = forest_params(x.shape[0], k)
    _, _, order = engine.init_forest(x, inv, kind, gd, gi, gf, 0, n_trees, leaf_size)
    _, ids = engine.unpermute(gd, gi, order)
    seconds = time.perf_counter() - t0
    return {"n_trees": n_trees, "leaf_size": leaf_size, "seconds": seconds, "recall@10": truth.recall(ids, 10),
            f"recall@{k}": truth.recall(ids, k)}


def _ascending_reverse_sampler(items):
    """A stand-in for ``knngraph.nndescent.cpu``'s ``sample_reverse`` entry (the kernel over an item range
    and its item count ``items``): each list keeps the first p offers in ascending order of the offering
    node. Worker w owns the lists of the w-th id range and reads every forward sample in order, as the
    library's kernel does, so the result does not depend on the number of threads."""
    from knngraph.primitives.compile import SplitKernel

    def sample_reverse_ascending(i0, i1, fwd, nfwd, rev, nrev, seed, salt, n_workers):
        n = fwd.shape[0]
        p = rev.shape[1]
        for w in range(i0, i1):
            lo = w * n // n_workers
            hi = (w + 1) * n // n_workers
            for v in range(lo, hi):
                nrev[v] = 0
            for s in range(n):
                for t in range(nfwd[s]):
                    v = fwd[s, t]
                    if v < lo or v >= hi:
                        continue
                    c = nrev[v]
                    if c < p:
                        rev[v, c] = s
                    nrev[v] = c + 1

    return SplitKernel(sample_reverse_ascending, fastmath=False), items


def build(base, k, overrides, truth) -> dict:
    """One default-or-overridden build with the recall after every iteration."""
    from knngraph import nndescent
    from knngraph.nndescent import cpu

    overrides = dict(overrides)
    reverse = overrides.pop("reverse", "reservoir")
    if reverse not in ("reservoir", "ascending"):
        raise ValueError(f"reverse must be 'reservoir' or 'ascending', got {reverse!r}")
    saved = cpu._BUILDS["sample_reverse"]
    if reverse == "ascending":
        cpu._BUILDS["sample_reverse"] = _ascending_reverse_sampler(saved[1])
    try:
        row = _build(base, k, nndescent.IndexParams(**{"graph_degree": k, **overrides}), truth)
    finally:
        cpu._BUILDS["sample_reverse"] = saved
    return {**row, "reverse_sampling": reverse}


def _build(base, k, params, truth) -> dict:
    from knngraph import nndescent
    from knngraph.nndescent._index import _build_degree

    curve = []
    measuring = [0.0]

    def after_iteration(it, gd, gi):
        tc = time.perf_counter()
        curve.append(round(truth.recall(gi[:, :k], 10), 5))
        measuring[0] += time.perf_counter() - tc

    t0 = time.perf_counter()
    index = nndescent.build(params, base, device="cpu", verbose=False, _callback=after_iteration)
    seconds = time.perf_counter() - t0 - measuring[0]
    info = index.graph.info
    ids = index.graph.indices[:, :k]  # a graph_degree override above k is scored on its first k columns
    n = base.shape[0]
    # the lists the iterations keep
    kb = _build_degree(params, params.graph_degree, n, info["update"] == "selective")
    updates = [int(u) for u in info["updates_per_iteration"]]
    iterations = int(info["iterations"])
    stopped = "threshold" if updates[-1] < params.termination_threshold * n * kb else "max_iterations"
    return {"build_s": seconds, "recall@10": truth.recall(ids, 10), f"recall@{k}": truth.recall(ids, k),
            "graph_degree": params.graph_degree, "iterations": iterations, "stopped_by": stopped,
            "sample_size": info["sample_size"], "init": info["init"], "update": info["update"],
            "max_iterations": params.max_iterations, "termination_threshold": params.termination_threshold,
            "updates_per_iteration": updates, "update_share_per_iteration": [u / (n * kb) for u in updates],
            "recall@10_per_iteration": curve,
            "seconds_per_iteration": [round(s, 3) for s in info["seconds_per_iteration"]],
            "join_passes": info.get("join_passes")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="50000,200000,800000", help="comma-separated row counts")
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS,
                    help="';'-separated builds: 'default' or comma-separated IndexParams overrides (key=value)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic set")
    ap.add_argument("--sample-nodes", type=int, default=1000)
    ap.add_argument("--no-initial", action="store_true", help="skip the recall of the forest's initial lists")
    ap.add_argument("--out", default="out")
    args = ap.parse_args(argv)
    import numba

    import knngraph
    from knngraph.primitives.compile import SERIAL_BELOW

    k = args.k
    variants = [(spec.strip(), parse_overrides(spec)) for spec in args.variants.split(";") if spec.strip()]
    log = JsonLines(Path(args.out) / "nndescent_scale_cpu.jsonl")
    # warm-up (JIT) of every kernel the variants use, threaded ones from SERIAL_BELOW rows on
    warm = clustered(SERIAL_BELOW + 2000, 128, seed=args.seed + 1, overlapping=True, xp=np)
    for init, update in {(o.get("init", "auto"), o.get("update", "auto")) for _, o in variants}:
        knngraph.knn_graph(warm, k, method="nndescent", device="cpu", verbose=False, init=init, update=update)
    for n in (int(s) for s in args.sizes.split(",")):
        base = clustered(n, 128, seed=args.seed, overlapping=True, xp=np)
        truth = quality.GraphTruth(base, "sqeuclidean", k, sample=args.sample_nodes, device="cpu")
        common = {"n": n, "d": 128, "clusters": max(100, n // 2000), "k": k, "threads": numba.get_num_threads()}
        if not args.no_initial:
            log.write(**common, variant="initial_lists", **initial_recall(base, k, truth))
        for name, overrides in variants:
            log.write(**common, variant=name, **build(base, k, overrides, truth))


if __name__ == "__main__":
    main()
