"""GGNN build time against the cap on the vertices a merge query expands per layer (``BUILD_MAX_POPS``,
100 in the library; not a paper constant), on the CPU: the build's phase split and the search quality of
the graph it gives (recall@10 of GGNN's search at three values of tau, 2,000 queries of sift-photos).

    python benchmarks/ggnn_build_pops_cpu.py [--n 100000] [--pops 100,50,30] [--out out]

``cpu_s`` is the process CPU time of the build (steadier than wall time on a shared machine). One JSON
line per cap to ``ggnn_build_pops_cpu.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JsonLines, load_sift  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--pops", default="100,50,30")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--out", default="out")
    args = ap.parse_args()

    from knngraph import ggnn
    from knngraph.evaluate import recall_at_k
    from knngraph.ggnn import _build

    base, queries, gt = load_sift(args.n)
    queries, gt = queries[:args.queries], gt[:args.queries]
    log = JsonLines(Path(args.out) / "ggnn_build_pops_cpu.jsonl")
    params = ggnn.IndexParams(graph_degree=24)
    ggnn.build(params, base[:3000], device="cpu", verbose=False)  # compile
    default = _build.BUILD_MAX_POPS
    try:
        for pops in (int(p) for p in args.pops.split(",")):
            _build.BUILD_MAX_POPS = pops
            c0, w0 = time.process_time(), time.perf_counter()
            index = ggnn.build(params, base, device="cpu", verbose=False)
            row = {"n": args.n, "graph_degree": 24, "build_max_pops": pops, "cpu_s": time.process_time() - c0,
                   "wall_s": time.perf_counter() - w0, **(index.hierarchy or {}).get("timings", {})}
            for tau in (0.3, 0.5, 0.8):
                st = {}
                _, i = ggnn.search(index, queries, 10, ggnn.SearchParams(tau=tau), device="cpu", verbose=False,
                                   stats=st)
                row[f"recall@10 tau {tau}"] = recall_at_k(np.asarray(i), gt, 10)
                row[f"distances_per_query tau {tau}"] = st.get("distances_per_query")
            log.write(part="build", **row)
    finally:
        _build.BUILD_MAX_POPS = default


if __name__ == "__main__":
    main()
