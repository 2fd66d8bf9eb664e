"""Atomic file writing, shared by the modules of knngraph that write files.

A file is written to a new temporary file in the target's directory (created with ``O_EXCL`` and mode
``0o666``, so the umask applies), flushed and fsynced, then moved over the target with
:func:`os.replace`; a failed write removes its temporary file and raises an error naming the target, and
a successful one removes the temporary files that crashed or killed writes left in that directory more
than an hour ago. :mod:`knngraph.io` writes vector files this way, and :mod:`knngraph.graph`,
:mod:`knngraph.multidevice` and :mod:`knngraph.distributed` write their saves through the same helpers.
"""

from __future__ import annotations

import errno
import os
import secrets
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ._formats import _CHUNK_BYTES

# Every file knngraph writes (knngraph.io and knngraph.graph) is first written to a temp file of this
# name in the target's directory.
_TEMP_PREFIX = ".knngraph-"
_TEMP_SUFFIX = ".tmp"
# A temp file untouched this long belongs to a save that crashed or was killed; the next save in its
# directory removes it. Long, so that a slow save in another process (whose temp file is not touched
# while it fsyncs gigabytes) is never taken for a dead one.
_STALE_TEMP_SECONDS = 3600


def _atomic_write(path, write_into: Callable[[Path], None]) -> None:
    """Call ``write_into(tmp)`` for a new temp path next to ``path``, then move it in place.

    Errors name ``path``, not the temp file, which never outlives a failed write."""
    target = Path(os.fspath(path))
    parent = target.parent
    if not parent.is_dir():
        raise FileNotFoundError(
            errno.ENOENT, f"cannot write there, directory {parent} does not exist", os.fspath(path)
        )
    tmp = parent / f"{_TEMP_PREFIX}{secrets.token_hex(8)}{_TEMP_SUFFIX}"
    try:
        write_into(tmp)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename in (tmp, os.fspath(tmp)):
            # OSError(errno, ...) gives the matching subclass (PermissionError, ...).
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc
        raise
    _remove_stale_temps(parent)


def _remove_stale_temps(directory: Path) -> None:
    """Delete temp files that crashed or killed saves left in ``directory`` (best effort)."""
    cutoff = time.time() - _STALE_TEMP_SECONDS
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not (entry.name.startswith(_TEMP_PREFIX) and entry.name.endswith(_TEMP_SUFFIX)):
                    continue
                try:
                    old = entry.stat(follow_symlinks=False).st_mtime < cutoff
                    if old and entry.is_file(follow_symlinks=False):
                        os.unlink(entry.path)
                except OSError:
                    pass
    except OSError:
        pass


def _open_new(tmp: Path):
    # O_EXCL: never follow or reuse something already there; mode 0o666 lets the umask apply.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    return os.fdopen(fd, "wb")


def _row_chunks(array: np.ndarray):
    row_bytes = max(1, array.shape[1] * array.dtype.itemsize)
    step = max(1, _CHUNK_BYTES // row_bytes)
    for lo in range(0, array.shape[0], step):
        yield array[lo : lo + step]


def _finish(f) -> None:
    f.flush()
    os.fsync(f.fileno())
