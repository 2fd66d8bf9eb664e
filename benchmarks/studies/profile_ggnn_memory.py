"""Device memory of a GGNN GPU build, measured against the estimate memory_limit plans with.

    python benchmarks/studies/profile_ggnn_memory.py [--sizes 200000,450000] [--out DIR]

CuPy memory hooks (:class:`knngraph._device.PeakInUse`) follow the bytes in use (allocated from the pool
and not yet freed) through a build of sift-photos rows and record their peak over the whole build, inside
the hierarchy
(``_build.build_hierarchy``) and inside the row sort (``_index._sort_rows_by_key``), next to the
estimate's parts (``ggnn.shard_build_bytes``, ``_build.build_device_bytes``): the private pieces of
``knngraph.ggnn`` it wraps for the run. One JSON line per size to ``profile_ggnn_memory.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import JsonLines, sync  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="200000,450000")
    ap.add_argument("--refinements", type=int, default=1)
    ap.add_argument("--out", default="out")
    args = ap.parse_args()

    import cupy as cp

    from knngraph import ggnn
    from knngraph._device import PeakInUse
    from knngraph.ggnn import _build, _index

    whole = PeakInUse()
    phases = {}

    def measured(name, fn):
        def run(*a, **kw):
            start = whole.in_use
            with PeakInUse() as phase:  # a second hook: its peak is above what was in use at the start
                try:
                    return fn(*a, **kw)
                finally:
                    sync()
                    got = phases.setdefault(name, {"peak_in_use": 0, "in_use_at_start": 0})
                    if start + phase.peak > got["peak_in_use"]:
                        got.update(peak_in_use=start + phase.peak, in_use_at_start=start)
        return run

    _index.build_hierarchy = measured("hierarchy", _build.build_hierarchy)
    _index._sort_rows_by_key = measured("row_sort", _index._sort_rows_by_key)
    base = data.load("sift-photos-450k").base
    log = JsonLines(Path(args.out) / "profile_ggnn_memory.jsonl")
    params = ggnn.IndexParams(refinements=args.refinements)
    ggnn.build(params, base[:2000], device="cuda", verbose=False)  # compile outside the measurement
    for n in map(int, args.sizes.split(",")):
        x = base[:n]
        phases.clear()
        cp.get_default_memory_pool().free_all_blocks()
        with whole:
            ggnn.build(params, x, device="cuda", verbose=False)
        k = params.graph_degree
        log.write(n=n, dim=x.shape[1], graph_degree=k, refinements=args.refinements, peak_in_use=whole.peak,
                  phases=phases.copy(), estimate=ggnn.shard_build_bytes(n, x.shape[1], params),
                  estimate_hierarchy=_build.build_device_bytes(n, x.shape[1], params),
                  estimate_kept_scratch=_build.kept_scratch_bytes(n, params),
                  estimate_sort_chunk=min(n, _index._sort_chunk_rows(k)) * k * _index.SORT_BYTES_PER_ENTRY,
                  float32_vectors=4 * n * x.shape[1])


if __name__ == "__main__":
    main()
