"""Deleting vectors, written once for every index kind that deletes (:func:`knngraph.song.delete`,
:func:`knngraph.ggnn.delete` and their ``compact``): the deleted rows and user ids live in the index's
``row_ids`` (:class:`~knngraph.primitives.filters.RowIds`), an index of several devices deletes part by
part (:func:`knngraph.multidevice.delete`), and a compaction rebuilds over the live vectors with their
ids. Above :mod:`knngraph.index` and :mod:`knngraph.multidevice`, which it uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._device import is_device_array
from ._typing import Array
from . import multidevice
from .index import check_index_type
from .primitives.filters import RowIds, check_compact_above

__all__ = ["delete_rows", "compact_rows", "live_vectors"]


def delete_rows(index: Any, ids: Any, index_type: type, compact_above: float, compact: Callable[[], Any], *,
                memory_limit: Any = None, verbose: bool = True) -> Any:
    """What the ``delete`` of every index kind that deletes does: ``compact_above`` checked; a
    :class:`~knngraph.multidevice.MultiDeviceIndex` handed to :func:`knngraph.multidevice.delete` (which
    calls the kind's ``delete`` per part); else ``ids`` marked deleted in ``index.row_ids``
    (:class:`~knngraph.primitives.filters.RowIds`, made on the first delete), and once the deleted share
    passes ``compact_above`` (and at least 2 rows live) the index ``compact()`` returns, else ``index``.
    TypeError when ``index`` is not an ``index_type``."""
    compact_above = check_compact_above(compact_above)
    if isinstance(index, multidevice.MultiDeviceIndex):
        return multidevice.delete(index, ids, compact_above=compact_above, memory_limit=memory_limit,
                                  verbose=verbose)
    check_index_type(index, index_type)
    rows = (index.row_ids or RowIds(index.shape[0])).delete(ids)
    index.row_ids = rows
    if rows.deleted_fraction > compact_above and rows.n_deleted < rows.n_rows - 1:
        return compact()
    return index


def compact_rows(index: Any, index_type: type, build: Callable[[Array], Any]) -> Any:
    """What the ``compact`` of every index kind that deletes does: the index ``build(vectors)`` makes of
    the live vectors of ``index``, with ``row_ids`` that keep their ids (:func:`live_vectors`), or
    ``index`` itself when nothing is deleted. TypeError when ``index`` is not an ``index_type``."""
    check_index_type(index, index_type)
    live = live_vectors(index, index_type.algorithm.upper())
    if live is None:
        return index
    vectors, new_rows = live
    new = build(vectors)
    new.row_ids = new_rows
    return new


def live_vectors(index: Any, algorithm: str) -> tuple[Array, Any] | None:
    """(the vectors of ``index``'s live rows, the :class:`~knngraph.primitives.filters.RowIds` of an index
    built over them) for a compaction; None when nothing is deleted. ValueError when fewer than 2 rows
    live (no index of ``algorithm`` holds fewer)."""
    rows = index.row_ids
    if rows is None or rows.n_deleted == 0:
        return None
    live, new_rows = rows.compacted()
    if live.size < 2:
        raise ValueError(f"cannot compact an index with {live.size} live vector(s): a {algorithm} index needs at "
                         "least 2")
    xp = __import__("cupy") if is_device_array(index.dataset) else np
    return index.dataset[xp.asarray(live)], new_rows
