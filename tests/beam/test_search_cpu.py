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
