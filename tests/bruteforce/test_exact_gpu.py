"""Exact k-NN on a real GPU (marker ``gpu``; run by scripts/gpu_check.sh with KNNGRAPH_GPU_TESTS=1)."""

import os
from pathlib import Path

import numpy as np
import pytest

import knngraph
from knngraph import metrics
from knngraph.evaluate import recall_at_k

pytestmark = pytest.mark.gpu

SELECTS = ["warp_filter", "quickselect"]


def _ref(base, queries, k, metric, graph=False):
    d = metrics.pairwise_distances(queries, base, metric)
    if graph:
        np.fill_diagonal(d, np.inf)
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(d, order, 1), order


@pytest.mark.parametrize("select", SELECTS)
@pytest.mark.parametrize("k", [1, 10, 100])
def test_sample_matches_ground_truth(sample, select, k):
    d, i = knngraph.knn(sample.base, sample.queries, k, device="cuda", select=select)
    assert isinstance(i, np.ndarray) and i.dtype == np.int32 and d.dtype == np.float32
    gt_d = sample.gt_distances[:, :k]
    np.testing.assert_array_equal(d, gt_d)  # integer distances: exact
    assert recall_at_k(i, sample.gt_indices, k, distances=d, true_distances=sample.gt_distances) == 1.0


@pytest.mark.parametrize("select", SELECTS)
@pytest.mark.parametrize("metric", metrics.METRICS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
def test_metrics_and_dtypes_match_reference(select, metric, dtype, rng):
    if np.dtype(dtype).kind == "f":
        base = rng.standard_normal((3000, 40)).astype(dtype)
        queries = rng.standard_normal((70, 40)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        base = rng.integers(info.min, info.max, (3000, 40), endpoint=True).astype(dtype)
        queries = rng.integers(info.min, info.max, (70, 40), endpoint=True).astype(dtype)
    k = 17
    d, i = knngraph.knn(base, queries, k, metric=metric, device="cuda", select=select)
    ref_d, ref_i = _ref(base, queries, k, metric)
    assert recall_at_k(i, ref_i, k, distances=_dist_of(base, queries, i, metric), true_distances=ref_d) == 1.0
    np.testing.assert_allclose(d, ref_d, rtol=1e-4, atol=1e-2 * max(1.0, float(np.abs(ref_d).max()) * 1e-4))


def _dist_of(base, queries, ids, metric):
    full = metrics.pairwise_distances(queries, base, metric)
    return np.take_along_axis(full, ids.astype(np.int64), 1)


@pytest.mark.parametrize("select", SELECTS)
def test_streaming_under_small_memory_limit(sample, select):
    """A budget far below the base size forces streamed base tiles and several query blocks."""
    d_ref, i_ref = knngraph.knn(sample.base, sample.queries, 10, device="cpu")
    d, i = knngraph.knn(sample.base, sample.queries, 10, device="cuda", select=select, memory_limit="3MB")
    np.testing.assert_array_equal(i, i_ref)
    np.testing.assert_array_equal(d, d_ref)


@pytest.mark.parametrize("select", SELECTS)
def test_few_queries_use_column_splits(sample, select):
    d_ref, i_ref = knngraph.knn(sample.base, sample.queries[:3], 100, device="cpu")
    d, i = knngraph.knn(sample.base, sample.queries[:3], 100, device="cuda", select=select)
    np.testing.assert_array_equal(i, i_ref)
    np.testing.assert_array_equal(d, d_ref)


def test_large_k_falls_back_to_quickselect(sample):
    d_ref, i_ref = knngraph.knn(sample.base, sample.queries[:50], 1500, device="cpu")
    d, i = knngraph.knn(sample.base, sample.queries[:50], 1500, device="cuda")
    np.testing.assert_array_equal(i, i_ref)
    with pytest.raises(ValueError, match="warp_filter.*k <= 1024"):
        knngraph.knn(sample.base, sample.queries[:5], 1500, device="cuda", select="warp_filter")


@pytest.mark.parametrize("select", SELECTS)
def test_graph_matches_cpu_graph(sample, select):
    base = sample.base[:5000]
    from knngraph.bruteforce.cuda import exact_knn

    g_cpu = knngraph.knn_graph(base, 16, device="cpu")
    # the exact graph builder has no select option any more: run the GPU exact k-NN in graph mode with it
    d, i, unsure = exact_knn(base, base, 16, "sqeuclidean", graph=True, memory_limit=1 << 30, select=select,
                             verbose=False)
    assert not unsure.any()  # N(0, 1) data: every row's answer is proven without a second search
    np.testing.assert_array_equal(i, g_cpu.indices)
    np.testing.assert_array_equal(d, g_cpu.distances)
    assert not (i == np.arange(len(base))[:, None]).any()
    g = knngraph.knn_graph(base, 16, device="cuda")
    np.testing.assert_array_equal(g.indices, g_cpu.indices)
    np.testing.assert_array_equal(g.distances, g_cpu.distances)


def test_device_arrays_in_and_out(sample):
    import cupy as cp

    base = cp.asarray(sample.base)
    q = cp.asarray(sample.queries[:100])
    d, i = knngraph.knn(base, q, 5)
    assert isinstance(d, cp.ndarray) and isinstance(i, cp.ndarray)
    d_ref, i_ref = knngraph.knn(sample.base, sample.queries[:100], 5, device="cpu")
    np.testing.assert_array_equal(i.get(), i_ref)
    # mixed devices: host queries against a device base -> host results
    d2, i2 = knngraph.knn(base, sample.queries[:100], 5)
    assert isinstance(i2, np.ndarray)
    np.testing.assert_array_equal(i2, i_ref)
    # non-contiguous device input
    d3, i3 = knngraph.knn(base, cp.asarray(sample.queries[:200])[::2], 5)
    np.testing.assert_array_equal(i3.get(), knngraph.knn(sample.base, sample.queries[:200:2], 5, device="cpu")[1])
    g = knngraph.knn_graph(base[:2000], 4)
    assert isinstance(g.indices, cp.ndarray)


def test_torch_tensors(sample):
    torch = pytest.importorskip("torch")
    tb = torch.from_numpy(sample.base.astype(np.float32)).cuda()
    tq = torch.from_numpy(sample.queries[:64].astype(np.float32)).cuda()
    d, i = knngraph.knn(tb, tq, 8)
    assert isinstance(i, torch.Tensor) and i.is_cuda and i.dtype == torch.int32
    i_ref = knngraph.knn(sample.base, sample.queries[:64], 8, device="cpu")[1]
    np.testing.assert_array_equal(i.cpu().numpy(), i_ref)


def test_nan_on_device_names_row():
    import cupy as cp

    x = cp.ones((100, 8), cp.float32)
    x[42, 3] = cp.nan
    with pytest.raises(ValueError, match="row 42"):
        knngraph.knn(x, x[:3], 2)


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine", "inner_product"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_device_queries_are_checked_by_the_search_flags(metric, dtype, bad, rng):
    """Device queries are checked for NaN and inf by a kernel whose flag the search reads at its end: the
    error names the first bad row as the eager check does, on the one-pass and the tiled paths, and the
    index answers the next search correctly."""
    import cupy as cp

    from knngraph import bruteforce

    base = cp.asarray(rng.standard_normal((3000, 64)).astype(dtype))
    good = rng.standard_normal((300, 64)).astype(dtype)
    index = bruteforce.build(bruteforce.IndexParams(metric=metric), base, device="cuda", verbose=False)
    for rows in (7, 300):
        q = cp.asarray(good[:rows])
        q[rows - 2, 5] = bad
        q[rows - 1, 0] = bad
        for limit in (None, "2MB"):  # one pass; base tiles streamed
            with pytest.raises(ValueError, match=f"^queries row {rows - 2} contains NaN or inf"):
                bruteforce.search(index, q, 5, verbose=False, memory_limit=limit)
    d, i = bruteforce.search(index, cp.asarray(good), 5, verbose=False)
    d_ref, i_ref = bruteforce.search(index, good, 5, device="cpu", verbose=False)
    assert recall_at_k(cp.asnumpy(i), i_ref, 5, distances=cp.asnumpy(d), true_distances=d_ref) == 1.0


def test_device_queries_out_of_float32_range_raise_after_the_search(rng):
    import cupy as cp

    x = cp.asarray((rng.random((50, 4)) * 1e20).astype(np.float32))
    with pytest.raises(ValueError, match=r"^queries against base: sqeuclidean distances .* exceed the float32"):
        knngraph.knn(x, x[:5], 3, device="cuda")
    d, i = knngraph.knn(x, x[:5], 3, metric="euclidean", device="cuda")
    assert (cp.asnumpy(i)[:, 0] == np.arange(5)).all() and np.isfinite(cp.asnumpy(d)).all()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_flag_nonfinite_sets_its_slot_only_for_nan_or_inf(dtype):
    import cupy as cp

    from knngraph._validate import flag_nonfinite

    for size, where in ((1, 0), (1000, 999), (300001, 123457)):
        for value, want in ((1.0, 0), (np.inf, 1), (-np.inf, 1), (np.nan, 1), (np.finfo(dtype).max, 0)):
            x = cp.zeros(size, dtype)
            x[where] = value
            flags = cp.zeros(4, cp.int32)
            assert flag_nonfinite(x.reshape(-1, 1), flags, 2)
            assert flags.get().tolist() == [0, 0, want, 0], (size, value)
    assert not flag_nonfinite(cp.zeros((4, 4), dtype)[:, ::2], cp.zeros(4, cp.int32), 0)  # not contiguous
    assert not flag_nonfinite(cp.zeros((4, 4), cp.int32), cp.zeros(4, cp.int32), 0)


def _device_data():
    p = os.environ.get("KNNGRAPH_DEVICE_DATA")
    if p and (Path(p) / "sift450k-base.u8bin").exists():
        return Path(p)
    pytest.skip("sift-photos 450k cut not present (KNNGRAPH_DEVICE_DATA; scripts/prepare_device_data.py)")


def test_sift450k_against_shared_ground_truth():
    from knngraph import io

    dd = _device_data()
    base = io.read(dd / "sift450k-base.u8bin")
    queries = np.ascontiguousarray(io.read(dd / "sift-query.u8bin"))
    gt = io.read(dd / "sift450k-gt32.ibin")
    d, i = knngraph.knn(base, queries, 32, device="cuda")
    # distances of the true ids (recomputed) give the true k-th distance for tie handling
    true_d = np.stack([((base[gt[r]].astype(np.int64) - queries[r].astype(np.int64)) ** 2).sum(1)
                       for r in range(len(queries))]).astype(np.float32)
    assert recall_at_k(i, gt, 32, distances=d, true_distances=true_d) == 1.0
    np.testing.assert_array_equal(d, true_d)


def test_numba_launch_path_matches_raw_launch(sample, monkeypatch):
    """KNNGRAPH_RAW_LAUNCH=0 launches through numba instead of CuPy: same answers."""
    d_raw, i_raw = knngraph.knn(sample.base, sample.queries[:200], 10, device="cuda")
    monkeypatch.setenv("KNNGRAPH_RAW_LAUNCH", "0")
    d_nb, i_nb = knngraph.knn(sample.base, sample.queries[:200], 10, device="cuda")
    np.testing.assert_array_equal(i_raw, i_nb)
    np.testing.assert_array_equal(d_raw, d_nb)


@pytest.mark.parametrize("metric", ["sqeuclidean", "inner_product"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float16])
def test_tensor_core_gemm_equals_fp32_gemm(metric, dtype, rng):
    """The int8 / fp16 tensor-core GEMM paths give the fp32 path's answers (int8: bit for bit)."""
    from knngraph.bruteforce.cuda import exact_knn

    if np.dtype(dtype).kind == "f":
        base = rng.standard_normal((4000, 64)).astype(dtype)
        q = rng.standard_normal((300, 64)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        base = rng.integers(info.min, info.max, (4000, 64), endpoint=True).astype(dtype)
        q = rng.integers(info.min, info.max, (300, 64), endpoint=True).astype(dtype)
    stats = {}
    d_tc, i_tc, unsure_tc = exact_knn(base, q, 20, metric, memory_limit=1 << 30, stats=stats, verbose=False)
    assert stats["gemm"] == ("fp16" if dtype == np.float16 else "int8")
    assert isinstance(d_tc, np.ndarray)  # host queries: results come back to the host block by block
    d32, i32, unsure32 = exact_knn(base, q, 20, metric, memory_limit=1 << 30, tensor_cores=False, verbose=False)
    # rows whose answer a path could not prove are searched again by the caller (bruteforce._index._exact);
    # the rows both paths proved must agree bit for bit (distances are recomputed in float64 on both)
    sure = ~(unsure_tc | unsure32)
    assert sure.mean() >= 0.9, sure.mean()
    np.testing.assert_array_equal(i_tc[sure], i32[sure])
    np.testing.assert_array_equal(d_tc[sure], d32[sure])


def test_fp16_cosine_keys_from_raw_dot_products(rng):
    """float16 cosine ranks by the tensor cores' dot products of the vectors as given, scaled by inverse
    norms: the answers it proves are the fp32 path's (normalised float32 rows) bit for bit, nearly every
    row is proven, a zero row is at distance 1 from everything and duplicates at exactly 0."""
    from knngraph.bruteforce.cuda import exact_knn

    base = (rng.standard_normal((5000, 64)) * rng.uniform(0.01, 50, (5000, 1))).astype(np.float16)
    base[150] = 0
    base[4000:4100] = base[:100]  # duplicates at other norms' rows
    q = np.concatenate([base[:100], rng.standard_normal((200, 64)).astype(np.float16), base[150:151]])
    stats = {}
    d_tc, i_tc, unsure_tc = exact_knn(base, q, 20, "cosine", memory_limit=1 << 30, stats=stats, verbose=False)
    assert stats["gemm"] == "fp16"
    d32, i32, unsure32 = exact_knn(base, q, 20, "cosine", memory_limit=1 << 30, tensor_cores=False, verbose=False)
    sure = ~(unsure_tc | unsure32)
    assert sure.mean() >= 0.95, sure.mean()
    np.testing.assert_array_equal(i_tc[sure], i32[sure])
    np.testing.assert_array_equal(d_tc[sure], d32[sure])
    assert (d_tc[:100, :2] == 0).all()  # each duplicate pair at exactly 0
    assert (d_tc[-1] == 1).all()  # the zero query
    ref_d, ref_i = _ref(base.astype(np.float32), q.astype(np.float32), 20, "cosine")
    d, i = knngraph.knn(base, q, 20, metric="cosine", device="cuda")
    assert recall_at_k(i, ref_i, 20, distances=_dist_of(base, q, i, "cosine"), true_distances=ref_d) == 1.0


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
def test_duplicates_are_at_distance_zero_on_gpu(metric, rng):
    base = (rng.standard_normal((5000, 64)) * 100 + 1000).astype(np.float32)
    d, i = knngraph.knn(base, base[:50], 3, metric=metric, device="cuda")
    assert (d[:, 0] == 0).all() and (i[:, 0] == np.arange(50)).all()
    d_cpu, i_cpu = knngraph.knn(base, base[:50], 3, metric=metric, device="cpu")
    np.testing.assert_array_equal(i, i_cpu)
    # both recompute each distance directly; only the summation order differs (last-ulp)
    np.testing.assert_allclose(d, d_cpu, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------
# exact means exact (the CPU cases of test_exactness.py, on the GPU, host and device inputs)


@pytest.mark.parametrize("device_input", [False, True])
@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
@pytest.mark.parametrize("case", ["gps", "offset_1e3", "offset_1e4", "two_far_clusters", "tiny", "huge_spread"])
def test_gpu_l2_exact_on_data_that_breaks_gemm_keys(case, metric, device_input, rng):
    import cupy as cp

    from tests.bruteforce.test_exactness import CASES, exact_answer

    base, queries = (a.astype(np.float32) for a in CASES[case](rng))
    b, q = (cp.asarray(base), cp.asarray(queries)) if device_input else (base, queries)
    d, i = knngraph.knn(b, q, 10, metric=metric, device="cuda")
    d, i = cp.asnumpy(cp.asarray(d)), cp.asnumpy(cp.asarray(i))
    td, ti = exact_answer(base, queries, 10, metric)
    assert recall_at_k(i, ti, 10, distances=d, true_distances=td) == 1.0
    np.testing.assert_allclose(d, td, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(td).max())))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("device_input", [False, True])
def test_gpu_float_vectors_of_small_integers_answer_as_uint8(dtype, device_input, sample):
    """Float vectors holding small integers take exact keys on the GPU too (fp32 and fp16 GEMMs): k
    candidates, the same ids and distances as the uint8 vectors."""
    import cupy as cp

    base, queries = sample.base[:5000], sample.base[5000:5300]
    b, q = base.astype(dtype), queries.astype(dtype)
    if device_input:
        b, q = cp.asarray(b), cp.asarray(q)
    d, i = knngraph.knn(b, q, 10, device="cuda")
    du, iu = knngraph.knn(base, queries, 10, device="cuda")
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(i)), iu)
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(d)), du)
    g = knngraph.knn_graph(b, 10, device="cuda")
    assert g.info["candidates"] == 10 and g.info["exactness_retries"] == 0


def test_gpu_retry_path_and_errors(rng):
    base = np.concatenate([1e4 + 1e-2 * rng.random((300, 3)), -1e4 + 1e-2 * rng.random((300, 3))]).astype(np.float32)
    g = knngraph.knn_graph(base, 5, device="cuda")
    assert g.info["exactness_retries"] >= 1
    assert knngraph.graph_recall(g, 5, base=base) == 1.0
    x = (rng.random((50, 4)) * 1e20).astype(np.float32)
    with pytest.raises(ValueError, match="distances of this data exceed the float32 range"):
        knngraph.knn(x, x[:5], 3, device="cuda")
    d, i = knngraph.knn(x, x[:5], 3, metric="euclidean", device="cuda")
    assert (i[:, 0] == np.arange(5)).all() and np.isfinite(d).all()


def test_gpu_cosine_in_0_2_and_self_exactly_0(rng):
    x = rng.standard_normal((3000, 48)).astype(np.float32)
    x[10] = 0
    for data in (x, x.astype(np.float16)):
        d, i = knngraph.knn(data, data, 5, metric="cosine", device="cuda")
        assert (d >= 0).all() and (d <= 2).all()
        rows = np.arange(3000) != 10
        assert (d[rows, 0] == 0).all() and (i[rows, 0] == np.arange(3000)[rows]).all()
        assert (d[10] == 1).all()
        g = knngraph.knn_graph(data, 8, metric="cosine", device="cuda")
        assert (g.distances >= 0).all() and (g.distances <= 2).all()
        g = knngraph.knn_graph(data, 8, method="nndescent", metric="cosine", device="cuda", verbose=False)
        assert (g.distances >= 0).all() and (g.distances <= 2).all()


@pytest.mark.parametrize("n", [1, 255, 256, 1000, 70_000])
def test_plan_column_sums_on_gpu_match_numpy(n, rng):
    """The numeric plan's two-stage GPU column sums equal NumPy's float64 sums to float64 rounding."""
    import cupy as cp

    from knngraph.bruteforce._exact import _column_sums

    x = (rng.standard_normal((n, 33)) * 10 + 1000).astype(np.float32)
    got = cp.asnumpy(_column_sums(cp.asarray(x), cp))
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=0), rtol=1e-12)


def test_filtered_exact_search_on_gpu_matches_cpu(sample):
    import cupy as cp

    mask = np.random.default_rng(2).random(len(sample.base)) < 0.2
    d, i = knngraph.knn(sample.base, sample.queries, 10, device="cuda", verbose=False, filter=mask)
    dc, ic = knngraph.knn(sample.base, sample.queries, 10, device="cpu", verbose=False, filter=mask)
    np.testing.assert_array_equal(i, ic)
    np.testing.assert_array_equal(d, dc)
    d2, i2 = knngraph.knn(cp.asarray(sample.base), cp.asarray(sample.queries), 10, device="cuda", verbose=False,
                          filter=cp.asarray(mask))
    np.testing.assert_array_equal(i2.get(), ic)


def test_search_keywords_on_the_gpu(sample):
    """The contract's search keywords on a GPU: ``out`` (CuPy arrays) filled and returned, ``stats``
    filled, ``n_threads`` checked, host ``out`` arrays refused."""
    import cupy as cp

    from knngraph import bruteforce

    index = bruteforce.build(bruteforce.IndexParams(), cp.asarray(sample.base), device="cuda")
    q = cp.asarray(sample.queries[:300])
    ref_d, ref_i = bruteforce.search(index, q, 10, device="cuda")
    out = (cp.empty((300, 10), cp.float32), cp.empty((300, 10), cp.int32))
    st = {}
    d, i = bruteforce.search(index, q, 10, device="cuda", out=out, stats=st, n_threads=1, memory_limit="1GB")
    assert d is out[0] and i is out[1] and st["seconds"] > 0 and st["exactness_retries"] >= 0
    np.testing.assert_array_equal(i.get(), ref_i.get())
    np.testing.assert_array_equal(d.get(), ref_d.get())
    with pytest.raises(ValueError, match=r"out\[0\] \(distances\) must be a CuPy array"):
        bruteforce.search(index, q, 10, device="cuda", out=(np.empty((300, 10), np.float32),
                                                             np.empty((300, 10), np.int32)))


def test_unit_rows_are_unit_and_deterministic(rng):
    """unit_rows gives rows of norm 1 to float32 rounding (zero rows stay zero), the same bits for the same
    row wherever it sits (the base's operand and a query's transformed row must agree)."""
    import cupy as cp

    from knngraph.bruteforce._gemm import unit_rows

    x = rng.standard_normal((3000, 77)).astype(np.float32) * 3
    x[5] = 0
    got = cp.asnumpy(unit_rows(cp.asarray(x)))
    norms = np.linalg.norm(got.astype(np.float64), axis=1)
    np.testing.assert_allclose(np.delete(norms, 5), 1.0, rtol=1e-6)
    assert (got[5] == 0).all()
    np.testing.assert_allclose(got, x / np.maximum(np.linalg.norm(x, axis=1), 1e-30)[:, None], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(cp.asnumpy(unit_rows(cp.asarray(x[100:110]))), got[100:110])


@pytest.mark.parametrize("metric", ["cosine", "sqeuclidean"])
def test_index_keeps_its_gemm_operand_and_threads_share_it(metric, rng):
    """A GPU index keeps its small base's GEMM operand after the first search; later searches, from
    several threads at once, give the first search's answers, which match the reference; release() drops
    the kept arrays."""
    import concurrent.futures

    import cupy as cp

    from knngraph import bruteforce

    base = cp.asarray(rng.standard_normal((4000, 64)).astype(np.float16))
    queries = cp.asarray(rng.standard_normal((300, 64)).astype(np.float16))
    index = bruteforce.build(bruteforce.IndexParams(metric=metric), base, device="cuda")
    d0, i0 = bruteforce.search(index, queries, 10, device="cuda", verbose=False)
    assert any(key[0] == "operand" for key in index._prepared)
    ref_d, ref_i = _ref(base.get().astype(np.float32), queries.get().astype(np.float32), 10, metric)
    np.testing.assert_array_equal(cp.asnumpy(i0), ref_i)

    def one(_):
        with cp.cuda.Stream(non_blocking=True):
            d, i = bruteforce.search(index, queries, 10, device="cuda", verbose=False)
            return cp.asnumpy(d), cp.asnumpy(i)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for d, i in pool.map(one, range(8)):
            np.testing.assert_array_equal(i, cp.asnumpy(i0))
            np.testing.assert_array_equal(d, cp.asnumpy(d0))
    index.release()
    assert index._prepared == {}
