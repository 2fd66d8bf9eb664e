"""Where a GGNN GPU build spends its time: every build step (the brute force in the segments, each
merge(lt, lm), the path searches of the symmetric linking, the link placement and its rounds, the write
of the links) timed on its own, the device synchronised before and after it.

    python benchmarks/studies/profile_ggnn_build.py [--n 450000] [--graph-degree 24] [--refinements 2] [--out DIR]
        [--inverse-links 0] [--tau-build 0.5] [--pops 100] [--waves 8] [--host-profile] [--search-tau 0.5]

The synchronisation adds a little to the total (the build itself synchronises only at phase ends); the
point is the split. The graph's hash is logged: a change that must not alter the graph keeps it. With
``--search-tau`` a GGNN search of 10k queries follows (for a profiler to pick its kernel). One JSON line
per step kind, and a total, to stdout and ``profile_ggnn_build.jsonl``. The steps are the private
``knngraph.ggnn._index.build_ops``, wrapped for the run; the whole build and the search are timed by the
runner's protocol.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import JsonLines, sync, time_calls  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=450_000)
    ap.add_argument("--graph-degree", type=int, default=24)
    ap.add_argument("--refinements", type=int, default=2)
    ap.add_argument("--tau-build", type=float, default=None, help="IndexParams.tau_build (default: its default)")
    ap.add_argument("--pops", type=int, default=None, help="the build's expansion cap (_build.BUILD_MAX_POPS)")
    ap.add_argument("--waves", type=int, default=None, help="waves of the link placement (_build.SYM_WAVES)")
    ap.add_argument("--inverse-links", type=int, default=0, help="IndexParams.inverse_links (0: graph_degree // 2)")
    ap.add_argument("--host-profile", action="store_true",
                    help="also a second, untimed-steps build under cProfile (host time per function, top 40)")
    ap.add_argument("--search-tau", type=float, default=None)
    ap.add_argument("--no-warmup", action="store_true",
                    help="no compiling build of 5,000 rows first (for a profiler counting launches)")
    ap.add_argument("--lineinfo", action="store_true", help="compile the kernels with line information")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    if args.lineinfo:
        from knngraph.primitives.compile import jit_with_lineinfo

        jit_with_lineinfo()

    import cupy as cp
    import numpy as np

    from knngraph import ggnn
    from knngraph.ggnn import _build, _index

    if args.pops is not None:
        _build.BUILD_MAX_POPS = args.pops
    if args.waves is not None:
        _build.SYM_WAVES = args.waves

    ds = data.load(data.sift_photos(args.n))
    xd = cp.asarray(ds.base)
    extra = {"inverse_links": args.inverse_links}
    if args.tau_build is not None:
        extra["tau_build"] = args.tau_build
    params = ggnn.IndexParams(graph_degree=args.graph_degree, refinements=args.refinements, **extra)
    if not args.no_warmup:
        ggnn.build(params, xd[:5000], device="cuda", verbose=False)  # compile
    seconds = collections.defaultdict(float)
    calls = collections.Counter()
    rounds = collections.Counter()
    real_ops = _index.build_ops

    def timed_ops(dev, xp=None):
        ops = real_ops(dev, xp)
        for name in ("brute_segments", "merge_queries", "sym_requests", "sym_place", "sym_write"):
            f = getattr(ops, name)

            def wrapped(*a, _f=f, _name=name):
                key = _name
                if _name == "merge_queries":
                    key = f"merge_queries lt={a[8]} lm={a[9]}"
                sync()
                t0 = time.perf_counter()
                r = _f(*a)
                sync()
                seconds[key] += time.perf_counter() - t0
                calls[key] += 1
                if _name == "sym_place":
                    rounds[key] += int(r or 0)
                return r

            setattr(ops, name, wrapped)
        return ops

    _index.build_ops = timed_ops
    t = time_calls(lambda: ggnn.build(params, xd, device="cuda", verbose=False), 1, warmup=False)
    index, total = t.result, t.median_s
    _index.build_ops = real_ops
    log = JsonLines(Path(args.out) / "profile_ggnn_build.jsonl")
    for key in sorted(seconds, key=seconds.get, reverse=True):
        log.write(part="step", step=key, seconds=seconds[key], calls=calls[key], rounds=rounds.get(key),
                  share=seconds[key] / total)
    rows = np.ascontiguousarray(cp.asnumpy(cp.asarray(index.graph.indices)))
    log.write(part="total", n=args.n, graph_degree=args.graph_degree, refinements=args.refinements,
              tau_build=params.tau_build, build_max_pops=_build.BUILD_MAX_POPS, sym_waves=_build.SYM_WAVES,
              k_sym=params.k_sym, seconds=total,
              timings=(index.hierarchy or {}).get("timings", {}), graph_sha1=hashlib.sha1(rows.tobytes()).hexdigest())
    if args.host_profile:  # where the host spends the time outside the device steps
        import cProfile
        import pstats

        prof = cProfile.Profile()

        def profiled():
            prof.enable()
            ggnn.build(params, xd, device="cuda", verbose=False)
            sync()
            prof.disable()

        log.write(part="host profile", seconds=time_calls(profiled, 1, warmup=False).median_s)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    if args.search_tau is not None:
        sp = ggnn.SearchParams(tau=args.search_tau)
        qd = cp.asarray(ds.queries)
        t = time_calls(lambda: ggnn.search(index, qd, 10, sp), 1)
        log.write(part="search", tau=args.search_tau, seconds=t.median_s, queries=ds.nq)


if __name__ == "__main__":
    main()
