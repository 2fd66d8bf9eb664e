"""Studies: one-off measurements behind the library's choices and the README's numbers, each a script
with its own command line and output files (JSON lines + PNG), run again to reproduce a recorded result
in ``benchmarks/results``.

They measure with the runner's pieces (:mod:`benchmarks.runner`): the timing protocol and JSON lines of
:mod:`~benchmarks.runner.measure`, the datasets of :mod:`~benchmarks.runner.data`, the recall of
:mod:`~benchmarks.runner.quality`, the baselines of :mod:`~benchmarks.runner.methods`; what they share
beyond that is in :mod:`benchmarks._common`. Every line ends with ``date``, ``command`` and ``env``.
Run one as ``python benchmarks/studies/NAME.py ...`` (or ``python -m benchmarks.studies.NAME``);
``scripts/gpu_check.sh bench NAME`` runs the GPU ones on a GPU machine.

What the runner's suites measure is not studied here again: ``song_gpu.py`` and ``song_cpu.py`` are
thin wrappers that run runner specs. The profilers (``profile_*.py``) time the library's steps one by
one and so reach into its private modules; the other studies use its public API only.
"""
