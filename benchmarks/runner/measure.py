"""Timing protocol, peak memory, the description of the machine and library versions, and the JSON lines
that carry them: what the runner and every study measure with.

Timing protocol: one warm-up call whose time is reported separately (``first_call_s``: JIT compilation
and first-use caches land here), then the median of ``repeats`` timed calls (:func:`time_calls`); before
each clock read, GPU work (CuPy and PyTorch) is synchronised. :func:`host_seconds` is the one other clock:
the host time of a call that returns before its GPU work ends (the device is synchronised before the
call, not after).

Every JSON line (:class:`JsonLines`, :class:`benchmarks.runner.run.Runner`) ends with ``date`` (UTC),
``command`` (the command line that wrote it) and ``env`` (:func:`environment`).
"""

from __future__ import annotations

import datetime
import importlib
import importlib.metadata
import json
import os
import platform
import re
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

__all__ = ["sync", "Timing", "time_calls", "host_seconds", "HostPeak", "GpuPeak", "environment", "library_versions",
           "now", "portable_paths", "command_line", "json_default", "JsonLines"]


def sync() -> None:
    """Wait for all queued GPU work (CuPy and PyTorch), if either is loaded and has a GPU."""
    if "cupy" in sys.modules:
        try:
            sys.modules["cupy"].cuda.runtime.deviceSynchronize()
        except Exception:
            pass
    if "torch" in sys.modules:
        try:
            torch = sys.modules["torch"]
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception:
            pass


class Timing:
    """Result of :func:`time_calls`: ``median_s``, every timed call's ``all_s``, ``first_call_s`` (None
    without warm-up), the last call's return value ``result``, and the process CPU seconds of each timed
    call ``cpu_all_s`` with their median ``cpu_median_s`` (all threads of the process: on a machine shared
    with other work, the steadier measure of a CPU call's work)."""

    def __init__(self, median_s, all_s, first_call_s, result, cpu_all_s=None):
        self.median_s = median_s
        self.all_s = all_s
        self.first_call_s = first_call_s
        self.result = result
        self.cpu_all_s = cpu_all_s or []
        self.cpu_median_s = statistics.median(self.cpu_all_s) if self.cpu_all_s else None


def time_calls(fn, repeats: int = 3, warmup: bool = True) -> Timing:
    """Time ``fn()`` by the protocol above; returns a :class:`Timing`."""
    first = None
    result = None
    if warmup:
        sync()
        t0 = time.perf_counter()
        result = fn()
        sync()
        first = time.perf_counter() - t0
    times, cpu = [], []
    for _ in range(max(1, repeats)):
        result = None  # let the previous result go before the next call allocates its own
        sync()
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        sync()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return Timing(statistics.median(times), times, first, result, cpu)


def host_seconds(fn, calls: int, warmup: int = 1, before=None) -> list[float]:
    """Host seconds of each of ``calls`` calls of ``fn()`` after ``warmup`` untimed ones: the device is
    synchronised before each call and after its clock stops, so a call that only queues GPU work is
    timed for its host part alone (launch overhead, argument checks). ``before``: called (untimed)
    after each synchronisation, just before the clock starts (e.g. busy host work, so that the call
    starts from a thread that is awake rather than one just back from waiting on the device)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        sync()
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        sync()
    return times


class HostPeak:
    """Peak resident memory (bytes) of this process since :meth:`reset`.

    On Linux the kernel's high-water mark is reset by writing 5 to ``/proc/self/clear_refs`` and read from
    ``VmHWM``; where that is not possible a thread samples the resident size every 20 ms. The peak is of
    the whole process, so it includes the dataset the runner holds.
    """

    def __init__(self):
        self._kernel = self._try_kernel()
        self._stop = None
        self._peak = 0

    @staticmethod
    def _hwm() -> int | None:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def _try_kernel(self) -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            return False
        return self._hwm() is not None

    def reset(self) -> None:
        if self._kernel:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            return
        self._stop_sampler()
        try:
            import psutil
        except ImportError:
            return
        proc = psutil.Process()
        self._peak = proc.memory_info().rss
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.02):
                self._peak = max(self._peak, proc.memory_info().rss)

        threading.Thread(target=sample, daemon=True).start()

    def _stop_sampler(self):
        if self._stop is not None:
            self._stop.set()
            self._stop = None

    def peak_bytes(self) -> int | None:
        if self._kernel:
            return self._hwm()
        if self._stop is None:
            return None
        try:
            import psutil

            self._peak = max(self._peak, psutil.Process().memory_info().rss)
        except ImportError:
            pass
        return int(self._peak)

    @property
    def source(self) -> str:
        return "VmHWM" if self._kernel else "rss sampled every 20 ms"


class GpuPeak:
    """Peak GPU memory (bytes) allocated since :meth:`reset`, through CuPy's memory pool and PyTorch's
    caching allocator (the two frameworks the measured code allocates with; numba kernels allocate nothing).

    CuPy's bytes in use are counted by a memory hook on the measuring thread
    (:class:`knngraph._device.PeakInUse`; the pool's size reads under the peak where blocks are reused);
    PyTorch reports its own peak. Returns None without a GPU.
    """

    def __init__(self):
        self._cupy_peak = None
        self.available = False
        try:
            import cupy

            self.available = cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:
            pass

    def reset(self) -> None:
        sync()
        if "cupy" in sys.modules and self.available:
            if self._cupy_peak is None:
                from knngraph._device import PeakInUse

                self._cupy_peak = PeakInUse().__enter__()
            self._cupy_peak.reset()
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()

    def peak_bytes(self) -> int | None:
        if not self.available:
            return None
        total = 0
        if self._cupy_peak is not None:
            total += self._cupy_peak.peak
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                total += torch.cuda.max_memory_allocated()
        return int(total)


# packages whose versions go into every JSON line (distribution name -> import name)
_LIBRARIES = {"knngraph": "knngraph", "numpy": "numpy", "numba": "numba", "numba-cuda": "numba_cuda",
              "cupy": "cupy", "torch": "torch", "pynndescent": "pynndescent", "hnswlib": "hnswlib",
              "faiss-cpu": "faiss", "scikit-learn": "sklearn", "matplotlib": "matplotlib", "cuvs": "cuvs"}


def library_versions() -> dict:
    """Versions of the libraries the benchmarks use (None when not installed), without importing them
    where the package metadata is enough."""
    out = {"python": platform.python_version()}
    for dist, module in _LIBRARIES.items():
        version = None
        names = {"cupy": (dist, f"{dist}-cuda12x", f"{dist}-cuda13x"), "cuvs": (dist, f"{dist}-cu13", f"{dist}-cu12")}
        for name in names.get(dist, (dist,)):
            try:
                version = importlib.metadata.version(name)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        if version is None and module in ("knngraph", "cupy", "torch", "numba_cuda"):
            try:  # knngraph may run from the source tree (PYTHONPATH) on the GPU machine
                version = importlib.import_module(module).__version__
            except Exception:
                version = None
        out[dist] = version
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name() -> str | None:
    try:
        from knngraph._device import _gpu_probe

        ok, _ = _gpu_probe()
        if not ok:
            return None
        import cupy

        return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:
        return None


def _host_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def source_revision() -> dict:
    """The knngraph commit measured: ``$KNNGRAPH_BENCH_COMMIT`` when set (a GPU machine's copy has no git),
    else ``git rev-parse HEAD`` of the source tree, with the library files that differ from it."""
    if os.environ.get("KNNGRAPH_BENCH_COMMIT"):
        return {"commit": os.environ["KNNGRAPH_BENCH_COMMIT"], "modified": os.environ.get("KNNGRAPH_BENCH_MODIFIED", "")}
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        modified = subprocess.run(["git", "-C", str(root), "diff", "--name-only", "HEAD", "--", "src"],
                                  capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "modified": ""}
    return {"commit": commit or None, "modified": " ".join(modified)}


def environment() -> dict:
    """Machine and versions: CPU model, cores, host memory, GPU name (None without one), libraries, and
    the knngraph source revision."""
    return {"cpu": _cpu_model(), "cpu_count": os.cpu_count(),
            "host_memory_bytes": _host_memory(), "gpu": _gpu_name(), "platform": platform.platform(),
            "versions": library_versions(), "source": source_revision()}


def now() -> str:
    """UTC date and time, ISO format, seconds."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def as_float(x) -> float | None:
    if x is None:
        return None
    return float(np.asarray(x))


def portable_paths(text: str) -> str:
    """``text`` (a command line, an error message) without the paths of the machine that ran it: the
    repository as ``.``, the folder in ``$OUT`` (where a lent GPU machine collects results) as ``$OUT``,
    the home folder as ``~``. A result file then tells what was run, not where."""
    root = str(Path(__file__).resolve().parents[2])
    places = [(root, "."), (os.environ.get("OUT", ""), "$OUT"), (os.path.expanduser("~"), "~")]
    for place, name in sorted((p for p in places if len(p[0].rstrip("/")) > 1), key=lambda p: -len(p[0])):
        # the folder itself or a path under it, not a longer name that starts alike (/a/b, not /a/bc)
        text = re.sub(re.escape(place.rstrip("/")) + r"(?![\w.-])", lambda _: name, text)
    return text


def command_line() -> str:
    """This process's command line as it would be typed (``python -m benchmarks ...`` for the runner,
    ``python benchmarks/studies/NAME.py ...`` for a study), paths made portable (:func:`portable_paths`)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        head = ["python", "-m", spec.name.removesuffix(".__main__")]
    else:
        script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
        root = Path(__file__).resolve().parents[2]
        head = ["python", str(script.relative_to(root)) if script and script.is_relative_to(root) else sys.argv[0]]
    return portable_paths(shlex.join(head + sys.argv[1:]))


def json_default(o):
    """JSON form of NumPy scalars and arrays, paths, and anything else (its repr)."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return repr(o)


class JsonLines:
    """Append one JSON object per measurement to ``path`` (flushed at once) and echo it without ``env``.

    Every line gets ``date``, ``command`` and ``env`` after its own fields, as the runner's lines do; the
    environment is described once per file object.

    Parameters
    ----------
    path : path
    command : str, optional
        Default: :func:`command_line`.
    echo : bool, default=True
    """

    def __init__(self, path, command: str | None = None, echo: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.command = command or command_line()
        self.env = environment()
        self.echo = echo
        self.rows: list[dict] = []

    def write(self, **row) -> dict:
        row = {**row, "date": now(), "command": self.command, "env": self.env}
        text = json.dumps(row, default=json_default)
        with open(self.path, "a") as fh:
            fh.write(text + "\n")
        self.rows.append(row)
        if self.echo:
            print(json.dumps({k: v for k, v in row.items() if k not in ("env", "command")}, default=json_default),
                  flush=True)
        return row
