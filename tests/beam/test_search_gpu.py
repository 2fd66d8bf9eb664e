"""The fast GPU searcher (``SearchParams(algo='beam')``, the GPU default) on a real GPU (marker ``gpu``).

On 8-bit vectors with queries of the same dtype the kernel's distances are exact integers (dp4a), so it
must return exactly what the plain-Python walk of tests/beam/test_search_sim.py returns."""

import numpy as np
import pytest

import knngraph
from knngraph import metrics, song
from knngraph.evaluate import recall_at_k
from knngraph.primitives.distances import distance_kind, inverse_norms

from ..song.conftest import random_vectors
from ..song.test_song_gpu import _sift450k, _true_dist, prepared_sift450k
from .test_search_sim import reference_walk

pytestmark = pytest.mark.gpu


def test_sift450k_recall_exact_distances_and_reference_ids():
    base, queries, gt = _sift450k()
    g = prepared_sift450k(base)
    index = song.from_graph(g, base, song.IndexParams(), device="cuda")
    gt_d = _true_dist(base, queries, gt[:, :10])
    floors = {32: 0.93, 64: 0.98, 128: 0.99}
    for queue, floor in floors.items():
        stats = {}
        d, i = index.search(queries, 10, song.SearchParams(queue_size=queue), device="cuda", verbose=False,
                            stats=stats)
        assert stats["algo"] == "beam"
        r = recall_at_k(i, gt[:, :10], 10, distances=d, true_distances=gt_d)
        assert r >= floor, (queue, r)
        np.testing.assert_array_equal(d[:200], _true_dist(base, queries[:200], i[:200]))
    for j in range(0, 10000, 500):  # the walk of the reference, id for id (queue 64)
        rd, ri, rn, rexp = reference_walk(g.indices, base, queries[j], distance_kind("sqeuclidean"),
                                          index.entry_points, 10, 64)
        d1, i1 = index.search(queries[j:j + 1], 10, song.SearchParams(queue_size=64, search_width=1),
                              device="cuda", verbose=False)
        np.testing.assert_array_equal(i1[0], ri)
        np.testing.assert_array_equal(d1[0], rd.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
@pytest.mark.parametrize("metric", metrics.METRICS)
def test_dtypes_and_metrics_against_reference(dtype, metric, rng):
    base = random_vectors(rng, 3000, 40, dtype)
    queries = random_vectors(rng, 50, 40, dtype)
    g = knngraph.optimize_graph(knngraph.knn_graph(base, 24, metric=metric, device="cpu", verbose=False), base,
                                graph_degree=16, device="cpu")
    index = song.from_graph(g, base, device="cuda")
    # one warp per query: the reference's walk (a batch this small would get the block kernel, whose
    # wider steps walk otherwise; it is checked against the truth below)
    dg, ig = song.search(index, queries, 10, song.SearchParams(queue_size=32, algo="beam", search_width=1),
                         device="cuda", verbose=False)
    da, ia = song.search(index, queries, 10, song.SearchParams(queue_size=32, algo="beam"), device="cuda",
                         verbose=False)
    kind = distance_kind(metric)
    xf = base.astype(np.float32)
    inv_b = inverse_norms(xf)
    inv_q = inverse_norms(queries.astype(np.float32))
    ref = [reference_walk(g.indices, base, queries[j], kind, index.entry_points, 10, 32, inv_b, inv_q[j])
           for j in range(len(queries))]
    ri = np.stack([r[1] for r in ref])
    rd = np.stack([r[0] for r in ref])
    if np.dtype(dtype).kind in "iu" and metric in ("sqeuclidean", "inner_product"):
        np.testing.assert_array_equal(ig, ri)  # exact integer arithmetic
        np.testing.assert_array_equal(dg, rd.astype(np.float32))
    else:  # float rounding may order near-ties differently and the walks part: compare with the truth
        truth = knngraph.knn(base, queries, 10, metric=metric, device="cpu")[1]
        assert recall_at_k(ig, truth, 10) >= recall_at_k(ri, truth, 10) - 0.03
        same = (ig[:, 0] == ri[:, 0])
        expect = np.sqrt(np.maximum(rd[:, 0], 0)) if metric == "euclidean" else rd[:, 0]
        np.testing.assert_allclose(dg[same, 0], expect[same], rtol=1e-3, atol=1e-3)
    assert (dg >= 0).all() or metric == "inner_product"
    truth = knngraph.knn(base, queries, 10, metric=metric, device="cpu")[1]
    assert recall_at_k(ia, truth, 10) >= recall_at_k(ig, truth, 10) - 0.03  # the block kernel (auto width)


def test_device_queries_out_arrays_small_batches_and_errors(sample):
    import cupy as cp

    g = knngraph.optimize_graph(knngraph.knn_graph(sample.base, 64, device="cuda", verbose=False), sample.base,
                                graph_degree=32, device="cuda")
    index = song.from_graph(g, cp.asarray(sample.base), device="cuda")
    sp = song.SearchParams(queue_size=64)
    d, i = index.search(sample.queries, 10, sp, device="cuda", verbose=False)
    assert recall_at_k(i, sample.gt_indices, 10, distances=d, true_distances=sample.gt_distances) >= 0.98
    # device queries in place, preallocated outputs filled and returned
    dq = cp.asarray(sample.queries)
    out = (cp.empty((len(dq), 10), cp.float32), cp.empty((len(dq), 10), cp.int32))
    d2, i2 = index.search(dq, 10, sp, device="cuda", verbose=False, out=out)
    assert d2 is out[0] and i2 is out[1]
    np.testing.assert_array_equal(i2.get(), i)
    # with a fixed search width any batch size gives the same rows; the automatic width (wider for small
    # batches) reaches at least the recall of width 1
    sp1 = song.SearchParams(queue_size=64, search_width=1)
    d1, i1 = index.search(sample.queries, 10, sp1, device="cuda", verbose=False)
    for b in (1, 10, 100):
        db, ib = index.search(sample.queries[:b], 10, sp1, device="cuda", verbose=False)
        np.testing.assert_array_equal(ib, i1[:b])
    r1 = recall_at_k(i1[:100], sample.gt_indices[:100], 10, distances=d1[:100],
                     true_distances=sample.gt_distances[:100])
    stats = {}
    dw, iw = index.search(sample.queries[:100], 10, sp, device="cuda", verbose=False, stats=stats)
    assert stats["search_width"] == 8
    assert recall_at_k(iw, sample.gt_indices[:100], 10, distances=dw,
                       true_distances=sample.gt_distances[:100]) >= r1 - 0.005
    # long queues take at least 2 warps per query (4 from 512) even in a batch that fills the GPU
    many = np.tile(sample.queries, (10, 1))
    for queue, width in ((64, 1), (128, 2), (512, 4)):
        index.search(many, 10, song.SearchParams(queue_size=queue), device="cuda", verbose=False, stats=stats)
        assert stats["search_width"] == width, (queue, stats["search_width"])
    # float queries against uint8 vectors: float arithmetic, same results on this integral data
    df, i_f = index.search(sample.queries.astype(np.float32), 10, sp, device="cuda", verbose=False)
    assert recall_at_k(i_f, i, 10) >= 0.999
    # non-finite queries: refused from the host; on the device (not copied back to be checked) their rows
    # get no neighbours, the other rows are unaffected
    bad = sample.queries.astype(np.float32)
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="queries row 3 contains NaN"):
        index.search(bad, 10, sp, device="cuda", verbose=False)
    db, ib = index.search(cp.asarray(bad), 10, sp, device="cuda", verbose=False)
    ib, db = ib.get(), db.get()
    assert (ib[3] == -1).all() and np.isnan(db[3]).all()
    assert recall_at_k(np.delete(ib, 3, 0), np.delete(i_f, 3, 0), 10) >= 0.999
    # a plan cycles through a ring of query counters and clears it when it wraps: the calls around the
    # wrap give the same rows (the ring's first counters were used by the calls above: not cleared, the
    # kernel would skip queries)
    from knngraph.beam.cuda import COUNTER_RING, BeamPlan

    plans = [v for v in index._cache.values() if isinstance(v, BeamPlan)]
    assert plans
    for plan in plans:
        plan._next_counter = COUNTER_RING - 2
    for _ in range(4):
        d3, i3 = index.search(dq, 10, sp, device="cuda", verbose=False, out=out)
        np.testing.assert_array_equal(i3.get(), i)
    assert any(p._next_counter == 2 for p in plans)  # the plan of these calls wrapped
    with pytest.raises(ValueError, match=r"out\[0\] \(distances\) must have shape"):
        index.search(dq, 10, sp, device="cuda", verbose=False, out=(cp.empty((2, 10), cp.float32), out[1]))
    # the fast searcher takes filters (tests/beam/test_filter_gpu.py); one that allows every id walks as the
    # unfiltered search
    st = {}
    _, ia = index.search(dq, 10, song.SearchParams(queue_size=64, algo="beam", filtered_path="graph"), device="cuda",
                         verbose=False, filter=np.ones(len(sample.base), bool), stats=st)
    assert st["algo"] == "beam" and st["filtered_path"] == "graph"
    np.testing.assert_array_equal(ia.get(), i)


@pytest.mark.parametrize("width", [2, 4, 8])
def test_block_per_query_kernel_matches_reference(width, sample):
    g = knngraph.optimize_graph(knngraph.knn_graph(sample.base, 64, device="cuda", verbose=False), sample.base,
                                graph_degree=32, device="cuda")
    index = song.from_graph(g, sample.base, device="cuda")
    queries = sample.queries[:40]
    d, i = index.search(queries, 10, song.SearchParams(queue_size=48, search_width=width), device="cuda",
                        verbose=False)
    gi = g.to_host().indices
    for j in range(0, 40, 7):
        rd, ri, _, _ = reference_walk(gi, sample.base, queries[j], distance_kind("sqeuclidean"), index.entry_points,
                                      10, 48, width=width)
        np.testing.assert_array_equal(i[j], ri)
        np.testing.assert_array_equal(d[j], rd.astype(np.float32))


def test_offset_device_views_fall_back_to_element_loads(rng):
    # float32 vectors whose device address is 4 mod 8 (a view one element into a buffer) cannot be read
    # as 8-byte words: the search reads them element by element (no misaligned-address fault) and returns
    # the aligned copy's rows (up to the order of float additions: near-ties may swap)
    import cupy as cp

    n, d = 600, 16
    x = rng.standard_normal((n, d)).astype(np.float32)
    buf = cp.zeros(1 + n * d, cp.float32)
    buf[1:] = cp.asarray(x).ravel()
    view = buf[1:].reshape(n, d)
    assert view.data.ptr % 8 == 4 and view.flags.c_contiguous
    g = knngraph.optimize_graph(knngraph.knn_graph(x, 24, device="cpu", verbose=False), x, 16, device="cpu")
    sp = song.SearchParams(queue_size=32)
    d_view, i_view = song.from_graph(g, view, device="cuda").search(cp.asarray(x[:50]), 10, sp, device="cuda",
                                                                      verbose=False)
    d_copy, i_copy = song.from_graph(g, cp.asarray(x), device="cuda").search(cp.asarray(x[:50]), 10, sp,
                                                                               device="cuda", verbose=False)
    assert (i_view.get() == i_copy.get()).mean() >= 0.99
    assert (i_view.get()[:, 0] == np.arange(50)).all()


def test_cpu_beam_returns_the_gpu_beams_ids(sample, nnd_index):
    """On uint8 data every distance is an exact integer on both sides, so the CPU beam searcher and the
    GPU's (beam/_kernels.py) walk identically: same ids, distances and work per query."""
    pytest.importorskip("cupy")
    for queue in (16, 64):
        sp = song.SearchParams(queue_size=queue, algo="beam", search_width=1)  # the CPU expands one at a time
        sc, sg = {}, {}
        dc, ic = song.search(nnd_index, sample.queries, 10, sp, device="cpu", verbose=False, stats=sc)
        dg, ig = song.search(nnd_index, sample.queries, 10, sp, device="cuda", verbose=False, stats=sg)
        np.testing.assert_array_equal(ic, ig)
        np.testing.assert_array_equal(dc, dg)
        assert sc["expansions_per_query"] == sg["expansions_per_query"]


def test_view_on_the_gpu_is_the_cpu_view(sample, nnd_index):
    """beam.search over a plain GraphView on the GPU (host and device queries) walks as on the CPU at
    width 1 (uint8: exact integer distances), fills ``out`` in place and reports its width."""
    import cupy as cp

    from knngraph import beam

    view = beam.GraphView(nnd_index.graph.indices, sample.base, nnd_index.entry_points, "sqeuclidean")
    dc, ic = beam.search(view, sample.queries, 10, 32, device="cpu")
    st = {}
    out = (cp.empty((len(sample.queries), 10), cp.float32), cp.empty((len(sample.queries), 10), cp.int32))
    dg, ig = beam.search(view, cp.asarray(sample.queries), 10, 32, device="cuda", search_width=1, stats=st, out=out)
    assert dg is out[0] and ig is out[1] and st["search_width"] == 1 and st["algo"] == "beam"
    np.testing.assert_array_equal(ig.get(), ic)
    np.testing.assert_array_equal(dg.get(), dc)
    dh, ih = beam.search(view, sample.queries, 10, 32, device="cuda", search_width=1)
    np.testing.assert_array_equal(ih.get(), ic)


def test_numba_launch_path_matches_prepared_launch(sample, nnd_index, monkeypatch):
    """KNNGRAPH_RAW_LAUNCH=0 launches the fast kernel through numba instead of a prepared launch: same
    rows and work per query, with and without GGNN's slack stop."""
    from knngraph import beam
    from knngraph.beam.cuda import launch_environment, reread_environment

    view = beam.GraphView(nnd_index.graph.indices, sample.base, nnd_index.entry_points, "sqeuclidean")
    runs = []
    try:
        for raw in ("1", "0"):
            monkeypatch.setenv("KNNGRAPH_RAW_LAUNCH", raw)
            reread_environment()  # the searcher reads the environment once, until told to read it again
            for slack in (None, (10, 0.5, 5000.0, 100)):
                st = {}
                d, i = beam.search(view, sample.queries[:300], 10, 48, device="cuda", search_width=2, stats=st,
                                   slack=slack)
                runs.append((d.get(), i.get(), st["distances_per_query"], st["expansions_per_query"]))
            assert launch_environment()[0] is (raw == "1")
    finally:
        monkeypatch.undo()
        reread_environment()
    for a, b in zip(runs[:2], runs[2:]):
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0], b[0])
        assert a[2:] == b[2:]
    assert runs[1][3] < runs[0][3]  # the slack stop is real


def test_many_host_queries_go_in_chunks_with_the_rows_of_one_piece(sample, nnd_index, monkeypatch):
    """Host queries of a search whose results go back to the host are searched in chunks on two streams
    from ``HOST_CHUNKS_MIN_ROWS`` rows on (lowered here: 12,000 queries in three chunks); each row is what
    the search in one piece gives (the same queries on the device), with a filter too; NaN in a host
    query is still refused, and fewer queries go in one piece."""
    import cupy as cp

    from knngraph import _gpu_queue, beam

    monkeypatch.setattr(beam._search, "HOST_CHUNKS_MIN_ROWS", 8000)
    chunked = []
    real = _gpu_queue.search_host_queries_in_chunks
    monkeypatch.setattr(_gpu_queue, "search_host_queries_in_chunks",
                        lambda *a, **kw: chunked.append(a[1].shape[0]) or real(*a, **kw))
    sp = song.SearchParams(queue_size=48)
    queries = np.ascontiguousarray(np.tile(sample.queries, (12000 // len(sample.queries) + 1, 1))[:12000])
    mask = np.random.default_rng(3).random(sample.base.shape[0]) < 0.6
    for filt in (None, mask):
        d, i = song.search(nnd_index, queries, 10, sp, device="cuda", verbose=False, filter=filt)
        assert chunked and chunked[-1] == 12000, "the search must have gone in chunks"
        assert isinstance(d, np.ndarray) and isinstance(i, np.ndarray) and i.shape == (12000, 10)
        d1, i1 = song.search(nnd_index, cp.asarray(queries), 10, sp, device="cuda", verbose=False, filter=filt)
        np.testing.assert_array_equal(i, i1.get())
        np.testing.assert_array_equal(d, d1.get())
        if filt is not None:
            assert mask[i[i >= 0]].all()
    calls = len(chunked)
    bad = queries.astype(np.float32)
    bad[9000, 3] = np.nan
    with pytest.raises(ValueError, match="queries row 9000"):
        song.search(nnd_index, bad, 10, sp, device="cuda", verbose=False)
    small = song.search(nnd_index, queries[:7999], 10, sp, device="cuda", verbose=False)
    assert len(chunked) == calls and small[1].shape == (7999, 10)
