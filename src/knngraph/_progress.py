"""Progress bars: a tqdm bar on a terminal, silent when not a terminal or ``verbose=False``."""

from __future__ import annotations

import contextlib
import sys


class _NullBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass


#: bar of work that may end before its total (NN-Descent stops when few lists change): no ETA, whose
#: estimate would assume the maximum, and "of at most" instead of "of"
_UPPER_BOUND_FORMAT = "{desc}: {n_fmt} of at most {total_fmt} [{elapsed}, {rate_fmt}{postfix}]"


@contextlib.contextmanager
def progress(total: int, desc: str, disable: bool = False, min_steps: int = 8, upper_bound: bool = False):
    """A context manager yielding an object with ``update(n)``.

    Bars show only for work of at least ``min_steps`` steps, when stderr is a terminal. ``upper_bound``:
    ``total`` is a maximum that the work may stop short of (the bar shows no ETA). Either way a bar left
    before its total ends showing the steps done as its total, so that the last line it leaves is true.
    """
    if disable or total < min_steps or not sys.stderr.isatty():
        yield _NullBar()
        return
    from tqdm.auto import tqdm

    kw = {"bar_format": _UPPER_BOUND_FORMAT} if upper_bound else {}
    bar = tqdm(total=total, desc=desc, leave=False, file=sys.stderr, **kw)
    try:
        yield bar
    finally:
        if bar.n < bar.total:
            bar.total = bar.n
            bar.refresh()
        bar.close()
