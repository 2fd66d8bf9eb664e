"""knngraph.distributed with workers on the GPU (marker ``gpu``; run with KNNGRAPH_GPU_TESTS=1 on a GPU
machine: the test cluster's 2 worker processes then share its GPU)."""

import numpy as np
import pytest

pytest.importorskip("distributed")  # the dask extra
import knngraph
from knngraph import song
from knngraph import distributed as kd
from knngraph.evaluate import recall_at_k
from knngraph.graphops import merge_topk

pytestmark = pytest.mark.gpu

SONG = song.IndexParams(graph_degree=16, intermediate_graph_degree=32, seed=3)
SONG_SEARCH = song.SearchParams(queue_size=32)


def test_gpu_shards_equal_the_same_indexes_in_process_and_cupy_queries(client, sift):
    import cupy as cp

    x, q = sift
    index = kd.build(SONG, x, client=client, shards=3, device="cuda").wait()
    d, i = kd.search(index, cp.asarray(q), 10, SONG_SEARCH, device="cuda", batch_size=30)
    assert isinstance(i, cp.ndarray) and isinstance(d, cp.ndarray)
    shards = client.gather(index.futures)  # the very indexes the workers built on their GPU
    parts = [s.search(q, 10, SONG_SEARCH, device="cuda") for s in shards]
    md, mi = merge_topk([cp.asnumpy(p[0]) for p in parts],
                        [cp.asnumpy(p[1]) + sh.offset for p, sh in zip(parts, index.shards)], 10)
    np.testing.assert_array_equal(cp.asnumpy(i), mi)
    np.testing.assert_allclose(cp.asnumpy(d), md, rtol=1e-5, atol=1e-3)
    exact = knngraph.knn(x, q, 10, device="cpu")
    assert recall_at_k(cp.asnumpy(i), exact.indices, 10) >= 0.95


def test_gpu_distributed_graph(client, sift):
    x, _ = sift
    d, i = kd.knn_graph(x, 16, client=client, piece_rows=1000, device="cuda")
    i, d = client.compute([i, d], sync=True)
    truth = knngraph.knn_graph(x, 16, device="cpu")
    assert recall_at_k(i, truth.indices, 16, distances=d, true_distances=truth.distances) >= 0.9
