"""Deletion (``song.delete``, ``ggnn.delete``, multi-device and Dask-sharded indexes): deleted ids are never
returned, with or without a filter; the marks survive ``save`` / ``load`` and ``extend``; a compaction
rebuilds over the live rows and keeps the users' ids, so a search that reaches every vertex answers what
brute force over the live rows answers, in the original ids."""

import numpy as np
import pytest

from knngraph import ggnn, multidevice, song

N = 300


def _brute_force(x, q, k, ids):
    """The k nearest of the rows ``ids`` (squared L2 of integer data, ties by lower id) as those ids."""
    d = ((q[:, None, :].astype(np.int64) - x[ids][None].astype(np.int64)) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(ids, d.shape), d), axis=1)[:, :k]
    return ids[order], np.take_along_axis(d, order, 1).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    return rng.integers(0, 30, (N, 8)).astype(np.uint8), rng.integers(0, 30, (20, 8)).astype(np.uint8)


def _build(algo, x):
    if algo == "song":
        return song.build(song.IndexParams(graph_degree=12, intermediate_graph_degree=24), x, device="cpu",
                          verbose=False)
    return ggnn.build(ggnn.IndexParams(graph_degree=12, segment_size=16), x, device="cpu", verbose=False)


def _every_vertex(algo):
    """Search params whose walk reaches every vertex of these small graphs (an exact answer)."""
    if algo == "song":
        return song.SearchParams(queue_size=512, filtered_path="graph")
    return ggnn.SearchParams(queue_size=512, tau=64.0, max_iterations=100_000, filtered_path="graph")


MODULES = {"song": song, "ggnn": ggnn}


@pytest.mark.parametrize("algo", ["song", "ggnn"])
def test_deleted_ids_are_never_returned_and_compaction_keeps_ids(data, algo):
    x, q = data
    mod = MODULES[algo]
    index = _build(algo, x)
    sp = _every_vertex(algo)
    gone = np.arange(0, N, 4)  # a quarter: no compaction at the default 0.5
    assert mod.delete(index, gone) is index and index.row_ids.n_deleted == gone.size
    live = np.setdiff1d(np.arange(N), gone)
    st = {}
    d, i = mod.search(index, q, 10, sp, device="cpu", verbose=False, stats=st)
    assert st["filtered_path"] == "graph" and st["allowed_fraction"] == live.size / N
    want_i, want_d = _brute_force(x, q, 10, live)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(d, want_d)
    # with a filter too: the filter and the deletions both hold
    mask = np.arange(N) % 3 == 0
    _, i = mod.search(index, q, 10, sp, device="cpu", verbose=False, filter=mask)
    np.testing.assert_array_equal(i, _brute_force(x, q, 10, np.flatnonzero(mask & np.isin(np.arange(N), live)))[0])
    # past half deleted (151 of 300): compacted, a new index over the live rows that answers in the original ids
    more = np.concatenate([np.arange(1, N, 4), [2]])
    small = mod.delete(index, more)
    assert small is not index and len(small) == 149 and small.row_ids.n_deleted == 0
    assert index.row_ids.n_deleted == 151  # the old index keeps its marks and stays usable
    live = np.setdiff1d(live, more)
    np.testing.assert_array_equal(small.row_ids.ids, live)
    d, i = mod.search(small, q, 10, sp, device="cpu", verbose=False)
    want_i, want_d = _brute_force(x, q, 10, live)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(d, want_d)
    np.testing.assert_array_equal(mod.search(index, q, 10, sp, device="cpu", verbose=False).indices, want_i)
    # deletes and filters on the compacted index speak the original ids
    mod.delete(small, live[:10], compact_above=1.0)
    mask = np.zeros(N, bool)
    mask[live[::2]] = True
    _, i = mod.search(small, q, 10, sp, device="cpu", verbose=False, filter=mask)
    np.testing.assert_array_equal(i, _brute_force(x, q, 10, live[10:][mask[live[10:]]])[0])
    with pytest.raises(ValueError, match="boolean mask of length 149, but the index holds 300 vectors"):
        mod.search(small, q, 10, sp, device="cpu", filter=np.ones(len(small), bool))


@pytest.mark.parametrize("algo", ["song", "ggnn"])
def test_marks_and_ids_survive_save_load_and_old_files_load(data, algo, tmp_path):
    x, q = data
    mod = MODULES[algo]
    index = _build(algo, x)
    mod.save(tmp_path / "plain.index", index)  # no deletions: the file is as before deletion existed
    assert mod.load(tmp_path / "plain.index").row_ids is None
    mod.delete(index, np.arange(0, N, 5), compact_above=1.0)
    mod.save(tmp_path / "marked.index", index)
    back = mod.load(tmp_path / "marked.index")
    np.testing.assert_array_equal(back.row_ids.deleted, index.row_ids.deleted)
    sp = _every_vertex(algo)
    np.testing.assert_array_equal(mod.search(back, q, 10, sp, device="cpu", verbose=False).indices,
                                  mod.search(index, q, 10, sp, device="cpu", verbose=False).indices)
    small = mod.compact(index, verbose=False)
    mod.save(tmp_path / "compact.index", small)
    back = mod.load(tmp_path / "compact.index")
    np.testing.assert_array_equal(back.row_ids.ids, small.row_ids.ids)
    assert back.row_ids.id_bound == N
    np.testing.assert_array_equal(mod.search(back, q, 10, sp, device="cpu", verbose=False).indices,
                                  mod.search(small, q, 10, sp, device="cpu", verbose=False).indices)


@pytest.mark.parametrize("algo", ["song", "ggnn"])
def test_extend_after_deletes_keeps_them_and_new_rows_take_the_next_ids(data, algo):
    x, q = data
    mod = MODULES[algo]
    index = _build(algo, x)
    gone = np.arange(N - 40, N)  # the largest ids: they are never given again
    small = mod.delete(index, gone, compact_above=0.1)
    assert len(small) == N - 40
    new = x[:30] + np.uint8(1)
    grown = mod.extend(small, new, device="cpu", verbose=False)
    assert grown.row_ids.id_bound == N + 30 and grown.row_ids.ids[-30:].tolist() == list(range(N, N + 30))
    sp = _every_vertex(algo)
    _, i = mod.search(grown, q, 10, sp, device="cpu", verbose=False)
    assert not np.isin(i, gone).any()
    every = np.concatenate([x, new])
    live = np.setdiff1d(np.arange(N + 30), gone)
    np.testing.assert_array_equal(i, _brute_force(every, q, 10, live)[0])
    # deletions on an index that is not compacted are kept by extend too (new rows live)
    index = _build(algo, x)
    mod.delete(index, gone, compact_above=1.0)
    grown = mod.extend(index, new, device="cpu", verbose=False)
    _, i = mod.search(grown, q, 10, sp, device="cpu", verbose=False)
    np.testing.assert_array_equal(i, _brute_force(every, q, 10, live)[0])


def test_bad_ids_and_thresholds_are_refused(data):
    x, q = data
    index = _build("song", x)
    for bad, exc, fragment in ((np.array([3, N]), ValueError, f"ids holds {N}, which is not an id of this index"),
                               (np.array([-1]), ValueError, "ids holds -1"),
                               (np.array([1.5]), TypeError, "ids must be integer ids, got dtype float64"),
                               (np.ones(N, bool), TypeError, "for a boolean mask pass np.flatnonzero(mask)"),
                               (np.zeros((2, 2), int), ValueError, "ids must be 1-D")):
        with pytest.raises(exc, match="ids") as info:
            song.delete(index, bad)
        assert fragment in str(info.value)
    for bad in (-0.1, 1.5, True, "half"):
        with pytest.raises(ValueError, match="compact_above must be a share of the rows in"):
            song.delete(index, [1], compact_above=bad)
    assert index.row_ids is None  # nothing was marked by the refused calls
    assert song.compact(index) is index  # nothing deleted: nothing to compact
    song.delete(index, [1, 1, 2], compact_above=1.0)
    song.delete(index, [2], compact_above=1.0)  # deleted already: stays deleted
    assert index.row_ids.n_deleted == 2


def test_deleting_all_but_one_searches_empty_and_does_not_compact(data):
    x, q = data
    index = _build("song", x)
    out = song.delete(index, np.arange(1, N))
    assert out is index  # a SONG index needs 2 vectors: no compaction
    d, i = song.search(index, q, 3, device="cpu", verbose=False)
    assert (i[:, 0] == 0).all() and (i[:, 1:] == -1).all() and np.isinf(d[:, 1:]).all()
    song.delete(index, [0])
    d, i = song.search(index, q, 3, device="cpu", verbose=False)
    assert (i == -1).all() and np.isinf(d).all()
    with pytest.raises(ValueError, match="cannot compact an index with 0 live vector"):
        song.compact(index)


def test_sharded_multidevice_index_deletes_in_each_part(data, tmp_path):
    x, q = data
    index = song.build(song.IndexParams(graph_degree=12, intermediate_graph_degree=24), x,
                       devices=["cpu", "cpu"], layout="sharded", verbose=False)
    sp = song.SearchParams(queue_size=512, filtered_path="graph")
    gone = np.concatenate([np.arange(0, 100), np.arange(160, 170)])  # part 0 compacts (100 of 150), part 1 not
    assert song.delete(index, gone) is index
    assert len(index.parts[0]) == 50 and index.parts[1].row_ids.n_deleted == 10
    live = np.setdiff1d(np.arange(N), gone)
    np.testing.assert_array_equal(song.search(index, q, 10, sp, verbose=False).indices, _brute_force(x, q, 10, live)[0])
    song.save(tmp_path / "md", index)
    back = song.load(tmp_path / "md")
    np.testing.assert_array_equal(song.search(back, q, 10, sp, verbose=False).indices,
                                  _brute_force(x, q, 10, live)[0])
    with pytest.raises(ValueError, match="ids holds 300"):
        multidevice.delete(index, [N])


def test_dask_sharded_index_deletes_a_task_per_shard(data, tmp_path):
    distributed = pytest.importorskip("distributed")
    from knngraph import distributed as kd

    x, q = data
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0") as client:
        index = kd.build(song.IndexParams(graph_degree=12, intermediate_graph_degree=24), x, client=client,
                         shards=3, device="cpu").wait()
        before = list(index.futures)
        gone = np.concatenate([np.arange(0, 80), np.arange(250, 260)])  # shard 0 compacts, shard 1 untouched
        assert kd.delete(index, gone) is index
        assert index.futures[1] is before[1] and index.futures[0] is not before[0]
        live = np.setdiff1d(np.arange(N), gone)
        sp = song.SearchParams(queue_size=512, filtered_path="graph")
        want = _brute_force(x, q, 10, live)[0]
        np.testing.assert_array_equal(kd.search(index, q, 10, sp, device="cpu", verbose=False).indices, want)
        kd.save(tmp_path / "sharded", index)
        back = kd.load(tmp_path / "sharded", client=client)
        np.testing.assert_array_equal(kd.search(back, q, 10, sp, device="cpu", verbose=False).indices, want)
