"""Several devices of one host in one process: what ``devices=`` means on every build and search.

After FAISS's ``IndexShards`` / ``IndexReplicas`` and cuVS's multi-GPU API: one switch, the same verbs, any
algorithm of :mod:`knngraph.registry` underneath.

* **sharded**: the rows are cut into contiguous slices, one per device; each device builds the
  algorithm's index of its slice, all devices at once (one host thread per device); a search sends every
  query batch to all devices, each returns its top-k with global ids, and the per-device lists are merged
  on the first device (:func:`knngraph.graphops.merge_topk`; CuPy copies the other devices' results
  there peer to peer where the GPUs can reach each other, else through host memory).
* **replicated**: the whole index on every device; the queries of a call are cut into one batch per device,
  searched at once, and gathered in order. For throughput.
* **deletion** (:func:`delete`, what ``song.delete`` and ``ggnn.delete`` do with a multi-device index): a
  sharded index deletes each part's ids in that part, on the part's device (where a compaction rebuilds
  it: a part keeps its own ids, so a global id stays ``bounds[j]`` + the part's id); a replicated one
  deletes in its index.
* ``layout="auto"``: replicated when the index's vectors fit every device's memory budget with room for
  its search (a quarter of the budget: graphs and query batches take the rest), else sharded.

``devices`` is a list of GPU ids (``0`` or ``"cuda:0"``), ``"all"`` (every GPU CuPy sees), or CPU entries
(``"cpu"``): several *logical* CPU devices run the same splitting and merging on the host (tests, and a
machine without GPUs). A device listed twice is two logical devices on one GPU. A device that does not
exist, an empty list or a mix of CPU and GPU entries is refused with a message naming it.

A build runs each device's work in a thread of its own that makes its device current, so the devices work
at the same time; a failure on one device (out of memory, say) is raised, naming the device, after the
other threads finished, and nothing half-built is returned. A search on GPUs queues every device's copies
and kernels from the calling thread, one device after another, with nothing waiting until all are queued
(host queries staged once in page-locked memory, results ready by CUDA events): the kernels overlap
without host threads taking turns at the interpreter lock; on logical CPU devices a search uses the
threads.

:class:`MultiDeviceIndex` is what ``build(..., devices=...)`` returns; ``search`` of the algorithm's module
takes it like its own index. ``save`` / ``load`` keep a sharded index as one file per shard (the
algorithm's own format) and a manifest.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import threading
import weakref
from pathlib import Path

import numpy as np

from ._device import (Device, array_kind, as_numpy, borrowed_streams, default_memory_limit, device_context,
                      format_bytes, is_device_array, parse_memory, resolve_device, return_as)
from ._gpu_queue import DeviceError, global_ids, named, naming, search_gpus, shard_bounds, shard_k
from .index import KNNResult

__all__ = ["MultiDeviceIndex", "resolve_devices", "choose_layout", "build", "search", "delete", "replicate",
           "knn_graph", "save", "load", "is_saved", "LAYOUTS", "DeviceError", "shard_bounds"]

LAYOUTS = ("auto", "sharded", "replicated")
MANIFEST = "manifest.json"
FORMAT = "knngraph-multidevice-index"


def resolve_devices(devices) -> tuple:
    """The :class:`~knngraph._device.Device` of each entry of ``devices`` (see the module docs); ValueError
    naming what is wrong (an empty list, a GPU that does not exist, CPU and GPU entries mixed)."""
    if isinstance(devices, str) and devices.strip().lower() == "all":
        from ._device import _gpu_count, gpu_available

        if not gpu_available():
            raise ValueError("devices='all' asks for every GPU, but no GPU is usable here")
        return tuple(Device("cuda", i) for i in range(_gpu_count()))
    if isinstance(devices, (str, int, np.integer, Device)):
        devices = [devices]
    try:
        entries = list(devices)
    except TypeError:
        raise TypeError(f"devices must be a list of GPU ids (0, 'cuda:1', ...), 'all', or CPU entries ('cpu'); "
                        f"got {devices!r}") from None
    if not entries:
        raise ValueError("devices must name at least one device, got an empty list")
    out = []
    for e in entries:
        if isinstance(e, (bool, np.bool_)):
            raise TypeError(f"devices: {e!r} is not a device")
        if isinstance(e, (int, np.integer)):
            if e < 0:
                raise ValueError(f"devices: GPU id {int(e)} is negative")
            e = f"cuda:{int(e)}"
        if isinstance(e, str) and e.strip().lower() == "auto":
            raise ValueError("devices: 'auto' is not a device; name GPU ids, 'all' or 'cpu'")
        try:
            out.append(resolve_device(e))
        except ValueError as exc:
            raise ValueError(f"devices: {exc}") from None
        except RuntimeError as exc:
            raise ValueError(f"devices: {exc}") from None
    if len({d.is_cuda for d in out}) > 1:
        raise ValueError(f"devices mixes CPU and GPU entries ({', '.join(map(str, out))}); use one kind")
    return tuple(out)


def choose_layout(layout: str, dataset, devices, memory_limit=None) -> str:
    """``layout`` itself, or for 'auto' 'replicated' when the vectors take at most a quarter of every
    device's memory budget (``memory_limit``, else its free memory), else 'sharded'."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    if layout != "auto":
        return layout
    nbytes = int(np.prod(dataset.shape)) * np.dtype(dataset.dtype).itemsize
    budget = parse_memory(memory_limit)
    budgets = [budget or default_memory_limit(d) for d in devices]
    return "replicated" if all(4 * nbytes <= b for b in budgets) else "sharded"


@dataclasses.dataclass(eq=False)
class MultiDeviceIndex:
    """An index spread over several devices (see the module docs).

    Attributes
    ----------
    algorithm : str
        The :mod:`knngraph.registry` name of the algorithm whose indexes the parts are.
    layout : {'sharded', 'replicated'}
    devices : tuple of Device
    parts : tuple
        Sharded: the index of each device's rows, in device order. Replicated: one index, searched on
        every device (each device keeps its own copies of what the search reads).
    bounds : ndarray of int64
        Row bounds of the shards (``bounds[j]`` is the global id of part j's row 0); ``[0, n]`` when
        replicated.
    """

    algorithm: str
    layout: str
    devices: tuple
    parts: tuple
    bounds: np.ndarray
    _pool: object = dataclasses.field(default=None, repr=False)

    @property
    def params(self):
        return self.parts[0].params

    @property
    def metric(self) -> str:
        return self.parts[0].metric

    @property
    def shape(self) -> tuple:
        return int(self.bounds[-1]), int(self.parts[0].shape[1])

    def __len__(self) -> int:
        return self.shape[0]

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_pool"] = None
        return state

    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        """One worker thread per device, kept with the index (a thread binds its device once)."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(len(self.devices),
                                                                thread_name_prefix="knngraph-device")
        return self._pool

    def search(self, queries, k: int, params=None, **kwargs) -> KNNResult:
        return search(self, queries, k, params, **kwargs)


def _on_device(dev: Device, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with ``dev`` current in this thread (each device's work on its own stream
    order: the devices run at once; work for one device stays in order), its stream synchronised before
    returning, so that another device may copy the results (a copy between devices does not wait for
    the source device's stream)."""
    if not dev.is_cuda:
        return fn(*args, **kwargs)
    import cupy as cp

    with device_context(dev):
        out = fn(*args, **kwargs)
        cp.cuda.get_current_stream().synchronize()
    return out


def _run_all(pool, devices, jobs):
    """Run ``jobs[j]()`` for device j in ``pool`` (all at once); the results in order. A failing job is
    re-raised as :class:`DeviceError` naming its device after every job has finished (MemoryError and
    TypeError / ValueError keep their type, with the device named)."""
    futures = [pool.submit(_on_device, dev, job) for dev, job in zip(devices, jobs)]
    concurrent.futures.wait(futures)
    for dev, f in zip(devices, futures):
        exc = f.exception()
        if exc is not None:
            raise naming(dev, exc) from exc
    return [f.result() for f in futures]


def _to_device(x, dev: Device):
    """``x`` on ``dev``: a copy of the rows there (peer to peer between GPUs), or a host array for the CPU."""
    if not dev.is_cuda:
        return as_numpy(x)
    import cupy as cp

    with device_context(dev):
        if type(x) is cp.ndarray and x.data.device_id == dev.index:
            return x
        return cp.asarray(x) if is_device_array(x) else cp.asarray(np.ascontiguousarray(as_numpy(x)))


def _rows(x, a: int, b: int):
    return x[a:b]


def build(module, params, dataset, devices, *, layout: str = "auto", memory_limit=None, verbose: bool = True,
          build_kwargs=None) -> MultiDeviceIndex:
    """The index of ``dataset`` spread over ``devices`` by the algorithm ``module`` (its contract's
    ``build``), ``layout`` as in the module docs. A device that fails (e.g. runs out of memory) fails the
    whole build, naming the device; the parts already built are released."""
    if isinstance(module, str):
        import importlib

        module = importlib.import_module(module)
    devs = resolve_devices(devices)
    lay = choose_layout(layout, dataset, devs, memory_limit)
    name = _algorithm_name(module)
    n = dataset.shape[0]
    pool = concurrent.futures.ThreadPoolExecutor(len(devs), thread_name_prefix="knngraph-device")
    kwargs = dict(build_kwargs or {})
    if lay == "replicated":
        index = _run_all(pool, devs[:1], [lambda: module.build(params, _to_device(dataset, devs[0]), device=devs[0],
                                                               memory_limit=memory_limit, verbose=verbose,
                                                               **kwargs)])[0]
        out = MultiDeviceIndex(name, lay, devs, _replicas(module, index, devs, pool), np.array([0, n], np.int64),
                               pool)
        _warm(out)
        return out
    if n < len(devs):
        raise ValueError(f"a sharded build over {len(devs)} devices needs at least {len(devs)} vectors, got {n}")
    bounds = shard_bounds(n, len(devs))
    jobs = [(lambda a=int(bounds[j]), b=int(bounds[j + 1]), dev=devs[j]:
             module.build(params, _to_device(_rows(dataset, a, b), dev), device=dev, memory_limit=memory_limit,
                          verbose=verbose and a == 0, **kwargs)) for j in range(len(devs))]
    try:
        parts = _run_all(pool, devs, jobs)
    except BaseException:
        pool.shutdown(wait=True)
        raise
    return MultiDeviceIndex(name, lay, devs, tuple(parts), bounds, pool)


def _warm(index: MultiDeviceIndex) -> None:
    """Make each device's copies of a replicated index now (one query on every device at once), so the
    first search does not pay for them."""
    module = _module_of(index)
    parts = index.parts if len(index.parts) == len(index.devices) else index.parts * len(index.devices)
    probe = as_numpy(parts[0].dataset[:1])
    _run_all(index.executor(), index.devices,
             [lambda j=j, dev=dev: module.search(parts[j], _to_device(probe, dev), 1, device=dev, verbose=False)
              for j, dev in enumerate(index.devices)])


def replicate(index, devices) -> MultiDeviceIndex:
    """``index`` (one algorithm's) as a replicated :class:`MultiDeviceIndex` over ``devices``: what
    ``search(index, ..., devices=...)`` searches. Kept with the index, so the devices' copies and worker
    threads are made once."""
    devs = resolve_devices(devices)
    bounds = np.array([0, len(index)], np.int64)
    kept = _REPLICAS.setdefault(index, {})
    if devs not in kept:
        module = __import__("importlib").import_module(index._module)
        out = MultiDeviceIndex(_algorithm_name(module), "replicated", devs, (index,), bounds)
        parts = _replicas(module, index, devs, out.executor())
        kept[devs] = (out.algorithm, None if len(parts) == 1 and parts[0] is index else parts, out.executor())
    name, parts, pool = kept[devs]
    return MultiDeviceIndex(name, "replicated", devs, (index,) if parts is None else parts, bounds, pool)


def _replicas(module, index, devs, pool) -> tuple:
    """The parts of a replicated index: the index itself when it keeps its own copy per device (a
    ``_cache`` of device arrays: SONG, GGNN), else one index per device over a copy of its vectors
    there (made at once on every device)."""
    if hasattr(index, "_cache"):
        return (index,)
    return tuple(_run_all(pool, devs, [lambda dev=dev: module.build(index.params, _to_device(index.dataset, dev),
                                                                    device=dev, verbose=False) for dev in devs]))


#: index -> {devices: (the algorithm's name; the copies made for them, or None when the index keeps its own
#: per device; the worker threads)}, dropped with the index. Nothing kept here may refer to the index: a
#: value holding its key keeps it alive (the index, its device copies and its threads were never freed;
#: a test drops one)
_REPLICAS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _algorithm_name(module) -> str:
    from . import registry

    for a in registry.ALGORITHMS.values():
        if a.module == module.__name__:
            return a.name
    raise ValueError(f"{module.__name__} is not an algorithm of knngraph.registry")


def _module_of(index: MultiDeviceIndex):
    from . import registry

    return registry.get(index.algorithm).load()


def _split_filter(filter, n: int, bounds):
    """Per shard, the boolean mask of ``filter`` (a mask of n or a bitset) over the shard's rows."""
    from .primitives.filters import prepare_filter

    allowed = prepare_filter(filter, n)
    if allowed is None:
        return [None] * (len(bounds) - 1)
    mask = allowed.mask()
    return [mask[int(bounds[j]):int(bounds[j + 1])] for j in range(len(bounds) - 1)]


def search(index: MultiDeviceIndex, queries, k: int, params=None, *, device="auto", verbose: bool = True,
           filter=None, stats: dict | None = None, memory_limit=None, out=None, n_threads=None) -> KNNResult:
    """The top-``k`` of each query over a :class:`MultiDeviceIndex` (see the module docs): results in the
    framework of ``queries`` (for device queries on the device where the results are merged, else on the
    host), nearest first, global ids. ``device`` must be 'auto' (the index's first device) or one of the
    index's devices: where the results are merged, and where ``out`` must be; the other keywords are the
    algorithm's and apply on every device (a filter is cut into each shard's part). With ``stats`` each
    device's search reports its figures before the next one is queued, so the devices do not overlap."""
    from .graphops import merge_topk
    from .index import check_out, fill_out
    from ._validate import check_k, check_vectors

    if not isinstance(index, MultiDeviceIndex):
        raise TypeError(f"index must be a knngraph.multidevice.MultiDeviceIndex, got {type(index).__name__}")
    module = _module_of(index)
    devs = index.devices
    n = len(index)
    qkind = array_kind(queries)
    first = devs[0]
    if device != "auto":
        want = resolve_device(device)
        if want not in devs:
            raise ValueError(f"device={device!r} is not one of the index's devices ({', '.join(map(str, devs))})")
        first = want
    q = check_vectors(queries, "queries", on_gpu=first.is_cuda and is_device_array(queries))
    if q.shape[1] != index.shape[1]:
        raise ValueError(f"queries have {q.shape[1]} columns but the index's vectors have {index.shape[1]}")
    k = check_k(k, n)
    nq = q.shape[0]
    if out is not None:
        check_out(out, nq, k, first)
    kw = dict(verbose=False, memory_limit=memory_limit, n_threads=n_threads)
    per_device_stats = [dict() if stats is not None else None for _ in devs]
    if len(devs) == 1:
        # one device: the algorithm's own search of its one part (ids of a one-part index are global)
        with named(devs[0]):
            d, i = module.search(index.parts[0], q, k, params, device=devs[0], filter=filter,
                                 stats=per_device_stats[0], **kw)
    elif all(dv.is_cuda for dv in devs):
        masks = _split_filter(filter, n, index.bounds) if index.layout == "sharded" else None
        d, i = search_gpus(module, index, q, k, params, first, filter, masks, per_device_stats, kw,
                           to_host=qkind.framework == "numpy" and out is None)
    elif index.layout == "replicated":
        pool = index.executor()
        parts = index.parts if len(index.parts) == len(devs) else index.parts * len(devs)
        cuts = shard_bounds(nq, len(devs))
        busy = [j for j in range(len(devs)) if cuts[j + 1] > cuts[j]] or [0]

        def replica_job(j):
            return module.search(parts[j], _to_device(q[int(cuts[j]):int(cuts[j + 1])], devs[j]), k, params,
                                 device=devs[j], filter=filter, stats=per_device_stats[j], **kw)

        results = _run_all(pool, [devs[j] for j in busy], [lambda j=j: replica_job(j) for j in busy])
        d = np.concatenate([as_numpy(r[0]) for r in results])
        i = np.concatenate([as_numpy(r[1]) for r in results])
    else:
        pool = index.executor()
        masks = _split_filter(filter, n, index.bounds)
        bounds = index.bounds

        def shard_job(j):
            kk = shard_k(index, j, k)
            d_j, i_j = module.search(index.parts[j], _to_device(q, devs[j]), kk, params, device=devs[j],
                                     filter=masks[j], stats=per_device_stats[j], **kw)
            return as_numpy(d_j), global_ids(as_numpy(i_j), int(bounds[j]))

        results = _run_all(pool, devs, [lambda j=j: shard_job(j) for j in range(len(devs))])
        d, i = merge_topk([r[0] for r in results], [r[1] for r in results], k)
    if stats is not None:
        keys = {key for s in per_device_stats if s for key in s}
        for key in keys:
            vals = [s[key] for s in per_device_stats if s and isinstance(s.get(key), (int, float))]
            if vals and key != "seconds":
                stats[key] = float(np.mean(vals))
        secs = [s.get("seconds") for s in per_device_stats if s and s.get("seconds") is not None]
        if secs:
            stats["seconds"] = float(max(secs))
        stats.update(layout=index.layout, devices=[str(dv) for dv in devs])
    if out is not None:
        with device_context(first):  # the copy into out queued after the merge, on first's stream
            fill_out(out, d, i)
        return KNNResult(*out)
    return KNNResult(return_as(qkind, d), return_as(qkind, i))


def _xp(dev: Device):
    return __import__("cupy") if dev.is_cuda else np


def delete(index: MultiDeviceIndex, ids, *, compact_above: float = 0.5, memory_limit=None,
           verbose: bool = True) -> MultiDeviceIndex:
    """Delete the vectors with the global ids ``ids`` from a :class:`MultiDeviceIndex` (see the module
    docs) with its algorithm's ``delete`` (``compact_above`` as there), every part at once on its device.
    The index's parts are replaced by what the parts' deletes return (compacted parts are new indexes);
    returns ``index``. TypeError when the algorithm cannot delete; ValueError for ids outside
    [0, len(index))."""
    from .primitives.filters import RowIds

    if not isinstance(index, MultiDeviceIndex):
        raise TypeError(f"index must be a knngraph.multidevice.MultiDeviceIndex, got {type(index).__name__}")
    module = _module_of(index)
    if not hasattr(module, "delete"):
        raise TypeError(f"{index.algorithm} indexes do not delete vectors; search with a filter instead")
    gone = ~RowIds(len(index)).delete(ids).live_mask()  # the ids validated, as a mask of the global ids
    kw = dict(compact_above=compact_above, memory_limit=memory_limit, verbose=verbose)
    if index.layout == "sharded":
        cuts = [(int(index.bounds[j]), int(index.bounds[j + 1])) for j in range(len(index.parts))]
        devs = index.devices
        jobs = [(lambda j=j, a=a, b=b: module.delete(index.parts[j], np.flatnonzero(gone[a:b]), device=devs[j], **kw))
                for j, (a, b) in enumerate(cuts)]
    else:
        devs = index.devices[:len(index.parts)]
        jobs = [(lambda p=p, dev=dev: module.delete(p, np.flatnonzero(gone), device=dev, **kw))
                for p, dev in zip(index.parts, devs)]
    index.parts = tuple(_run_all(index.executor(), devs, jobs))
    return index


def save(path, index: MultiDeviceIndex) -> None:
    """Write a multi-device index to the folder ``path``: the manifest (algorithm, layout, bounds) and each
    part in its algorithm's own file format (``part-<j>.<algorithm>``). Load with :func:`load`."""
    if not isinstance(index, MultiDeviceIndex):
        raise TypeError(f"index must be a knngraph.multidevice.MultiDeviceIndex, got {type(index).__name__}")
    module = _module_of(index)
    folder = Path(os.fspath(path))
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for j, part in enumerate(index.parts if index.layout == "sharded" else index.parts[:1]):
        name = f"part-{j}.{index.algorithm}"
        module.save(folder / name, part)
        names.append(name)
    manifest = {"format": FORMAT, "version": 1, "algorithm": index.algorithm, "layout": index.layout,
                "bounds": [int(b) for b in index.bounds], "parts": names, "devices": [str(d) for d in index.devices]}
    from .io import _atomic_write

    _atomic_write(folder / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=1)))


def is_saved(path) -> bool:
    """Whether ``path`` is a folder written by :func:`save` (the algorithms' ``load`` read those too)."""
    return isinstance(path, (str, os.PathLike)) and (Path(os.fspath(path)) / MANIFEST).is_file()


def load(path, *, devices=None, metric: str | None = None) -> MultiDeviceIndex:
    """Read a folder written by :func:`save`; ``devices`` (default: the saved ones, which must exist here)
    must name as many devices as a sharded index has parts."""
    from . import registry

    folder = Path(os.fspath(path))
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{folder}: no {MANIFEST}; not a saved multi-device index") from None
    except ValueError as exc:
        raise ValueError(f"{folder / MANIFEST}: not a valid manifest ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{folder / MANIFEST}: not a knngraph multi-device index manifest")
    module = registry.get(manifest["algorithm"]).load()
    parts = tuple(module.load(folder / name, metric=metric) for name in manifest["parts"])
    devs = resolve_devices(devices if devices is not None else manifest["devices"])
    if manifest["layout"] == "sharded" and len(devs) != len(parts):
        raise ValueError(f"{folder}: a sharded index of {len(parts)} parts needs {len(parts)} devices, got "
                         f"{len(devs)}")
    bounds = np.asarray(manifest["bounds"], np.int64)
    out = MultiDeviceIndex(manifest["algorithm"], manifest["layout"], devs, parts, bounds)
    if out.layout == "replicated":
        out.parts = _replicas(module, parts[0], devs, out.executor())
    return out


# --------------------------------------------------------------------------------------------------
# k-NN graphs over several devices


#: rows of each cluster piece copied into the graph in one merge
_OVERLAP = 3


def knn_graph(algorithm, base, k: int, devices, *, metric: str = "sqeuclidean", memory_limit=None,
              verbose: bool = True, params=None, **fields):
    """The k-NN graph of ``base`` built by the registry ``algorithm`` over several devices (``devices=`` of
    :func:`knngraph.knn_graph`).

    * Exact graphs are cut by rows: each device computes the exact neighbours of its slice of the rows
      among all of them (the base on every device), so the graph is the one-device graph.
    * Other builders: when the build fits one device's memory budget it runs there (spreading a graph
      that fits one device would only add work). Otherwise the data is cut into the overlapping k-means
      clusters of :mod:`knngraph.partition` (every row in the pieces of its 3 nearest centroids, pieces
      sized to a device's budget), the pieces are built by the builder on all devices at once (a host
      thread each, taking the next piece when done), and each row's lists from its pieces are merged on the
      device that built the piece (:func:`knngraph.graphops.merge_sorted_lists`, one piece's rows at a
      time): the out-of-core build of NN-Descent (``out_of_core='clusters'``), spread over the devices.
      For search-graph builders (GRNND, GGNN) the merged rows are each row's nearest among its pieces'
      rows, linked by :func:`knngraph.graphops.connect_graph`.
    """
    from .graph import Graph

    devs = resolve_devices(devices)
    n = base.shape[0]
    if algorithm.name == "exact":
        d, i = _exact_graph_rows(base, k, devs, metric, memory_limit, verbose)
        info = {"method": "exact", "graph_degree": k, "devices": [str(v) for v in devs]}
    else:
        per_row = _graph_bytes_per_row(base, k)
        budget = min(parse_memory(memory_limit) or default_memory_limit(v) for v in devs)
        if len(devs) == 1 or n * per_row <= budget:
            data = _to_device(base, devs[0]) if devs[0].is_cuda and is_device_array(base) else base
            g = _on_device(devs[0], algorithm.build_graph, data, k, metric=metric, device=devs[0],
                           memory_limit=memory_limit, verbose=verbose, params=params, **fields)
            g.info["devices"] = [str(devs[0])]
            return g.to_host() if not is_device_array(base) else g
        min_rows = _MIN_PIECE_ROWS_PER_K * (k + 1)
        if budget // per_row < min_rows:
            raise MemoryError(f"memory_limit allows {format_bytes(budget)} per device, but a k-NN graph of k={k} "
                              f"built in pieces needs at least {format_bytes(min_rows * per_row)} per device "
                              f"(pieces of {min_rows} rows of {base.shape[1]} dimensions); raise memory_limit")
        d, i, info = _clustered_graph(algorithm, base, k, devs, metric, budget // per_row, verbose, params, fields)
    g = Graph(as_numpy(i), as_numpy(d), metric, info)
    if algorithm.search_graph:
        from .graphops import connect_graph

        g = connect_graph(g, base, device=devs[0])
    return g.to_device() if is_device_array(base) else g


#: the smallest piece of a several-device graph build, in rows per neighbour (a piece of 4(k + 1) rows gives
#: each of its rows k neighbours among several times as many candidates)
_MIN_PIECE_ROWS_PER_K = 4


def _graph_bytes_per_row(base, k: int) -> int:
    """Device bytes a graph build takes per row, for sizing pieces: the row's vector (as float32 and as
    given), its lists while building (ids, distances and flags of 2k entries) and their merge."""
    d = int(base.shape[1])
    return 4 * d + np.dtype(base.dtype).itemsize * d + 2 * k * 16 + 64


def _exact_graph_rows(base, k, devs, metric, memory_limit, verbose):
    from . import registry

    bruteforce = registry.get("exact").load()

    n = base.shape[0]
    bounds = shard_bounds(n, len(devs))
    pool = concurrent.futures.ThreadPoolExecutor(len(devs), thread_name_prefix="knngraph-device")

    def rows(j):
        a, b = int(bounds[j]), int(bounds[j + 1])
        if b <= a:
            return np.empty((0, k), np.float32), np.empty((0, k), np.int32)
        on = _to_device(base, devs[j])
        index = bruteforce.build(bruteforce.IndexParams(metric=metric), on, device=devs[j])
        d, i = bruteforce.search(index, on[a:b], min(k + 1, n), device=devs[j], memory_limit=memory_limit,
                                 verbose=verbose and j == 0)
        d, i = as_numpy(d), as_numpy(i)
        own = i == np.arange(a, b)[:, None]
        pos = np.where(own.any(axis=1), own.argmax(axis=1), i.shape[1] - 1)
        keep = np.ones(i.shape, bool)
        keep[np.arange(b - a), pos] = False
        return d[keep].reshape(b - a, -1)[:, :k], i[keep].reshape(b - a, -1)[:, :k]

    try:
        parts = _run_all(pool, devs, [lambda j=j: rows(j) for j in range(len(devs))])
    finally:
        pool.shutdown(wait=True)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


class _Engine:
    """What :func:`knngraph.partition.nearest_centroids` needs of an engine, on one device (CuPy on a
    GPU: the rows' distances to the centroids by GEMM there; NumPy on the CPU)."""

    def __init__(self, dev: Device):
        self.dev = dev
        self.xp = _xp(dev)

    def asarray(self, a):
        return _to_device(a, self.dev)

    @staticmethod
    def to_host(a):
        return as_numpy(a)


def _piece_on(base, rows, dev: Device):
    """``base[rows]`` on ``dev``. Rows of device input are gathered on their GPU on a stream of their own
    (not the GPU's default stream, where the work of that GPU's own pieces is queued: a gather there
    would wait for it), then copied peer to peer."""
    if not is_device_array(base):
        return _to_device(np.asarray(base[rows]), dev)
    import cupy as cp

    src = Device("cuda", base.data.device_id)
    with device_context(src):
        after = cp.cuda.get_current_stream().record()  # this thread's work on that GPU so far
        with borrowed_streams(src.index, "piece-gather") as (side,), side:
            side.wait_event(after)  # a block it freed with kernels still queued is reused after them
            sub = base[cp.asarray(rows)]
            side.synchronize()
    if src == dev:
        return sub
    with device_context(dev):
        out = cp.asarray(sub)
        # ``sub`` goes back to its pool on return: the copy must be done
        cp.cuda.get_current_stream().synchronize()
    return out


def _clustered_graph(algorithm, base, k, devs, metric, max_rows, verbose, params, fields):
    """The pieces of the overlapping clusters built and merged on ``devs`` (see :func:`knngraph`)."""
    import time

    from . import partition as P
    from ._progress import progress
    from .graphops import merge_sorted_lists
    from .primitives.distances import distance_kind

    t0 = time.perf_counter()
    n = base.shape[0]
    kind = distance_kind(metric)
    seed = int(fields.get("seed", getattr(params, "seed", 0)) or 0)
    max_rows = int(max(_MIN_PIECE_ROWS_PER_K * (k + 1), min(n, max_rows)))
    n_clusters = P.plan_clusters(n, max_rows, _OVERLAP)
    overlap = min(_OVERLAP, n_clusters)
    block_rows = max(1024, max_rows // 2)
    cent = P.kmeans(base, n_clusters, kind, seed)
    # each row's nearest centroids on the GPU of the input (or the first device)
    where = Device("cuda", base.data.device_id) if is_device_array(base) else devs[0]
    try:
        with device_context(where):
            labels = P.nearest_centroids(_Engine(where), base, cent, kind, overlap, block_rows)
    except Exception as exc:  # an error of that GPU (out of memory above all) names it, as the builds' do
        raise naming(where, exc) from exc
    pieces = P.split_pieces(base, labels, len(cent), kind, seed, max_rows, block_rows, min_rows=2 * (k + 1))
    partition_s = time.perf_counter() - t0
    res_d = np.full((n, k), np.inf, np.float32)
    res_i = np.full((n, k), -1, np.int32)
    lock = threading.Lock()
    queue = list(range(len(pieces)))
    taken = threading.Lock()
    built = [0] * len(devs)
    # seconds per device: gathering pieces, building them, waiting for the merge lock, merging
    split = [{"gather_s": 0.0, "build_s": 0.0, "merge_wait_s": 0.0, "merge_s": 0.0} for _ in devs]

    def worker(j):
        dev = devs[j]
        xp = _xp(dev)
        clock = split[j]
        while True:
            with taken:
                if not queue:
                    return
                p = queue.pop(0)
            rows = pieces[p]
            if len(rows) < 2:
                continue
            t = time.perf_counter()
            block = _piece_on(base, rows, dev)
            clock["gather_s"] += time.perf_counter() - t
            t = time.perf_counter()
            kk = min(k, len(rows) - 1)
            g = algorithm.build_graph(block, kk, metric=metric, device=dev, verbose=False, params=params,
                                      piece=True, **fields)
            gi, gd = xp.asarray(g.indices), xp.asarray(g.distances)
            ids = xp.asarray(rows.astype(np.int32))
            glob = xp.where(gi >= 0, ids[xp.maximum(gi, 0)], np.int32(-1)).astype(xp.int32)
            t_lock = time.perf_counter()
            clock["build_s"] += t_lock - t
            with lock:  # rows are shared by overlapping pieces: read, merge and write back as one step
                t = time.perf_counter()
                clock["merge_wait_s"] += t - t_lock
                md, mi = merge_sorted_lists(xp.asarray(res_d[rows]), xp.asarray(res_i[rows]), gd, glob, k)
                res_d[rows], res_i[rows] = as_numpy(md), as_numpy(mi)
                clock["merge_s"] += time.perf_counter() - t
            built[j] += 1
            bar.update(1)

    pool = concurrent.futures.ThreadPoolExecutor(len(devs), thread_name_prefix="knngraph-device")
    try:
        with progress(len(pieces), f"{algorithm.name} clusters on {len(devs)} devices", disable=not verbose,
                      min_steps=1) as bar:
            _run_all(pool, devs, [lambda j=j: worker(j) for j in range(len(devs))])
    finally:
        pool.shutdown(wait=True)
    sizes = [len(r) for r in pieces]
    info = {"method": algorithm.name, "graph_degree": k, "out_of_core": "clusters", "clusters": int(len(cent)),
            "pieces": len(pieces), "overlap": overlap, "piece_rows_max": int(max(sizes)),
            "max_piece_rows": int(max_rows), "rows_built": int(sum(sizes)), "devices": [str(v) for v in devs],
            "pieces_per_device": built, "partition_seconds": partition_s,
            "seconds_per_device": [{key: round(v, 3) for key, v in c.items()} for c in split],
            "seconds": time.perf_counter() - t0}
    return res_d, res_i, info
