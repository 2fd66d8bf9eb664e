"""How the fast GPU searcher's time per batch depends on the batch size and the search width (warps per
query), to set the automatic width for large batches.

    python benchmarks/studies/profile_search_width.py [--dataset sift|minilm] [--minilm-dir DIR] [--dtype float32]

Prints one JSON line per (queue size, width, batch): milliseconds per call, queries per second and the
recall@10 of the batch (batches larger than the query set repeat it). With one warp per query, a batch
runs in rounds of as many queries as the GPU holds warps; the last round's partly idle GPU (the tail)
costs a share of the call that shrinks as the batch grows, and wider searches shorten each query.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.studies.search_gpu import load, per_call, score  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", choices=["sift", "minilm"], default="sift")
    ap.add_argument("--minilm-dir", default="")
    ap.add_argument("--dtype", default="", choices=["", "float32", "float16", "int8"],
                    help="the vectors in another dtype (as search_gpu.py --dtype)")
    ap.add_argument("--metric", default="", choices=["", "inner_product"])
    ap.add_argument("--queues", default="16,24,64")
    ap.add_argument("--widths", default="1,2,4")
    ap.add_argument("--batches", default="1000,2500,5000,10000,20000")
    ap.add_argument("--registers", default="0", help="register caps per thread (SearchParams.max_registers; "
                    "0: the library's default)")
    ap.add_argument("--warp-caps", default="0", help="caps on the warps of a width-1 launch (0: as many as fit)")
    ap.add_argument("--per-lane", default="0", help="loads per lane and vector row that set the team size "
                    "(0: the library's choice per distance mode)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    import cupy as cp

    import knngraph
    from knngraph import _cuda_launch, song
    from knngraph.beam import cuda as beam_cuda

    blocks_of = beam_cuda._blocks
    team_size_of = beam_cuda.bk.team_size

    base, queries, gt, gt_d, metric, _ = load(args)
    xb = cp.asarray(base)
    raw = knngraph.knn_graph(xb, 96, metric=metric, device="cuda", verbose=False)
    graph = knngraph.optimize_graph(raw, xb, graph_degree=32, device="cuda", verbose=False)
    index = song.from_graph(graph, xb, song.IndexParams(metric=metric), device="cuda")
    nq = len(queries)
    ints = lambda text: [int(v) for v in text.split(",")]  # noqa: E731
    points = [(qs, w, r, b, cap, pl) for qs in ints(args.queues) for w in ints(args.widths)
              for r in ints(args.registers) for b in ints(args.batches) for cap in ints(args.warp_caps)
              for pl in ints(args.per_lane)]
    for qs, width, regs, b, cap, pl in points:
        beam_cuda.bk.team_size = (lambda units, per_lane=4, pl=pl: team_size_of(units, pl or per_lane))
        index._cache.clear()
        beam_cuda._blocks = (lambda nq_, wpb, w, sm, cap=cap: max(1, min(blocks_of(nq_, wpb, w, sm), cap // wpb))
                             if cap and w == 1 else blocks_of(nq_, wpb, w, sm))
        xq = cp.asarray(queries[np.arange(b) % nq])
        sp = song.SearchParams(queue_size=qs, search_width=width, max_registers=regs)
        o = (cp.empty((b, 10), cp.float32), cp.empty((b, 10), cp.int32))
        secs = per_call(lambda: song.search(index, xq, 10, sp, device="cuda", verbose=False, out=o), args.repeats)
        m = min(b, nq)
        r = score(o[1][:m].get(), o[0][:m].get(), gt[:m], gt_d[:m])
        print(json.dumps({"dataset": args.dataset, "dtype": str(base.dtype), "queue_size": qs, "width": width, "registers": regs,
                          "warp_cap": cap, "per_lane": pl, "batch": b,
                          "ms": secs * 1e3, "qps": b / secs, "recall": r}), flush=True)
    for name, fn in _cuda_launch.compiled_functions():
        print(json.dumps({"kernel": name[:80], "registers": fn.num_regs, "local_bytes": fn.local_size_bytes,
                          "shared_bytes": fn.shared_size_bytes}))


if __name__ == "__main__":
    main()
