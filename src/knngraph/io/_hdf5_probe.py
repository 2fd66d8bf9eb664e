"""The guard against HDF5 files that hang the HDF5 library.

libhdf5 can loop forever on a damaged file, and a loop in C cannot be interrupted in the calling
process, so before :mod:`knngraph.io` opens an HDF5 file it has a long-lived child interpreter read the
file's metadata (:class:`_Prober`, one per process, ended at exit). A child that does not answer within
:data:`HDF5_PROBE_SECONDS` (environment variable ``KNNGRAPH_HDF5_PROBE_SECONDS``), fails or crashes gets
the file called damaged with a ``ValueError`` naming it; files that passed are remembered per version
(path, size, modification time).
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

#: seconds a child process may spend reading an HDF5 file's metadata before the file is called damaged
HDF5_PROBE_SECONDS = 10.0

#: the probe's child: reads one JSON request per line (path, whether to read the root's attributes), answers
#: one line: "" or the error h5py raised
_PROBE_SERVER = r"""
import json, sys
import h5py
for line in sys.stdin:
    path, attributes = json.loads(line)
    try:
        with h5py.File(path, "r") as f:
            if attributes:
                dict(f.attrs)
            for key in f:
                node = f.get(key)
                getattr(node, "shape", None), getattr(node, "dtype", None)
        answer = ""
    except BaseException as exc:
        answer = f"{type(exc).__name__}: {exc}"
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""

#: files whose metadata the probe read in time: (path, size, mtime, attributes) -> True
_PROBED: dict = {}


class _Prober:
    """One long-lived child interpreter (h5py imported once) that reads HDF5 metadata on request, so a
    probe costs a pipe round trip, not an interpreter start; a child that hangs or crashes is killed and
    the next probe starts a new one. Not a fork of this process (its threads, its locks) and not
    :mod:`multiprocessing` (which would import the caller's main script again in the child)."""

    def __init__(self):
        self.proc = None
        self.lock = threading.Lock()

    def _start(self):
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", _PROBE_SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def close(self):
        """End the child (at exit): it leaves its loop when its input closes."""
        with self.lock:
            if self.proc is not None:
                try:
                    self.proc.stdin.close()
                    self.proc.wait(timeout=2)
                except (OSError, ValueError):
                    pass
                except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: kill it below
                    pass
                self._stop()

    def _stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            self.proc = None

    def probe(self, path: str, attributes: bool, limit: float):
        """'' when h5py read the metadata, the error text when it raised, None when it did not answer
        within ``limit`` seconds (or the child died: then the text says so)."""
        import json
        import select

        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._stop()
                self._start()
            try:
                self.proc.stdin.write(json.dumps([path, attributes]) + "\n")
                self.proc.stdin.flush()
                ready, _, _ = select.select([self.proc.stdout], [], [], limit)
                line = self.proc.stdout.readline() if ready else None
            except OSError:
                line = ""
            if line is None:
                self._stop()
                return None
            if not line:  # EOF: the child died reading the file
                code = self.proc.poll()
                self._stop()
                return f"the HDF5 reader crashed (exit status {code})"
            return json.loads(line)


_PROBER = _Prober()
atexit.register(_PROBER.close)


def _probe_hdf5(p: Path, path, *, attributes: bool = False) -> None:
    """Read the file's metadata (every node's shape and dtype; with ``attributes`` the root's attributes
    too) in a child process first: libhdf5 can loop forever on a damaged file (a few flipped bytes in the
    root attributes), and a loop in C cannot be interrupted in this process. A child that does not answer
    within :data:`HDF5_PROBE_SECONDS` (``KNNGRAPH_HDF5_PROBE_SECONDS``) is killed, and the file called
    damaged (ValueError naming it); so is a child that fails or crashes. The answer is kept per file
    version."""
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, attributes)
    if key in _PROBED:
        return
    limit = float(os.environ.get("KNNGRAPH_HDF5_PROBE_SECONDS") or HDF5_PROBE_SECONDS)
    why = _PROBER.probe(os.fspath(p.resolve()), attributes, limit)
    if why is None:
        raise ValueError(f"{os.fspath(path)}: the HDF5 library did not finish reading this file's metadata "
                         f"within {limit:g} s; the file is corrupt (or not an HDF5 file)")
    if why:
        raise ValueError(f"{os.fspath(path)}: not a readable HDF5 file, or it is corrupt ({why})")
    _PROBED[key] = True
