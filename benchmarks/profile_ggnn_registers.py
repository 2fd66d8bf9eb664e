"""GGNN GPU build time against the register cap of its one-warp kernels (search, merge, symmetric linking).

    python benchmarks/profile_ggnn_registers.py [--caps 0,64,80,96,128] [--n 450000] [--out DIR]

Uncapped, the kernels take 121-168 registers per thread (``ggnn/_kernels.py``, BUILD_MAX_REGISTERS), so an SM
holds only 12 of their one-warp blocks; a cap trades spills for more warps in flight. The cap is read when
``knngraph.ggnn._kernels`` is imported (``KNNGRAPH_GGNN_MAX_REGISTERS``), so each cap runs in its own
process: a build of 5,000 rows compiles the kernels, then ``--repeats`` builds of sift-photos (k=24) are
timed (median) with the build's split (merge / symmetric linking / refinement). The graph must not depend
on the cap: its rows' hash is logged and the last line says whether every cap built the same graph.
One JSON line per cap, and a summary, to stdout and ``profile_ggnn_registers.jsonl`` in --out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def one_cap(n: int, repeats: int) -> dict:
    """In the child process: build, time and hash."""
    import cupy as cp
    import numpy as np

    from _common import load_sift

    from knngraph import ggnn

    base, _, _ = load_sift(n)
    xd = cp.asarray(base)
    params = ggnn.IndexParams(graph_degree=24)
    ggnn.build(params, xd[:5000], device="cuda", verbose=False)  # compile
    seconds, splits, index = [], [], None
    for _ in range(repeats):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        index = ggnn.build(params, xd, device="cuda", verbose=False)
        cp.cuda.Device().synchronize()
        seconds.append(time.perf_counter() - t0)
        splits.append((index.hierarchy or {}).get("timings", {}))
    rows = np.ascontiguousarray(cp.asnumpy(cp.asarray(index.graph.indices)))
    mid = int(np.argsort(seconds)[len(seconds) // 2])
    return {"seconds": seconds[mid], "all_seconds": seconds, "timings": splits[mid],
            "graph_sha1": hashlib.sha1(rows.tobytes()).hexdigest()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caps", default="0,64,80,96,128", help="register caps (0: none, numba's default)")
    ap.add_argument("--n", type=int, default=450_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="out")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_cap(args.n, args.repeats)))
        return
    from _common import JsonLines

    log = JsonLines(Path(args.out) / "profile_ggnn_registers.jsonl")
    results = {}
    for cap in (int(c) for c in args.caps.split(",") if c):
        env = dict(os.environ, KNNGRAPH_GGNN_MAX_REGISTERS=str(cap))
        proc = subprocess.run([sys.executable, __file__, "--child", "--n", str(args.n), "--repeats",
                               str(args.repeats)], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            log.write(part="cap", max_registers=cap, error=proc.stderr[-2000:])
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results[cap] = r
        log.write(part="cap", max_registers=cap, n=args.n, graph_degree=24, **r)
    if results:
        best = min(results, key=lambda c: results[c]["seconds"])
        log.write(part="summary", fastest_cap=best, seconds={c: r["seconds"] for c, r in results.items()},
                  same_graph=len({r["graph_sha1"] for r in results.values()}) == 1)


if __name__ == "__main__":
    main()
