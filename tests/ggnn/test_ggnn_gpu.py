"""GGNN on a real GPU (marker ``gpu``; scripts/gpu_check.sh runs these with KNNGRAPH_GPU_TESTS=1).

sift-photos 450k comes from $KNNGRAPH_DEVICE_DATA (scripts/prepare_device_data.py). On uint8 data every
distance is an exact integer in float32, so the GPU and CPU searches of one index return the same ids
(with either cache; the sorted one with one warp per query, search_width=1), and the GPU build is the
CPU build."""

import numpy as np
import pytest

from knngraph import ggnn

from tests.song.test_song_gpu import _sift450k

from .conftest import recall_at

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def sift_index():
    base, queries, gt = _sift450k()
    return base, queries, gt, ggnn.build(ggnn.IndexParams(), base, device="cuda", verbose=False)


@pytest.mark.parametrize("cache", ["sorted", "rings"])
def test_sift450k_recall_and_same_ids_as_cpu(sift_index, cache):
    import cupy as cp

    base, queries, gt, index = sift_index
    # the slack tau is the recall knob: at 0.5 (the default) on the default build 0.934 with the rings and
    # 0.929 with the sorted cache (measured on an H200, the same in two builds: the build is deterministic;
    # the CPU returns the same ids), 0.95 within reach with either cache (one warp per query, as the CPU)
    recalls = {}
    for tau in (0.5, 0.7, 1.0):
        sp = ggnn.SearchParams(tau=tau, cache=cache, search_width=1)
        d, i = ggnn.search(index, cp.asarray(queries), 10, sp, device="cuda")
        i = cp.asnumpy(i)
        recalls[tau] = recall_at(i, gt, 10)
        # the CPU's ids at every tau (the sorted cache's launch plan is reused: tau travels with each call)
        dc, ic = ggnn.search(index, queries[:300], 10, sp, device="cpu")
        np.testing.assert_array_equal(i[:300], ic)
        np.testing.assert_array_equal(cp.asnumpy(d)[:300], dc)
    assert max(recalls.values()) >= 0.95 and recalls[0.5] >= {"rings": 0.93, "sorted": 0.925}[cache], recalls
    assert list(recalls.values()) == sorted(recalls.values()), recalls
    if cache == "sorted":
        from knngraph.beam.cuda import BeamPlan

        plans = [v for v in index._cache[("sorted", 0)].cache.values() if isinstance(v, BeamPlan)]
        assert len(plans) == 1, len(plans)


def test_gpu_build_is_the_cpu_build_on_a_slice(sift_index, tmp_path):
    """The GPU build runs the merges and the linking's path searches as kernels and places the links on
    the host in the CPU's order: on integer data (exact distances) it is the CPU build, edge for edge."""
    from collections import deque

    base, queries, _, _ = sift_index
    x = base[:20000]
    import knngraph

    truth = knngraph.knn(x, queries[:1000], 10, device="cuda").indices
    p = ggnn.IndexParams(graph_degree=16, refinements=1)
    a = ggnn.build(p, x, device="cuda", verbose=False)
    b = ggnn.build(p, x, device="cpu", verbose=False)
    np.testing.assert_array_equal(a.entry_points, b.entry_points)
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    np.testing.assert_array_equal(a.graph.distances, b.graph.distances)
    # device vectors are built from on the device (no host round trip), and the index holding them
    # searches on either device and saves
    import cupy as cp

    c = ggnn.build(p, cp.asarray(x), device="cuda", verbose=False)
    assert isinstance(c.dataset, cp.ndarray)
    np.testing.assert_array_equal(c.graph.indices, b.graph.indices)
    np.testing.assert_array_equal(c.entry_points, b.entry_points)
    sp = ggnn.SearchParams(tau=0.5)
    np.testing.assert_array_equal(ggnn.search(c, queries[:200], 10, sp, device="cpu").indices,
                                  ggnn.search(b, queries[:200], 10, sp, device="cpu").indices)
    for cache in ("sorted", "rings"):
        sc = ggnn.SearchParams(tau=0.5, cache=cache)
        np.testing.assert_array_equal(cp.asnumpy(ggnn.search(c, cp.asarray(queries[:500]), 10, sc).indices),
                                      ggnn.search(b, queries[:500], 10, sc, device="cuda").indices)
    ggnn.save(tmp_path / "c.ggnn", c)
    np.testing.assert_array_equal(ggnn.load(tmp_path / "c.ggnn").dataset, x)
    # sharded from device vectors: each shard converted on its own, the host build's graph; searched on the CPU
    p2 = ggnn.IndexParams(graph_degree=16, refinements=0, n_shards=2)
    c2 = ggnn.build(p2, cp.asarray(x), device="cuda", verbose=False)
    b2 = ggnn.build(p2, x, device="cpu", verbose=False)
    np.testing.assert_array_equal(c2.graph.indices, b2.graph.indices)
    np.testing.assert_array_equal(ggnn.search(c2, queries[:200], 10, sp, device="cpu").indices,
                                  ggnn.search(b2, queries[:200], 10, sp, device="cpu").indices)
    # float16 cosine vectors on the device: the inverse norms made there, recall against the exact cosine top-10
    x16 = cp.asarray(x.astype(np.float16))
    c16 = ggnn.build(ggnn.IndexParams(graph_degree=16, refinements=0, metric="cosine"), x16, device="cuda",
                     verbose=False)
    q16 = cp.asarray(queries[:500].astype(np.float16))
    exact = cp.asnumpy(knngraph.knn(x16, q16, 10, metric="cosine", device="cuda").indices)
    found = cp.asnumpy(ggnn.search(c16, q16, 10, ggnn.SearchParams(tau=1.0)).indices)
    assert recall_at(found, exact, 10) >= 0.9
    ra = recall_at(ggnn.search(a, queries[:1000], 10, sp, device="cpu").indices, np.asarray(truth), 10)
    rb = recall_at(ggnn.search(b, queries[:1000], 10, sp, device="cpu").indices, np.asarray(truth), 10)
    assert ra == rb and ra >= 0.94, (ra, rb)  # 0.949 with these settings
    g = a.graph.indices
    seen = np.zeros(g.shape[0], bool)
    seen[a.entry_points] = True
    todo = deque(a.entry_points.tolist())
    while todo:
        for v in g[todo.popleft()]:
            if v >= 0 and not seen[v]:
                seen[v] = True
                todo.append(v)
    assert seen.all()


def test_sharded_search_swaps_shards_through_host_memory(sift_index):
    import cupy as cp

    base, queries, gt, _ = sift_index
    x = base[:100_000]
    index = ggnn.build(ggnn.IndexParams(n_shards=4), x, device="cuda", verbose=False)
    q = cp.asarray(queries[:2000])
    sp = ggnn.SearchParams(tau=0.5, search_width=1)  # one warp per query, as the CPU
    resident = ggnn.search(index, q, 10, sp, device="cuda")
    index.release()
    swapped = ggnn.search(index, q, 10, sp, device="cuda", memory_limit=10_000_000)  # < one shard's bytes * 4
    np.testing.assert_array_equal(cp.asnumpy(resident.indices), cp.asnumpy(swapped.indices))
    assert not index._cache, "swapped shards are dropped after their search"
    cpu = ggnn.search(index, queries[:2000], 10, sp, device="cpu")
    np.testing.assert_array_equal(cp.asnumpy(resident.indices), cpu.indices)


def _pool_peak(fn):
    """(result, peak device bytes fn held at once through CuPy, above what was in use before)."""
    from knngraph._device import PeakInUse

    with PeakInUse() as peak:
        out = fn()
    return out, peak.peak


def test_build_stays_within_its_estimate_and_memory_limit_adds_shards(sift_index):
    """The device memory of a build is within shard_build_bytes (what memory_limit is planned with) and
    not far below it; a memory_limit a third of that builds in more shards, within the limit, the graph
    of the same number of shards asked for, and searches as well from host memory."""
    import dataclasses

    import cupy as cp

    base, queries, gt, _ = sift_index
    x = base[:200_000]
    p = ggnn.IndexParams(refinements=1)
    estimate = ggnn.shard_build_bytes(x.shape[0], x.shape[1], p)
    one, peak = _pool_peak(lambda: ggnn.build(p, x, device="cuda", verbose=False))
    assert one.n_shards == 1 and 0.5 * estimate <= peak <= estimate, (peak, estimate)
    limit = estimate // 3
    with pytest.warns(UserWarning, match=r"do not fit \d+ bytes of device memory \(memory_limit\); building \d+"):
        cut, peak_cut = _pool_peak(lambda: ggnn.build(p, x, device="cuda", memory_limit=limit, verbose=False))
    m = cut.n_shards
    assert m >= 3 and cut.params.n_shards == m and cut.graph.info["n_shards_requested"] == 1
    assert peak_cut <= limit, (peak_cut, limit)
    asked = ggnn.build(dataclasses.replace(p, n_shards=m), x, device="cuda", verbose=False)
    np.testing.assert_array_equal(cut.graph.indices, asked.graph.indices)
    import knngraph

    truth = np.asarray(knngraph.knn(x, queries[:2000], 10, device="cuda").indices)
    sp = ggnn.SearchParams(tau=0.5)
    r_one = recall_at(cp.asnumpy(ggnn.search(one, queries[:2000], 10, sp, device="cuda").indices), truth, 10)
    r_cut = recall_at(cp.asnumpy(ggnn.search(cut, queries[:2000], 10, sp, device="cuda",
                                             memory_limit=limit).indices), truth, 10)
    # floors below the 450k test's 0.942 at tau 0.5: one refinement here; more, smaller shards are each
    # searched in full
    assert r_one >= 0.9 and r_cut >= 0.9, (r_one, r_cut)


def test_knn_graph_of_device_input_is_on_the_device(sift_index):
    """``knn_graph(method="ggnn")`` of a CuPy array returns CuPy arrays (the contract), the graph of the
    same build from host input."""
    import cupy as cp

    import knngraph

    x = sift_index[0][:5000]
    g = knngraph.knn_graph(cp.asarray(x), 16, method="ggnn", device="cuda", verbose=False, refinements=1)
    h = knngraph.knn_graph(x, 16, method="ggnn", device="cuda", verbose=False, refinements=1)
    assert isinstance(g.indices, cp.ndarray) and isinstance(g.distances, cp.ndarray)
    np.testing.assert_array_equal(g.indices.get(), h.indices)


def test_extend_builds_on_the_device_it_is_asked_for(sample):
    """``extend`` rebuilds on the device it is given: the GPU build of the concatenated vectors (the CPU
    build, edge for edge, on this uint8 data), keeping device vectors on the device when the index held
    them; the extended index searches with the sorted cache as the CPU does (one warp per query)."""
    import cupy as cp

    x = sample.base[:3000]
    p = ggnn.IndexParams(graph_degree=12, refinements=1)
    ref = ggnn.build(p, x, device="cpu", verbose=False)
    on_device = ggnn.extend(ggnn.build(p, cp.asarray(x[:2500]), device="cuda", verbose=False),
                            cp.asarray(x[2500:]), device="cuda", verbose=False)
    assert isinstance(on_device.dataset, cp.ndarray) and on_device.graph.info["device"] == "cuda"
    np.testing.assert_array_equal(cp.asnumpy(on_device.dataset), x)
    np.testing.assert_array_equal(on_device.graph.indices, ref.graph.indices)
    on_host = ggnn.extend(ggnn.build(p, x[:2500], device="cpu", verbose=False), x[2500:], device="cuda",
                          verbose=False)
    assert isinstance(on_host.dataset, np.ndarray) and on_host.graph.info["device"] == "cuda"
    np.testing.assert_array_equal(on_host.graph.indices, ref.graph.indices)
    sp = ggnn.SearchParams(search_width=1)
    dg, ig = ggnn.search(on_device, cp.asarray(sample.queries[:500]), 10, sp, device="cuda")
    dc, ic = ggnn.search(ref, sample.queries[:500], 10, sp, device="cpu")
    np.testing.assert_array_equal(cp.asnumpy(ig), ic)
    np.testing.assert_array_equal(cp.asnumpy(dg), dc)
