"""The sharded search index: :class:`ShardedIndex`, :func:`build`, :func:`search`, :func:`delete`,
:func:`save`, :func:`load`.

Every shard is an index of one searching algorithm of :mod:`knngraph.registry` (``searches=True``),
built, saved and loaded through that algorithm's module contract (:mod:`knngraph.index`) by a Dask task;
the shard indexes live on the workers as the results of those tasks. A search sends each batch of
queries to every worker holding shards, by a direct call to it (not a task: see :func:`search`), which
offsets each shard's ids to global ids and merges its shards' top-k; the client merges the workers' with
:func:`knngraph.graphops.merge_topk`. Dask keeps the lineage of every shard (its rows or its file), so a
shard lost with its worker is rebuilt or reloaded on another one (a batch whose call was lost with it is
re-sent as a task).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed.core import send_recv
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

from .. import registry
from .._device import array_kind, as_numpy, return_as
from .._typing import Array, MemoryLimit, PathLike
from .._validate import check_finite, check_int, check_k, check_vectors
from ..graphops import merge_topk
from ..io import _atomic_write
from ..index import KNNResult, runtime_docs
from ._common import Shard, ShardError, _is_dask_array, get_client, n_workers, named, plan_shards, read_source

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["ShardedIndex", "build", "search", "delete", "save", "load", "read_manifest", "MANIFEST",
           "DEFAULT_BATCH_SIZE"]

#: the manifest file of a saved sharded index
MANIFEST = "manifest.json"
FORMAT = "knngraph-sharded-index"
VERSION = 1
#: queries sent to the shards per batch
DEFAULT_BATCH_SIZE = 10_000
#: batches under way at once while queries stream: enough to keep every worker searching while the client
#: sends the next batches and merges the previous ones
MAX_IN_FLIGHT = 8
#: the workers' RPC operation that searches a batch on the shards a worker holds (see _SearchService)
SEARCH_OP = "knngraph_search_shards"
#: seconds a direct call may take to connect to its worker: a live worker's system accepts at once, while
#: Dask would retry a dead one's address for its whole connect timeout (30 s by default) before the batch
#: could be re-sent as a task
CALL_CONNECT_TIMEOUT = 5


@dataclasses.dataclass(eq=False)
class ShardedIndex:
    """An index cut into shards that live on the workers of a Dask cluster.

    Attributes
    ----------
    client : distributed.Client
    algorithm : str
        The :mod:`knngraph.registry` name of the shards' algorithm.
    params : IndexParams
        The algorithm's build parameters (the same for every shard).
    shards : tuple of Shard
        Each shard's global row offset, row count and source (for error messages).
    futures : list of distributed.Future
        The shard indexes (results of their build or load tasks).
    dim : int
    dtype : numpy.dtype
    """

    client: object
    algorithm: str
    params: object
    shards: tuple
    futures: list
    dim: int
    dtype: object

    @property
    def metric(self) -> str:
        return self.params.metric

    @property
    def shape(self) -> tuple:
        return (sum(s.rows for s in self.shards), self.dim)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"ShardedIndex(algorithm={self.algorithm!r}, shape={self.shape}, shards={len(self.shards)}, "
                f"metric={self.metric!r})")

    def search(self, queries: Array, k: int, params: Any = None, **kwargs: Any) -> KNNResult:
        """:func:`search` of this index."""
        return search(self, queries, k, params, **kwargs)

    def wait(self) -> "ShardedIndex":
        """Block until every shard is built (or loaded); a failed shard raises, naming it. The shards
        stay on their workers."""
        _wait_built(self)
        return self


# --------------------------------------------------------------------------------------------------
# worker tasks (plain functions: Dask reruns them from their arguments when a worker is lost) and the
# workers' search service


def _build_shard(source, algorithm, params, device, memory_limit):
    mod = registry.get(algorithm).load()
    return mod.build(params, read_source(source), device=device, memory_limit=memory_limit, verbose=False)


def _search_shard(index, queries, k, params, offset, device):
    # k may exceed a small shard: it then returns all its vectors, and the merge pads (inf, -1)
    kk = min(k, len(index))
    d, i = index.search(queries, kk, params, device=device, verbose=False)
    # a copy (the index's own arrays stay as they are), in int32: build keeps the global ids below 2**31
    i = as_numpy(i).astype(np.int32)
    if offset:
        np.add(i, offset, out=i, where=i >= 0)
    return as_numpy(d).astype(np.float32, copy=False), i


def _search_shards(queries, k, params, offsets, device, *indexes):
    """One batch of queries on every shard a worker holds, their top-k merged there: one call (or task)
    per worker and batch, whatever the number of shards."""
    q = np.ascontiguousarray(as_numpy(queries))
    parts = [_search_shard(ix, q, k, params, off, device) for ix, off in zip(indexes, offsets)]
    if len(parts) == 1:
        return parts[0]
    return _merge(k, *parts)


def _merge(k, *parts):
    return merge_topk([p[0] for p in parts], [p[1] for p in parts], k)


class _SearchService(WorkerPlugin):
    """The workers' end of a streamed search: ``SEARCH_OP`` runs :func:`_search_shards` on the shard
    indexes a worker holds (looked up by their keys) for one batch the client sent straight to it; no
    task, so no trip through the scheduler. Searches run in as many threads of their own as the worker
    has for tasks, as the search tasks did: a GPU worker's threads search on streams of their own, which
    overlap (on one H200 worker with its default threads, one search thread streamed 0.58x / 0.73x /
    0.84x the in-process queries/s at queue 32 / 64 / 128). A shard the worker no longer holds answers
    'missing' (the client then searches that batch with a task, which Dask reruns if it must)."""

    name = "knngraph-sharded-search"
    idempotent = True  # every search registers it; the workers keep the first

    def setup(self, worker):
        self._worker = worker
        self._thread = concurrent.futures.ThreadPoolExecutor(max(1, int(worker.state.nthreads)),
                                                             thread_name_prefix="knngraph-search")
        worker.handlers[SEARCH_OP] = self._search

    def teardown(self, worker):
        worker.handlers.pop(SEARCH_OP, None)
        self._thread.shutdown(wait=False)

    async def _search(self, comm, keys, queries, k, params, offsets, device, name):
        # ``comm`` first: Dask passes a handler whose first parameter has that name its connection
        try:
            indexes = [self._worker.data[key] for key in keys]
        except KeyError:
            return {"status": "missing"}
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                self._thread, named, name, _search_shards, queries, k, params, offsets, device, *indexes)
        except Exception as exc:  # named; raised by the client (a status, so it passes a scheduler proxy too)
            return {"status": "error", "exception": to_serialize(exc)}
        return {"status": "OK", "result": to_serialize(result)}


def _delete_shard(index, ids, compact_above, device, memory_limit):
    # a copy: the task's input (the shard's previous index, another future's result) stays as it was
    mod = registry.get(index.algorithm).load()
    return mod.delete(copy.copy(index), ids, compact_above=compact_above, device=device, memory_limit=memory_limit,
                      verbose=False)


def _load_shard(path, algorithm, metric):
    return registry.get(algorithm).load().load(path, metric=metric)


def _save_shard(index, path):
    mod = registry.get(index.algorithm).load()
    mod.save(path, index)
    return os.path.getsize(path)


# --------------------------------------------------------------------------------------------------
# helpers


def _nbytes(obj, depth=0) -> int:
    """Bytes of the arrays an index holds (Dask's ``sizeof`` of an index), so that the scheduler keeps
    work next to a shard instead of moving the shard: it would otherwise count a few hundred bytes."""
    if hasattr(obj, "nbytes") and hasattr(obj, "dtype"):
        return int(obj.nbytes)
    if depth > 2 or not dataclasses.is_dataclass(obj):
        return 64
    return sum(_nbytes(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj))


def _register_sizeof():
    from dask.sizeof import sizeof

    from ..index import Index

    sizeof.register(Index)(_nbytes)


_register_sizeof()


def _wait_built(index: ShardedIndex) -> None:
    """Block until every shard is in a worker's memory (built, loaded or rebuilt), without moving it; a
    shard that failed raises, named."""
    from distributed import wait

    with index.client.as_current():  # wait() waits through the default client, which this one may not be
        wait(index.futures)
    failed = [f for f in index.futures if f.status != "finished"]
    if failed:
        _gather(index, failed)  # no data to move: raises the failure


def _gather(index: ShardedIndex, futures):
    """Results of ``futures``; a shard whose task failed for good (a worker lost too often, a file gone)
    raises a :class:`ShardError` naming it. Never returns a partial result."""
    from distributed.scheduler import KilledWorker

    try:
        return index.client.gather(futures)
    except KilledWorker as exc:
        raise ShardError(f"a task of {_which(index, exc)} was lost with its worker too many times "
                         f"and could not be rerun: {exc}") from exc


def _which(index: ShardedIndex, exc) -> str:
    text = str(exc)
    for s, f in zip(index.shards, index.futures):
        if f.key in text or f"shard-{s.index}-" in text:
            return s.name
    return "a shard of " + repr(index)


def _near(workers) -> dict:
    """submit() options that run a task on ``workers`` (those holding its shard) while they live."""
    return {"workers": list(workers), "allow_other_workers": True} if workers else {}


def _holders(index: ShardedIndex) -> list:
    """Per shard, the workers that hold it (a sorted tuple; empty while it is not computed)."""
    who = index.client.who_has(index.futures)
    return [tuple(sorted(who.get(f.key) or ())) for f in index.futures]


@dataclasses.dataclass(eq=False)
class _Group:
    """Shards held by the same workers, searched together: one call (or task) per batch, their top-k
    merged there."""

    workers: tuple  # the holders (empty: none now)
    shards: list  # (Shard, Future) pairs
    by_task: bool  # batches go as tasks: Dask array queries, no holder, or a call found the shards gone


def _groups(index: ShardedIndex, direct: bool) -> list:
    """The search's groups of shards (a shard not held anywhere now gets a group of its own: no task
    pulls shards from several workers)."""
    groups: dict = {}
    for s, f, where in zip(index.shards, index.futures, _holders(index)):
        group = groups.setdefault(where or ("unplaced", s.index), _Group(where, [], not (direct and where)))
        group.shards.append((s, f))
    return list(groups.values())


def _names(group) -> str:
    """'shard 3 (...)' or 'shards 0, 1 and 2' for a worker's search call or task (error messages)."""
    if len(group) == 1:
        return group[0][0].name
    ids = [str(s.index) for s, _ in group]
    return f"shards {', '.join(ids[:-1])} and {ids[-1]}"


def _algorithm_of(params):
    """The searching algorithm whose ``IndexParams`` class ``params`` is."""
    for name in registry.searchers():
        mod = registry.get(name).load()
        if type(params) is getattr(mod, "IndexParams", None):
            return name
    raise TypeError(f"params must be the IndexParams of a searching algorithm ({', '.join(registry.searchers())}), "
                    f"got {type(params).__module__}.{type(params).__name__}")


def _key(prefix, shard: Shard, token: str) -> str:
    return f"knngraph-{prefix}-shard-{shard.index}-{token}"


# --------------------------------------------------------------------------------------------------
# public API


@runtime_docs
def build(params: Any, dataset: Array | Sequence[PathLike], *, client: Client | str | None = None,
          shards: int | Sequence[int] | None = None, device: str = "auto", memory_limit: MemoryLimit = None,
          verbose: bool = True) -> ShardedIndex:
    """Build a sharded index on a Dask cluster: one index of ``params``' algorithm per shard, each built
    by a worker from its own rows.

    Parameters
    ----------
    params : IndexParams
        The build parameters of any searching algorithm of :mod:`knngraph.registry` (e.g.
        ``knngraph.song.IndexParams(...)``, ``knngraph.bruteforce.IndexParams()``); every shard gets them.
    dataset : NumPy array, Dask array, or list of vector file paths
        Dask array: one shard per row chunk (or per ``shards``). List of files (:mod:`knngraph.io`
        formats): one shard per file, read by the worker that builds it (only the headers are read
        here; every worker must see the paths). NumPy array: ``shards`` slices (default: one per
        worker), shipped inside the build tasks.
    client : distributed.Client or str, optional
        The cluster (a scheduler address connects to it); default: the current client.
    shards : int or sequence of int, optional
        The number of near-equal shards, or their row counts (not with files).
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Resolved by each worker: 'auto' uses the worker's GPU when it has one (dask-cuda gives each
        worker one), else its CPUs.
    {memory_limit}
        Per worker.
    verbose : bool, default=True
        Unused (workers build quietly); kept for the module contract.

    Returns
    -------
    ShardedIndex
        The shards are built in the background; :meth:`ShardedIndex.wait` blocks until they are.

    Examples
    --------
    >>> import numpy as np, distributed
    >>> from knngraph import bruteforce, distributed as kd
    >>> client = distributed.Client(processes=False, n_workers=2, dashboard_address=":0")
    >>> x = np.random.default_rng(0).random((300, 8), dtype=np.float32)
    >>> index = kd.build(bruteforce.IndexParams(), x, client=client, shards=3, device="cpu")
    >>> index
    ShardedIndex(algorithm='exact', shape=(300, 8), shards=3, metric='sqeuclidean')
    >>> kd.search(index, x[:2], k=3, device="cpu").indices[:, 0].tolist()
    [0, 1]
    >>> client.close()
    """
    import dask

    algorithm = _algorithm_of(params)
    client = get_client(client)
    plan, sources, n, d, dtype = plan_shards(dataset, shards, n_workers(client))
    if n >= 2**31:
        raise ValueError(f"a sharded index holds at most 2**31 - 1 vectors (int32 ids), got {n}")
    token = dask.base.tokenize(algorithm, params, [s.source for s in plan], n, os.urandom(8))
    futures = []
    for shard, source in zip(plan, sources):
        if isinstance(source, np.ndarray) or isinstance(source, tuple):
            fut = client.submit(named, shard.name, _build_shard, source, algorithm, params, device, memory_limit,
                                key=_key("build", shard, token))
        else:  # a Dask chunk: the build depends on its lineage
            task = dask.delayed(named, pure=True)(shard.name, _build_shard, source, algorithm, params, device,
                                                   memory_limit, dask_key_name=_key("build", shard, token))
            fut = client.compute(task)
        futures.append(fut)
    return ShardedIndex(client, algorithm, params, tuple(plan), futures, int(d), np.dtype(dtype))


def _query_batches(index: ShardedIndex, queries, batch_size: int, token: str):
    """An iterator of (row offset, rows, the batch's host queries or a future of them) per batch, created
    lazily; the queries are checked here, at once (Dask array chunks by the worker that reads them)."""
    client = index.client
    if _is_dask_array(queries):
        q = queries
        if q.ndim != 2:
            raise ValueError(f"queries must be a 2-D array of shape (n_queries, dim), got {q.ndim}-D shape {q.shape}")
        import math

        if any(math.isnan(c) for c in q.chunks[0]):
            q = q.compute_chunk_sizes()
        if q.shape[1] != index.dim:
            raise ValueError(f"queries have dimension {q.shape[1]} but the index has {index.dim}")
        if q.shape[0] == 0:
            raise ValueError("queries is empty (0 rows)")
        q = q.rechunk({0: batch_size, 1: -1})

        def chunks():
            lo = 0
            for c, block in enumerate(q.to_delayed().ravel()):
                rows = int(q.chunks[0][c])
                yield lo, rows, client.compute(__import__("dask").delayed(np.ascontiguousarray)(
                    block, dask_key_name=f"knngraph-queries-{token}-{c}"))
                lo += rows

        return chunks()
    q = check_vectors(queries, "queries", on_gpu=False)
    check_finite(q, "queries")
    if q.shape[1] != index.dim:
        raise ValueError(f"queries have dimension {q.shape[1]} but the index has {index.dim}")
    return ((lo, min(batch_size, q.shape[0] - lo), np.ascontiguousarray(q[lo:lo + batch_size]))
            for lo in range(0, q.shape[0], batch_size))


def _submit(index: ShardedIndex, group: _Group, b: int, block, k, params, device, token: str):
    """Batch ``b`` on ``group`` as a Dask task (a ``distributed.Future``). The batch is an argument of the
    task, in its specification: a task lost with its worker is rerun elsewhere with it, its shards rebuilt
    from their lineage, up to Dask's ``allowed-failures`` (then KilledWorker: a ShardError naming them)."""
    return index.client.submit(named, f"{_names(group.shards)}, query batch {b}", _search_shards, block, k, params,
                               [s.offset for s, _ in group.shards], device, *[f for _, f in group.shards],
                               key=_key("search", group.shards[0][0], f"{token}-{b}"), **_near(group.workers))


def _call(index: ShardedIndex, group: _Group, b: int, block, k, params, device) -> concurrent.futures.Future:
    """Batch ``b`` sent straight to the first worker holding ``group`` (:class:`_SearchService`): a
    ``concurrent.futures.Future`` of the worker's answer, which :func:`_answer` reads."""
    client = index.client
    fields = {"keys": to_serialize([f.key for _, f in group.shards]), "queries": to_serialize(block), "k": k,
              "params": to_serialize(params), "offsets": [s.offset for s, _ in group.shards], "device": device,
              "name": f"{_names(group.shards)}, query batch {b}"}
    address = group.workers[0]

    async def ask():
        if client.direct_to_workers is False:  # a client told it cannot reach the workers: the scheduler relays
            return await client.scheduler.proxy(msg={"op": SEARCH_OP, **fields}, worker=address)
        # what client.rpc(address).<op>(...) does, with a connect timeout of its own
        comm = await client.rpc.connect(address, timeout=CALL_CONNECT_TIMEOUT)
        try:
            return await send_recv(comm, op=SEARCH_OP, serializers=client.rpc.serializers,
                                   deserializers=client.rpc.deserializers, **fields)
        finally:
            client.rpc.reuse(address, comm)

    return asyncio.run_coroutine_threadsafe(ask(), client.loop.asyncio_loop)


def _answer(call: concurrent.futures.Future):
    """The (distances, ids) of a direct call; None when the worker or its shards are gone (its
    connection lost, 'missing', or the call cancelled after another to that worker failed); a failed
    search raises, named."""
    try:
        response = call.result()
    except (OSError, concurrent.futures.CancelledError):  # OSError: CommClosedError, refused, timed out
        return None
    status = response.get("status") if isinstance(response, dict) else None
    if status == "error":
        raise response["exception"]
    return response["result"] if status == "OK" else None


def search(index: ShardedIndex, queries: Array, k: int, params: Any = None, *, device: str = "auto",
           batch_size: int = DEFAULT_BATCH_SIZE, verbose: bool = True) -> KNNResult:
    """The top-``k`` of each query over all shards, ids global.

    Parameters
    ----------
    index : ShardedIndex
    queries : array of shape (n_queries, d)
        NumPy, CuPy (copied to the host for the trip), or a Dask array (each chunk read by a worker).
    k : int
        Neighbours per query, at most the number of indexed vectors (a shard smaller than k returns all
        its vectors).
    params : SearchParams, optional
        The algorithm's search parameters, used on every shard.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Resolved by each worker.
    batch_size : int, default=10000
        Queries per batch: each batch goes to every worker holding shards, which merges its shards'
        top-k; the client merges the workers'. At most a few batches are under way at once, so a million
        queries stream.
    verbose : bool, default=True
        A progress bar over the batches (on a terminal).

    Returns
    -------
    KNNResult
        (distances, indices) of shape (n_queries, k): NumPy for NumPy and Dask queries, CuPy for CuPy ones.

    Notes
    -----
    Host queries go to the workers by direct calls, not tasks: each batch is sent straight to each worker
    holding shards (:class:`_SearchService`) and its top-k comes straight back; the scheduler sees
    nothing per batch. A task per worker and batch, the batch in its specification, made the scheduler
    forward the batch and the result and run the task's whole life, and that cost more than the search.
    Measured on a LocalCluster of 2 worker processes on 2 CPU cores (shared with other work), two shards
    whose search is a 2.15 ms wait (a GPU search as the host sees it), 100 batches of 10,000 queries,
    k=10, against the same shards searched one after the other in process and merged (8-12 ms per batch,
    0.85-1.3M queries/s; 9-11 ms of CPU): by tasks, 28-52 ms per batch (0.19-0.36M queries/s,
    0.23-0.39x), the client's process (client and scheduler) spending 22-28 ms of CPU per batch (two
    empty tasks alone: 8-9 ms) and each worker 10-12 ms; by direct calls, 12-25 ms per batch
    (0.40-0.84M queries/s, 0.47-0.68x), 9-13 ms and 4-7 ms of CPU: the client's side now costs what the
    search in process does, and the rest is the workers sharing the two cores with it. Scattering the
    batch to the workers and keeping the task saved nearly nothing: the task is the cost.

    Faults keep their cure: the client holds each batch until its results arrive, and a call whose
    worker died (connection lost) or no longer holds the shards ('missing') is re-sent as a task, which
    Dask reruns where the shards are rebuilt; that group's later batches go as tasks too. A client set
    with ``direct_to_workers=False`` (it cannot reach the workers) has the scheduler relay the calls.
    Dask array queries go as tasks, their chunks read by the workers.
    """
    from distributed import Future

    from .._progress import progress

    if not isinstance(index, ShardedIndex):
        raise TypeError(f"index must be a knngraph.distributed.ShardedIndex, got {type(index).__name__}")
    k = check_k(k, len(index))
    batch_size = check_int(batch_size, "batch_size", low=1)
    if params is not None:
        cls = getattr(registry.get(index.algorithm).load(), "SearchParams", None)
        if type(params) is not cls:
            raise TypeError(f"params must be a {registry.get(index.algorithm).module}.SearchParams, "
                            f"got {type(params).__name__}")
    kind = None if _is_dask_array(queries) else array_kind(queries)
    import dask

    token = dask.base.tokenize(index.futures[0].key if index.futures else "", k, os.urandom(8))
    n_q = int(queries.shape[0]) if hasattr(queries, "shape") else len(queries)
    batches = _query_batches(index, queries, batch_size, token)
    _wait_built(index)  # each batch goes to the workers holding the shards
    groups = _groups(index, direct=not _is_dask_array(queries))
    if not all(g.by_task for g in groups):
        index.client.register_plugin(_SearchService())
    out_d = out_i = None
    pending = []

    def finish(item):
        lo, rows, b, block, parts = item
        results = list(parts)
        for j, (group, part) in enumerate(zip(groups, parts)):
            if isinstance(part, concurrent.futures.Future):
                results[j] = _answer(part)
                if results[j] is None:  # the worker or its shards are gone: this batch and the group's next as tasks
                    if not group.by_task:  # the calls sent there since would fail too (a connect timeout each)
                        group.by_task = True
                        for *_, later_parts in pending:
                            later_parts[j].cancel()
                    results[j] = _submit(index, group, b, block, k, params, device, token)
        tasks = [r for r in results if isinstance(r, Future)]
        if tasks:  # a failed shard task raises here, named (named()); nothing partial is returned
            gathered = iter(_gather(index, tasks))
            results = [next(gathered) if isinstance(r, Future) else r for r in results]
        d, i = results[0] if len(results) == 1 else _merge(k, *results)
        out_d[lo:lo + rows] = d
        out_i[lo:lo + rows] = i
        bar.update(1)

    n_batches = -(-n_q // batch_size) if n_q else 0
    with progress(n_batches, "sharded search", disable=not verbose, min_steps=2) as bar:
        for b, (lo, rows, block) in enumerate(batches):
            if out_d is None:
                out_d = np.empty((n_q, k), np.float32)
                out_i = np.empty((n_q, k), np.int32)
            parts = [_submit(index, g, b, block, k, params, device, token) if g.by_task
                     else _call(index, g, b, block, k, params, device) for g in groups]
            pending.append((lo, rows, b, block, parts))
            del parts, block
            if len(pending) >= MAX_IN_FLIGHT:
                finish(pending.pop(0))
        while pending:
            finish(pending.pop(0))
    if out_d is None:
        raise ValueError("queries is empty (0 rows)")
    if kind is None:
        return KNNResult(out_d, out_i)
    return KNNResult(return_as(kind, out_d), return_as(kind, out_i))


def delete(index: ShardedIndex, ids: Any, *, compact_above: float = 0.5, device: str = "auto",
           memory_limit: MemoryLimit = None) -> ShardedIndex:
    """Delete the vectors with the global ids ``ids``: one task per shard that holds some of them, on the
    worker holding it, with the shards' algorithm's ``delete`` (:func:`knngraph.song.delete`,
    :func:`knngraph.ggnn.delete`: marked in a bitset every search clears from its allowed ids, the shard
    compacted past ``compact_above`` of its rows deleted, its ids kept). Each such shard becomes the
    result of its task (Dask keeps the lineage: a shard lost with its worker is rebuilt and its deletes
    redone); :func:`save` writes the marks. Returns ``index`` (its shards replaced).

    Parameters
    ----------
    index : ShardedIndex
    ids : 1-D array of int
        Global ids in [0, len(index)); ids deleted already stay deleted.
    compact_above : float, default=0.5
        Per shard, as the algorithm's ``delete``.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Where a compaction builds, resolved by each worker.
    memory_limit : int or str or None, default=None
        Per worker, for a compaction.
    """
    import dask

    from ..primitives.filters import RowIds, check_compact_above

    if not isinstance(index, ShardedIndex):
        raise TypeError(f"index must be a knngraph.distributed.ShardedIndex, got {type(index).__name__}")
    compact_above = check_compact_above(compact_above)
    if not hasattr(registry.get(index.algorithm).load(), "delete"):
        raise TypeError(f"{index.algorithm} indexes do not delete vectors; search with a filter instead")
    gone = ~RowIds(len(index)).delete(ids).live_mask()  # the ids validated, as a mask of the global ids
    token = dask.base.tokenize(index.futures[0].key if index.futures else "", os.urandom(8))
    futures = []
    for s, f, where in zip(index.shards, index.futures, _holders(index)):
        local = np.flatnonzero(gone[s.offset:s.offset + s.rows])
        if local.size == 0:
            futures.append(f)
            continue
        futures.append(index.client.submit(named, s.name, _delete_shard, f, local, compact_above, device, memory_limit,
                                           key=_key("delete", s, token), **_near(where)))
    index.futures = futures
    return index


# --------------------------------------------------------------------------------------------------
# save / load


def _shard_file(i: int, algorithm: str) -> str:
    return f"shard-{i:05d}.{algorithm}"


def save(path: PathLike, index: ShardedIndex) -> None:
    """Write ``index`` to the folder ``path`` (created if needed): one index file per shard, written by
    the worker holding the shard with its algorithm's ``save`` (versioned, atomic, checksummed), then
    ``manifest.json`` (written last, atomically: a folder without it holds no complete index). Every
    worker must see ``path`` (a shared file system)."""
    if not isinstance(index, ShardedIndex):
        raise TypeError(f"index must be a knngraph.distributed.ShardedIndex, got {type(index).__name__}")
    folder = Path(os.fspath(path)).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    files = [_shard_file(s.index, index.algorithm) for s in index.shards]
    futs = [index.client.submit(named, s.name, _save_shard, f, str(folder / name), pure=False)
            for s, f, name in zip(index.shards, index.futures, files)]
    _gather(index, futs)
    params = {f.name: getattr(index.params, f.name) for f in dataclasses.fields(index.params)}
    manifest = {"format": FORMAT, "version": VERSION, "algorithm": index.algorithm, "metric": index.metric,
                "params": params, "dim": index.dim, "dtype": np.dtype(index.dtype).str,
                "shards": [{"file": name, "offset": s.offset, "rows": s.rows, "source": s.source}
                           for s, name in zip(index.shards, files)]}
    text = json.dumps(manifest, indent=1, default=str)
    _atomic_write(folder / MANIFEST, lambda tmp: Path(tmp).write_text(text))


def read_manifest(path) -> dict:
    """The manifest of the sharded index saved in the folder ``path``; FileNotFoundError / ValueError
    naming it when it is missing or not one."""
    folder = Path(os.fspath(path)).absolute()
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise FileNotFoundError(f"{folder}: not a saved sharded index (no {MANIFEST})")
    try:
        m = json.loads(mpath.read_text())
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise ValueError(f"format is {m.get('format') if isinstance(m, dict) else None!r}, not {FORMAT!r}")
        if m.get("version") != VERSION:
            raise ValueError(f"version {m.get('version')!r} is not supported (this knngraph reads {VERSION})")
        if not isinstance(m.get("algorithm"), str) or not isinstance(m.get("shards"), list):
            raise ValueError("it lacks the algorithm or the shard list")
    except ValueError as exc:
        raise ValueError(f"{mpath}: not a valid sharded-index manifest ({exc})") from None
    return m


def load(path: PathLike, *, client: Client | str | None = None, metric: str | None = None) -> ShardedIndex:
    """A sharded index saved by :func:`save`: each shard is loaded by a worker from its file (so a shard
    lost with its worker is reloaded on another one). FileNotFoundError / ValueError naming the folder or
    the shard file when something is missing or does not match the manifest; ``metric`` (when given)
    must be the saved one."""
    from ..metrics import canonical_metric

    folder = Path(os.fspath(path)).absolute()
    mpath = folder / MANIFEST
    m = read_manifest(folder)
    try:
        algo = registry.get(m["algorithm"])
        params = algo.load().IndexParams(**m["params"])
        shards = tuple(Shard(i, int(s["offset"]), int(s["rows"]), f"{folder / s['file']}")
                       for i, s in enumerate(m["shards"]))
        dim, dtype = int(m["dim"]), np.dtype(m["dtype"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{mpath}: not a valid sharded-index manifest ({type(exc).__name__}: {exc})") from None
    if metric is not None and canonical_metric(metric) != params.metric:
        raise ValueError(f"{folder}: index was saved with metric {params.metric!r}, not {metric!r}")
    if not shards:
        raise ValueError(f"{mpath}: the manifest lists no shards")
    for s in shards:
        if not Path(s.source).is_file():
            raise FileNotFoundError(f"{s.name}: shard file is missing")
    client = get_client(client)
    import dask

    token = dask.base.tokenize(str(folder), mpath.stat().st_mtime_ns, os.urandom(8))
    futures = [client.submit(named, s.name, _load_shard, s.source, algo.name, params.metric,
                             key=_key("load", s, token)) for s in shards]
    return ShardedIndex(client, algo.name, params, shards, futures, dim, dtype)
