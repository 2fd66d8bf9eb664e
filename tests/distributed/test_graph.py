"""The distributed k-NN graph (overlapping k-means pieces built on workers, lists merged by row blocks)
on a LocalCluster of 2 CPU worker processes, against the in-memory out-of-core build of the same
partition and against the exact graph of real SIFT vectors."""

import os
import signal
import threading

import numpy as np
import pytest

pytest.importorskip("distributed")  # the dask extra
import knngraph
from knngraph import Graph, nndescent
from knngraph import distributed as kd
from knngraph import io as kio
from knngraph.evaluate import recall_at_k

da = pytest.importorskip("dask.array")
K = 16


@pytest.fixture(scope="module")
def truth(sift):
    x, _ = sift
    return knngraph.knn_graph(x, K, device="cpu")


@pytest.fixture(scope="module")
def out_of_core(sift):
    """The in-memory out-of-core build (overlapping clusters) of the same vectors, with every row in its 3
    nearest clusters as the distributed graph cuts them (cluster_margin=None)."""
    x, _ = sift
    g = nndescent.build(nndescent.IndexParams(graph_degree=K, out_of_core="clusters", cluster_margin=None), x,
                        device="cpu", memory_limit="2MB").graph
    assert g.info["out_of_core"] == "clusters" and g.info["pieces"] >= 4
    return g


def test_graph_reaches_the_out_of_core_recall(client, sift, truth, out_of_core):
    x, _ = sift
    d, i = kd.knn_graph(da.from_array(x, chunks=(700, 128)), K, client=client,
                        piece_rows=out_of_core.info["max_piece_rows"], device="cpu")
    i, d = client.compute([i, d], sync=True)  # the test's client is not the default one
    assert i.shape == (3000, K) and i.dtype == np.int32 and d.dtype == np.float32
    assert not (i == np.arange(3000)[:, None]).any()  # self excluded
    ref = recall_at_k(out_of_core.indices, truth.indices, K, distances=out_of_core.distances,
                      true_distances=truth.distances)
    got = recall_at_k(i, truth.indices, K, distances=d, true_distances=truth.distances)
    assert ref >= 0.9
    assert got >= ref - 0.002
    # each row's list is sorted and holds distinct ids
    assert (np.diff(d, axis=1) >= 0).all()
    assert all(len(set(r)) == K for r in i[::97])
    # longer lists while building and merging, the first K returned
    d2, i2 = kd.knn_graph(x, K, client=client, piece_rows=out_of_core.info["max_piece_rows"], build_degree=32,
                          device="cpu")
    i2, d2 = client.compute([i2, d2], sync=True)
    assert i2.shape == (3000, K) and (np.diff(d2, axis=1) >= 0).all()
    assert recall_at_k(i2, truth.indices, K, distances=d2, true_distances=truth.distances) >= 0.95


def test_graph_written_as_knng_shards_and_a_lost_worker(client, sift, tmp_path):
    x = sift[0][:2000]
    paths = []
    for j, (lo, hi) in enumerate(((0, 700), (700, 2000))):
        paths.append(str(tmp_path / f"base{j}.u8bin"))
        kio.write(paths[-1], x[lo:hi])
    expected = kd.knn_graph(paths, K, client=client, piece_rows=700, block_rows=600, device="cpu")
    # a worker dies while the graph is written: its pieces are rebuilt elsewhere
    pid = next(iter(client.run(os.getpid).values()))
    killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    killer.start()
    folder = kd.knn_graph(paths, K, client=client, piece_rows=700, block_rows=600, out=tmp_path / "g",
                          device="cpu")
    killer.join()
    # output blocks of 600 rows across the two files: 600, 600, 600, 200
    assert sorted(os.listdir(folder)) == ["graph.json"] + [f"part-{j:05d}.knng" for j in range(4)]
    part = Graph.load(os.path.join(folder, "part-00003.knng"))
    assert part.indices.shape == (200, K) and part.info["rows"] == [1800, 2000]
    g = kd.load_graph(folder)
    e_i, e_d = client.compute([expected.indices, expected.distances], sync=True)
    np.testing.assert_array_equal(g.indices, e_i)
    np.testing.assert_array_equal(g.distances, e_d)
    truth = knngraph.knn_graph(x, K, device="cpu")
    assert recall_at_k(g.indices, truth.indices, K, distances=g.distances, true_distances=truth.distances) >= 0.9


def test_graph_bad_input(client, rng, tmp_path):
    x = rng.standard_normal((50, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="k must be smaller than the number of vectors"):
        kd.knn_graph(x, 50, client=client)
    with pytest.raises(ValueError, match="'song' does not build k-NN graphs"):
        kd.knn_graph(x, 5, client=client, method="song")
    with pytest.raises(ValueError, match="overlap must be in the range"):
        kd.knn_graph(x, 5, client=client, overlap=9)
    with pytest.raises(FileNotFoundError, match="no graph.json"):
        kd.load_graph(tmp_path)
