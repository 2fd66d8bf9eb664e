"""Filtered search and deleted vectors: which ids a search may return, as a bitset every search path reads
the same way.

A user passes ``filter=`` either as a boolean mask over the index's ids (``True``: may be returned) or
as a bitset of ``ceil(n / 32)`` uint32 words, id ``i`` being bit ``i % 32`` (least significant first) of
word ``i // 32``; bits past ``n`` are ignored. :func:`prepare_filter` validates either form and returns an
:class:`AllowedIds` holding the bitset (a filter may allow no id at all: every result row is then -1 /
inf); kernels test an id with :func:`knngraph.primitives.bitset.is_allowed` (written once, CPU and GPU;
this module is host code that does not import numba).

Deleted vectors are expressed the same way. An index that deletes (:func:`knngraph.song.delete`,
:func:`knngraph.ggnn.delete`) keeps a :class:`RowIds`: the bitset of its deleted rows, cleared from the
allowed bits of every search (:meth:`RowIds.search_filter`), and, once the index was compacted (rebuilt
over its live rows), the user id of each row, through which search results are mapped, so that ids stay
what they were when the vectors were added.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["AllowedIds", "RowIds", "prepare_filter", "bitset_words", "pack_mask", "user_ids",
           "results_as_user_ids", "check_compact_above", "allowed_rows"]


def bitset_words(n: int) -> int:
    """uint32 words of a bitset over ``n`` ids."""
    return (int(n) + 31) // 32


def pack_mask(mask: np.ndarray) -> np.ndarray:
    """The uint32 bitset of a boolean mask (bit ``i % 32`` of word ``i // 32`` is ``mask[i]``)."""
    bits = np.zeros(bitset_words(mask.shape[0]) * 4, np.uint8)
    packed = np.packbits(mask, bitorder="little")
    bits[:packed.size] = packed
    return bits.view("<u4").astype(np.uint32, copy=False)


def _count(bits: np.ndarray) -> int:
    """Set bits of a uint32 bitset."""
    if hasattr(np, "bitwise_count"):  # NumPy >= 2.0: a popcount per word
        return int(np.bitwise_count(bits).sum())
    return int(np.unpackbits(bits.view(np.uint8)).sum())


def _clear_tail(bits: np.ndarray, n: int) -> np.ndarray:
    """``bits`` with the bits past ``n`` cleared (in place)."""
    if n % 32:
        bits[-1] &= np.uint32((1 << (n % 32)) - 1)
    return bits


@dataclasses.dataclass(frozen=True)
class AllowedIds:
    """A validated filter over ``n`` ids: ``bits`` (host uint32 words, bits past ``n`` cleared) and the
    number of ids it allows (possibly 0)."""

    bits: np.ndarray
    n: int
    n_allowed: int

    @classmethod
    def of_bits(cls, bits: np.ndarray, n: int) -> "AllowedIds":
        """The filter of a uint32 bitset of ``bitset_words(n)`` words (taken as it is; its tail cleared)."""
        bits = _clear_tail(np.ascontiguousarray(bits, dtype=np.uint32), n)
        return cls(bits, int(n), _count(bits))

    @property
    def fraction(self) -> float:
        """Share of the ids that are allowed."""
        return self.n_allowed / self.n if self.n else 0.0

    def ids(self) -> np.ndarray:
        """The allowed ids, ascending (int64)."""
        return np.flatnonzero(self.mask())

    def mask(self) -> np.ndarray:
        """The filter as a boolean mask of length ``n``."""
        return np.unpackbits(self.bits.view(np.uint8), count=self.n, bitorder="little").astype(bool)

    def rows(self, lo: int, hi: int) -> "AllowedIds":
        """The filter over ids ``lo .. hi - 1`` alone, renumbered from 0 (a shard's part)."""
        if lo == 0 and hi == self.n:
            return self
        if lo % 32 == 0:
            return AllowedIds.of_bits(self.bits[lo // 32:lo // 32 + bitset_words(hi - lo)].copy(), hi - lo)
        return AllowedIds.of_bits(pack_mask(self.mask()[lo:hi]), hi - lo)


def prepare_filter(filter, n: int, name: str = "filter") -> AllowedIds | None:
    """Validate ``filter`` (None, a boolean mask of length ``n`` or a uint32 bitset of ``ceil(n / 32)``
    words; NumPy, CuPy, PyTorch or a list) for an index of ``n`` ids. None stays None; a filter that
    allows no id is valid (every result row is then -1 / inf).

    Raises TypeError for other dtypes (with how to turn a list of ids into a mask) and ValueError for a
    wrong length or shape."""
    if filter is None:
        return None
    if isinstance(filter, AllowedIds):
        if filter.n != n:
            raise ValueError(f"{name} is a filter over {filter.n} ids, but the index holds {n}")
        return filter
    from .._device import as_numpy

    try:
        a = as_numpy(filter)
    except Exception as exc:  # an object NumPy cannot hold as an array
        raise TypeError(f"{name} must be a boolean mask or a uint32 bitset, got {type(filter).__name__}") from exc
    if a.dtype == object or a.dtype.kind not in "bu" or (a.dtype.kind == "u" and a.dtype != np.uint32):
        raise TypeError(
            f"{name} must be a boolean mask of length {n} (True: the id may be returned) or a uint32 bitset "
            f"of {bitset_words(n)} words, got dtype {a.dtype}; to allow a list of ids, pass "
            f"mask = np.zeros({n}, bool); mask[ids] = True")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype == np.bool_:
        if a.shape[0] != n:
            raise ValueError(f"{name} is a boolean mask of length {a.shape[0]}, but the index holds {n} vectors")
        return AllowedIds.of_bits(pack_mask(a), n)
    if a.shape[0] != bitset_words(n):
        raise ValueError(f"{name} is a bitset of {a.shape[0]} uint32 words, but {n} vectors need "
                         f"{bitset_words(n)} (ceil(n / 32))")
    return AllowedIds.of_bits(np.array(a, dtype=np.uint32, copy=True), n)


def user_ids(row_ids, ids):
    """Search results ``row_ids`` (int32, -1 = none; NumPy or CuPy) as user ids through ``ids`` (the user
    id of each row, int32, on the results' device): -1 stays -1."""
    xp = np if isinstance(row_ids, np.ndarray) else __import__("cupy")
    return xp.where(row_ids >= 0, ids[xp.maximum(row_ids, 0)], np.int32(-1)).astype(np.int32, copy=False)


def results_as_user_ids(row_ids, rows: "RowIds | None", cache: dict):
    """Search results ``row_ids`` of an index whose rows are ``rows`` as its users' ids (the same array
    when every row is its own id); the ids' copy on the results' device is kept in ``cache`` (the index's
    per-device cache) while ``rows.ids`` is the same array."""
    if rows is None or rows.ids is None:
        return row_ids
    on_gpu = not isinstance(row_ids, np.ndarray)
    key = ("row-ids", row_ids.data.device_id if on_gpu else "cpu")
    kept = cache.get(key)
    if kept is None or kept[0] is not rows.ids:
        if on_gpu:
            from .._device import kept_across_streams

            with kept_across_streams():
                kept = cache[key] = (rows.ids, __import__("cupy").asarray(rows.ids))
        else:
            kept = cache[key] = (rows.ids, rows.ids)
    return user_ids(row_ids, kept[1])


def allowed_rows(rows: "RowIds | None", n: int, filter, name: str = "filter") -> AllowedIds | None:
    """The rows a search of an index of ``n`` rows may return: :meth:`RowIds.search_filter` of the index's
    ``rows``, or, for an index that never deleted (``rows`` None), ``filter`` validated by
    :func:`prepare_filter`; None for the unfiltered search."""
    return rows.search_filter(filter, name) if rows is not None else prepare_filter(filter, n, name)


def check_compact_above(compact_above) -> float:
    """``compact_above=`` of a delete: a share in [0, 1] (1: never compact), else ValueError naming it."""
    if isinstance(compact_above, bool) or not isinstance(compact_above, (int, float, np.integer, np.floating)) \
            or not 0.0 <= float(compact_above) <= 1.0:
        raise ValueError(f"compact_above must be a share of the rows in [0, 1] (1: never compact), got "
                         f"{compact_above!r}")
    return float(compact_above)


@dataclasses.dataclass(frozen=True, eq=False)
class RowIds:
    """The rows of an index that deletes, as its users see them: which rows are deleted and which user
    id each row has. Immutable: :meth:`delete`, :meth:`extended` and :meth:`compacted` return new ones
    (a search that runs meanwhile keeps reading the one it started with).

    Attributes
    ----------
    n_rows : int
        Rows of the index (vectors it holds, deleted ones included).
    deleted : ndarray of uint32 or None
        Bitset of the deleted rows (``bitset_words(n_rows)`` words); None: none is.
    ids : ndarray of int32 or None
        The user id of each row, ascending (an index rebuilt over its live rows by a compaction keeps
        its users' ids); None: row ``i`` is id ``i``.
    id_bound : int
        Ids given so far are in [0, id_bound): new rows (``extend``) get the next ones, so an id is never
        given twice, also when the rows of the largest ones were deleted and compacted away. Filters are
        over this many ids.
    """

    n_rows: int
    deleted: np.ndarray | None = None
    ids: np.ndarray | None = None
    id_bound: int = -1

    def __post_init__(self):
        if self.id_bound < 0:
            object.__setattr__(self, "id_bound", int(self.n_rows))

    @property
    def n_deleted(self) -> int:
        """Deleted rows."""
        return 0 if self.deleted is None else _count(self.deleted)

    @property
    def deleted_fraction(self) -> float:
        """Share of the rows that are deleted."""
        return self.n_deleted / self.n_rows if self.n_rows else 0.0

    def live_mask(self) -> np.ndarray:
        """Boolean mask of the rows that are not deleted."""
        if self.deleted is None:
            return np.ones(self.n_rows, bool)
        return ~AllowedIds(self.deleted, self.n_rows, 0).mask()

    def search_filter(self, filter, name: str = "filter") -> AllowedIds | None:
        """The rows a search may return: ``filter`` (over the ``id_bound`` user ids, validated by
        :func:`prepare_filter`) taken to the rows, without the deleted rows. None when there is no filter
        and nothing is deleted (the unfiltered search)."""
        allowed = prepare_filter(filter, self.id_bound, name)
        if self.deleted is None and self.ids is None:
            return allowed  # rows are ids and none is deleted: the filter as it is
        if allowed is None and self.deleted is None:
            return None
        if allowed is None:
            bits = np.full(bitset_words(self.n_rows), 0xFFFFFFFF, np.uint32)
        elif self.ids is not None:
            bits = pack_mask(allowed.mask()[self.ids])
        else:
            bits = allowed.bits.copy()
        if self.deleted is not None:
            bits &= ~self.deleted
        return AllowedIds.of_bits(bits, self.n_rows)

    def delete(self, ids, name: str = "ids") -> "RowIds":
        """These rows with the user ids ``ids`` (1-D integers in [0, id_bound)) marked deleted; ids that are
        deleted already (or were compacted away) stay so. TypeError / ValueError naming ``name`` for
        anything else."""
        from .._device import as_numpy

        try:
            a = np.atleast_1d(as_numpy(ids))
        except Exception as exc:
            raise TypeError(f"{name} must be a 1-D array of integer ids, got {type(ids).__name__}") from exc
        if a.dtype.kind not in "iu" or a.dtype == np.bool_:
            raise TypeError(f"{name} must be integer ids, got dtype {a.dtype}" + (
                "; for a boolean mask pass np.flatnonzero(mask)" if a.dtype == np.bool_ else ""))
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
        a = a.astype(np.int64)
        if a.size and (int(a.min()) < 0 or int(a.max()) >= self.id_bound):
            bad = int(a[(a < 0) | (a >= self.id_bound)][0])
            raise ValueError(f"{name} holds {bad}, which is not an id of this index (ids are in [0, {self.id_bound}))")
        if self.ids is None:
            rows = a
        else:
            pos = np.minimum(np.searchsorted(self.ids, a), self.n_rows - 1)
            rows = pos[self.ids[pos] == a]  # the others were compacted away: deleted already
        bits = np.zeros(bitset_words(self.n_rows), np.uint32) if self.deleted is None else self.deleted.copy()
        np.bitwise_or.at(bits, rows >> 5, np.left_shift(np.uint32(1), (rows & 31).astype(np.uint32)))
        return dataclasses.replace(self, deleted=bits)

    def extended(self, m: int) -> "RowIds":
        """These rows followed by ``m`` new live rows, with the next ``m`` user ids."""
        n = self.n_rows + int(m)
        deleted = None
        if self.deleted is not None:
            deleted = np.zeros(bitset_words(n), np.uint32)
            deleted[:self.deleted.size] = self.deleted
        ids = None
        if self.ids is not None or self.id_bound != self.n_rows:
            own = self.ids if self.ids is not None else np.arange(self.n_rows, dtype=np.int32)
            ids = np.concatenate([own, np.arange(self.id_bound, self.id_bound + m, dtype=np.int32)])
        return RowIds(n, deleted, ids, self.id_bound + int(m))

    def compacted(self) -> tuple[np.ndarray, "RowIds"]:
        """(the live rows, ascending; the RowIds of an index rebuilt over them: nothing deleted, each row
        with its user id)."""
        live = np.flatnonzero(self.live_mask())
        own = self.ids if self.ids is not None else np.arange(self.n_rows, dtype=np.int32)
        return live, RowIds(int(live.size), None, np.ascontiguousarray(own[live], np.int32), self.id_bound)

    def arrays(self) -> tuple[dict, dict]:
        """(arrays, header values) that an index file keeps of these rows (:meth:`from_saved` reads them)."""
        arrays = {}
        if self.deleted is not None:
            arrays["deleted"] = self.deleted
        if self.ids is not None:
            arrays["row_ids"] = self.ids
        return arrays, {"id_bound": int(self.id_bound)}

    @classmethod
    def from_saved(cls, n_rows: int, arrays, meta: dict) -> "RowIds | None":
        """The RowIds an index file of ``n_rows`` rows keeps (None for files written before deletion existed,
        or without deletions); ValueError when its parts do not fit the rows."""
        deleted = arrays["deleted"] if "deleted" in arrays else None
        ids = arrays["row_ids"] if "row_ids" in arrays else None
        bound = int(meta.get("id_bound", n_rows))
        if deleted is None and ids is None and bound == n_rows:
            return None
        if deleted is not None and (deleted.dtype != np.uint32 or deleted.shape != (bitset_words(n_rows),)):
            raise ValueError(f"its deleted rows are {deleted.dtype} of shape {deleted.shape}, not a bitset of "
                             f"{bitset_words(n_rows)} uint32 words")
        if ids is not None and (ids.dtype.kind not in "iu" or ids.shape != (n_rows,) or
                                (n_rows and (int(ids.min()) < 0 or int(ids.max()) >= bound))
                                or (np.diff(ids.astype(np.int64)) <= 0).any()):
            raise ValueError(f"its row ids are not {n_rows} ascending ids in [0, {bound})")
        if bound < n_rows:
            raise ValueError(f"its id bound {bound} is below its {n_rows} rows")
        return cls(int(n_rows), deleted, None if ids is None else ids.astype(np.int32), bound)
