"""Where the exact k-NN's time goes beyond its GEMMs: the numeric plan (one or two passes over the base),
the selection of candidates, and their float64 rescoring with the proof (:mod:`knngraph.bruteforce._exact`).

    python benchmarks/profile_exact_overhead.py [--n 1000000] [--nq 10000] [--d 128] [--k 10]

Prints one JSON line per part (GPU seconds, best of 5, after a warm-up call)."""
import argparse
import json
import time

CHUNK = 1 << 18  # the numeric plan's row chunk


def best_of(fn, repeats=5):
    import cupy as cp

    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--nq", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()
    import cupy as cp

    import knngraph
    from knngraph.bruteforce import cuda as impl
    from knngraph.bruteforce._exact import _column_sums, _row_norms2, plan_numerics

    rng = cp.random.default_rng(0)
    base = rng.standard_normal((args.n, args.d), dtype=cp.float32)
    queries = rng.standard_normal((args.nq, args.d), dtype=cp.float32)
    from knngraph._device import default_memory_limit, resolve_device

    budget = default_memory_limit(resolve_device("cuda"))  # what knngraph.knn uses
    plan = plan_numerics(base, "sqeuclidean", cp)
    parts = {
        "knn_total": lambda: knngraph.knn(base, queries, args.k, device="cuda", verbose=False),
        "plan_numerics": lambda: plan_numerics(base, "sqeuclidean", cp),
        "exact_knn_given_plan": lambda: impl.exact_knn(base, queries, args.k, "sqeuclidean", memory_limit=budget,
                                                       verbose=False, plan=plan),
        "exact_knn_k_candidates": lambda: impl.exact_knn(base, queries, args.k, "sqeuclidean",
                                                         memory_limit=budget, verbose=False, plan=plan,
                                                         candidates=args.k),
        "column_sums_one_stage": lambda: [base[s:s + CHUNK].sum(axis=0, dtype=cp.float64)
                                          for s in range(0, args.n, CHUNK)],
        "column_sums_two_stage": lambda: [_column_sums(base[s:s + CHUNK], cp) for s in range(0, args.n, CHUNK)],
        "row_norms": lambda: [_row_norms2(base[s:s + CHUNK], cp) for s in range(0, args.n, CHUNK)],
        "gemm_only": lambda: [cp.matmul(queries, base[s:s + 65536].T) for s in range(0, args.n, 65536)],
    }
    for name, fn in parts.items():
        print(json.dumps({"part": name, "n": args.n, "nq": args.nq, "d": args.d, "k": args.k,
                          "seconds": best_of(fn)}), flush=True)
    stats = {}
    impl.exact_knn(base, queries, args.k, "sqeuclidean", memory_limit=budget, verbose=False, plan=plan, stats=stats)
    print(json.dumps({"part": "stats", **{k: (v if isinstance(v, (int, float, str, bool)) else str(v))
                                          for k, v in stats.items()}}))


if __name__ == "__main__":
    main()
