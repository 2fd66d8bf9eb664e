"""First run on the CPU: compile NN-Descent's iteration kernels in a second process.

numba compiles one function at a time on one core. On a fresh install the demo's kernels take about 45 s
to compile on a 2-core machine, and the largest share, NN-Descent's local join and update kernels, does
not depend on the rest. :func:`start_nndescent_compile` starts ``python -m knngraph._firstrun DTYPE``,
which builds a small NN-Descent graph (random initial lists, threaded kernels) and so compiles those
kernels into numba's disk cache while the calling process compiles everything else; the caller
waits for it (:func:`wait`) before its own NN-Descent build, whose compilation then finds the
kernels on disk (numba looks there before compiling a new signature).

Nothing is started when the kernels are already on disk, when the machine has one core, or when
``KNNGRAPH_NO_BACKGROUND_COMPILE`` is set; a child that fails costs nothing but the time it took (the
caller compiles the kernels itself).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np

_log = logging.getLogger("knngraph")


def _on_disk(dispatcher) -> bool:
    """Whether numba's disk cache of ``dispatcher`` has an index (some signature compiled before)."""
    try:
        cache_file = dispatcher._cache._cache_file
        return os.path.exists(cache_file._index_path)
    except AttributeError:  # another numba layout: assume nothing cached
        return False


def start_nndescent_compile(dtype) -> subprocess.Popen | None:
    """Start compiling NN-Descent's threaded iteration kernels for vectors of ``dtype`` in a second
    process (see the module doc); None when that would not help."""
    from .nndescent import cpu

    if os.environ.get("KNNGRAPH_NO_BACKGROUND_COMPILE") or (os.cpu_count() or 1) < 2:
        return None
    if _on_disk(cpu.local_join):
        return None
    _log.debug("compiling NN-Descent's kernels in a second process")
    return subprocess.Popen([sys.executable, "-m", "knngraph._firstrun", np.dtype(dtype).name],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def wait(child: subprocess.Popen | None, timeout: float = 300.0) -> float:
    """Wait for a child of :func:`start_nndescent_compile` (killed after ``timeout`` seconds); returns the
    seconds it spent compiling (0 without a child or when it failed)."""
    if child is None:
        return 0.0
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return 0.0
    try:
        return float(out.strip().splitlines()[-1]) if child.returncode == 0 else 0.0
    except (ValueError, IndexError):
        return 0.0


def _compile(dtype: str) -> None:
    import knngraph
    from .datasets import load_sample
    from .primitives.compile import SERIAL_BELOW, compile_seconds

    base = np.ascontiguousarray(load_sample().base[: SERIAL_BELOW + 1000], dtype=dtype)  # threaded kernels
    knngraph.knn_graph(base, 16, method="nndescent", device="cpu", verbose=False, init="random",
                       max_iterations=2)
    print(compile_seconds())


if __name__ == "__main__":
    _compile(sys.argv[1])
