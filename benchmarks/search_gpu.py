"""The helpers ``benchmarks/profile_search_width.py`` imports (``from search_gpu import load, per_call, score``)
while it waits to move into ``benchmarks/studies/``, where ``search_gpu`` is the study itself; this file
goes with that move. Run the study as ``python benchmarks/studies/search_gpu.py``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.studies.search_gpu import load, per_call, score  # noqa: E402

__all__ = ["load", "per_call", "score"]
