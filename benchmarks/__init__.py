"""knngraph benchmarks.

* ``python -m benchmarks ...``: the benchmark runner (datasets x methods x parameter sweeps -> one JSON
  line per run), the CPU and GPU suites, and the report generator that turns the JSON lines into
  ``benchmarks/REPORT.md`` and its plots. The code is in :mod:`benchmarks.runner`.
* ``python benchmarks/studies/<name>.py``: the studies, one-off measurements behind the library's choices
  and the README's numbers, built on the runner's timing, data and recall (:mod:`benchmarks.studies`).

Nothing here is run by CI; ``tests/test_bench_*.py`` check the runner, the report generator and the
studies' helpers on the bundled sample.
"""
