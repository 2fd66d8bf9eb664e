"""Where a GRNND build on the GPU spends its time: every step of the rounds timed on its own.

    python benchmarks/studies/profile_grnnd_rounds.py --out out/ [--n 450000] [--alphas 1.0,1.05] [--rounds 3x6,3x4]
        [--degree 32] [--device cuda|cpu]

sift-photos (the first --n rows, uint8) built by the library's own driver (``grnnd._index.run_rounds``
and ``_finish``) with the GPU implementation wrapped so that each call of a step (``random_rows``,
``row_proposals``, ``propose``, ``group``, ``merge``, ``reverse``; the final ``prune``) runs between two
device synchronisations and its seconds are added to the step's total. The synchronisations cost a
little (a few hundred calls); ``whole_build_s`` is a plain ``grnnd.build`` for comparison (the runner's
timing protocol: a warm-up build, then a timed one). Per build
one JSON row: seconds per step, their share, calls per step, the redirects and reverse edges of the
rounds and the mean out-degree. The question it answers: is the build bound by the pair tests of
``propose`` (which grow with the pool, so with ``prune_alpha``), or by the grouping and merging of the
proposals?
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import JsonLines, sync, time_calls  # noqa: E402


class StepTimer:
    """An implementation module whose functions are timed one call at a time (device synchronised)."""

    def __init__(self, impl):
        self._impl = impl
        self.seconds = collections.defaultdict(float)
        self.calls = collections.Counter()

    def __getattr__(self, name):
        fn = getattr(self._impl, name)
        if not callable(fn):
            return fn

        def timed_step(*args, **kwargs):
            sync()
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            sync()
            self.seconds[name] += time.perf_counter() - t0
            self.calls[name] += 1
            return out

        return timed_step


def profile(base, params, device="cuda"):
    """(seconds per step, calls per step, stats, mean out-degree) of one build of ``params`` over ``base``."""
    from knngraph._device import Device, implementation
    from knngraph.grnnd import _index as gi
    from knngraph.primitives.distances import distance_kind

    dev = Device(device)
    kind = distance_kind(params.metric)
    steps = StepTimer(implementation("knngraph.grnnd", dev))
    finish = StepTimer(implementation("knngraph.graphops", dev))
    n = base.shape[0]
    xv, inv, xp = gi._prepare(base, params.metric, dev)
    stats = {}
    pools = gi.run_rounds(steps, xp, xv, inv, kind, params, n, s=gi._initial_degree(params, n), stats=stats)
    ids, _ = gi._finish(finish, xp, xv, inv, kind, params.metric, pools, params.graph_degree, params.prune_alpha)
    sync()
    seconds = dict(steps.seconds)
    seconds.update({f"final_{k}": v for k, v in finish.seconds.items()})
    calls = dict(steps.calls)
    return seconds, calls, stats, float((ids >= 0).sum()) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--n", type=int, default=450_000)
    ap.add_argument("--alphas", default="1.0,1.05")
    ap.add_argument("--rounds", default="3x6")
    ap.add_argument("--degree", type=int, default=32)
    ap.add_argument("--device", default="cuda", help="cpu: the same split of the numba path (2 cores here)")
    args = ap.parse_args()
    from knngraph import grnnd

    log = JsonLines(Path(args.out) / "profile_grnnd_rounds.jsonl")
    base = data.load(data.sift_photos(args.n)).base
    for rounds in args.rounds.split(","):
        t1, t2 = (int(v) for v in rounds.split("x"))
        for alpha in (float(a) for a in args.alphas.split(",")):
            params = grnnd.IndexParams(graph_degree=args.degree, prune_alpha=alpha, outer_iterations=t1,
                                       inner_iterations=t2)
            profile(base[:20_000], params, args.device)  # compile every kernel first
            whole = time_calls(lambda: grnnd.build(params, base, device=args.device, verbose=False), 1).median_s
            seconds, calls, stats, degree = profile(base, params, args.device)
            total = sum(seconds.values())
            log.write(part="steps", device=args.device, n=args.n, graph_degree=args.degree, prune_alpha=alpha, rounds=rounds,
                      whole_build_s=whole, steps_total_s=total, seconds=seconds,
                      share={k: v / total for k, v in seconds.items()}, calls=calls, mean_degree=degree,
                      redirects=stats.get("redirects"), reverse_edges=stats.get("reverse_edges"))


if __name__ == "__main__":
    main()
