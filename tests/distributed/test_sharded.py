"""Sharded build and search on a LocalCluster of 2 CPU worker processes (tests/distributed/conftest.py):
results against exact k-NN and against in-process indexes of the same shards, sources (NumPy, Dask
arrays, files), save/load, faults (a killed worker, a shard that cannot be rebuilt) and bad input."""

import os
import signal
import threading

import numpy as np
import pytest

pytest.importorskip("distributed")  # the dask extra
import knngraph
from knngraph import bruteforce, nndescent, song
from knngraph import distributed as kd
from knngraph import io as kio
from knngraph.evaluate import recall_at_k
from knngraph.graphops import merge_topk

da = pytest.importorskip("dask.array")

SONG = song.IndexParams(graph_degree=16, intermediate_graph_degree=32, seed=3)
SONG_SEARCH = song.SearchParams(queue_size=32)


def _files(tmp_path, x, cuts, ext=".fbin"):
    paths, lo = [], 0
    for j, hi in enumerate(list(cuts) + [len(x)]):
        p = tmp_path / f"part{j}{ext}"
        kio.write(p, x[lo:hi])
        paths.append(str(p))
        lo = hi
    return paths


def test_sharded_exact_equals_exact_knn(client, rng):
    x = rng.standard_normal((1000, 12)).astype(np.float32)
    q = rng.standard_normal((150, 12)).astype(np.float32)
    ed, ei = knngraph.knn(x, q, 10, device="cpu")  # first: compiles (or loads) the kernels the workers load
    index = kd.build(bruteforce.IndexParams(), x, client=client, shards=3, device="cpu")
    assert [s.rows for s in index.shards] == [334, 333, 333] and len(index) == 1000
    d, i = kd.search(index, q, 10, batch_size=64, device="cpu")  # 3 batches stream
    np.testing.assert_array_equal(i, ei)
    np.testing.assert_allclose(d, ed, rtol=1e-5, atol=1e-5)
    assert i.dtype == np.int32 and d.dtype == np.float32


def test_a_batch_is_one_direct_call_per_worker_holding_shards(client, rng, monkeypatch):
    """Each batch of host queries goes to each worker once, for all the shards it holds (merged there),
    straight to it: no task, so nothing per batch through the scheduler. Dask array queries (chunks the
    workers read) go as one task per worker and batch."""
    from distributed import get_task_stream

    x = rng.standard_normal((900, 8)).astype(np.float32)
    q = rng.standard_normal((100, 8)).astype(np.float32)
    index = kd.build(bruteforce.IndexParams(), x, client=client, shards=6, device="cpu").wait()
    holders = client.who_has(index.futures)
    workers = {w for ws in holders.values() for w in ws}
    calls = _spy(monkeypatch, "_call")
    with get_task_stream(client) as stream:
        d, i = kd.search(index, q, 5, batch_size=25, device="cpu")  # 4 batches
    assert not [t for t in stream.data if "knngraph-search" in str(t["key"])]
    assert sorted(b for b, _ in calls) == sorted(list(range(4)) * len(workers))
    for _, group in calls:  # a call carries every shard its worker holds
        (where,) = group.workers
        assert {f.key for _, f in group.shards} == {key for key, ws in holders.items() if where in ws}
    expected = knngraph.knn(x, q, 5, device="cpu")
    np.testing.assert_array_equal(i, expected.indices)
    with get_task_stream(client) as stream:
        d, i = kd.search(index, da.from_array(q, chunks=(25, 8)), 5, batch_size=25, device="cpu")
    searches = {t["key"] for t in stream.data if "knngraph-search" in str(t["key"])}
    assert len(searches) == 4 * len(workers)
    np.testing.assert_array_equal(i, expected.indices)


def _spy(monkeypatch, name):
    """Record (batch, group) of every call of knngraph.distributed._index.<name> (_call: a batch sent
    straight to a worker; _submit: a batch sent as a task)."""
    from knngraph.distributed import _index

    seen, original = [], getattr(_index, name)

    def spy(index, group, b, *args):
        seen.append((b, group))
        return original(index, group, b, *args)

    monkeypatch.setattr(_index, name, spy)
    return seen


def test_sharded_song_equals_single_indexes_on_same_shards(client, sift):
    x, q = sift
    # the in-process indexes first: their kernels, compiled here, load from numba's cache in the workers
    parts_d, parts_i = [], []
    for lo, hi in ((0, 1200), (1200, 2400), (2400, 3000)):
        sd, si = song.search(song.build(SONG, x[lo:hi], device="cpu"), q, 10, SONG_SEARCH, device="cpu")
        parts_d.append(sd)
        parts_i.append(si + lo)
    md, mi = merge_topk(parts_d, parts_i, 10)
    xd = da.from_array(x, chunks=(1200, 128))  # shards: the chunks (1200, 1200, 600 rows)
    index = kd.build(SONG, xd, client=client, device="cpu")
    assert [s.offset for s in index.shards] == [0, 1200, 2400]
    d, i = kd.search(index, q, 10, SONG_SEARCH, batch_size=40, device="cpu")
    np.testing.assert_array_equal(i, mi)
    np.testing.assert_array_equal(d, md)
    exact = knngraph.knn(x, q, 10, device="cpu")
    assert recall_at_k(i, exact.indices, 10, distances=d, true_distances=exact.distances) >= 0.95


def test_files_dask_queries_and_k_above_a_shard(client, rng, tmp_path):
    x = rng.standard_normal((300, 8)).astype(np.float32)
    q = rng.standard_normal((50, 8)).astype(np.float32)
    paths = _files(tmp_path, x, [6, 150])  # a shard of 6 rows: k=9 takes all of it
    index = kd.build(bruteforce.IndexParams(metric="cosine"), paths, client=client, device="cpu")
    assert [s.rows for s in index.shards] == [6, 144, 150] and index.shards[0].source == paths[0]
    d, i = kd.search(index, da.from_array(q, chunks=(20, 8)), 9, device="cpu")
    ed, ei = knngraph.knn(x, q, 9, metric="cosine", device="cpu")
    assert isinstance(i, np.ndarray)
    np.testing.assert_array_equal(i, ei)
    np.testing.assert_allclose(d, ed, rtol=1e-5, atol=1e-5)
    # the only way k exceeds what the shards hold together is k > n
    with pytest.raises(ValueError, match="k=301 is larger than the number of base vectors n=300"):
        kd.search(index, q, 301)


def test_save_load_round_trip(client, sift, tmp_path):
    x, q = sift
    index = kd.build(SONG, x[:1500], client=client, shards=2, device="cpu")
    before = kd.search(index, q, 5, SONG_SEARCH, device="cpu")
    kd.save(tmp_path / "idx", index)
    names = sorted(os.listdir(tmp_path / "idx"))
    assert names == ["manifest.json", "shard-00000.song", "shard-00001.song"]
    loaded = kd.load(tmp_path / "idx", client=client)
    assert loaded.algorithm == "song" and loaded.params == SONG and loaded.shape == (1500, 128)
    after = kd.search(loaded, q, 5, SONG_SEARCH, device="cpu")
    np.testing.assert_array_equal(after.indices, before.indices)
    np.testing.assert_array_equal(after.distances, before.distances)
    with pytest.raises(ValueError, match="saved with metric 'sqeuclidean', not 'cosine'"):
        kd.load(tmp_path / "idx", client=client, metric="cosine")
    os.remove(tmp_path / "idx" / "shard-00001.song")
    with pytest.raises(FileNotFoundError, match="shard 1 .*shard-00001.song.*missing"):
        kd.load(tmp_path / "idx", client=client)
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        kd.load(tmp_path, client=client)


def _holder_pid(client, future):
    client.wait_for_workers(2)
    (addr,) = client.who_has([future])[future.key]  # searches run where the shard is: one copy
    return addr, client.run(os.getpid, workers=[addr])[addr]


def test_killed_worker_is_survived(client, rng, tmp_path):
    x = rng.standard_normal((800, 10)).astype(np.float32)
    q = rng.standard_normal((400, 10)).astype(np.float32)
    index = kd.build(bruteforce.IndexParams(), _files(tmp_path, x, [400]), client=client, device="cpu").wait()
    expected = knngraph.knn(x, q, 7, device="cpu")
    # the worker holding shard 0 dies: its shard is rebuilt from its file on a worker
    _, pid = _holder_pid(client, index.futures[0])
    os.kill(pid, signal.SIGKILL)
    d, i = kd.search(index, q, 7, device="cpu")
    np.testing.assert_array_equal(i, expected.indices)
    # ... and in the middle of a search of several batches
    _, pid = _holder_pid(client, index.futures[1])
    killer = threading.Timer(0.2, os.kill, (pid, signal.SIGKILL))
    killer.start()
    d, i = kd.search(index, q, 7, batch_size=50, device="cpu")
    killer.join()
    np.testing.assert_array_equal(i, expected.indices)
    np.testing.assert_allclose(d, expected.distances, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("direct_to_workers", [None, False], ids=["direct", "through the scheduler"])
def test_worker_killed_in_a_streamed_search_resends_its_batches(client, rng, tmp_path, monkeypatch,
                                                                 direct_to_workers):
    """The worker holding shard 0 dies while batch 3 is being sent (batches 0-2 under way): every batch
    of its shards not answered yet is re-sent as a task (the shards rebuilt from their files on the
    other worker), the rest of the search too; the ids are those of exact k-NN. The same with calls the
    scheduler relays (a client set not to reach the workers)."""
    from distributed import Client

    from knngraph.distributed import _index

    x = rng.standard_normal((800, 10)).astype(np.float32)
    q = rng.standard_normal((400, 10)).astype(np.float32)
    expected = knngraph.knn(x, q, 7, device="cpu")
    with Client(client.scheduler.address, direct_to_workers=direct_to_workers, set_as_default=False) as own:
        index = kd.build(bruteforce.IndexParams(), _files(tmp_path, x, [400]), client=own, device="cpu").wait()
        _, pid = _holder_pid(own, index.futures[0])
        call, resent = _index._call, _spy(monkeypatch, "_submit")

        def killing_call(index, group, b, *args):
            if b == 3 and group.shards[0][0].index == 0:
                os.kill(pid, signal.SIGKILL)
            return call(index, group, b, *args)

        monkeypatch.setattr(_index, "_call", killing_call)
        d, i = kd.search(index, q, 7, batch_size=50, device="cpu")  # 8 batches
    np.testing.assert_array_equal(i, expected.indices)
    np.testing.assert_allclose(d, expected.distances, rtol=1e-5, atol=1e-5)
    killed = {s.index for s, _ in resent[0][1].shards}
    assert 0 in killed and all({s.index for s, _ in group.shards} == killed for _, group in resent)
    resent_batches = sorted(b for b, _ in resent)
    assert resent_batches == list(range(resent_batches[0], 8)) and resent_batches[0] <= 3


def test_a_worker_without_the_shard_answers_missing_and_the_batch_goes_as_a_task(client, rng, monkeypatch):
    """Calls sent to a live worker that does not hold the shards (moved, or rebuilt elsewhere) come back
    'missing': each such batch is re-sent as a task, and the ids are those of exact k-NN."""
    from knngraph.distributed import _index

    x = rng.standard_normal((600, 8)).astype(np.float32)
    q = rng.standard_normal((90, 8)).astype(np.float32)
    client.wait_for_workers(2)  # one may be restarting, killed by an earlier test
    index = kd.build(bruteforce.IndexParams(), x, client=client, shards=2, device="cpu").wait()
    workers, groups = set(client.scheduler_info()["workers"]), _index._groups

    def misplaced(index, direct):  # each group's calls go to a worker that does not hold its shards
        found = groups(index, direct)
        for g in found:
            g.workers = tuple(w for w in workers if w not in g.workers)
        return found

    monkeypatch.setattr(_index, "_groups", misplaced)
    resent = _spy(monkeypatch, "_submit")
    d, i = kd.search(index, q, 6, batch_size=30, device="cpu")  # 3 batches
    expected = knngraph.knn(x, q, 6, device="cpu")
    np.testing.assert_array_equal(i, expected.indices)
    n_groups = len({id(group) for _, group in resent})
    assert sorted(b for b, _ in resent) == sorted([0, 1, 2] * n_groups)


def test_search_error_on_a_worker_is_named(client, sift):
    x, q = sift
    index = kd.build(SONG, x[:1000], client=client, shards=2, device="cpu").wait()
    with pytest.raises(ValueError, match=r"shard \d \(rows .*\), query batch 0: k=10 is larger than queue_size=8"):
        kd.search(index, q, 10, song.SearchParams(queue_size=8), device="cpu")


def test_shard_that_cannot_be_rebuilt_is_named(client, rng, tmp_path):
    x = rng.standard_normal((200, 6)).astype(np.float32)
    paths = _files(tmp_path, x, [100])
    index = kd.build(bruteforce.IndexParams(), paths, client=client, device="cpu").wait()
    _, pid = _holder_pid(client, index.futures[1])
    os.remove(paths[1])
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(FileNotFoundError, match=r"shard 1 \(.*part1.fbin\)"):
        kd.search(index, x[:3], 2, device="cpu")


def test_shard_build_error_is_named(client, rng):
    x = rng.standard_normal((40, 4)).astype(np.float32)
    x[30, 1] = np.nan
    with pytest.raises(ValueError, match=r"shard 1 \(chunk 1 of the Dask array, rows 20-39\): .*NaN"):
        kd.build(bruteforce.IndexParams(), da.from_array(x, chunks=(20, 4)), client=client).wait()


def test_bad_input(client, rng, tmp_path):
    x = rng.standard_normal((60, 4)).astype(np.float32)
    kio.write(tmp_path / "a.fbin", x)
    kio.write(tmp_path / "b.fbin", rng.standard_normal((10, 5)).astype(np.float32))
    with pytest.raises(ValueError, match="different dimensions .*a.fbin: 4, .*b.fbin: 5"):
        kd.build(bruteforce.IndexParams(), [tmp_path / "a.fbin", tmp_path / "b.fbin"], client=client)
    with pytest.raises(TypeError, match="IndexParams of a searching algorithm"):
        kd.build(nndescent.IndexParams(), x, client=client)
    with pytest.raises(ValueError, match=r"shards must be in the range \[1, 60\] \(one row at least per shard\), "
                                         "got 61"):
        kd.build(bruteforce.IndexParams(), x, client=client, shards=61)
    index = kd.build(bruteforce.IndexParams(), x, client=client, shards=2)
    with pytest.raises(ValueError, match="queries have dimension 3 but the index has 4"):
        kd.search(index, x[:, :3], 2)
    with pytest.raises(ValueError, match="k must be at least 1"):
        kd.search(index, x, 0)
    with pytest.raises(TypeError, match="knngraph.bruteforce.SearchParams"):
        kd.search(index, x, 2, SONG_SEARCH)


def test_unreachable_scheduler():
    with pytest.raises(ConnectionError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"):
        kd.connect("tcp://127.0.0.1:9")
