"""The per-call cost of small GPU searches, this tree against an older one, in ONE process.

    python benchmarks/studies/search_calls_ab.py --before OLD/src --out out/   # on a machine with a GPU

A search of 1 to 1,000 queries costs a few hundred microseconds, most of it on the host (checks, the
query copy, the launch, the copy back). Timed in two processes, the host's speed drifts by 10-30%
between them on a lent machine, far more than the difference to be found. So the older tree's package
(``--before``: a directory holding ``knngraph/``) is copied under the name ``knngraph_before`` and
imported beside this one; both search the same graph (the SONG-prepared graph of sift-photos 450k, built
once by this tree: exact 96-NN pruned to degree 32), and their calls are timed in alternating blocks
(``--rounds`` blocks of ``--calls`` calls each, the order flipped every round), so the host's drift hits
both alike. Each block's median per call is compared with the other tree's block of the same round;
``ratio`` is the median of those ratios (this tree / older, below 1 is faster). Calls are timed with a
device synchronisation before and after (host queries: the copy to the GPU, the search and the copy
back; device queries: no copies). ``same_ids``: whether both trees return the same ids.

Writes ``search_calls_ab.jsonl`` (one line per queue size x batch x query placement) and
``search_calls_ab.png`` (the ratios) to --out.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import _common  # noqa: E402
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402


def import_before(source: Path, workdir: Path):
    """The package ``source / 'knngraph'`` imported as ``knngraph_before`` (a copy in ``workdir``). The
    package reaches its own modules by relative imports, so the copy runs as the original does."""
    package = source / "knngraph"
    if not (package / "__init__.py").is_file():
        raise FileNotFoundError(f"--before: {source} holds no knngraph package (expected {package}/__init__.py)")
    shutil.copytree(package, workdir / "knngraph_before", ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(workdir))
    return importlib.import_module("knngraph_before")


def alternate(calls: dict, rounds: int, per_block: int) -> dict:
    """Median microseconds per call of each entry of ``calls`` (name -> function) per round, the entries
    timed in alternating blocks (order flipped every round) after a warm-up of 10 calls per block, each call
    by :func:`benchmarks.runner.measure.time_calls`."""
    names = list(calls)
    medians = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            fn = calls[name]
            for _ in range(10):
                fn()
            # the runner's protocol: the device synchronised before and after each call
            medians[name].append(time_calls(fn, per_block, warmup=False).median_s * 1e6)
    return medians


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="directory holding the older tree's knngraph package")
    ap.add_argument("--out", default="out")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=100, help="calls per block (a fifth of it for 10k queries)")
    ap.add_argument("--label", default="", help="a name for the older tree (e.g. its commit)")
    ap.add_argument("--profile", type=int, default=0,
                    help="instead: profile this many one-query calls (device queries, queue 32) of each tree with "
                         "cProfile and print each tree's functions by own time")
    args = ap.parse_args()
    import cupy as cp

    import knngraph
    from knngraph import song

    out = Path(args.out)
    log = JsonLines(out / "search_calls_ab.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        before = import_before(Path(args.before), Path(tmp))
        song_before = importlib.import_module("knngraph_before.song")
        ds = data.load("sift-photos-450k")
        xs = cp.asarray(ds.base)
        prepared = knngraph.optimize_graph(knngraph.knn_graph(xs, 96, device="cuda", verbose=False), xs, 32,
                                           device="cuda", verbose=False)
        ids, dists = cp.asnumpy(prepared.indices), cp.asnumpy(prepared.distances)
        index = {"this": song.from_graph(knngraph.Graph(ids, dists, "sqeuclidean"), xs, device="cuda"),
                 "before": song_before.from_graph(before.Graph(ids, dists, "sqeuclidean"), xs, device="cuda")}
        modules = {"this": song, "before": song_before}
        if args.profile:
            _profile(modules, index, cp.asarray(np.ascontiguousarray(ds.queries[:1])), args.profile)
            return
        for queue in (32, 64):
            params = {name: modules[name].SearchParams(queue_size=queue) for name in modules}
            for batch in (1, 10, 100, 1000, 10000):
                for where in ("host", "device"):
                    q = np.ascontiguousarray(ds.queries[:batch])
                    q = cp.asarray(q) if where == "device" else q

                    def caller(name, q=q, params=params):
                        return lambda: modules[name].search(index[name], q, 10, params[name], device="cuda",
                                                            verbose=False)

                    calls = {name: caller(name) for name in modules}
                    same = bool((cp.asnumpy(calls["this"]()[1]) == cp.asnumpy(calls["before"]()[1])).all())
                    per_block = args.calls if batch < 10000 else max(5, args.calls // 5)
                    med = alternate(calls, args.rounds, per_block)
                    ratios = [a / b for a, b in zip(med["this"], med["before"])]
                    log.write(part="search_call", queue_size=queue, batch=batch, queries=where,
                              this_us=statistics.median(med["this"]), before_us=statistics.median(med["before"]),
                              ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios),
                              rounds=args.rounds, calls_per_block=per_block, same_ids=same,
                              before=args.label or "the older tree", gpu=cp.cuda.runtime.getDeviceProperties(
                                  cp.cuda.Device().id)["name"].decode())
    _plot(log.path, out / "search_calls_ab.png")


def _profile(modules: dict, index: dict, q, calls: int) -> None:
    """Print, for each tree, the 25 functions with the most own time over ``calls`` one-query searches."""
    import cProfile
    import io
    import pstats

    import cupy as cp

    for name, module in modules.items():
        params = module.SearchParams(queue_size=32)
        for _ in range(200):
            module.search(index[name], q, 10, params, device="cuda", verbose=False)
        cp.cuda.Device().synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            module.search(index[name], q, 10, params, device="cuda", verbose=False)
        cp.cuda.Device().synchronize()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        print(f"== {name}: {calls} calls\n{text.getvalue()}", flush=True)


def _plot(jsonl: Path, png: Path) -> None:
    rows, plt = _common.read_plot_input(jsonl)
    if plt is None:
        return
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for queue in sorted({r["queue_size"] for r in rows}):
        for where, style in (("host", "-o"), ("device", "--s")):
            sel = sorted((r for r in rows if r["queue_size"] == queue and r["queries"] == where),
                         key=lambda r: r["batch"])
            ax.plot([r["batch"] for r in sel], [r["ratio"] for r in sel], style,
                    label=f"queue {queue}, {where} queries")
    ax.set_xscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(1.03, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("queries per call")
    ax.set_ylabel("time per call, this tree / older")
    ax.set_title(f"{rows[0]['gpu']}: this tree against {rows[0]['before']} (same process)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
