"""A short soak (``benchmarks/soak.py``): 8 threads search one index of each searcher for a few seconds with
random batch sizes, k, queue sizes and filters while another thread saves, loads and extends an index;
every row must equal the serial call's, with no error. (The full run: ``python benchmarks/soak.py``.)"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.soak import soak  # noqa: E402


@pytest.mark.slow  # about 15 s on 2 cores
def test_short_soak_on_the_cpu(sample):
    base = np.ascontiguousarray(sample.base[:3000])
    queries = np.ascontiguousarray(sample.queries[:1500])
    report = soak(base, queries, device="cpu", seconds=12, threads=8, configs=40)
    assert not report["errors"], report["errors"][:3]
    assert report["mismatches"] == 0
    assert report["calls"] >= 40 and report["churn_rounds"] >= 1
    # host memory settles once the caches are made (tolerance: allocator noise of a few batches)
    assert report["rss_growth_after_warmup_bytes"] < 200 << 20
