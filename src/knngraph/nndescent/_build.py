"""GNND build, GGM merge, the iteration loop and the out-of-core drivers, written once over an engine
(:class:`knngraph.nndescent.cpu.Engine` or :class:`knngraph.nndescent.cuda.Engine`, chosen by the
library's dispatch idiom, :func:`knngraph._device.implementation`).

An engine owns arrays and kernels: ``prepare``, ``new_graph``, ``init`` (random lists), ``init_forest``
(CPU) / ``init_windows`` (GPU), ``start_refine`` + ``iterate`` (one GNND iteration, returning the entries
inserted) + ``refine_stats``, ``merge_lists``, ``unpermute``, ``asarray`` / ``to_host``,
``memory_per_node``. Everything here works on internal distances (squared L2 for both L2 metrics) and
engine arrays (NumPy or CuPy); the public functions convert at the edges.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import math
import time

import numpy as np

from .._device import borrowed_streams, format_bytes, let_page_locked_go, page_locked
from .._prefetch import BlockPrefetcher
from .._progress import progress
from ._common import forest_bytes_per_node, forest_params
from ._windows import window_bytes_per_node

__all__ = ["Config", "make_engine", "refine", "two_phase", "build_in_memory", "ggm", "plan_shard_rows", "sharded_build",
           "plan_piece_rows", "clustered_build"]


@dataclasses.dataclass(frozen=True)
class Config:
    """Resolved build settings (see ``IndexParams``)."""

    k: int
    p: int
    max_iterations: int
    threshold: float
    seed: int
    selective: bool
    kind: int
    verbose: bool = False
    init: str = "random"
    n_trees: int = 0
    leaf_size: int = 0
    #: two-phase schedule (:func:`build_in_memory`): iterate on lists of ``short_k`` entries first (0 or k:
    #: one phase), until an iteration inserts fewer than ``short_stop * n * short_k`` entries, widen them
    #: to k by two hops (``hops`` neighbours, ``hops`` entries of each) and iterate with ``tail_p`` samples
    short_k: int = 0
    short_stop: float = 0.1
    tail_p: int = 0
    hops: int = 32


def make_engine(device, *, simulate: bool = False):
    """The engine for ``device``; ``simulate=True``: the GPU engine's orchestration on NumPy arrays, its
    kernels run by the numba CUDA simulator (tests)."""
    from .._device import Device, implementation

    if simulate:
        return implementation(__package__, Device("cuda")).Engine(simulate=True)
    module = implementation(__package__, device)
    return module.Engine(device.index) if device.is_cuda else module.Engine()


def refine(engine, x, inv, gd, gi, gf, cfg: Config, *, split=0, stats=None, desc="nn-descent", callback=None,
           extra=None, it0=0):
    """NN-Descent iterations on an initialised graph (gd, gi, gf updated in place): at most
    ``cfg.max_iterations``, stopping after an iteration that inserts fewer than ``cfg.threshold * n * k``
    entries. ``callback(it, gd, gi)`` runs after each iteration, outside the timings. ``extra``: engine
    options (GPU: ``insert``, ``profile``, ``max_registers``; CPU: ``buffer_bytes``). Returns the
    per-iteration insert counts; ``stats`` gets them with the times and the engine's own figures. ``it0``:
    the number of the first iteration (the CPU's reverse samples are seeded by it)."""
    n, k = gd.shape
    state = engine.start_refine(x, inv, cfg.kind, gd, gi, gf, p=cfg.p, seed=cfg.seed, split=split,
                                selective=cfg.selective, **dict(extra or {}))
    history, times = [], []
    paused = 0.0
    t0 = time.perf_counter()
    with progress(cfg.max_iterations, desc, disable=not cfg.verbose, min_steps=1, upper_bound=True) as bar:
        for it in range(cfg.max_iterations):
            inserted = engine.iterate(state, it0 + it)
            history.append(inserted)
            times.append(time.perf_counter() - t0 - paused)
            bar.update(1)
            if callback is not None:
                tc = time.perf_counter()
                callback(it, gd, gi)
                paused += time.perf_counter() - tc
            if inserted < cfg.threshold * n * k:
                break
    if stats is not None:
        stats["updates_per_iteration"] = history
        stats["seconds_per_iteration"] = times
        stats["iterations"] = len(history)
        stats.update(engine.refine_stats(state))
    return history


def two_phase(cfg: Config) -> bool:
    """Whether :func:`build_in_memory` runs the two-phase schedule for ``cfg``."""
    return 0 < cfg.short_k < cfg.k


def build_in_memory(engine, data, cfg: Config, *, stats=None, callback=None, prepared=None, extra=None):
    """GNND (Alg. 1) on ``data``: random, random projection forest or cluster window initial lists
    (``cfg.init``), then iterations. Returns engine arrays (gd, gi).

    Two phases where ``0 < cfg.short_k < cfg.k``: the iterations run on lists of ``short_k`` entries until
    one inserts fewer than ``cfg.short_stop * n * short_k`` (the early iterations, from random lists, cost
    the most: each local join is NEW x (NEW + OLD) samples, and on short lists they do the same in less
    time); then each list is widened to k entries with the nearest of its neighbours' neighbours
    (``engine.widen``: the first ``cfg.hops`` entries of the lists of its first ``cfg.hops`` entries), new
    entries NEW within the first short_k and OLD behind, and the iterations go on with ``cfg.tail_p``
    samples until the usual stop, within ``cfg.max_iterations`` in all. H200, 1,000 overlapping clusters
    of 128-d rows, k=32 (lists of 32, then 64): 5 + 3 iterations, 1.19 s at 1M rows against 17 iterations
    and 2.44 s for lists of 64 from the start, 25.7 s against 38.8 s at 16M, at higher whole-list recall
    (``benchmarks/results/nndescent_gpu_h200_two_phase.jsonl``); the CPU study of the schedule is
    ``benchmarks/studies/nndescent_wide_tail.py``."""
    x, inv = prepared if prepared is not None else engine.prepare(data, cfg.kind)
    n = x.shape[0]
    wide = two_phase(cfg)
    gd, gi, gf = engine.new_graph(n, cfg.short_k if wide else cfg.k)
    order = None
    if cfg.init == "rp_forest":
        # the iterations run on the points reordered by the forest (near points, near ids: cache locality)
        n_trees, leaf_size = forest_params(n, cfg.k)
        x, inv, order = engine.init_forest(x, inv, cfg.kind, gd, gi, gf, cfg.seed, cfg.n_trees or n_trees,
                                           cfg.leaf_size or leaf_size)
    elif cfg.init == "cluster_windows":
        engine.init_windows(x, inv, cfg.kind, gd, gi, gf, cfg.seed)
    else:
        engine.init(x, inv, cfg.kind, gd, gi, gf, 0, 0, cfg.seed)
    report = callback
    if callback is not None and order is not None:
        def report(it, gd_it, gi_it):
            callback(it, *engine.unpermute(gd_it, gi_it, order))
    desc = "nn-descent (cuda)" if engine.is_cuda else "nn-descent (cpu)"
    if not wide:
        refine(engine, x, inv, gd, gi, gf, cfg, split=0, stats=stats, callback=report, extra=extra, desc=desc)
    else:
        first: dict = {}
        short = dataclasses.replace(cfg, k=cfg.short_k, p=min(cfg.p, cfg.short_k), threshold=cfg.short_stop)
        done = len(refine(engine, x, inv, gd, gi, gf, short, split=0, stats=first, callback=report, extra=extra,
                          desc=desc + " short lists"))
        t0 = time.perf_counter()
        gd, gi, gf = engine.widen(x, inv, cfg.kind, gd, gi, gf, cfg.k, cfg.hops)
        engine.synchronize()
        widen_seconds = time.perf_counter() - t0
        second: dict = {}
        rest = cfg.max_iterations - done
        if rest > 0:
            tail = dataclasses.replace(cfg, p=max(1, min(cfg.tail_p or cfg.p, cfg.k)), max_iterations=rest)
            later = None if report is None else (lambda it, gd_it, gi_it: report(it + done, gd_it, gi_it))
            refine(engine, x, inv, gd, gi, gf, tail, split=0, stats=second, callback=later, extra=extra, it0=done,
                   desc=desc + " wide lists")
        if stats is not None:
            _two_phase_stats(stats, first, second, widen_seconds, cfg)
    if order is not None:
        gd, gi = engine.unpermute(gd, gi, order)
    return gd, gi


def _two_phase_stats(stats, first, second, widen_seconds, cfg: Config):
    """The two phases' refine stats as one build's (iterations, inserts and seconds of both, the second
    phase's times counted from the build's start) plus the phases' own figures."""
    times = list(first.get("seconds_per_iteration", []))
    start = (times[-1] if times else 0.0) + widen_seconds
    times += [start + t for t in second.get("seconds_per_iteration", [])]
    stats["updates_per_iteration"] = list(first.get("updates_per_iteration", [])) + list(
        second.get("updates_per_iteration", []))
    stats["seconds_per_iteration"] = times
    stats["iterations"] = first.get("iterations", 0) + second.get("iterations", 0)
    stats["phase_iterations"] = [first.get("iterations", 0), second.get("iterations", 0)]
    stats["phase_list_degrees"] = [cfg.short_k, cfg.k]
    stats["phase_sample_sizes"] = [min(cfg.p, cfg.short_k), max(1, min(cfg.tail_p or cfg.p, cfg.k))]
    stats["widen_seconds"] = widen_seconds
    # the engine's own figures (refine_stats): numbers added, lists joined, dicts of numbers added by key
    for part in (first, second):
        for key, value in part.items():
            if key in ("updates_per_iteration", "seconds_per_iteration", "iterations"):
                continue
            have = stats.get(key)
            if key not in stats:
                stats[key] = dict(value) if isinstance(value, dict) else (
                    list(value) if isinstance(value, list) else value)
            elif isinstance(value, dict) and isinstance(have, dict):
                for name, v in value.items():
                    have[name] = have.get(name, 0) + v
            elif isinstance(value, list) and isinstance(have, list):
                have.extend(value)
            elif isinstance(value, (int, float)) and isinstance(have, (int, float)):
                stats[key] = have + value
            else:
                stats[key] = value


def _offset_ids(xp, ids, off):
    return xp.where(ids >= 0, ids + np.int32(off), np.int32(-1)).astype(np.int32)


def ggm(engine, x, inv, n1, g1d, g1i, g2d, g2i, cfg: Config, *, readd=True, stats=None, extra=None):
    """GPU-based graph merge (paper section 5.1, Alg. 3) of the graphs of x[:n1] and x[n1:].

    ``g1*``/``g2*`` are engine arrays with k columns sorted by distance, ids local to their subset. Each
    list keeps its first k/2 entries (OLD) and gets k - k/2 random ids of the other subset (NEW); GNND
    then refines with same-subset pairs skipped; with ``readd`` the removed halves are merged back
    (Alg. 3 l.12). Returns (gd, gi) over x with ids in [0, n).
    """
    xp = engine.xp
    n = x.shape[0]
    k = cfg.k
    keep = k // 2
    gd, gi, gf = engine.new_graph(n, k)
    gd[:n1, :keep] = g1d[:, :keep]
    gi[:n1, :keep] = g1i[:, :keep]
    gd[n1:, :keep] = g2d[:, :keep]
    gi[n1:, :keep] = _offset_ids(xp, g2i[:, :keep], n1)
    engine.init(x, inv, cfg.kind, gd, gi, gf, keep, n1, cfg.seed)
    refine(engine, x, inv, gd, gi, gf, cfg, split=n1, stats=stats, desc="graph merge", extra=extra)
    if readd and k > keep:
        rd = xp.concatenate([g1d[:, keep:k], g2d[:, keep:k]])
        ri = xp.concatenate([g1i[:, keep:k], _offset_ids(xp, g2i[:, keep:k], n1)])
        gd, gi = engine.merge_lists(gd, gi, rd, ri, k)
    return gd, gi


def _build_bytes_per_node(engine, n, d, itemsize, cfg: Config, cosine: bool) -> int:
    """Working bytes per node of an in-memory build (the forest's too when it starts from one)."""
    per_node = engine.memory_per_node(d, itemsize, cfg.k, cfg.p, cosine)
    if cfg.init == "rp_forest":
        per_node += forest_bytes_per_node(d, itemsize, forest_params(n, cfg.k)[0], cosine)
    elif cfg.init == "cluster_windows":
        per_node += window_bytes_per_node(d, cfg.k, n)
    return per_node


def plan_shard_rows(engine, n, d, itemsize, cfg: Config, budget: int, *, cosine: bool) -> int:
    """Rows per shard so that one shard-pair merge fits ``budget`` bytes.

    A merge holds 2 shards' working set (:meth:`memory_per_node`) plus, per shard row, the shard's own
    graph and running result (16 k bytes each for both shards) and a prefetch buffer of vectors.
    """
    per_node = _build_bytes_per_node(engine, n, d, itemsize, cfg, cosine)
    resident = 16 * cfg.k + d * itemsize
    rows = budget // (2 * (per_node + resident))
    min_rows = 2 * cfg.k + 2
    if rows < min_rows:
        need = 2 * (per_node + resident) * min_rows
        raise MemoryError(f"nn-descent needs at least {format_bytes(need)} for lists of {cfg.k} neighbours, d={d} "
                          f"(two shards of "
                          f"{min_rows} rows); memory_limit allows {format_bytes(budget)}")
    return int(min(rows, n))


def _load_device(engine):
    """The GPU the engine's blocks load to (:class:`knngraph._prefetch.BlockPrefetcher`), or None for
    host blocks (the CPU engine; the simulator, whose arrays are NumPy's)."""
    return engine.device_index if engine.is_cuda and not engine.simulate else None


class _Folder:
    """Folds each cluster piece's lists into the running host lists (:func:`._merge_host.fold_piece_lists`:
    compiled, split over numba's threads, GIL released) on one worker thread while the caller builds the
    next piece.

    Pieces share rows, so the folds run one at a time in the order the pieces are handed over (a single
    worker takes them first in, first out): the lists do not depend on how the folds interleave with the
    builds. :meth:`add` hands a piece over:

    * host arrays (the CPU engine, the simulator, the exact lists of small pieces) as they are;
    * the GPU's lists are copied into one of :attr:`SLOTS` page-locked buffers on a side stream, after the
      work queued on the caller's stream so far; the worker waits for the copy (an event), lets the device
      arrays go (they are held until then, so that the next build cannot reuse their memory while the copy
      reads it) and folds from the buffer. Where page-locked memory cannot be had, the caller copies into
      pageable memory (``engine.to_host``) and the worker folds that.

    At most :attr:`SLOTS` folds are outstanding: before a piece takes a slot, the fold of the piece that
    used it last must be done (the caller waits). A fold's error is raised by the next :meth:`add` or by
    :meth:`close`. ``handoff_seconds``: the caller's time in :meth:`add` and :meth:`close` (waiting for a
    slot, queueing the copies, or copying where there is no page-locked memory); ``fold_seconds``: the
    worker's time (waiting for the copy and folding)."""

    SLOTS = 2

    def __init__(self, engine, res_d, res_i, done, max_rows: int):
        self.engine = engine
        self.res = (res_d, res_i, done)
        self.max_rows = int(max_rows)
        self.on_device = engine.is_cuda and not engine.simulate
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="knngraph-fold")
        self.pending: collections.deque = collections.deque()  # the folds not yet seen done, oldest first
        self.count = 0
        self.pinned: list = [None] * self.SLOTS  # per slot: (distances, ids) page-locked, or False
        self.stream = None
        self._streams = contextlib.ExitStack()
        self.handoff_seconds = 0.0
        self.fold_seconds = 0.0  # written by the worker only

    def add(self, rows, gd, gi):
        """Hand over a piece: ``rows`` its sorted global row ids, (gd, gi) its lists (engine or host arrays,
        ids local to the piece)."""
        t0 = time.perf_counter()
        try:
            # a slot's buffers are reused SLOTS pieces later: by then the fold that read them is done
            while self.pending and (len(self.pending) >= self.SLOTS or self.pending[0].done()):
                self.pending.popleft().result()  # raises the fold's error
            slot = self.count % self.SLOTS
            self.count += 1
            if isinstance(gd, np.ndarray) or not self.on_device:
                job = (self.engine.to_host(gd), self.engine.to_host(gi), None, None)
            else:
                job = self._copy_async(slot, gd, gi)
            self.pending.append(self.pool.submit(self._fold, rows, *job))
        finally:
            self.handoff_seconds += time.perf_counter() - t0

    def _buffers(self, slot: int):
        """The slot's page-locked (distances, ids) buffers of ``max_rows`` rows, allocated on first use;
        None where page-locked memory cannot be had (then no slot tries again)."""
        if self.pinned[slot] is None:
            k = self.res[0].shape[1]
            bufs = (page_locked((self.max_rows, k), np.float32), page_locked((self.max_rows, k), np.int32))
            # no page-locked memory: plain copies instead, for every slot
            self.pinned[slot] = bufs
            if bufs[0] is None or bufs[1] is None:
                self.pinned = [False] * self.SLOTS
        return self.pinned[slot] or None

    def _copy_async(self, slot: int, gd, gi):
        """(distances, ids, copied event, device arrays to hold) of a copy of the GPU lists into the slot's
        page-locked buffers, queued on the side stream after the caller's stream's work; a plain copy
        where there are no buffers."""
        bufs = self._buffers(slot) if gd.shape[0] <= self.max_rows else None
        if bufs is None:
            return self.engine.to_host(gd), self.engine.to_host(gi), None, None
        cp = self.engine.cp
        m = gd.shape[0]
        with cp.cuda.Device(self.engine.device_index):
            gd, gi = cp.ascontiguousarray(gd), cp.ascontiguousarray(gi)
            if self.stream is None:
                (self.stream,) = self._streams.enter_context(borrowed_streams(self.engine.device_index,
                                                                             "list-download"))
            self.stream.wait_event(cp.cuda.get_current_stream().record())
            hd, hi = bufs[0][:m], bufs[1][:m]
            for src, dst in ((gd, hd), (gi, hi)):
                try:
                    src.get(stream=self.stream, out=dst, blocking=False)
                except TypeError:  # a CuPy without ``blocking``: a copy on a given stream is asynchronous
                    src.get(stream=self.stream, out=dst)
            copied = self.stream.record()
        return hd, hi, copied, [gd, gi]

    def _fold(self, rows, hd, hi, copied, hold):
        """The worker: wait for the copy (if any), let the device lists go, fold."""
        from ._merge_host import fold_piece_lists

        t0 = time.perf_counter()
        try:
            if copied is not None:
                copied.synchronize()
                with self.engine.cp.cuda.Device(self.engine.device_index):
                    hold.clear()
            fold_piece_lists(rows, hd, hi, *self.res)
        finally:
            self.fold_seconds += time.perf_counter() - t0

    def close(self, *, failed: bool = False):
        """Wait for the folds in order (raising the first error), or with ``failed`` (the caller is raising)
        drop those not started and wait for the running one; then wait for the copies still queued and give
        the side stream and the page-locked buffers back."""
        t0 = time.perf_counter()
        try:
            if not failed:
                while self.pending:
                    self.pending.popleft().result()
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pending.clear()
            try:
                if self.stream is not None:
                    # a copy still queued writes into a page-locked buffer: done before it is let go
                    self.stream.synchronize()
            finally:
                self._streams.close()
                pinned = sum(b[0].nbytes + b[1].nbytes for b in self.pinned if b)
                self.pinned = [None] * self.SLOTS
                let_page_locked_go(pinned)
                self.handoff_seconds += time.perf_counter() - t0


def sharded_build(engine, data, cfg: Config, shard_rows: int, *, stats=None):
    """Out-of-core GNND (paper section 5): build each shard's graph, then GGM every shard pair once and
    fold each merged list into the running top-k of its node. Merges start from the shards' own graphs
    (as the GNND authors' code does): the running lists hold ids of shards that are not loaded, whose
    vectors a merge could not read. Returns host arrays (distances, ids)."""
    xp = engine.xp
    n = data.shape[0]
    n_shards = math.ceil(n / shard_rows)
    size = math.ceil(n / n_shards)
    bounds = [(lo, min(n, lo + size)) for lo in range(0, n, size)]
    n_shards = len(bounds)
    k = cfg.k
    sequence = list(bounds)
    for i in range(n_shards - 1):
        sequence += [bounds[i]] + bounds[i + 1:]
    local = []          # each shard's own graph (host, local ids)
    res_d = []          # running result lists (host, global ids)
    res_i = []
    t0 = time.perf_counter()
    merge_iters = []
    fetch = BlockPrefetcher(data, sequence, device_index=_load_device(engine))
    try:
        with progress(n_shards + n_shards * (n_shards - 1) // 2, "nn-descent shards",
                      disable=not cfg.verbose, min_steps=1) as bar:
            for s, (lo, hi) in enumerate(bounds):
                block = fetch.next()
                shard_cfg = dataclasses.replace(cfg, seed=cfg.seed + 7919 * s, verbose=False)
                gd, gi = build_in_memory(engine, block, shard_cfg)
                ld, li = engine.to_host(gd), engine.to_host(gi)
                local.append((ld, li))
                res_d.append(ld.copy())
                res_i.append(np.where(li >= 0, li + np.int32(lo), np.int32(-1)).astype(np.int32))
                del block, gd, gi
                bar.update(1)
            # shard-pair merges run with the build's settings: capping them (the GNND authors' code used
            # 10-12 samples and 3-11 iterations) cost recall on large shards in our measurements (0.80 at
            # 2M points, 0.49 at 5M with 16 samples / 6 iterations; see benchmarks/results)
            merge_cfg = dataclasses.replace(cfg, verbose=False)
            for i, (lo_i, hi_i) in enumerate(bounds[:-1]):
                ni = hi_i - lo_i
                xi = fetch.next()
                gdi, gii = engine.asarray(local[i][0]), engine.asarray(local[i][1])
                rdi, rii = engine.asarray(res_d[i]), engine.asarray(res_i[i])
                for j in range(i + 1, n_shards):
                    lo_j, hi_j = bounds[j]
                    xj = fetch.next()
                    x_ij, inv = engine.prepare(xp.concatenate([xi, xj]), cfg.kind)
                    del xj
                    st = {}
                    gd, gi = ggm(engine, x_ij, inv, ni, gdi, gii, engine.asarray(local[j][0]),
                                 engine.asarray(local[j][1]), merge_cfg, readd=False, stats=st)
                    merge_iters.append(st.get("iterations", 0))
                    glob = xp.where(gi < ni, gi + np.int32(lo_i), gi - np.int32(ni) + np.int32(lo_j))
                    glob = xp.where(gi >= 0, glob, np.int32(-1)).astype(np.int32)
                    rdi, rii = engine.merge_lists(rdi, rii, gd[:ni], glob[:ni], k)
                    rdj, rij = engine.merge_lists(engine.asarray(res_d[j]), engine.asarray(res_i[j]), gd[ni:],
                                                  glob[ni:], k)
                    res_d[j], res_i[j] = engine.to_host(rdj), engine.to_host(rij)
                    del x_ij, inv, gd, gi, glob
                    bar.update(1)
                res_d[i], res_i[i] = engine.to_host(rdi), engine.to_host(rii)
                del xi
    finally:
        fetch.close()
    if stats is not None:
        stats.update(shards=n_shards, shard_rows=size, merges=n_shards * (n_shards - 1) // 2,
                     merge_iterations=merge_iters, seconds=time.perf_counter() - t0)
    return np.concatenate(res_d), np.concatenate(res_i)


#: pieces of at most SMALL_PIECE_PER_K * (k + 1) rows get an exact graph; clusters of fewer than
#: POOL_PER_K * (k + 1) rows are pooled (:func:`knngraph.partition.split_pieces`)
SMALL_PIECE_PER_K = 4
POOL_PER_K = 2
#: with the border rule (``margin``), clusters are planned as if every row were built this many times,
#: more than it builds (1.1 to 1.8 rows per row on the sets measured): k-means clusters vary in size, and a
#: cluster too large for a piece is halved, which builds the rows near the cut twice. Rows built per row at
#: plans of 1.2 / 1.5 / 1.8 / 2.2 / 2.6 (cluster_margin 0.2, k=32, a quarter of the data's memory):
#: 1.87 / 1.53 / 1.41 / 1.21 / 1.19 on 2M rows of separate clusters, 1.32 / 1.28 / 1.19 / 1.18 / 1.19 on
#: 200k overlapping ones, with the same share of the true 10 nearest neighbours in a piece with their row
#: (0.999-1.0 and 0.989-0.993); 2M overlapping clusters: 1.76 / 1.79 / 1.80 at 1.5 / 1.8 / 2.2.
PLANNED_COPIES = 2.2
#: the border distance is lowered where it would build more rows per row than this
#: (:func:`knngraph.partition.border_threshold`): little more work than every row in its 2 nearest
#: clusters, on data whose rows are nearly all near a border (100k uniform random rows in 128 dimensions,
#: 60 clusters: 99.9 % of them within 0.2 neighbourhood radii of their 2nd nearest cluster). On an H200,
#: the runner's 10M x 128 synth set, k=32, a quarter of the data's memory (in-memory build 30.9-31.5 s,
#: recall@10 1.000): a cap of 2.0 built 2.03 rows per row in 40.1 s (1.27x) at graph recall@10 0.947;
#: 2.2: 2.29 rows, 46.8 s (1.51x) at 0.962; 2.4 (not binding there: 2.37 rows): 46.5 s (1.50x) at 0.964,
#: the recall of the old rule's three clusters per row (0.963) at a third of its time
#: (``benchmarks/results/nndescent_out_of_core_gpu_h200.jsonl``)
MAX_COPIES = 2.4


def plan_piece_rows(engine, n, d, itemsize, cfg: Config, budget: int, *, cosine: bool) -> int:
    """Most rows of one cluster piece so that its build fits ``budget`` bytes: the build's working set
    (:meth:`memory_per_node`), the piece's rows of the running result lists and their merge (16 k bytes
    each) and the prefetch buffer of the next piece's vectors."""
    per_node = _build_bytes_per_node(engine, n, d, itemsize, cfg, cosine)
    per_row = per_node + 32 * cfg.k + d * itemsize
    rows = budget // per_row
    min_rows = 4 * POOL_PER_K * (cfg.k + 1)
    if rows < min_rows:
        raise MemoryError(f"nn-descent needs at least {format_bytes(per_row * min_rows)} for lists of {cfg.k} "
                          f"neighbours, d={d} "
                          f"(a cluster of {min_rows} rows); memory_limit allows {format_bytes(budget)}")
    return int(min(rows, n))


def to_internal(dist, metric, xp):
    """Reported distances -> internal ones (euclidean is squared; the others are the same)."""
    d = xp.asarray(dist, dtype=xp.float32)
    return d * d if metric == "euclidean" else d


def small_exact_lists(data, k, metric):
    """Exact (reported distances, ids) host lists of a few vectors: each row's min(k, n - 1) nearest
    (ties by lower id), padded with (inf, -1) to k columns (the graph of a handful of added vectors, a
    small cluster piece). Float64 distances of all pairs: meant for a few hundred rows at most."""
    from .._device import as_numpy
    from ..metrics import pairwise_distances

    x = as_numpy(data)
    n = x.shape[0]
    ids = np.full((n, k), -1, np.int32)
    dist = np.full((n, k), np.inf, np.float32)
    if n > 1:
        m = min(k, n - 1)
        d = pairwise_distances(x, x, metric)
        np.fill_diagonal(d, np.inf)
        order = np.lexsort((np.broadcast_to(np.arange(n), (n, n)), d), axis=1)[:, :m]
        ids[:, :m] = order
        dist[:, :m] = np.take_along_axis(d, order, 1)
    return dist, ids


def clustered_build(engine, data, cfg: Config, max_rows: int, *, metric: str, overlap: int = 3,
                    margin: float | None = None, stats=None):
    """Out-of-core GNND over overlapping clusters (see :mod:`knngraph.partition`): k-means centroids, every
    row in the piece of its nearest cluster and in those of its 2nd to ``overlap``-th nearest ones whose
    border it lies within ``margin`` neighbourhood radii of (None: in all of them), each piece built in
    memory (the next piece's rows loaded meanwhile, :class:`knngraph._prefetch.BlockPrefetcher`) and
    folded into the running top-k of its rows on the host (:class:`_Folder`: a compiled, threaded kernel
    on a worker thread, in piece order, while the next piece builds; on the GPU each piece's lists go to
    page-locked memory by an asynchronous copy on a side stream). Returns host arrays (distances, ids).

    ``stats`` gets the partition's figures and the pieces': ``partition_seconds`` (k-means, assignment
    and splitting; ``partition_seconds_by_step`` has each), ``partition_load_seconds`` and
    ``partition_load_wait_seconds`` (the passes of the assignment and the halvings over host rows bound
    for the GPU: the loader's time gathering and copying the next block, and the calling thread's time
    waiting for it: the part of the loads the GPU's work does not hide; 0 where the blocks are read
    directly, on the CPU and for data already on the GPU), ``pieces_build_seconds`` (the builds, on the
    calling thread, up to the device's synchronisation), ``pieces_merge_seconds`` (the calling thread's
    time handing the pieces' lists over and waiting for the folds: the part of the merge the builds do not
    hide), ``pieces_fold_seconds`` (the worker's time: waiting for each copy and folding),
    ``pieces_load_seconds`` and ``pieces_load_wait_seconds`` (the pieces' rows: the loader's time, the
    calling thread's wait)."""
    from .. import partition as P

    n = data.shape[0]
    k = cfg.k
    t0 = time.perf_counter()
    planned = overlap if margin is None else min(overlap, PLANNED_COPIES)
    n_clusters = P.plan_clusters(n, max_rows, planned)
    block_rows = max(1024, max_rows // 2)
    # k-means on the engine's arrays (the GPU's) when its sample fits a piece's budget, else on the host
    on_engine = P.kmeans_sample_rows(n, n_clusters) <= max_rows
    cent = P.kmeans(data, n_clusters, cfg.kind, cfg.seed, engine=engine if on_engine else None)
    overlap = min(overlap, len(cent))
    engine.synchronize()
    t_kmeans = time.perf_counter() - t0
    radius = threshold = border = None
    loads: dict = {}  # the partition's block loads (nearest_centroids, split_pieces)
    if margin is None or overlap < 2:
        # every row in its `overlap` nearest clusters, halved at medians (the partition of the several-device
        # and Dask graphs)
        labels = P.nearest_centroids(engine, data, cent, cfg.kind, overlap, block_rows, stats=loads)
    else:
        labels, border, radii = P.nearest_centroids(engine, data, cent, cfg.kind, overlap, block_rows,
                                                    with_border=True, probes=P.probe_rows(n, cfg.seed), k=k,
                                                    stats=loads)
        radius = float(np.median(radii))
        threshold = P.border_threshold(border, margin * radius, MAX_COPIES)
        labels[:, 1:][border[:, 1:] > threshold] = -1
    t_assign = time.perf_counter() - t0 - t_kmeans
    pool = POOL_PER_K * (k + 1)
    # split below max_rows by `pool`: a pool of outlier rows may join a piece (split_pieces)
    pieces = P.split_pieces(data, labels, len(cent), cfg.kind, cfg.seed, max(pool, max_rows - pool), block_rows,
                            min_rows=pool, engine=engine, border=border, cut_margin=threshold, stats=loads)
    del labels, border
    small = SMALL_PIECE_PER_K * (k + 1)
    t_plan = time.perf_counter() - t0
    # every row's list is written by its first piece and merged with those of its later pieces (the rows
    # that sit in one piece only, most of them, need no merge); rows of no piece keep (inf, -1). The fold
    # of a piece into these host lists runs on a worker thread while the next piece builds (_Folder)
    res_d = np.empty((n, k), np.float32)
    res_i = np.empty((n, k), np.int32)
    done = np.zeros(n, bool)
    iterations = []
    t_build = 0.0
    fetch = BlockPrefetcher(data, pieces, device_index=_load_device(engine))
    folder = _Folder(engine, res_d, res_i, done, max((len(r) for r in pieces), default=0))
    failed = True
    try:
        with progress(len(pieces), "nn-descent clusters", disable=not cfg.verbose, min_steps=1) as bar:
            for s, rows in enumerate(pieces):
                block = fetch.next()
                if len(rows) < 2:
                    bar.update(1)
                    continue
                tb = time.perf_counter()
                if len(rows) <= small:
                    hd, hi = small_exact_lists(engine.to_host(block), k, metric)
                    gd, gi = to_internal(hd, metric, np), hi
                else:
                    st: dict = {}
                    gd, gi = build_in_memory(engine, block, dataclasses.replace(cfg, seed=cfg.seed + 7919 * s,
                                                                                verbose=False), stats=st)
                    iterations.append(st.get("iterations", 0))
                engine.synchronize()
                t_build += time.perf_counter() - tb
                # ids local to the piece: the fold maps them to rows (sorted, so the lists' order holds)
                folder.add(rows, gd, gi)
                del block, gd, gi
                bar.update(1)
        failed = False
    finally:
        try:
            folder.close(failed=failed)
        finally:
            fetch.close()
    missing = ~done
    res_d[missing] = np.inf
    res_i[missing] = -1
    if stats is not None:
        sizes = [len(r) for r in pieces]
        stats.update(out_of_core="clusters", clusters=int(len(cent)), pieces=len(pieces), overlap=overlap,
                     margin=margin, neighbour_radius=radius, border_distance=threshold,
                     piece_rows_max=int(max(sizes)), piece_rows_mean=float(np.mean(sizes)),
                     max_piece_rows=int(max_rows), rows_built=int(sum(sizes)), copies=float(sum(sizes)) / n,
                     piece_iterations=iterations, partition_seconds=t_plan,
                     partition_seconds_by_step={"kmeans": t_kmeans, "assign": t_assign,
                                                "split": t_plan - t_kmeans - t_assign},
                     partition_load_seconds=loads.get("load_seconds", 0.0),
                     partition_load_wait_seconds=loads.get("load_wait_seconds", 0.0),
                     pieces_build_seconds=t_build, pieces_merge_seconds=folder.handoff_seconds,
                     pieces_fold_seconds=folder.fold_seconds, pieces_load_seconds=fetch.load_seconds,
                     pieces_load_wait_seconds=fetch.wait_seconds, seconds=time.perf_counter() - t0)
    return res_d, res_i
