"""The fast searcher's filtered kernels on a real GPU (marker ``gpu``): on uint8 vectors with uint8 queries
the distances are exact integers (dp4a), so one warp per query must return the CPU twin's ids with every
filter, also through one prepared launch whose bitset changes from call to call."""

import numpy as np
import pytest

import knngraph
from knngraph import beam, ggnn, song

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def view(sample):
    g = knngraph.optimize_graph(knngraph.knn_graph(sample.base, 48, device="cuda", verbose=False), sample.base,
                                graph_degree=24, device="cuda").to_host()
    return beam.GraphView(g.indices, sample.base, song.from_graph(g, sample.base, device="cpu").entry_points,
                          "sqeuclidean")


@pytest.mark.parametrize("share", [0.0, 0.003, 0.1, 0.5, 0.9])
def test_gpu_returns_the_cpu_ids_with_a_filter(sample, view, share):
    import cupy as cp

    q = sample.queries[:500]
    mask = np.random.default_rng(11).random(len(sample.base)) < share
    st = {}
    dg, ig = beam.search(view, q, 10, 32, device="cuda", search_width=1, filter=mask, stats=st)
    dc, ic = beam.search(view, q, 10, 32, device="cpu", filter=mask)
    np.testing.assert_array_equal(ig.get(), ic)
    np.testing.assert_array_equal(dg.get(), dc)
    assert mask[ic[ic >= 0]].all()
    if share == 0.003:  # 60 allowed ids: a list of 1024 holds fewer than k for some queries
        assert (ic == -1).any()
    # wider steps (automatic width): allowed ids only, as near as the CPU's
    dw, iw = beam.search(view, cp.asarray(q), 10, 32, device="cuda", filter=mask)
    iw = iw.get()
    assert mask[iw[iw >= 0]].all()
    assert abs(int((iw >= 0).sum()) - int((ic >= 0).sum())) <= 0.02 * ic.size


def test_one_plan_serves_every_filter(sample, view):
    """The bitset (and the list's length) is rewritten per call like the queries: one plan per
    configuration, the CPU's ids for each filter in turn (lists of about 80: one capacity, 128)."""
    q = sample.queries[:300]
    # a view of its own: the module's view holds the plans of the tests above (other lists and widths)
    view = beam.GraphView(view.graph_ids, view.vectors, view.entry_points, view.metric)
    rng = np.random.default_rng(4)
    masks = [rng.random(len(sample.base)) < share for share in (0.4, 0.41, 0.39)]
    for mask in masks + masks[:1]:
        ig = beam.search(view, q, 10, 32, device="cuda", search_width=1, filter=mask)[1].get()
        np.testing.assert_array_equal(ig, beam.search(view, q, 10, 32, device="cpu", filter=mask)[1])
    # plan keys: (device, 'beam', list capacity, k, mode, query dtype, dim, registers, width, slack, filtered, thread)
    plans = [key for key in view.cache if isinstance(key, tuple) and key[1:2] == ("beam",) and key[10]]
    assert len(plans) == 1 and plans[0][2] == 128, plans


def test_song_and_ggnn_filtered_walks_match_the_cpu(sample):
    q = sample.queries[:400]
    mask = np.random.default_rng(2).random(len(sample.base)) < 0.3
    index = song.build(song.IndexParams(), sample.base, device="cuda", verbose=False)
    sp = song.SearchParams(queue_size=32, filtered_path="graph", search_width=1)
    st = {}
    ig = index.search(q, 10, sp, device="cuda", verbose=False, filter=mask, stats=st).indices
    ic = index.search(q, 10, sp, device="cpu", verbose=False, filter=mask).indices
    assert st["filtered_path"] == "graph" and st["algo"] == "beam"
    np.testing.assert_array_equal(ig, ic)
    g = ggnn.build(ggnn.IndexParams(graph_degree=24), sample.base, device="cuda", verbose=False)
    gp = ggnn.SearchParams(tau=0.5, filtered_path="graph", search_width=1)
    np.testing.assert_array_equal(g.search(q, 10, gp, device="cuda", verbose=False, filter=mask).indices,
                                  g.search(q, 10, gp, device="cpu", verbose=False, filter=mask).indices)


def test_deleted_vectors_on_the_gpu(sample):
    """Deletion and compaction on a GPU index: the CPU's ids, and after compaction the original ids."""
    index = song.build(song.IndexParams(), sample.base, device="cuda", verbose=False)
    gone = np.arange(0, len(sample.base), 3)
    index = song.delete(index, gone, compact_above=1.0)
    sp = song.SearchParams(queue_size=32, search_width=1, filtered_path="graph")
    ig = index.search(sample.queries[:200], 10, sp, device="cuda", verbose=False).indices
    np.testing.assert_array_equal(ig, index.search(sample.queries[:200], 10, sp, device="cpu", verbose=False).indices)
    assert not np.isin(ig, gone).any()
    small = song.compact(index, device="cuda", verbose=False)
    d, i = small.search(sample.queries[:200], 10, song.SearchParams(queue_size=64), device="cuda", verbose=False)
    live = np.setdiff1d(np.arange(len(sample.base)), gone)
    want = knngraph.knn(sample.base[live], sample.queries[:200], 10, device="cpu", verbose=False)
    hits = np.mean([len(set(a) & set(live[b])) / 10 for a, b in zip(i.tolist(), want.indices.tolist())])
    assert hits >= 0.95 and not np.isin(i, gone).any()
