r"""Soak test: many threads searching one index of each searcher for minutes, results checked row by row.

    python benchmarks/soak.py --device cpu --minutes 10 --threads 8 --out benchmarks/results/
    python benchmarks/soak.py --device cuda --minutes 10 --threads 4 --out $OUT      # a CUDA stream per thread

What a retrieval service does to an index: threads (a web server's pool, a Dask worker's threads) call
``search`` on one shared index with batches of 1 to 10,000 queries, k and queue sizes that change per call,
filters switched on and off, while another thread saves the index and an ``extend`` makes a new one.

1. Indexes of the bundled sift sample (20k rows; ``--rows``): ``song`` (the fast searcher, and SONG's walk
   under a filter), ``ggnn`` (both caches) and ``exact``.
2. ``--configs`` call configurations (searcher, batch of the queries, k, queue size or tau, filter) are
   drawn once, with a fixed seed; each one's result is computed serially first: the reference.
3. For ``--minutes``, ``--threads`` threads (on a GPU each with a CUDA stream of its own) call random
   configurations and compare every row (ids and distances) with the reference; meanwhile a thread saves
   one index to a temporary file and loads it back, and extends another with new vectors and searches the
   extended index, over and over.
4. Host memory (RSS) and, on a GPU, the bytes CuPy's pool holds, are sampled every second; growth after
   the first quarter of the run (warm-up: caches, compiled kernels) is reported, and again after asking the
   C heap to give back what it keeps freed (``malloc_trim``: growth that goes then was no leak), with what
   grew alongside (Python objects by type, threads, GPU kernels loaded, CuPy's pools: ``_census``).

Written: ``soak_<device>.jsonl`` (one line: calls, rows checked, mismatches, errors, latency p50 / p99 per
batch-size bucket, memory over time) and printed. Exit status 1 on any mismatch or error.
``tests/test_soak.py`` runs a 20-second version of it in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.runner.measure import JsonLines  # noqa: E402

#: batch-size buckets of the latency report
BUCKETS = ((1, 1), (2, 10), (11, 100), (101, 1000), (1001, 10_000))


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _trim_heap() -> bool:
    """Ask glibc's allocator to give freed heap memory back to the system (``malloc_trim(0)``); False where
    there is no such call (another C library, another system)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def _census(use_gpu: bool) -> dict:
    """What could grow in a long-running process, counted: Python objects by type, threads, and on a GPU the
    kernels loaded (:func:`knngraph._cuda_launch.compiled_functions`), CuPy's pinned pool's free blocks and
    its device pool's bytes. Taken at the end of the warm-up and at the end of the run, so that a growth of
    resident memory can be traced to what grew with it."""
    import collections
    import gc

    out = {"threads": threading.active_count(), "objects": dict(collections.Counter(
        type(o).__name__ for o in gc.get_objects()))}
    if use_gpu:
        try:
            import cupy as cp

            from knngraph import _cuda_launch

            out["gpu_kernels_loaded"] = len(_cuda_launch.compiled_functions())
            out["pinned_free_blocks"] = int(cp.get_default_pinned_memory_pool().n_free_blocks())
            out["gpu_pool_bytes"] = int(cp.get_default_memory_pool().total_bytes())
        except Exception:  # noqa: BLE001 - a count that cannot be taken must not end the soak
            pass
    return out


def _census_growth(start: dict, end: dict) -> dict:
    """``end`` minus ``start``: every counter, and the 10 object types whose counts grew most."""
    out = {k: end[k] - start[k] for k in end if k != "objects" and k in start}
    grew = {t: n - start["objects"].get(t, 0) for t, n in end["objects"].items()}
    out["objects"] = dict(sorted(((t, g) for t, g in grew.items() if g > 0), key=lambda x: -x[1])[:10])
    return out


def build_indexes(base, device: str):
    from knngraph import bruteforce, ggnn, song

    return {"song": song.build(song.IndexParams(graph_degree=32, intermediate_graph_degree=48), base, device=device,
                               verbose=False),
            "ggnn": ggnn.build(ggnn.IndexParams(graph_degree=24, refinements=0), base, device=device, verbose=False),
            "exact": bruteforce.build(bruteforce.IndexParams(), base, device=device)}


def draw_configs(n_configs: int, n_queries: int, n: int, seed: int = 11):
    """(searcher, start, stop, k, knob, filter mask or None) call configurations."""
    rng = np.random.default_rng(seed)
    masks = [None, rng.random(n) < 0.5, rng.random(n) < 0.05]
    out = []
    for _ in range(n_configs):
        name = str(rng.choice(["song", "ggnn", "exact"], p=[0.5, 0.3, 0.2]))
        size = int(min(n_queries, np.exp(rng.uniform(0, np.log(10_000)))))
        start = int(rng.integers(0, n_queries - size + 1))
        k = int(rng.choice([1, 5, 10, 20]))
        knob = int(rng.choice([24, 32, 64, 128])) if name != "ggnn" else float(rng.choice([0.3, 0.5, 1.0]))
        mask = masks[int(rng.integers(0, 3))] if name in ("song", "exact") else None
        out.append((name, start, start + size, k, knob, mask))
    return out


def call(indexes, queries, cfg, device):
    from knngraph import bruteforce, ggnn, song

    name, a, b, k, knob, mask = cfg
    q = queries[a:b]
    if name == "song":
        return song.search(indexes["song"], q, k, song.SearchParams(queue_size=max(knob, k)), device=device,
                           verbose=False, filter=mask)
    if name == "ggnn":
        cache = "rings" if knob == 0.3 else "sorted"
        return ggnn.search(indexes["ggnn"], q, k, ggnn.SearchParams(tau=knob, cache=cache, queue_size=64),
                           device=device, verbose=False)
    return bruteforce.search(indexes["exact"], q, k, device=device, verbose=False, filter=mask)


def host(a):
    from knngraph._device import as_numpy

    return as_numpy(a)


def soak(base, queries, *, device: str = "cpu", seconds: float = 60.0, threads: int = 8, configs: int = 120,
         seed: int = 11, churn: bool = True) -> dict:
    """Run the soak (see the module docs); returns the report."""
    import knngraph
    from knngraph import song

    use_gpu = device.startswith("cuda")
    indexes = build_indexes(base, device)
    cfgs = draw_configs(configs, queries.shape[0], base.shape[0], seed)
    reference = []
    for cfg in cfgs:
        d, i = call(indexes, queries, cfg, device)
        reference.append((host(d), host(i)))
    lock = threading.Lock()
    report = {"calls": 0, "rows": 0, "mismatches": 0, "errors": [], "churn_rounds": 0}
    latency = {b: [] for b in BUCKETS}
    stop = threading.Event()

    def worker(w):
        rng = np.random.default_rng(seed + 101 * w)
        stream = None
        if use_gpu:
            import cupy as cp

            stream = cp.cuda.Stream(non_blocking=True)
        while not stop.is_set():
            j = int(rng.integers(0, len(cfgs)))
            cfg = cfgs[j]
            try:
                t0 = time.perf_counter()
                if stream is not None:
                    with stream:
                        d, i = call(indexes, queries, cfg, device)
                        stream.synchronize()
                else:
                    d, i = call(indexes, queries, cfg, device)
                dt = time.perf_counter() - t0
                d, i = host(d), host(i)
                rd, ri = reference[j]
                ok = np.array_equal(i, ri) and np.array_equal(d, rd)
            except Exception:  # noqa: BLE001 - every error is reported
                with lock:
                    report["errors"].append(traceback.format_exc(limit=3))
                continue
            size = cfg[2] - cfg[1]
            with lock:
                report["calls"] += 1
                report["rows"] += size
                report["mismatches"] += 0 if ok else int((i != ri).any(axis=1).sum())
                for b in BUCKETS:
                    if b[0] <= size <= b[1]:
                        latency[b].append(dt)

    def churner():
        rng = np.random.default_rng(seed + 7)
        folder = tempfile.mkdtemp(prefix="knngraph-soak-")
        path = os.path.join(folder, "song.index")
        while not stop.is_set():
            try:
                song.save(path, indexes["song"])
                back = song.load(path)
                extra = base[rng.integers(0, base.shape[0], 200)] + 0  # duplicates of existing rows
                bigger = song.extend(back, extra, device=device, verbose=False)
                d, i = song.search(bigger, queries[:50], 10, device=device, verbose=False)
                assert host(i).max() < bigger.shape[0]
                with lock:
                    report["churn_rounds"] += 1
            except Exception:  # noqa: BLE001
                with lock:
                    report["errors"].append("churn: " + traceback.format_exc(limit=3))

    memory = []
    census = []  # at the end of the warm-up

    def sample_memory(t0):
        pool = None
        if use_gpu:
            import cupy as cp

            pool = cp.get_default_memory_pool()
        while not stop.is_set():
            memory.append((round(time.perf_counter() - t0, 1), _rss_bytes(), pool.total_bytes() if pool else 0))
            if not census and memory[-1][0] >= seconds / 4:
                census.append(_census(use_gpu))
            stop.wait(1.0)

    t0 = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(threads)]
    extra = [threading.Thread(target=sample_memory, args=(t0,), daemon=True)]
    if churn:
        extra.append(threading.Thread(target=churner, daemon=True))
    for t in pool + extra:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in pool + extra:
        t.join(300)
    report["seconds"] = time.perf_counter() - t0
    report["latency_ms"] = {f"{lo}-{hi}": {"calls": len(v), "p50": 1e3 * float(np.percentile(v, 50)) if v else None,
                                            "p99": 1e3 * float(np.percentile(v, 99)) if v else None}
                            for (lo, hi), v in latency.items()}
    warm = [m for m in memory if m[0] >= seconds / 4] or memory
    report["memory"] = memory
    report["rss_growth_after_warmup_bytes"] = int(warm[-1][1] - warm[0][1]) if warm else 0
    report["gpu_pool_growth_after_warmup_bytes"] = int(warm[-1][2] - warm[0][2]) if warm else 0
    # growth that the C heap gives back once asked (freed blocks it kept, e.g. in the arenas of threads) is
    # not a leak: the resident size after malloc_trim, against the start of the warm part
    if warm and _trim_heap():
        report["rss_growth_after_warmup_trimmed_bytes"] = int(_rss_bytes() - warm[0][1])
    if census:
        report["census_growth_after_warmup"] = _census_growth(census[0], _census(use_gpu))
    report["device"] = device
    report["threads"] = threads
    report["knngraph"] = knngraph.__version__
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=None, help="default: 8 on the CPU, 4 on a GPU")
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--configs", type=int, default=200)
    ap.add_argument("--out", default="out")
    args = ap.parse_args(argv)
    from knngraph.datasets import load_sample

    s = load_sample()
    base = np.ascontiguousarray(s.base[:args.rows])
    queries = np.ascontiguousarray(np.concatenate([s.queries] * 10)[:10_000])
    threads = args.threads or (4 if args.device.startswith("cuda") else 8)
    report = soak(base, queries, device=args.device, seconds=60 * args.minutes, threads=threads,
                  configs=args.configs)
    lines = JsonLines(Path(args.out) / f"soak_{args.device.split(':')[0]}.jsonl", echo=False)
    lines.write(**{k: v for k, v in report.items()})
    summary = {k: v for k, v in report.items() if k != "memory"}
    summary["errors"] = len(report["errors"])
    print(json.dumps(summary, indent=1))
    for e in report["errors"][:5]:
        print(e, file=sys.stderr)
    return 1 if report["mismatches"] or report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
