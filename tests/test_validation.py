"""Bad input: each rule gives a clear exception that names the argument and the problem (ValueError for a
bad value, TypeError for a bad type; NaN or inf rows are named by index; a missing file is a
FileNotFoundError, an unusable device asked for by name a RuntimeError), never a crash or a wrong answer."""

import numpy as np
import pytest

import knngraph
from knngraph import bruteforce


@pytest.fixture
def base(rng):
    return rng.standard_normal((50, 8)).astype(np.float32)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_base_names_the_row(base, bad):
    base[17, 3] = bad
    with pytest.raises(ValueError, match="base row 17 contains NaN or inf"):
        knngraph.knn(base, base[:2], 3, device="cpu")
    with pytest.raises(ValueError, match="base row 17 contains NaN or inf"):
        knngraph.knn_graph(base, 3, device="cpu")


def test_non_finite_queries_names_the_row(base):
    q = base[:5].copy()
    q[4, 0] = np.nan
    with pytest.raises(ValueError, match="queries row 4 contains NaN or inf"):
        knngraph.knn(base, q, 3, device="cpu")


def test_dimension_mismatch(base):
    with pytest.raises(ValueError, match="queries has 7 dimensions but base has 8"):
        knngraph.knn(base, base[:3, :7], 3, device="cpu")


@pytest.mark.parametrize("k, match", [(0, "k must be at least 1, got 0"), (-2, "k must be at least 1"),
                                      (51, "k=51 is larger than the number of base vectors n=50")])
def test_bad_k_for_search(base, k, match):
    with pytest.raises(ValueError, match=match):
        knngraph.knn(base, base[:3], k, device="cpu")


def test_k_must_be_an_integer(base):
    with pytest.raises(TypeError, match="k must be an integer, got float"):
        knngraph.knn(base, base[:3], 2.0, device="cpu")


def test_graph_k_must_be_below_n(base):
    with pytest.raises(ValueError, match="k must be smaller than the number of vectors.*k=50, n=50"):
        knngraph.knn_graph(base, 50, device="cpu")
    assert knngraph.knn_graph(base, 49, device="cpu").degree == 49


@pytest.mark.parametrize("shape", [(0, 8), (5, 0)])
def test_empty_arrays(shape):
    with pytest.raises(ValueError, match="base is empty"):
        knngraph.knn(np.zeros(shape, np.float32), np.zeros((1, 8), np.float32), 1, device="cpu")


@pytest.mark.parametrize("shape", [(8,), (2, 3, 4)])
def test_wrong_ndim(shape):
    with pytest.raises(ValueError, match=f"base must be a 2-D array of shape \\(n_vectors, dim\\), got {len(shape)}-D"):
        knngraph.knn(np.zeros(shape, np.float32), np.zeros((1, 8), np.float32), 1, device="cpu")
    with pytest.raises(ValueError, match="queries must be a 2-D array"):
        knngraph.knn(np.zeros((4, 8), np.float32), np.zeros(shape, np.float32), 1, device="cpu")


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16, np.complex64, np.bool_])
def test_unsupported_dtype(dtype):
    with pytest.raises(TypeError, match=f"base has dtype {np.dtype(dtype)}; supported vector dtypes are float32"):
        knngraph.knn(np.ones((5, 4), dtype), np.ones((1, 4), np.float32), 1, device="cpu")


def test_not_an_array():
    with pytest.raises(TypeError, match="queries must be an array"):
        knngraph.knn(np.ones((5, 4), np.float32), "abc", 1, device="cpu")


def test_unknown_metric(base):
    with pytest.raises(ValueError, match="unknown metric 'manhattan'; valid metrics are sqeuclidean, euclidean"):
        knngraph.knn(base, base[:2], 2, metric="manhattan", device="cpu")


def test_bad_device(base):
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"):
        knngraph.knn(base, base[:2], 2, device="tpu")


def test_cuda_asked_for_without_gpu(base):
    if knngraph.gpu_available():
        pytest.skip("a GPU is usable here")
    with pytest.raises(RuntimeError, match="device='cuda' was asked for but no GPU is usable"):
        knngraph.knn(base, base[:2], 2, device="cuda")


@pytest.mark.parametrize("value, match", [(-5, "memory_limit must be between 1 byte and 1 PiB, got -5"),
                                          (0.5, "memory_limit must be between 1 byte and 1 PiB, got 0.5"),
                                          (float("inf"), "memory_limit must be between 1 byte and 1 PiB"),
                                          ("1e400GB", "memory_limit must be between 1 byte and 1 PiB"),
                                          ("lots", "memory_limit must be a number of bytes or a string such as")])
def test_bad_memory_limit(base, value, match):
    with pytest.raises(ValueError, match=match):
        knngraph.knn(base, base[:2], 2, device="cpu", memory_limit=value)


def test_bad_select_option(base):
    with pytest.raises(ValueError, match="The 'select' parameter of SearchParams must be one of"):
        knngraph.knn(base, base[:2], 2, device="cpu", select="heap")


def test_unknown_graph_method(base):
    with pytest.raises(ValueError, match="method='magic' is not a graph builder; graph builders: .*exact"):
        knngraph.knn_graph(base, 3, method="magic")


def test_params_are_frozen_and_keyword_only():
    p = bruteforce.IndexParams(metric="l2")
    assert p.metric == "euclidean"  # aliases are stored canonical
    with pytest.raises(TypeError):
        bruteforce.IndexParams("cosine")
    with pytest.raises(Exception):
        p.metric = "cosine"


def test_truncated_graph_file(tmp_path, base):
    g = knngraph.knn_graph(base, 3, device="cpu")
    path = tmp_path / "g.knng"
    g.save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="g.knng: not a knngraph graph file or it is truncated/corrupt"):
        knngraph.Graph.load(path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        knngraph.Graph.load(tmp_path / "missing.knng")


def test_corrupted_graph_file_fails_checksum(tmp_path, base):
    g = knngraph.knn_graph(base, 3, device="cpu")
    path = tmp_path / "g.knng"
    g.save(path)
    raw = bytearray(path.read_bytes())
    pos = raw.rfind(b"NUMPY") + 200  # inside the last array's data
    raw[pos] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="g.knng: .*corrupt"):
        knngraph.Graph.load(path)


def test_graph_rejects_bad_arrays():
    with pytest.raises(TypeError, match="Graph indices must be int32, got int64"):
        knngraph.Graph(np.zeros((3, 2), np.int64), np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="same 2-D shape"):
        knngraph.Graph(np.zeros((3, 2), np.int32), np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match="graph row 1 holds neighbour ids outside \\[-1, 2\\)"):
        knngraph.Graph(np.array([[1], [5]], np.int32), np.zeros((2, 1), np.float32))
    g = knngraph.Graph(np.array([[1], [0]], np.int32), np.zeros((2, 1), np.float32))
    g.indices[1, 0] = 5  # changed in place: validate_ids (every converter calls it) says so
    with pytest.raises(ValueError, match="graph row 1 holds neighbour ids outside \\[-1, 2\\)"):
        g.validate_ids()


def test_device_arrays_are_recognised_by_type_and_report_their_gpu():
    # stand-ins: a CuPy-like array (its type lives in a cupy module) reports the GPU of its memory pointer;
    # the per-type answer is cached, so a later NumPy array is still a host array
    from knngraph._device import _cuda_device_of, _is_cupy, is_device_array

    class Pointer:
        device_id = 3

    CupyLike = type("ndarray", (), {"__module__": "cupy._core.core", "data": Pointer()})
    a = CupyLike()
    assert _is_cupy(a) and _is_cupy(CupyLike()) and _cuda_device_of(a) == 3 and is_device_array(a)
    x = np.zeros((2, 2), np.float32)
    assert not _is_cupy(x) and _cuda_device_of(x) is None and not is_device_array(x)
    NotCupy = type("ndarray", (), {"__module__": "cupyish.arrays"})
    assert not _is_cupy(NotCupy())


def test_checked_vectors_come_back_as_they_are_or_made_contiguous_and_float32():
    from knngraph._validate import check_vectors

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert check_vectors(x, "queries", on_gpu=False) is x
    t = check_vectors(x.T, "queries", on_gpu=False)
    assert t.flags.c_contiguous and (t == x.T).all()
    w = check_vectors(x.astype(np.float64), "queries", on_gpu=False)
    assert w.dtype == np.float32 and (w == x).all()
    assert (check_vectors([[1.0, 2.0], [3.0, 4.0]], "queries", on_gpu=False) == [[1, 2], [3, 4]]).all()
    with pytest.raises(TypeError, match="queries has dtype int32"):
        check_vectors(x.astype(np.int32), "queries", on_gpu=False)
    with pytest.raises(ValueError, match="queries is empty"):
        check_vectors(x[:0], "queries", on_gpu=False)
    with pytest.raises(ValueError, match="queries must be a 2-D array"):
        check_vectors(x[0], "queries", on_gpu=False)


@pytest.mark.parametrize("rows, bad_row", [(1, 0), (5, 4), (600, 599), (600, 0)])
def test_check_finite_names_the_first_bad_row_of_small_large_and_chunked_inputs(monkeypatch, rows, bad_row):
    from knngraph import _validate

    x = np.ones((rows, 40), np.float16)
    _validate.check_finite(x, "queries")  # finite: no error
    x[bad_row, 39] = np.inf
    x[-1, 0] = np.nan
    first = min(bad_row, rows - 1)
    with pytest.raises(ValueError, match=f"queries row {first} contains NaN or inf"):
        _validate.check_finite(x, "queries")
    monkeypatch.setattr(_validate, "_FINITE_CHUNK_ROWS", 64)  # the rows in chunks, each reduced whole
    with pytest.raises(ValueError, match=f"queries row {first} contains NaN or inf"):
        _validate.check_finite(x, "queries")
    with pytest.raises(ValueError, match=f"queries row {first} contains NaN or inf"):
        _validate.check_finite(x[:, ::-1], "queries")  # a strided view


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_nonfinite_flaggable_takes_contiguous_floats_only(dtype):
    """The GPU search defers its NaN check to the flag kernel exactly for the arrays the kernel takes."""
    from knngraph._validate import nonfinite_flaggable

    x = np.zeros((4, 6), dtype)
    assert nonfinite_flaggable(x)
    assert not nonfinite_flaggable(x[:, ::2])
    assert not nonfinite_flaggable(x.astype(np.int32))
    assert not nonfinite_flaggable(x.astype(np.uint8))
