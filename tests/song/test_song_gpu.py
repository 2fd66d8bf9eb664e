"""SONG's kernel on a real GPU (marker ``gpu``; scripts/gpu_check.sh runs these with
KNNGRAPH_GPU_TESTS=1); the fast searcher has tests/beam/test_search_gpu.py.

sift-photos 450k comes from $KNNGRAPH_DEVICE_DATA (scripts/prepare_device_data.py). With
``algo='song'`` the GPU and CPU paths run the same algorithm; on uint8 data every distance is an exact
integer in float32, so they must return the same ids."""

import os
from pathlib import Path

import numpy as np
import pytest

import knngraph
from knngraph import metrics, song
from knngraph.evaluate import recall_at_k

from .conftest import random_vectors

pytestmark = pytest.mark.gpu

CACHE = Path(os.environ.get("KNNGRAPH_SONG_CACHE", "/tmp/knngraph-song"))


def _sift450k():
    d = os.environ.get("KNNGRAPH_DEVICE_DATA")
    if not d or not (Path(d) / "sift450k-base.u8bin").exists():
        pytest.skip("needs KNNGRAPH_DEVICE_DATA with sift450k-base.u8bin (scripts/prepare_device_data.py)")
    from knngraph import io

    base = np.ascontiguousarray(io.read(Path(d) / "sift450k-base.u8bin"))
    queries = np.ascontiguousarray(io.read(Path(d) / "sift-query.u8bin"))
    gt = np.asarray(io.read(Path(d) / "sift450k-gt32.ibin"))
    return base, queries, gt


def prepared_sift450k(base):
    """The prepared exact graph (k-NN 96 -> degree 32, the defaults) built on the GPU, cached for the
    benchmark (benchmarks/studies/song_gpu.py reads the same files)."""
    path = CACHE / "sift450k-exact96-opt32.knng"
    if path.exists():
        return knngraph.Graph.load(path)
    raw = knngraph.knn_graph(base, 96, device="cuda", verbose=False)
    g = knngraph.optimize_graph(raw, base, graph_degree=32, device="cuda", verbose=False)
    CACHE.mkdir(parents=True, exist_ok=True)
    g.save(path)
    raw.save(CACHE / "sift450k-exact96.knng")
    return g


def _true_dist(base, queries, ids):
    diff = base[ids].astype(np.float32) - queries[:, None, :].astype(np.float32)
    return (diff * diff).sum(-1)


def test_sift450k_recall_and_same_ids_as_cpu():
    base, queries, gt = _sift450k()
    g = prepared_sift450k(base)
    index = song.from_graph(g, base, song.IndexParams(), device="cuda")
    stats = {}
    d, i = index.search(queries, 10, song.SearchParams(queue_size=64, algo="song"), device="cuda", verbose=False,
                        stats=stats)
    assert isinstance(i, np.ndarray) and i.shape == (10000, 10) and i.dtype == np.int32
    gt_d = _true_dist(base, queries, gt[:, :10])
    r = recall_at_k(i, gt[:, :10], 10, distances=d, true_distances=gt_d)
    assert r >= 0.98, r  # 0.9875 on the CPU path (2,000 queries)
    d2, i2 = index.search(queries, 10, song.SearchParams(queue_size=128), device="cuda", verbose=False)
    assert recall_at_k(i2, gt[:, :10], 10, distances=d2, true_distances=gt_d) >= 0.99  # CPU path: 0.995-0.997
    np.testing.assert_array_equal(d[:100], _true_dist(base, queries[:100], i[:100]))
    cpu_stats = {}
    dc, ic = index.search(queries[:300], 10, song.SearchParams(queue_size=64, algo="song"), device="cpu",
                          verbose=False, stats=cpu_stats)
    np.testing.assert_array_equal(i[:300], ic)
    np.testing.assert_array_equal(d[:300], dc)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
@pytest.mark.parametrize("metric", metrics.METRICS)
def test_dtypes_and_metrics_match_cpu(dtype, metric, rng):
    base = random_vectors(rng, 3000, 40, dtype)
    queries = random_vectors(rng, 200, 40, dtype)
    g = knngraph.optimize_graph(knngraph.knn_graph(base, 24, metric=metric, device="cpu", verbose=False), base,
                                graph_degree=16, device="cpu")
    sp = song.SearchParams(queue_size=32, algo="song")
    dg, ig = song.search(song.from_graph(g, base, device="cuda"), queries, 10, sp, device="cuda", verbose=False)
    dc, ic = song.search(song.from_graph(g, base, device="cpu"), queries, 10, sp, device="cpu", verbose=False)
    if np.dtype(dtype).kind in "iu" and metric in ("sqeuclidean", "inner_product"):
        np.testing.assert_array_equal(ig, ic)  # exact integer arithmetic on both paths
        np.testing.assert_array_equal(dg, dc)
    else:  # float rounding may order near-ties differently
        assert recall_at_k(ig, ic, 10) >= 0.97
        np.testing.assert_allclose(dg[:, 0], dc[:, 0], rtol=1e-3, atol=1e-3)


def test_bloom_hashing_batches_and_device_arrays(sample, rng):
    import cupy as cp

    raw = knngraph.knn_graph(sample.base, 64, device="cuda", verbose=False)
    g = knngraph.optimize_graph(raw, sample.base, graph_degree=32, device="cuda")
    index = song.from_graph(g.to_host(), sample.base, song.IndexParams(), device="cuda")
    for visited in ("hash", "bloom"):
        sp = song.SearchParams(queue_size=32, visited=visited, algo="song")
        dg, ig = index.search(sample.queries, 10, sp, device="cuda", verbose=False)
        dc, ic = index.search(sample.queries, 10, sp, device="cpu", verbose=False)
        np.testing.assert_array_equal(ig, ic)
    db, ib = index.search(sample.queries, 10, song.SearchParams(queue_size=32, batch_size=173, algo="song"),
                          device="cuda", verbose=False)
    da, ia = index.search(sample.queries, 10, song.SearchParams(queue_size=32, algo="song"), device="cuda",
                          verbose=False)
    np.testing.assert_array_equal(ib, ia)
    # device inputs: used in place, results come back as CuPy
    dq = cp.asarray(sample.queries)
    d2, i2 = song.search(song.from_graph(g, cp.asarray(sample.base), device="cuda"), dq, 10,
                         song.SearchParams(queue_size=32), device="cuda", verbose=False)
    assert isinstance(i2, cp.ndarray)
    assert recall_at_k(i2.get(), sample.gt_indices, 10, distances=d2.get(), true_distances=sample.gt_distances) >= 0.95
    # hashed index: Hamming search on the GPU, exact re-rank on the host; same ids as the CPU path
    h = song.from_graph(g.to_host(), sample.base, song.IndexParams(hash_bits=256), device="cuda")
    dh, ih = h.search(sample.queries, 10, song.SearchParams(queue_size=64, algo="song"), device="cuda",
                      verbose=False)
    dhc, ihc = h.search(sample.queries, 10, song.SearchParams(queue_size=64), device="cpu", verbose=False)
    np.testing.assert_array_equal(ih, ihc)
    assert recall_at_k(ih, sample.gt_indices, 10, distances=dh, true_distances=sample.gt_distances) >= 0.75


@pytest.mark.parametrize("share", [0.01, 0.1, 0.5, 0.9])
def test_filtered_search_on_gpu_matches_cpu(sample, share):
    """Filtered search on the GPU (the fast searcher, one warp per query): the CPU path's ids (the walk at
    10-90% allowed, the exact search over the allowed vectors at 1%), no disallowed id, also with the
    bitset form and device inputs."""
    import cupy as cp

    raw = knngraph.knn_graph(sample.base, 64, device="cuda", verbose=False)
    g = knngraph.optimize_graph(raw, sample.base, graph_degree=32, device="cuda")
    index = song.from_graph(g.to_host(), sample.base, song.IndexParams(), device="cuda")
    mask = np.random.default_rng(5).random(len(sample.base)) < share
    sp = song.SearchParams(filtered_path="exact" if share == 0.01 else "graph", search_width=1)  # the CPU walk
    sg, sc = {}, {}
    dg, ig = index.search(sample.queries, 10, sp, device="cuda", verbose=False, stats=sg, filter=mask)
    dc, ic = index.search(sample.queries, 10, sp, device="cpu", verbose=False, stats=sc, filter=mask)
    assert sg["filtered_path"] == sc["filtered_path"] == ("exact" if share == 0.01 else "graph")
    np.testing.assert_array_equal(ig, ic)
    assert mask[ig[ig >= 0]].all()
    from knngraph.primitives.filters import prepare_filter

    bits = cp.asarray(prepare_filter(mask, len(mask)).bits)
    d2, i2 = song.search(index, cp.asarray(sample.queries), 10, sp, device="cuda", verbose=False, filter=bits)
    np.testing.assert_array_equal(i2.get(), ig)


def test_song_walk_takes_the_search_keywords(sample):
    """SONG's walk (algo='song') on a GPU with the contract's keywords: ``out`` (CuPy arrays) filled and
    returned with the plain call's rows, ``stats``, ``memory_limit`` and ``n_threads``; a filter allowing few
    ids takes the exact search over them (knngraph.bruteforce on the GPU)."""
    import cupy as cp

    g = knngraph.optimize_graph(knngraph.knn_graph(sample.base, 32, device="cuda", verbose=False), sample.base,
                                graph_degree=16, device="cuda")
    index = song.from_graph(g, sample.base, device="cuda")
    q = cp.asarray(sample.queries[:200])
    sp = song.SearchParams(queue_size=32, algo="song")
    ref_d, ref_i = index.search(q, 10, sp, device="cuda", verbose=False)
    out = (cp.empty((200, 10), cp.float32), cp.empty((200, 10), cp.int32))
    st = {}
    d, i = index.search(q, 10, sp, device="cuda", verbose=False, out=out, stats=st, memory_limit="1GB",
                        n_threads=1)
    assert d is out[0] and i is out[1] and "algo" not in st and st["seconds"] > 0
    np.testing.assert_array_equal(i.get(), ref_i.get())
    mask = np.zeros(len(sample.base), bool)
    mask[::400] = True
    d, i = index.search(q, 10, sp, device="cuda", verbose=False, filter=mask, stats=st)
    assert st["filtered_path"] == "exact"
    want_d, want_i = knngraph.knn(sample.base, sample.queries[:200], 10, device="cpu", filter=mask)
    np.testing.assert_array_equal(i.get(), want_i)
