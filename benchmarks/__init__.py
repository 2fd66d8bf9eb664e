"""knngraph benchmarks.

* ``python -m benchmarks ...``: the benchmark runner (datasets x methods x parameter sweeps -> one JSON
  line per run), the CPU and GPU suites, and the report generator that turns the JSON lines into
  ``benchmarks/REPORT.md`` and its plots. The code is in :mod:`benchmarks.runner`.
* ``python benchmarks/<algorithm>_<device>.py``: the older per-algorithm scripts (issue-specific studies).

Nothing here is run by CI; ``tests/test_bench_*.py`` check the runner and the report generator on the
bundled sample.
"""
