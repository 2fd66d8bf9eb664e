"""The per-call host cost of small CPU searches of ``song.search``, this tree against older ones, in ONE process.

    python benchmarks/studies/search_calls_cpu_ab.py --before OLD/src [--before OTHER/src ...]

The CPU path shares the GPU path's entry: the decorator that makes the input's device current, the
argument checks, the filter and device dispatch, and the results handed back in the caller's framework.
So a small CPU search (a few hundred vertices, 1 or 100 queries) times that host work on a machine
without a GPU; its kernel runs a few microseconds. Each ``--before`` (a directory holding
``knngraph/``) is imported beside this tree under its own name (``knngraph_before0``, ...), all trees
search the same graph with the same queries, and their calls are timed in alternating blocks (the order
reversed every round), so the host's drift hits all alike. Prints, per batch, each tree's median of the
blocks' median microseconds per call and the median ratio to this tree (below 1: this tree is faster),
and whether the ids agree. ``--out``: also one JSON line per tree and batch. The kernels run on one thread
(``--threads``): on a loaded 2-core machine a thread pool's wake-ups made 100-query calls swing by milliseconds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def import_tree(source: Path, workdir: Path, name: str):
    """The package ``source / 'knngraph'`` imported as ``name`` (a copy in ``workdir``; it reaches its own
    modules by relative imports, so the copy runs as the original does)."""
    package = source / "knngraph"
    if not (package / "__init__.py").is_file():
        raise FileNotFoundError(f"--before: {source} holds no knngraph package (expected {package}/__init__.py)")
    shutil.copytree(package, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))
    if str(workdir) not in sys.path:
        sys.path.insert(0, str(workdir))
    return importlib.import_module(name)


def block_median_us(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", action="append", required=True, help="directory holding an older knngraph package")
    ap.add_argument("--n", type=int, default=500, help="vectors of the index")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=300, help="calls per block")
    ap.add_argument("--batches", default="1,100")
    ap.add_argument("--threads", type=int, default=1,
                    help="numba threads of the kernels (1: the walks run on the calling thread, so a busy machine's "
                         "scheduling of a thread pool does not swamp the few microseconds compared)")
    ap.add_argument("--out", default="", help="a JSON-lines file to append the results to")
    args = ap.parse_args()

    import numba

    import knngraph
    from knngraph import song

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))

    rng = np.random.default_rng(0)
    x = rng.random((args.n, args.dim), dtype=np.float32)
    graph = knngraph.optimize_graph(knngraph.knn_graph(x, 32, device="cpu", verbose=False), x, 16, device="cpu",
                                    verbose=False)
    ids, dists = np.asarray(graph.indices), np.asarray(graph.distances)
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this": (knngraph, song)}
        for j, src in enumerate(args.before):
            pkg = import_tree(Path(src), Path(tmp), f"knngraph_before{j}")
            trees[src] = (pkg, importlib.import_module(f"knngraph_before{j}.song"))
        index = {name: s.from_graph(pkg.Graph(ids, dists, "sqeuclidean"), x, device="cpu", verbose=False)
                 for name, (pkg, s) in trees.items()}
        for batch in (int(b) for b in args.batches.split(",")):
            q = np.ascontiguousarray(rng.random((batch, args.dim), dtype=np.float32))

            def caller(name, q=q):
                s = trees[name][1]
                params = s.SearchParams(queue_size=32)
                ix = index[name]
                return lambda: s.search(ix, q, 10, params, device="cpu", verbose=False)

            calls = {name: caller(name) for name in trees}
            ref = calls["this"]()[1]
            same = {name: bool((np.asarray(fn()[1]) == ref).all()) for name, fn in calls.items()}
            names = list(calls)
            med = {name: [] for name in names}
            for r in range(args.rounds):
                for name in (names if r % 2 == 0 else names[::-1]):
                    for _ in range(20):
                        calls[name]()
                    med[name].append(block_median_us(calls[name], args.calls))
            for name in names:
                ratios = [a / b for a, b in zip(med[name], med["this"])]
                row = dict(batch=batch, tree=name, us=round(statistics.median(med[name]), 2),
                           ratio_to_this=round(statistics.median(ratios), 4), same_ids=same[name])
                print(json.dumps(row), flush=True)
                if args.out:
                    with open(args.out, "a") as fh:
                        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
