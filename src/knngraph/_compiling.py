"""What knngraph says and counts about compiling its kernels, importable without a compiler.

:func:`notice` says a thing once per process where the user sees it ("compiling CPU kernels (first use on
this machine ...)"); :func:`compile_seconds` adds up the seconds this process spent compiling knngraph's
kernels, CPU (numba's compile events, counted by :mod:`knngraph.primitives.compile`) and GPU
(:mod:`knngraph._cuda_launch`), so that reported timings can leave them out or say they include them.

Neither imports numba: a process whose kernels all come from the disk caches, as a warm GPU process does,
never imports it (its import alone costs a few tenths of a second of the first call).
"""

from __future__ import annotations

import logging
import sys
import threading

__all__ = ["notice", "compile_seconds", "add_cpu_compile_seconds"]

_log = logging.getLogger("knngraph")

_SAID: set = set()
_LOCK = threading.Lock()
_CPU_SECONDS = [0.0]


def notice(message: str) -> None:
    """Say ``message`` once per process where the user sees it: as an INFO record of the ``knngraph``
    logger when the program shows its logs (a handler on it or on the root logger, e.g. the command
    line's), else as a WARNING record, which Python's last-resort handler writes to stderr when no logging
    is configured: a plain script shows no INFO records and would otherwise sit silent through minutes of
    compilation."""
    with _LOCK:
        if message in _SAID:
            return
        _SAID.add(message)
    if _log.handlers or logging.getLogger().handlers:
        _log.info(message)
    else:
        _log.warning("knngraph: %s", message)


def add_cpu_compile_seconds(seconds: float) -> None:
    """Count ``seconds`` of numba compiling one of knngraph's CPU kernels (its outermost compile only)."""
    with _LOCK:
        _CPU_SECONDS[0] += seconds


def compile_seconds() -> float:
    """Seconds this process has spent compiling knngraph's kernels, CPU and GPU (0 when all came from the
    disk caches); the difference over a timed call is the compilation inside it."""
    gpu = sys.modules.get("knngraph._cuda_launch")
    return _CPU_SECONDS[0] + (gpu.compile_seconds() if gpu is not None else 0.0)
