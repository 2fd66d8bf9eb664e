"""Progress bars: a tqdm bar on a terminal, silent when not a terminal or ``verbose=False``."""

from __future__ import annotations

import contextlib
import sys


class _NullBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass


@contextlib.contextmanager
def progress(total: int, desc: str, disable: bool = False, min_steps: int = 8):
    """A context manager yielding an object with ``update(n)``.

    Bars show only for work of at least ``min_steps`` steps, when stderr is a terminal.
    """
    if disable or total < min_steps or not sys.stderr.isatty():
        yield _NullBar()
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, leave=False, file=sys.stderr)
    try:
        yield bar
    finally:
        bar.close()
