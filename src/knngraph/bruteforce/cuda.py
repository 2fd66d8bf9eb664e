"""Exact k-NN on the GPU: cuBLAS GEMM tiles (through CuPy) + per-row selection kernels (numba-cuda).

Loop (Komarov, Dashti, D'Souza, "Fast k-NNG Construction with GPU-Based Quick Multi-Select"; the paper
kept the whole distance matrix in GPU memory, we stream):

    for each query block Q (rows):                      # queries: device-resident or uploaded per block
        best = (inf, none) x k per row
        for each base tile X (columns):                 # base: resident if it fits the budget, else streamed
            D = Q X^T                                   # one GEMM, float32
            per row, select k of key(D, ||x||^2)        # knngraph.primitives.kselect
            best = k smallest of best U selected        # in the same kernel (warp_filter) or a merge pass
        distances = key + ||q||^2 (sqeuclidean), ...

Tile sizes come from ``memory_limit``; everything allocated is accounted for there. With
``select="quickselect"`` each tile also needs two (key, id) ping-pong buffers of the tile's size.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .._device import borrowed_streams, kept_across_streams
from .._device import sm_count as multiprocessors
from .._progress import progress
from ..primitives.kselect import MAX_FILTER_K, TileSelector, resolve_select
from ._exact import NumericPlan, finish_candidates, new_flags, plan_numerics, raise_flagged
from ._gemm import plan_gemm

__all__ = ["exact_knn", "plan_tiles"]

_MAX_TILE_BYTES = 2 << 30   # one dot tile; larger tiles gain nothing in GEMM speed
_MAX_QUERY_BLOCK = 16384
#: a resident base operand (with its column terms) of at most this many bytes is kept in the index's
#: ``prepared`` dict for its later searches. Rebuilding it (cosine: a float32 copy of the base, normalised)
#: was a fifth of a small search's time (18k x 384 float16, 2k queries, H200: 0.4 of 3.8 ms); larger
#: bases spend far longer in their GEMMs, and a kept copy of them would hold that much GPU memory.
KEEP_OPERAND_BYTES = 512 << 20


def plan_tiles(n: int, nq: int, d: int, k: int, budget: int, select: str, resident_bytes: int):
    """Query block and base tile sizes that fit ``budget`` bytes (after ``resident_bytes``).

    Per element of a tile: 2 x 4 bytes of dot products (double-buffered), plus 16 bytes of ping-pong buffers for quickselect.
    Per query row: 4*d for the float32 queries, and the running best lists.
    """
    per_elem = 8 + (16 if select == "quickselect" else 0)  # two dot buffers (GEMM/selection overlap)
    avail = budget - resident_bytes
    qb = int(min(nq, _MAX_QUERY_BLOCK))
    while True:
        per_query = 4 * d + 8 * k * 4 + 8
        tile_avail = avail - qb * per_query
        bt = tile_avail // (qb * per_elem + 4 * d + 4) if tile_avail > 0 else 0
        bt = int(min(n, bt, max(1, _MAX_TILE_BYTES // (4 * qb))))
        if bt >= min(n, 1024) or qb <= 64:
            break
        qb = max(64, qb // 2)
    if bt < 1:
        need = resident_bytes + qb * (4 * d + 8 * k * 4) + (qb * per_elem + 4 * d) * min(n, 1024)
        raise MemoryError(f"exact k-NN needs about {need / 2**20:.0f} MiB of GPU memory for k={k}, d={d}; "
                          f"memory_limit allows {budget / 2**20:.0f} MiB")
    return qb, bt


def exact_knn(base, queries, k: int, metric: str, *, graph: bool = False, memory_limit: int,
              select: str = "auto", device_index: int = 0, verbose: bool = True, stats: dict | None = None,
              tensor_cores: bool = True, plan: NumericPlan | None = None, candidates: int | None = None,
              prepared: dict | None = None, flags=None, one_pass_only: bool = False):
    """Exact top-k on the GPU. ``base``/``queries`` are CuPy arrays (used in place) or host arrays
    (NumPy / memory-mapped, streamed). Each query selects ``candidates`` by GEMM key (default: the numeric
    plan's), then the best k are made exact and checked (:mod:`._exact`). Returns (distances float32,
    ids int32, unsure bool) [nq, k]: CuPy arrays for device queries, NumPy arrays for host queries.

    ``prepared``: a dict that lives with ``base`` (an index's), where the resident GEMM operand and column
    terms are kept for later calls (:data:`KEEP_OPERAND_BYTES`); ``base`` must not change while it does.

    ``flags``: the caller's check flags (:func:`._exact.new_flags`) on GPU ``device_index``: the search's
    checks set them and the caller raises with :func:`._exact.raise_flagged` once it reads them (its one
    wait for the device). Without them this call makes its own, waits for them and raises here.

    ``one_pass_only``: raise :class:`knngraph._cuda_graphs.NotCapturable`, before any GPU work, unless the
    search runs in one pass (device queries in one block, a resident base in one tile): the only search
    that is captured as a CUDA graph."""
    import cupy as cp

    own = flags is None
    with cp.cuda.Device(device_index):
        if own:
            flags = new_flags(cp)
        out = _exact_knn(base, queries, k, metric, graph=graph, memory_limit=memory_limit, select=select,
                         device_index=device_index, verbose=verbose, stats=stats, tensor_cores=tensor_cores,
                         plan=plan, candidates=candidates, prepared=prepared, flags=flags,
                         one_pass_only=one_pass_only)
        if own:
            raise_flagged(flags.get(), queries, metric)
    return out


def _exact_knn(base, queries, k: int, metric: str, *, graph: bool, memory_limit: int, select: str,
               device_index: int, verbose: bool, stats: dict | None, tensor_cores: bool, plan: NumericPlan | None,
               candidates: int | None, prepared: dict | None, flags, one_pass_only: bool = False):
    """:func:`exact_knn` with the caller's ``flags``."""
    import cupy as cp

    n, d = base.shape
    nq = queries.shape[0]
    with cp.cuda.Device(device_index):
        numerics = plan or plan_numerics(base, metric, cp if isinstance(base, cp.ndarray) else np).for_queries(queries)
        c = candidates or numerics.candidates(k, n - 1 if graph else n)
        if select == "auto":
            select = resolve_select(select, c)  # by the candidates each query selects
        else:
            select = resolve_select(select, k)  # the caller's choice, checked against the k asked for
            if select == "warp_filter":
                # the exactness margin (candidates beyond k) stays within the filter's limit; answers it
                # cannot prove are searched again with more candidates (bruteforce._index._exact: 'auto')
                c = min(c, MAX_FILTER_K)
        sm_count = multiprocessors(device_index)  # cached: CuPy reads every attribute of the device
        budget = int(memory_limit)
        gemm_dtype = np.float32 if not numerics.identity else None
        if numerics.gamma == 0.0 and numerics.integer_top is not None:
            # float vectors of small integers (at most 2048: exact in float16) with exact keys: the fp16
            # tensor-core GEMM with fp32 accumulation gives the same integer dot products as SGEMM
            gemm_dtype = np.float16
        plan = plan_gemm(gemm_dtype or base.dtype, gemm_dtype or queries.dtype, metric, d,
                         allow_tensor_cores=tensor_cores)
        # Keep the base's GEMM operand (plus column terms) on the GPU when it takes at most half the
        # budget; otherwise stream base tiles through the GPU for each query block.
        op_itemsize = 1 if plan.mode == "int8" else (2 if plan.mode == "fp16" else 4)
        # cosine on fp16 keeps the normalised float32 rows too, for the candidates' exact distances
        op_bytes = n * (op_itemsize * d + 4 + (4 * d if plan.scaled else 0))
        resident = op_bytes <= budget // 2
        base_on_gpu = isinstance(base, cp.ndarray)
        qb, bt = plan_tiles(n, nq, d, c, budget, select, op_bytes if resident else 0)
        # results for host queries go back to the host block by block, so query sets larger than GPU
        # memory work; device queries get device results
        host_out = not isinstance(queries, cp.ndarray)
        n_q_blocks = (nq + qb - 1) // qb
        n_tiles = (n + bt - 1) // bt
        one_pass = resident and not host_out and n_q_blocks == 1 and n_tiles == 1
        if one_pass_only and not one_pass:
            from .._cuda_graphs import NotCapturable

            raise NotCapturable("only a one-pass exact search is captured")
        xb_rows = None
        if resident:
            xb, xb_col, xb_rows = _resident_operand(base, numerics, plan, device_index, prepared, op_bytes)
        # candidate rows for the exact distances: the resident transformed rows (as the GEMM plan keeps
        # them), else the base as given
        rows_transformed = xb_rows is not None
        selector = TileSelector(select, c, sm_count)
        if stats is not None:
            stats.update(select=select, gemm=plan.mode, query_block=qb, base_tile=bt, base_resident=bool(resident),
                         base_on_gpu=base_on_gpu, candidates=c, centered=numerics.shift is not None,
                         scale=numerics.scale, one_pass=one_pass)
        if one_pass:
            return _one_pass(queries, xb, xb_col, xb_rows if rows_transformed else base, rows_transformed, numerics,
                             plan, selector, k, c, graph, flags)
        out_d = (np if host_out else cp).empty((nq, k), np.float32)
        out_i = (np if host_out else cp).empty((nq, k), np.int32)
        unsure = (np if host_out else cp).zeros(nq, bool)

        # Two streams: GEMM of tile t+1 (compute-bound) can run while tile t is selected (memory-bound).
        # Two dot buffers alternate; a buffer is overwritten only after its selection has finished.
        # The selection stream gets the higher priority: as GEMM blocks retire, the scheduler starts
        # selection blocks first.
        # (CUDA clamps an out-of-range priority to the device's highest; CuPy does not expose the range)
        with borrowed_streams(device_index, "exact", (0, -1000)) as (s_gemm, s_sel):
            selector.stream = s_sel
            ready = cp.cuda.get_current_stream().record()  # inputs and resident data are complete
            s_gemm.wait_event(ready)
            s_sel.wait_event(ready)
            dot_bufs = [cp.empty(qb * bt, plan.out_dtype()) for _ in range(2)]
            slot_free = [None, None]
            slot_keep = [None, None]
            with progress(n_q_blocks * n_tiles, "exact k-NN (cuda)", disable=not verbose) as bar:
                for qs in range(0, nq, qb):
                    qe = min(nq, qs + qb)
                    with s_gemm:
                        q_given = cp.asarray(queries[qs:qe])
                        q, q_row, q_scale, tq = _query_block(q_given, numerics, plan)
                    with s_sel:
                        best_k = cp.empty((qe - qs, c), cp.float32)
                        best_i = cp.empty((qe - qs, c), cp.int32)
                    for t, bs in enumerate(range(0, n, bt)):
                        be = min(n, bs + bt)
                        slot = t % 2
                        with s_gemm:
                            if slot_free[slot] is not None:
                                s_gemm.wait_event(slot_free[slot])
                            slot_keep[slot] = None  # the tile that used this slot is done: release it
                            if resident:
                                x = xb[bs:be]
                                xc = xb_col[bs:be]
                            else:
                                x_raw = numerics.prepare(cp.asarray(base[bs:be]), cp)
                                x = plan.operand(x_raw)
                                xc = plan.column_term(x_raw, x)
                                del x_raw
                            dots = dot_bufs[slot][:(qe - qs) * (be - bs)].reshape(qe - qs, be - bs)
                            plan.dots(q, x, dots, q_scale, xc)
                            tile_ready = s_gemm.record()
                        s_sel.wait_event(tile_ready)
                        with s_sel:
                            sel_col, sel_alpha = plan.selection_terms(xc)
                            selector.offer_tile(dots, sel_col, sel_alpha, bs, qs if graph else -1, best_k, best_i,
                                                first_tile=(t == 0))
                            slot_free[slot] = s_sel.record()
                        slot_keep[slot] = (x, xc, q, q_scale)  # alive until the selection reading them is done
                        bar.update(1)
                    s_sel.wait_event(s_gemm.record())
                    with s_sel:
                        keys, ids = selector.finish(best_k, best_i)
                        block_d, block_i, block_u = finish_candidates(
                            cp, keys, ids, q_row, q_given, tq, xb_rows if rows_transformed else base, numerics, k,
                            rows_transformed=rows_transformed, flags=flags)
                        del tq, q_given
                        if host_out:
                            block_d.get(stream=s_sel, out=out_d[qs:qe])
                            block_i.get(stream=s_sel, out=out_i[qs:qe])
                            block_u.get(stream=s_sel, out=unsure[qs:qe])
                            s_sel.synchronize()
                        else:
                            out_d[qs:qe] = block_d
                            out_i[qs:qe] = block_i
                            unsure[qs:qe] = block_u
                        # the next query block's GEMMs must not overwrite q before this block is done
                        s_gemm.wait_event(s_sel.record())
            cp.cuda.get_current_stream().wait_event(s_sel.record())
            return out_d, out_i, unsure


def _query_block(q_given, numerics: NumericPlan, plan):
    """(GEMM operand, row terms, row scales for :meth:`GemmPlan.dots` or None, transformed queries for the
    exact finish) of a block of device queries, on the current stream."""
    import cupy as cp

    q_raw = numerics.prepare(q_given, cp)
    q = plan.operand(q_raw)
    q_row = plan.row_term(q_raw, q)
    tq, q_scale = plan.query_scale(q_raw)  # float16 cosine: both from one launch
    if tq is None:
        # the float32 operand is the transformed queries (the same operations, in order)
        tq = q if plan.mode == "fp32" else numerics.transform(q_given, cp)
    return q, q_row, q_scale, tq


def _one_pass(queries, xb, xb_col, rows, rows_transformed: bool, numerics: NumericPlan, plan, selector, k: int,
              c: int, graph: bool, flags):
    """The search of device queries that fit one query block against a resident base that fits one tile
    (a small base: up to tens of thousands of rows), on the current stream: one GEMM, one selection, the
    exact finish, and the finish's arrays returned as they are. The tiled loop's second stream, events,
    double buffers and block copies cost more host time here than the GPU spends on the whole search
    (18k x 384 float16 base, 2k queries: a third of a 1.8 ms call on an H200)."""
    import cupy as cp

    q, q_row, q_scale, tq = _query_block(queries, numerics, plan)
    nq, n = q.shape[0], xb.shape[0]
    dots = plan.dots(q, xb, cp.empty((nq, n), plan.out_dtype()), q_scale, xb_col)
    best_k = cp.empty((nq, c), cp.float32)
    best_i = cp.empty((nq, c), cp.int32)
    sel_col, sel_alpha = plan.selection_terms(xb_col)
    selector.offer_tile(dots, sel_col, sel_alpha, 0, 0 if graph else -1, best_k, best_i, first_tile=True)
    keys, ids = selector.finish(best_k, best_i)
    d, i, unsure = finish_candidates(cp, keys, ids, q_row, queries, tq, rows, numerics, k,
                                     rows_transformed=rows_transformed, flags=flags)
    return d, i, unsure  # (new C-ordered arrays: NumericPlan.to_reported)


def _resident_operand(base, numerics: NumericPlan, plan, device_index: int, prepared: dict | None, op_bytes: int):
    """(GEMM operand, column terms, rows for exact distances or None: :meth:`GemmPlan.rescore_rows`) of the
    whole base on this GPU: from ``prepared`` when an earlier call kept them, else made now (and kept there
    when they take at most :data:`KEEP_OPERAND_BYTES`)."""
    import cupy as cp

    key = ("operand", device_index, plan.mode)
    held = None if prepared is None else prepared.get(key)
    if held is not None:
        return held
    keep = prepared is not None and op_bytes <= KEEP_OPERAND_BYTES
    with kept_across_streams() if keep else contextlib.nullcontext():
        x_in = numerics.prepare(cp.asarray(base), cp)
        xb = plan.operand(x_in)
        xb_col = plan.column_term(x_in, xb)
        xb_rows = plan.rescore_rows(x_in, xb)
    if keep:
        prepared[key] = (xb, xb_col, xb_rows)
    return xb, xb_col, xb_rows
