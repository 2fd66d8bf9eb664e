"""What the sharded index and the distributed k-NN graph share: the Dask client, the sources of rows
(NumPy arrays, Dask arrays, lists of files) cut into shards, and the errors that name a shard."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING

import numpy as np

from .. import io as kio
from .._validate import SUPPORTED_DTYPES, check_finite, check_vectors

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["ShardError", "connect", "get_client", "n_workers", "Shard", "plan_shards", "shard_rows", "named",
           "read_source"]

#: how long connecting to a scheduler address may take before ConnectionError
CONNECT_TIMEOUT = "10s"


class ShardError(RuntimeError):
    """A shard (or a cluster piece of a distributed graph build) could not be built, loaded, searched or
    rebuilt; the message names it, where its rows come from and the underlying error."""


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ImportError("knngraph.distributed needs Dask: pip install 'knngraph[dask]'") from None
    return distributed


def connect(address: str, *, timeout: str | float = CONNECT_TIMEOUT) -> Client:
    """A ``distributed.Client`` of the scheduler at ``address`` ('tcp://host:8786'); ConnectionError
    naming the address when it cannot be reached within ``timeout``."""
    distributed = _distributed()
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"scheduler address must be a non-empty string such as 'tcp://host:8786', got {address!r}")
    _probe(address)
    try:
        return distributed.Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConnectionError(f"cannot reach the Dask scheduler at {address!r} within {timeout} "
                              f"({type(exc).__name__}: {exc})") from None


def _probe(address: str) -> None:
    """ConnectionError at once when nothing listens at a tcp:// address (Dask would retry until its
    timeout)."""
    import socket

    if not address.startswith("tcp://"):
        return
    host, _, port = address[len("tcp://"):].rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except ValueError:
        raise ValueError(f"scheduler address {address!r}: expected tcp://host:port") from None
    except OSError as exc:
        raise ConnectionError(f"cannot reach the Dask scheduler at {address!r} ({type(exc).__name__}: {exc})") from None


def get_client(client):
    """``client`` (a ``distributed.Client``), a new client of the scheduler address ``client`` (a string),
    or the current client when None."""
    distributed = _distributed()
    if isinstance(client, str):
        return connect(client)
    if client is None:
        try:
            return distributed.get_client()
        except ValueError:
            raise ValueError("no Dask client: pass client=distributed.Client(...) (or a scheduler address), or "
                             "create a Client first") from None
    if not isinstance(client, distributed.Client):
        raise TypeError(f"client must be a distributed.Client or a scheduler address, got {type(client).__name__}")
    if client.status not in ("running", "connecting"):
        raise ValueError(f"the Dask client is {client.status}; it must be running")
    return client


def n_workers(client) -> int:
    """Workers of the cluster now (at least 1)."""
    try:
        info = client.scheduler_info(n_workers=-1)  # newer Dask lists only a few workers by default
    except TypeError:
        info = client.scheduler_info()
    return max(1, len(info.get("workers", {})))


def named(name: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on a worker, its errors re-raised with ``name`` (a shard or piece) in front:
    the same exception type when it can be made from a message (ValueError, FileNotFoundError, ...), a
    :class:`ShardError` otherwise."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        msg = f"{name}: {exc}"
        try:
            new = type(exc)(msg)
            if str(new) != msg:
                raise TypeError
        except Exception:
            new = ShardError(f"{name}: {type(exc).__name__}: {exc}")
        raise new from exc


# --------------------------------------------------------------------------------------------------
# sources of rows


@dataclasses.dataclass(frozen=True)
class Shard:
    """Rows ``[offset, offset + rows)`` of the whole, and where they come from (``source``: 'rows a-b of
    the array', 'chunk 3 of the Dask array', or a file path)."""

    index: int
    offset: int
    rows: int
    source: str

    @property
    def name(self) -> str:
        return f"shard {self.index} ({self.source})"


def _check_dtype(dtype, name):
    dt = np.dtype(dtype)
    if dt != np.float64 and dt not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {dt}; supported vector dtypes are float32, float16, uint8, int8 "
                        "(float64 is cast)")
    return dt


def _is_dask_array(x) -> bool:
    return type(x).__module__.split(".")[0] == "dask" and hasattr(x, "chunks")


def _is_file_list(x) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(p, (str, os.PathLike)) for p in x)


def shard_rows(n: int, shards) -> list[int]:
    """Row counts of the shards: ``shards`` an int (that many near-equal shards) or a sequence of counts
    summing to ``n``."""
    if isinstance(shards, (int, np.integer)) and not isinstance(shards, bool):
        s = int(shards)
        if not 1 <= s <= n:
            raise ValueError(f"shards must be in the range [1, {n}] (one row at least per shard), got {s}")
        base, extra = divmod(n, s)
        return [base + (i < extra) for i in range(s)]
    try:
        counts = [int(c) for c in shards]
    except TypeError:
        raise TypeError(f"shards must be an int or a sequence of row counts, got {type(shards).__name__}") from None
    if not counts or min(counts) < 1 or sum(counts) != n:
        raise ValueError(f"shards as row counts must be positive and sum to the {n} rows, got {counts}")
    return counts


def plan_shards(dataset, shards, n_workers: int):
    """(list of :class:`Shard`, list of per-shard row sources for the workers, n, d, dtype) of a NumPy
    array, a Dask array or a list of vector files.

    A row source is a NumPy slice (embedded in the build task, so Dask can rerun it), a Dask array chunk
    (its lineage) or ``("file", path, first row, end row)``, which the worker reads itself. Several files:
    one shard each; one file may be cut into ``shards`` row ranges."""
    if _is_file_list(dataset):
        if shards is not None and len(dataset) > 1:
            raise ValueError("shards cannot be given with several files: each file is one shard (a single file "
                             "can be cut into shards)")
        paths = [os.fspath(p) for p in dataset]
        heads = []
        for p in paths:
            n_p, d_p, dt_p = kio.read_header(p)
            heads.append((n_p, d_p, _check_dtype(dt_p, p)))
        dims = {h[1] for h in heads}
        if len(dims) > 1:
            listing = ", ".join(f"{p}: {h[1]}" for p, h in zip(paths, heads))
            raise ValueError(f"dataset files have different dimensions ({listing}); all shards need the same")
        dtypes = {h[2] for h in heads}
        if len(dtypes) > 1:
            listing = ", ".join(f"{p}: {h[2]}" for p, h in zip(paths, heads))
            raise ValueError(f"dataset files have different dtypes ({listing}); all shards need the same")
        out, sources, off = [], [], 0
        for p, (n_p, _, _) in zip(paths, heads):
            if n_p < 1:
                raise ValueError(f"dataset file {p} holds no vectors")
            lo = 0
            for rows in (shard_rows(n_p, shards) if shards is not None else [n_p]):
                where = p if rows == n_p else f"{p}, rows {lo}-{lo + rows - 1}"
                out.append(Shard(len(out), off + lo, rows, where))
                sources.append(("file", p, lo, lo + rows))
                lo += rows
            off += n_p
        return out, sources, off, heads[0][1], heads[0][2]
    if _is_dask_array(dataset):
        x = dataset
        if x.ndim != 2:
            raise ValueError(f"dataset must be a 2-D array of shape (n_vectors, dim), got {x.ndim}-D shape {x.shape}")
        dt = _check_dtype(x.dtype, "dataset")
        if any(math.isnan(c) for c in x.chunks[0]):
            x = x.compute_chunk_sizes()
        n, d = (int(s) for s in x.shape)
        if n == 0 or d == 0:
            raise ValueError(f"dataset is empty (shape {(n, d)}); it needs at least one vector of at least one "
                             "dimension")
        x = x.rechunk({0: tuple(shard_rows(n, shards)) if shards is not None else x.chunks[0], 1: -1})
        blocks = x.to_delayed().ravel()
        out, sources, off = [], [], 0
        for c, (rows, block) in enumerate(zip(x.chunks[0], blocks)):
            if rows == 0:
                continue  # empty chunks hold nothing to index
            out.append(Shard(len(out), off, int(rows), f"chunk {c} of the Dask array, rows {off}-{off + rows - 1}"))
            sources.append(block)
            off += int(rows)
        return out, sources, n, d, dt
    x = check_vectors(dataset, "dataset", on_gpu=False)
    check_finite(x, "dataset")
    n, d = x.shape
    counts = shard_rows(n, shards if shards is not None else min(max(1, n_workers), n))
    out, sources, off = [], [], 0
    for rows in counts:
        out.append(Shard(len(out), off, rows, f"rows {off}-{off + rows - 1} of the array"))
        sources.append(x[off:off + rows])
        off += rows
    return out, sources, n, d, x.dtype


def read_source(source):
    """The rows of a source (on a worker): a file is read here, arrays are returned as they are."""
    if isinstance(source, tuple) and source and source[0] == "file":
        _, path, lo, hi = source
        return kio.read(path, rows=(lo, hi), mmap=False)
    return source

