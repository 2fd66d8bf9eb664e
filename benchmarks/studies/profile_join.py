"""GNND on sift-photos 450k (k=64), for tuning and kernel profilers: in-memory GPU builds capped at
--iterations (a comma-separated sweep, as --sample-size), printing per build the inserts and seconds per
iteration, timed by the runner's protocol (a warm-up build that compiles, then the median of the other
--repeat - 1 builds, at least one) and, with --recall, the runner's graph recall@10 / @64 on 2,000 nodes.
It drives the builder's private pieces (``knngraph.nndescent._build``, ``.cuda.Engine``, the join kernel).
Under Nsight Compute, profile one join launch:

    ncu --kernel-name regex:local_join --launch-skip 2 --launch-count 1 --set full \\
        python benchmarks/studies/profile_join.py --iterations 3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import time_calls  # noqa: E402
from benchmarks.runner.quality import GraphTruth  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", default="6")
    ap.add_argument("--sample-size", default="32")
    ap.add_argument("--init", default="random")
    ap.add_argument("--repeat", type=int, default=1,
                    help="builds in a row: the first compiles, the median of the others (at least one) is reported")
    ap.add_argument("--recall", action="store_true", help="graph recall@10 and @64 on 2,000 nodes")
    ap.add_argument("--max-registers", type=int, default=-1, help="join kernel register cap (0: none; -1: default)")
    ap.add_argument("--sass", help="write the join kernel's SASS to this file")
    ap.add_argument("--insert", default="lock", help="lock, slots or none (the join without inserts)")
    ap.add_argument("--profile", action="store_true", help="per-kernel seconds (synchronising after each launch)")
    args = ap.parse_args(argv)
    import cupy as cp

    from knngraph.primitives.distances import DIST_L2SQ
    from knngraph.nndescent import _build
    from knngraph.nndescent import _kernels as K
    from knngraph.nndescent.cuda import JOIN_MAX_REGISTERS, Engine, packed_words

    base = cp.asarray(data.load("sift-photos-450k").base)
    engine = Engine(0)
    truth = GraphTruth(base, "sqeuclidean", 64, sample=2000, device="cuda") if args.recall else None
    extra = {} if args.max_registers < 0 else {"max_registers": args.max_registers}
    extra.update(insert=args.insert, profile=args.profile)
    if args.init == "cluster_windows":
        from knngraph.nndescent import _windows

        x, inv = engine.prepare(base, DIST_L2SQ)
        for _ in range(2):
            phases = {}
            gd, gi, gf = engine.new_graph(base.shape[0], 64)
            _windows.window_graph(engine, x, DIST_L2SQ, gd, gi, gf, 0, timings=phases)
        print(json.dumps({"window_phase_seconds": {k: round(v, 4) for k, v in phases.items()}}), flush=True)
        del x, inv, gd, gi, gf
    for p in [int(v) for v in args.sample_size.split(",")]:
        for iterations in [int(v) for v in args.iterations.split(",")]:
            cfg = _build.Config(k=64, p=p, max_iterations=iterations, threshold=0.0, seed=0, selective=True,
                                kind=DIST_L2SQ, init=args.init)
            def build():
                stats = {}
                return _build.build_in_memory(engine, base, cfg, stats=stats, extra=extra), stats

            t = time_calls(build, max(1, args.repeat - 1))
            (gd, gi), stats = t.result
            seconds = t.median_s
            out = {"sample_size": p, "iterations": iterations, "init": args.init, "seconds": round(seconds, 4),
                   "init_seconds": round(seconds - stats["seconds_per_iteration"][-1], 4),
                   "seconds_per_iteration": [round(t, 4) for t in stats["seconds_per_iteration"]],
                   "updates_per_iteration": stats["updates_per_iteration"]}
            if args.profile:
                out["kernel_seconds"] = {k: round(v, 4) for k, v in stats["kernel_seconds"].items()}
            if truth is not None:
                out.update({f"recall@{r}": round(truth.recall(gi, r), 5) for r in (10, 64)})
            print(json.dumps(out), flush=True)
    cap = JOIN_MAX_REGISTERS if args.max_registers < 0 else args.max_registers
    packed = packed_words(base, DIST_L2SQ)
    join = K.join_kernel(p, args.insert, cap or None, 64, packed[0] if packed else 0)
    regs = join.get_regs_per_thread()
    local = join.get_local_mem_per_thread()
    print(json.dumps({"join_registers": list(regs.values()) if isinstance(regs, dict) else regs,
                      "join_local_bytes": list(local.values()) if isinstance(local, dict) else local}))
    if args.sass:
        sass = join.inspect_sass()
        Path(args.sass).write_text(next(iter(sass.values())) if isinstance(sass, dict) else sass)


if __name__ == "__main__":
    main()
