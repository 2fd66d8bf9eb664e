"""First run on the CPU: compile in two processes.

numba compiles one function at a time on one core. On a fresh install the demo's kernels take about 45 s
to compile on a 2-core machine. NN-Descent's iteration kernels (local join, updates, sampling) and the
beam searcher do not depend on the rest: :func:`start_nndescent_compile` starts
``python -m knngraph._firstrun DTYPE``, which builds a small NN-Descent graph (random initial lists,
threaded kernels) and searches it, and so compiles those kernels into numba's disk cache, while the
calling process compiles the others (exact search, graph pruning, and the random projection forest that
starts NN-Descent: :func:`compile_forest`). The caller waits for the child (:func:`wait`) before its own
NN-Descent build; numba looks in its disk cache before compiling a new signature, and finds them there.

Nothing is started when the kernels are already on disk, when the machine has one core, or when
``KNNGRAPH_NO_BACKGROUND_COMPILE`` is set; a child that fails costs nothing but the time it took (the
caller compiles the kernels itself). Both processes take the lock of :func:`knngraph._warmup.lock_numba_cache_writes`
around their writes to numba's disk cache, so that a kernel both compile (for different argument types) keeps
every entry.
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
    _lock_cache_writes()
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


def compile_forest(x, k: int) -> None:
    """Compile (or load) the kernels of the random projection forest that starts a CPU NN-Descent build
    of ``x`` (L2) with ``k`` neighbours, by running that initialisation alone (a few tenths of a second on
    the demo's data): the part of the demo's NN-Descent build that the second process does not compile."""
    from .nndescent._common import forest_params
    from .nndescent.cpu import Engine
    from .primitives.distances import DIST_L2SQ

    engine = Engine()
    xc, inv = engine.prepare(x, DIST_L2SQ)
    gd, gi, gf = engine.new_graph(xc.shape[0], k)
    n_trees, leaf_size = forest_params(xc.shape[0], k)
    _, _, order = engine.init_forest(xc, inv, DIST_L2SQ, gd, gi, gf, 0, n_trees, leaf_size)
    engine.unpermute(gd, gi, order)


def _lock_cache_writes() -> None:
    from ._warmup import can_lock, lock_numba_cache_writes

    if can_lock():
        lock_numba_cache_writes()


def _compile(dtype: str) -> None:
    import knngraph
    from . import song
    from ._compiling import compile_seconds
    from .datasets import load_sample
    from .primitives.compile import SERIAL_BELOW

    _lock_cache_writes()
    sample = load_sample()
    base = np.ascontiguousarray(sample.base[: SERIAL_BELOW + 1000], dtype=dtype)  # threaded kernels
    graph = knngraph.knn_graph(base, 16, method="nndescent", device="cpu", verbose=False, init="random",
                               max_iterations=2)
    queries = np.ascontiguousarray(sample.queries[:64], dtype=dtype)
    song.search(song.from_graph(graph, base, device="cpu"), queries, 10, device="cpu", verbose=False)
    # this process's output, read by wait(): the seconds it spent compiling (a command's result, not a
    # diagnostic; diagnostics go to the logger, which is silent here)
    sys.stdout.write(f"{compile_seconds()}\n")


if __name__ == "__main__":
    _compile(sys.argv[1])
