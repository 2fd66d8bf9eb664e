"""What exactness costs the GPU's exact k-NN, step by step, on real and synthetic float data.

    python benchmarks/studies/profile_exact.py --out out/          # on a machine with an NVIDIA GPU

Float vectors give float32 GEMM keys with a rounding error, so :func:`knngraph.knn` selects more
candidates than k, recomputes their distances in float64 and proves the answer (or searches again with
more candidates; :mod:`knngraph.bruteforce._exact`). For each case (device-resident base and queries)
this times, median of --repeats after a warm-up:

* ``knn``: the whole public call;
* ``first_pass``: one pass of the private ``bruteforce.cuda.exact_knn`` with the numeric plan of the base
  and queries (margin candidates, float64 recomputation, proof; or exact keys for small integers), and
  the share of queries it leaves unsure;
* ``k_candidates``: the same pass with only k candidates (the recomputation and proof kept);
* ``no_exactness``: the pass with the plan's error bound set to 0 (k candidates, keys taken as exact: what
  the search cost before it was made exact);
* ``gemm``: the GEMM tiles alone; ``plan``: :func:`plan_numerics` alone.

Cases: sift-photos 450k as float32 with 10,000 of its queries (k = 10, 100), the same as uint8 (exact
integer keys: no margin), and a float16 cosine set of 18,000 x 384 with 2,000 queries (the size of the
minilm-words embeddings; Gaussian clusters). One JSON line per case and step in ``profile_exact.jsonl``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402
from benchmarks.studies.exact_gpu import gemm_only  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    import cupy as cp

    import knngraph
    from knngraph._device import default_memory_limit, resolve_device
    from knngraph.bruteforce._exact import plan_numerics
    from knngraph.bruteforce.cuda import exact_knn

    log = JsonLines(Path(args.out) / "profile_exact.jsonl")
    budget = default_memory_limit(resolve_device("cuda"))
    sift = data.load("sift-photos-450k")
    sq = sift.queries[:10_000]
    cases = [("sift-photos-450k float32", cp.asarray(sift.base, dtype=cp.float32), cp.asarray(sq, dtype=cp.float32),
              "sqeuclidean", (10, 100)),
             ("sift-photos-450k uint8", cp.asarray(sift.base), cp.asarray(sq), "sqeuclidean", (10, 100))]
    emb = clustered(20_000, 384, seed=3, overlapping=True, n_centers=50, on_device=True).astype(cp.float16)
    cases.append(("clustered 18k x 384 float16", emb[:18_000], emb[18_000:], "cosine", (10,)))
    for name, base, queries, metric, ks in cases:
        plan = plan_numerics(base, metric, cp).for_queries(queries)  # the plan knn() searches with
        t_plan = time_calls(lambda: plan_numerics(base, metric, cp), args.repeats).median_s
        for k in ks:
            head = {"case": name, "n": int(base.shape[0]), "nq": int(queries.shape[0]), "d": int(base.shape[1]),
                    "dtype": str(base.dtype), "metric": metric, "k": k, "gamma": plan.gamma,
                    "plan_seconds": t_plan}
            stats = {}
            exact_knn(base, queries, k, metric, memory_limit=budget, stats=stats, verbose=False, plan=plan)
            steps = {
                "knn": lambda: knngraph.knn(base, queries, k, metric=metric, device="cuda", verbose=False),
                "first_pass": lambda: exact_knn(base, queries, k, metric, memory_limit=budget, verbose=False,
                                                plan=plan),
                "k_candidates": lambda: exact_knn(base, queries, k, metric, memory_limit=budget, verbose=False,
                                                  plan=plan, candidates=k),
                "no_exactness": lambda: exact_knn(base, queries, k, metric, memory_limit=budget, verbose=False,
                                                  plan=dataclasses.replace(plan, gamma=0.0)),
            }
            row = dict(head, candidates=stats.get("candidates"), select=stats.get("select"),
                       base_tile=stats.get("base_tile"), query_block=stats.get("query_block"))
            for step, fn in steps.items():
                t = time_calls(fn, args.repeats)
                row[f"{step}_seconds"] = t.median_s
                if step == "first_pass":
                    row["unsure_share"] = float(t.result[2].mean())
                if step == "k_candidates":
                    row["unsure_share_k_candidates"] = float(t.result[2].mean())
            if base.dtype == cp.float32:
                row["gemm_seconds"] = time_calls(lambda: gemm_only(queries, base, stats["base_tile"]),
                                                 args.repeats).median_s
            log.write(**row)
    print(f"wrote {log.path}")


if __name__ == "__main__":
    main()
