r"""What freeing a cached device array does to a kernel of another stream that still reads it.

    python benchmarks/studies/cached_blocks_gpu.py --out $OUT

A search caches device arrays (graph, vectors, user ids, ...) and other threads' searches, each on a stream
of its own, read them. Three ways of letting such an array go while a kernel queued on another stream (behind
a kernel that spins for about 100 ms) is still to read it:

* ``pool``: an array from CuPy's pool, dropped, then an array of the same size allocated and filled on the
  stream that made it: the pool hands the freed block to that allocation at once, and the queued kernel
  reads the fill (``wrong_rows``: rows of its result that differ from what the array held);
* ``cudaFree``: an array of its own ``cudaMalloc`` (outside the pool): how long dropping it takes
  (``drop_ms``: about the spin's time if ``cudaFree`` waits for the queued kernel);
* ``kept``: an array made in :func:`knngraph._device.kept_across_streams`: its block goes back to the pool
  only after the device has finished the queued work (``drop_ms`` about the spin's time, ``wrong_rows`` 0).

Lines go to ``cached_blocks.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner.measure import JsonLines  # noqa: E402

SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""
ROWS = 1 << 20


def trial(way: str) -> dict:
    import contextlib

    import cupy as cp

    from knngraph._device import kept_across_streams

    spin = cp.RawKernel(SPIN, "spin")
    reader = cp.cuda.Stream(non_blocking=True)
    making = {"pool": contextlib.nullcontext, "kept": kept_across_streams}.get(way)
    if making is None:  # its own cudaMalloc
        held = cp.ndarray((ROWS,), cp.int32, cp.cuda.MemoryPointer(cp.cuda.Memory(ROWS * 4), 0))
        held[...] = cp.arange(ROWS, dtype=cp.int32)
    else:
        with making():
            held = cp.arange(ROWS, dtype=cp.int32)
    cp.cuda.get_current_stream().synchronize()
    with reader:
        spin((1,), (1,), (cp.int64(200_000_000),))
        read = held * 2
    queued = not reader.done
    t0 = time.perf_counter()
    del held
    drop_ms = 1e3 * (time.perf_counter() - t0)
    fill = cp.full(ROWS, -7, cp.int32)  # the size of the dropped array, on the stream that made it
    reader.synchronize()
    wrong = int((read != 2 * cp.arange(ROWS, dtype=cp.int32)).sum())
    del fill
    return dict(way=way, queued_when_dropped=queued, drop_ms=drop_ms, wrong_rows=wrong, rows=ROWS)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out")
    args = ap.parse_args(argv)
    lines = JsonLines(Path(args.out) / "cached_blocks.jsonl")
    trial("pool")  # compiles the spin kernel and warms the pool
    for way in ("pool", "cudaFree", "kept"):
        lines.write(part="cached_blocks", **trial(way))


if __name__ == "__main__":
    main()
