"""Where the host time of a small GPU search call goes (the target: at most 0.1 ms per call on the host).

    python benchmarks/studies/profile_search_host.py [--batch 10] [--queue 24] [--calls 3000]
    python benchmarks/studies/profile_search_host.py --timings --calls 300

Searches sift-photos 450k with device queries and preallocated outputs (``out=``), and prints:
the median host time per call of ``song.search`` and of the prepared launch alone (the rest is argument
checking and dispatch), then the functions that take the host time (cProfile, sorted by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import host_seconds, sync, time_calls  # noqa: E402


def host_ms(fn, calls, warmup=0):
    """Median host milliseconds of a call (the runner's :func:`~benchmarks.runner.measure.host_seconds`)."""
    return statistics.median(host_seconds(fn, calls, warmup=warmup)) * 1e3


def busy_host(seconds=2e-3):
    """Busy host work for ``seconds``: the host thread is awake when the next call starts."""
    t1 = time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        pass


def host_timings(index, queries, calls):
    """The host time of one ``song.search`` call (device queries, ``out=``) timed three ways; see --timings."""
    import json

    import cupy as cp
    from knngraph import song

    xq = cp.asarray(queries[:1000])
    for qs in (16, 64, 128, 256):
        for b in (1, 10, 100, 1000):
            sp = song.SearchParams(queue_size=qs)
            out = (cp.empty((b, 10), cp.float32), cp.empty((b, 10), cp.int32))
            qb = xq[:b]

            def call():
                song.search(index, qb, 10, sp, device="cuda", verbose=False, out=out)

            for _ in range(20):
                call()
            idle, warm = [], []
            for _ in range(calls):  # the two alternate, call by call
                idle += host_seconds(call, 1, warmup=0)
                warm += host_seconds(call, 1, warmup=0, before=busy_host)
            # 50 calls back to back, host clock only; then 20 calls until the device is done
            loop = host_seconds(lambda: [call() for _ in range(50)], 1, warmup=0)[0] / 50
            device_ms = time_calls(lambda: [call() for _ in range(20)], 1, warmup=False).median_s / 20 * 1e3
            print(json.dumps({"queue_size": qs, "batch": b, "host_ms_after_sync": statistics.median(idle) * 1e3,
                              "host_ms_warm_thread": statistics.median(warm) * 1e3,
                              "host_ms_back_to_back": loop * 1e3, "ms_per_call_synchronised": device_ms}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--queue", type=int, default=24)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--sweep", action="store_true", help="only the host time per call for batches 1, 10, "
                    "100, 1000 and queue sizes 16, 64 (no profile)")
    ap.add_argument("--timings", action="store_true",
                    help="batches 1-1000, queues 16-256: the host time per call measured three ways (JSON lines): "
                    "after a synchronise (the GPU idle, the host thread just woken from waiting), after a "
                    "synchronise and 2 ms of busy host work (a warm host thread), and back to back without "
                    "synchronising (the steady host cost of a loop of calls)")
    args = ap.parse_args()
    import cupy as cp

    import knngraph
    from knngraph import song
    from knngraph._device import sm_count
    from knngraph.beam import cuda as beam_cuda

    ds = data.load(data.sift_photos(450_000))
    base, queries = ds.base, ds.queries
    xb = cp.asarray(base)
    raw = knngraph.knn_graph(xb, 32, device="cuda", verbose=False)
    index = song.from_graph(knngraph.optimize_graph(raw, xb, graph_degree=16, device="cuda", verbose=False), xb,
                            device="cuda")
    if args.timings:
        host_timings(index, queries, args.calls)
        return
    if args.sweep:
        xq = cp.asarray(queries[:1000])
        for qs in (16, 64):
            for b in (1, 10, 100, 1000):
                sp = song.SearchParams(queue_size=qs)
                out = (cp.empty((b, 10), cp.float32), cp.empty((b, 10), cp.int32))
                qb = xq[:b]
                song.search(index, qb, 10, sp, device="cuda", verbose=False, out=out)
                plan = [v for k, v in index._cache.items() if isinstance(k, tuple) and "beam" in k
                        and k[2] == qs and k[-2] == beam_cuda.search_width(b, sm_count(0), 0, qs)][0]
                whole = host_ms(lambda: song.search(index, qb, 10, sp, device="cuda", verbose=False, out=out),
                                args.calls)
                launch = host_ms(lambda: plan(qb, out[0], out[1]), args.calls)
                print(f"queue {qs} batch {b}: host ms per call {whole:.4f}, prepared launch alone {launch:.4f}")
        return
    b = args.batch
    q = cp.asarray(queries[:b])
    sp = song.SearchParams(queue_size=args.queue)
    out = (cp.empty((b, 10), cp.float32), cp.empty((b, 10), cp.int32))

    def call():
        song.search(index, q, 10, sp, device="cuda", verbose=False, out=out)

    whole = host_ms(call, args.calls, warmup=20)
    plan = next(v for k, v in index._cache.items() if isinstance(k, tuple) and "beam" in k)
    launch = host_ms(lambda: plan(q, out[0], out[1]), args.calls)
    auto = host_ms(lambda: song.search(index, q, 10, sp, verbose=False, out=out), args.calls)
    print(f"batch {b} queue {args.queue}: host ms per call: song.search(device='cuda') {whole:.4f}, "
          f"device='auto' {auto:.4f}, prepared launch alone {launch:.4f}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        call()
    prof.disable()
    sync()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
