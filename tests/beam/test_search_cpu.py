"""The fast searcher on the CPU (:mod:`knngraph.beam.cpu`, :func:`knngraph.beam.search`): the kernel against
the plain-Python reference walk, the public entry over a plain :class:`~knngraph.beam.GraphView` against
brute force and against ``song.search`` (which runs it), the visited stamps kept across calls, float16
vectors read as their bits, and bad arguments."""

import numpy as np
import pytest

import knngraph
from knngraph import beam, metrics, song
from knngraph.beam.cpu import search_beam
from knngraph.primitives.distances import DIST_IP, DIST_L2SQ

from ..song.conftest import complete_graph, random_vectors
from .test_search_sim import reference_walk


def _brute(base, queries, k, metric):
    full = metrics.pairwise_distances(queries, base, metric)
    order = np.array([np.lexsort((np.arange(base.shape[0]), row))[:k] for row in full])
    return np.take_along_axis(full, order, 1), order


@pytest.mark.parametrize("kind", [DIST_L2SQ, DIST_IP])
def test_beam_kernel_equals_reference_walk(kind, rng):
    """Ids, distances, distance computations and expansions equal the plain-Python walk exactly (small
    integers: every distance is exact), including rows with -1 and repeated entry points."""
    x = rng.integers(0, 8, (300, 16)).astype(np.uint8)
    q = rng.integers(0, 8, (12, 16)).astype(np.uint8)
    ids = knngraph.optimize_graph(knngraph.knn_graph(x, 12, device="cpu", verbose=False), x, graph_degree=8,
                                  fill=False, device="cpu").indices
    assert (ids < 0).any()
    entries = np.array([0, 7, 7, 100], np.int32)
    for queue in (4, 11, 40):
        d, i, nd, ne = search_beam(ids, x, q, np.zeros(1, np.float32), kind, entries, 4, queue)
        for j in range(len(q)):
            rd, ri, rn, rexp = reference_walk(ids, x, q[j], kind, entries, 4, queue)
            np.testing.assert_array_equal(i[j], ri)
            np.testing.assert_array_equal(d[j], rd.astype(np.float32))
            assert (nd[j], ne[j]) == (rn, rexp)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
@pytest.mark.parametrize("metric", metrics.METRICS)
def test_view_of_complete_graph_is_exact(dtype, metric, rng):
    """beam.search over a plain view (no index): on a complete graph every distance is computed, so the
    reported distances of every metric and the ids are brute force's."""
    base = random_vectors(rng, 40, 12, dtype)
    queries = random_vectors(rng, 6, 12, dtype)
    view = beam.GraphView(complete_graph(40).indices, base, np.array([3]), metric)
    st = {}
    d, i = beam.search(view, queries, 5, 8, device="cpu", stats=st)
    assert d.dtype == np.float32 and i.dtype == np.int32 and i.shape == (6, 5)
    ref_d, ref_i = _brute(base, queries, 5, metric)
    got = np.take_along_axis(metrics.pairwise_distances(queries, base, metric), i.astype(np.int64), 1)
    np.testing.assert_allclose(got, ref_d, rtol=1e-4, atol=1e-3 * max(1.0, float(np.abs(ref_d).max())))
    np.testing.assert_allclose(d, ref_d, rtol=1e-4, atol=1e-3 * max(1.0, float(np.abs(ref_d).max())))
    assert st["algo"] == "beam" and st["distances_per_query"] == 40 and st["seconds"] >= 0
    assert 1 <= st["expansions_per_query"] <= 40 and "search_width" not in st  # each vertex expanded at most once


def test_view_search_is_song_search_and_fills_out(sample, nnd_index):
    """song.search (algo 'auto' on the CPU) is beam.search over the index's view: same ids and distances;
    ``out`` is filled and returned; ``n_threads`` changes nothing."""
    q = sample.queries[:50]
    ref = song.search(nnd_index, q, 10, song.SearchParams(queue_size=24), device="cpu", verbose=False)
    view = beam.GraphView(nnd_index.graph.indices, sample.base, nnd_index.entry_points, "sqeuclidean")
    out = (np.empty((50, 10), np.float32), np.empty((50, 10), np.int32))
    d, i = beam.search(view, q, 10, 24, device="cpu", out=out, n_threads=1)
    assert d is out[0] and i is out[1]
    np.testing.assert_array_equal(i, ref.indices)
    np.testing.assert_array_equal(d, ref.distances)


def test_view_pads_with_minus_one_and_inf(rng):
    base = rng.standard_normal((10, 3)).astype(np.float32)
    ids = np.full((10, 2), -1, np.int32)
    ids[0] = [1, 2]  # from entry 0 only 0, 1, 2 are reachable
    d, i = beam.search(beam.GraphView(ids, base, [0], "euclidean"), base[:1], 5, 5, device="cpu")
    assert sorted(i[0, :3].tolist()) == [0, 1, 2] and i[0, 3:].tolist() == [-1, -1] and np.isinf(d[0, 3:]).all()
    assert d[0, 0] == 0.0 and i[0, 0] == 0


def test_same_seed_same_result_and_stamps_wrap(sample, nnd_index):
    """Two indexes from the same graph and seed answer identically; the visited stamps kept across calls
    (cleared when their generation counter wraps) never change a result."""
    g = nnd_index.graph
    sp = song.SearchParams(queue_size=16)
    q = sample.queries[:64]
    a = song.search(song.from_graph(g, sample.base, song.IndexParams(seed=3), device="cpu"), q, 10, sp,
                    device="cpu", verbose=False)
    other = song.from_graph(g, sample.base, song.IndexParams(seed=3), device="cpu")
    b = song.search(other, q, 10, sp, device="cpu", verbose=False)
    np.testing.assert_array_equal(a.indices, b.indices)
    with other._beam_view().borrow_scratch() as sc:  # one caller at a time: the next search gets it back
        sc.gens[:] = 65534  # the next queries cross the wrap-around
    c = song.search(other, q, 10, sp, device="cpu", verbose=False, n_threads=2)
    np.testing.assert_array_equal(a.indices, c.indices)
    np.testing.assert_array_equal(a.distances, c.distances)
    assert (sc.gens <= 65535).all()


@pytest.mark.parametrize("metric", metrics.METRICS)
@pytest.mark.filterwarnings("ignore::knngraph.graphops.UnreachableVerticesWarning")  # a raw k-NN graph's islands
def test_float16_index_searches_its_bits_as_the_float32_copy(metric, rng):
    """A float16 index's CPU beam search reads the float16 bit patterns (half the bytes); it walks and
    answers as the float32 copy of the same vectors does."""
    base = (rng.standard_normal((2000, 48)) * np.where(rng.random((2000, 48)) < 0.1, 1e-6, 1.0)).astype(np.float16)
    queries = rng.standard_normal((40, 48)).astype(np.float16)
    g = knngraph.knn_graph(base, 16, metric=metric, device="cpu", verbose=False)
    half = song.from_graph(g, base, device="cpu", verbose=False)
    single = song.from_graph(g, base.astype(np.float32), device="cpu", verbose=False)
    sp = song.SearchParams(queue_size=32)
    stats = {}
    dh, ih = half.search(queries, 10, sp, device="cpu", verbose=False, stats=stats)
    assert stats["algo"] == "beam" and half._cache["cpu-half-bits"].dtype == np.uint16
    ds, is_ = single.search(queries.astype(np.float32), 10, sp, device="cpu", verbose=False)
    np.testing.assert_array_equal(ih, is_)
    np.testing.assert_allclose(dh, ds, rtol=1e-5, atol=1e-5)


def test_bad_views_and_arguments(rng):
    x = rng.standard_normal((30, 4)).astype(np.float32)
    ids = complete_graph(30).indices
    view = beam.GraphView(ids, x, [0, 5], "sqeuclidean")
    q = x[:2]
    with pytest.raises(TypeError, match="view must be a knngraph.beam.GraphView"):
        beam.search(song.from_graph(complete_graph(30), x, device="cpu"), q, 3, 8, device="cpu")
    with pytest.raises(ValueError, match="k=9 is larger than queue_size=8"):
        beam.search(view, q, 9, 8, device="cpu")
    with pytest.raises(ValueError, match=r"queue_size must be in the range \[1, 1024\]"):
        beam.search(view, q, 3, 2000, device="cpu")
    with pytest.raises(ValueError, match=r"search_width must be in the range \[0, 8\]"):
        beam.search(view, q, 3, 8, device="cpu", search_width=9)
    with pytest.raises(ValueError, match="queries must be a 2-D array of 4-dimensional rows"):
        beam.search(view, q[:, :3], 3, 8, device="cpu")
    with pytest.raises(ValueError, match="slack must be None or"):
        beam.search(view, q, 3, 8, device="cpu", slack=(10, 0.5))
    with pytest.raises(ValueError, match=r"out\[1\] \(indices\) must have shape \(2, 3\)"):
        beam.search(view, q, 3, 8, device="cpu", out=(np.empty((2, 3), np.float32), np.empty((2, 4), np.int32)))
    with pytest.raises(ValueError, match="n_threads must be a positive integer"):
        beam.search(view, q, 3, 8, device="cpu", n_threads=0)
    bad = q.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="queries row 1 contains NaN"):
        beam.search(view, bad, 3, 8, device="cpu")
    with pytest.raises(TypeError, match="graph_ids must hold int32 ids"):
        beam.GraphView(ids.astype(np.int64), x, [0], "sqeuclidean")
    with pytest.raises(ValueError, match=r"graph_ids must be a 2-D array with one row per vector \(30\)"):
        beam.GraphView(ids[:20], x, [0], "sqeuclidean")
    with pytest.raises(ValueError, match=r"entry_points must be ids in \[0, 30\)"):
        beam.GraphView(ids, x, [0, 30], "sqeuclidean")
    with pytest.raises(ValueError, match="entry_points must be a non-empty 1-D array"):
        beam.GraphView(ids, x, [], "sqeuclidean")
    with pytest.raises(ValueError, match="manhattan"):
        beam.GraphView(ids, x, [0], "manhattan")


@pytest.mark.parametrize("bad", [dict(k=9), dict(queue_size=2000, k=3), dict(search_width=9),
                                 dict(max_registers=256), dict(queries_dim=3), dict(slack=(10, 0.5))])
def test_search_checked_refuses_what_would_break_the_kernels_bounds(rng, bad):
    """beam.search_checked skips beam.search's checks and messages (its callers checked the arguments) but
    not the ranges and shapes the kernels' bounds rest on: one ValueError pointing to beam.search."""
    from knngraph._device import Device

    x = rng.standard_normal((30, 4)).astype(np.float32)
    view = beam.GraphView(complete_graph(30).indices, x, [0, 5], "sqeuclidean")
    args = dict(k=3, queue_size=8, search_width=0, max_registers=0, slack=None, queries_dim=4) | bad
    q = x[:2, :args.pop("queries_dim")]
    with pytest.raises(ValueError, match="search_checked takes arguments already checked .* call beam.search"):
        beam.search_checked(view, q, args.pop("k"), args.pop("queue_size"), Device("cpu"), **args)
    d, i = beam.search_checked(view, x[:2], 3, 8, Device("cpu"))
    np.testing.assert_array_equal(i, beam.search(view, x[:2], 3, 8, device="cpu")[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("metric", metrics.METRICS)
def test_int8_walk_reranks_to_the_exact_answer(dtype, metric, rng):
    """The CPU walk over int8 codes (``cpu_walk='auto'`` picks it for float vectors of 128+ dimensions)
    keeps its whole list and orders it by exact distances: on a complete graph with a list longer than the
    graph every vertex is in it, so ids and distances are brute force's, as the exact walk's are."""
    base = random_vectors(rng, 60, beam.INT8_WALK_MIN_DIM, dtype)
    queries = random_vectors(rng, 7, beam.INT8_WALK_MIN_DIM, dtype)
    view = beam.GraphView(complete_graph(60).indices, base, np.array([3]), metric)
    st = {}
    d, i = beam.search(view, queries, 5, 64, device="cpu", stats=st)
    assert st["cpu_walk"] == "int8"
    de, ie = beam.search(view, queries, 5, 64, device="cpu", cpu_walk="exact")
    np.testing.assert_array_equal(i, ie)
    np.testing.assert_array_equal(d, de)  # the same distance function on the same rows
    bd, bi = _brute(base.astype(np.float64), queries.astype(np.float64), 5, metric)
    np.testing.assert_array_equal(i, bi)
    np.testing.assert_allclose(d, bd, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine", "inner_product"])
def test_int8_walk_reaches_the_exact_walks_recall(metric, rng):
    """On a real search graph (fewer vertices in a list than in the graph) the walk over int8 codes finds
    what the exact walk finds: recall@10 against brute force within 0.02 of it at each queue size."""
    centres = rng.standard_normal((20, 128)).astype(np.float32) * 3
    base = (centres[rng.integers(0, 20, 2000)] + rng.standard_normal((2000, 128))).astype(np.float32)
    queries = (centres[rng.integers(0, 20, 100)] + rng.standard_normal((100, 128))).astype(np.float32)
    g = knngraph.optimize_graph(knngraph.knn_graph(base, 24, metric=metric, device="cpu", verbose=False), base,
                                graph_degree=16, device="cpu")
    index = song.from_graph(g, base, device="cpu")
    truth = knngraph.knn(base, queries, 10, metric=metric, device="cpu")[1]
    for queue in (16, 48):
        got = {walk: song.search(index, queries, 10, song.SearchParams(queue_size=queue, cpu_walk=walk),
                                 device="cpu", verbose=False)[1] for walk in ("int8", "exact")}
        rec = {walk: np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth)]) for walk, ids in got.items()}
        assert rec["int8"] >= rec["exact"] - 0.02, (queue, rec)
        assert rec["exact"] > 0.8


def test_int8_codes_use_one_scale_and_keep_the_rows_direction(rng):
    x = (rng.standard_normal((500, 130)) * rng.uniform(0.1, 5, 130) + 3).astype(np.float32)
    for metric in ("sqeuclidean", "cosine"):
        codes, inv_c, shift, scale = beam.int8_codes(x, metric, block_rows=64)
        assert codes.dtype == np.int8 and codes.shape == x.shape and np.abs(codes).max() == 127
        if metric == "cosine":
            assert not shift.any() and inv_c.shape == (500,)
            xn = x / np.linalg.norm(x, axis=1, keepdims=True)
            cos = (codes * inv_c[:, None] * xn).sum(axis=1)  # each code row points where its vector does
            assert cos.min() > 0.999
        else:
            np.testing.assert_allclose(shift, x.mean(axis=0), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(codes / scale + shift, x, atol=0.51 / scale)


def test_cpu_walk_is_checked(rng):
    x = rng.standard_normal((30, 4)).astype(np.float32)
    view = beam.GraphView(complete_graph(30).indices, x, [0], "sqeuclidean")
    with pytest.raises(ValueError, match="cpu_walk must be one of 'auto', 'int8', 'exact', got 'fast'"):
        beam.search(view, x[:2], 3, 8, device="cpu", cpu_walk="fast")
    u8 = beam.GraphView(complete_graph(30).indices, (x * 10 + 100).astype(np.uint8), [0], "sqeuclidean")
    with pytest.raises(ValueError, match=r"cpu_walk='int8' needs float16 or float32 vectors .*vectors uint8"):
        beam.search(u8, x[:2], 3, 8, device="cpu", cpu_walk="int8")
    with pytest.raises(ValueError, match=r"cpu_walk='int8' needs .*filter on"):
        beam.search(view, x[:2], 3, 8, device="cpu", cpu_walk="int8", filter=np.arange(30) % 2 == 0)
    with pytest.raises(ValueError, match="cpu_walk"):
        song.SearchParams(cpu_walk="fast")
    index = song.from_graph(complete_graph(30), x, device="cpu")
    with pytest.raises(ValueError, match="cpu_walk='int8' applies to unfiltered searches only"):
        song.search(index, x[:2], 3, song.SearchParams(queue_size=8, cpu_walk="int8"), device="cpu",
                    filter=np.arange(30) % 2 == 0)
    # small float vectors walk exactly under 'auto'; 'int8' may still be asked for
    st = {}
    beam.search(view, x[:2], 3, 8, device="cpu", stats=st)
    assert st["cpu_walk"] == "exact"
    beam.search(view, x[:2], 3, 8, device="cpu", stats=st, cpu_walk="int8")
    assert st["cpu_walk"] == "int8"


def test_auto_walks_the_vectors_where_one_dimension_takes_the_codes_range(rng):
    """One dimension 100x the others' scale leaves the rest a few code steps: the coding error
    (beam.int8_plan) is far above beam.INT8_WALK_MAX_ERROR, so 'auto' walks the vectors there."""
    base = rng.standard_normal((400, 256)).astype(np.float32)
    view = beam.GraphView(complete_graph(400).indices[:, :16], base, [0], "sqeuclidean")
    st = {}
    beam.search(view, base[:3], 3, 16, device="cpu", stats=st)
    assert st["cpu_walk"] == "int8" and view.int8_plan()[2] < beam.INT8_WALK_MAX_ERROR / 2
    skewed = base.copy()
    skewed[:, 7] *= 100
    view = beam.GraphView(complete_graph(400).indices[:, :16], skewed, [0], "sqeuclidean")
    beam.search(view, skewed[:3], 3, 16, device="cpu", stats=st)
    assert st["cpu_walk"] == "exact" and view.int8_plan()[2] > 2 * beam.INT8_WALK_MAX_ERROR


def test_int8_walk_in_blocks_fills_out_and_honours_exact_with_an_all_allowing_filter(rng, monkeypatch):
    """Queries walk int8 codes in blocks (beam._search.INT8_WALK_BLOCK), each block re-ranked into its rows
    of ``out``; a filter that allows every vertex is the unfiltered search, and the ``cpu_walk`` asked of
    ``song.search`` reaches it; vectors holding NaN never take the codes under 'auto'."""
    from knngraph.beam import _search

    base = random_vectors(rng, 300, 128, np.float32)
    queries = random_vectors(rng, 25, 128, np.float32)
    g = knngraph.optimize_graph(knngraph.knn_graph(base, 16, device="cpu", verbose=False), base, graph_degree=12,
                                device="cpu")
    index = song.from_graph(g, base, device="cpu")
    sp = song.SearchParams(queue_size=24, cpu_walk="int8")
    whole = song.search(index, queries, 5, sp, device="cpu", verbose=False)
    monkeypatch.setattr(_search, "INT8_WALK_BLOCK", 4)
    out = (np.full((25, 5), -7, np.float32), np.full((25, 5), -7, np.int32))
    d, i = song.search(index, queries, 5, sp, device="cpu", verbose=False, out=out)
    assert d is out[0] and i is out[1]
    np.testing.assert_array_equal(i, whole[1])
    np.testing.assert_array_equal(d, whole[0])
    st = {}
    everyone = np.ones(300, bool)
    song.search(index, queries, 5, song.SearchParams(queue_size=24, cpu_walk="exact", filtered_path="graph"),
                device="cpu", verbose=False, filter=everyone, stats=st)
    assert st["cpu_walk"] == "exact"
    song.search(index, queries, 5, sp, device="cpu", verbose=False, filter=everyone, stats=st)
    assert st["cpu_walk"] == "int8"
    bad = base.copy()
    bad[3, 5] = np.nan
    assert _search.int8_plan(bad, "sqeuclidean")[2] == np.inf
    assert _search.int8_plan(bad, "cosine")[2] == np.inf
