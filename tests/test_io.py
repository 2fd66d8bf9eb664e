"""Tests for knngraph.io: round trips of every format, row ranges, memmap, every error."""

from __future__ import annotations

import os
import re
import struct

import h5py
import numpy as np
import pytest

from knngraph import io

# extension -> dtype written and read back
FORMATS = {
    ".fvecs": np.float32,
    ".ivecs": np.int32,
    ".bvecs": np.uint8,
    ".fbin": np.float32,
    ".ibin": np.int32,
    ".u8bin": np.uint8,
    ".i8bin": np.int8,
    ".npy": np.float32,
}
BINARY = [ext for ext in FORMATS if ext.endswith("bin")]
VECS = [ext for ext in FORMATS if ext.endswith("vecs")]


def _array(dtype, shape=(11, 7), seed=0):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


@pytest.fixture(params=list(FORMATS))
def written(request, tmp_path):
    ext = request.param
    arr = _array(FORMATS[ext])
    path = tmp_path / f"data{ext}"
    io.write(path, arr)
    return path, arr


# ---------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip(written, mmap):
    path, arr = written
    got = io.read(path, mmap=mmap)
    assert got.dtype == arr.dtype
    assert got.shape == arr.shape
    np.testing.assert_array_equal(got, arr)
    if mmap:
        assert isinstance(got, np.memmap)
        assert not got.flags.writeable
    else:
        assert not isinstance(got, np.memmap)
        assert got.flags.writeable and got.flags.c_contiguous


def test_round_trip_str_path(written):
    path, arr = written
    np.testing.assert_array_equal(io.read(str(path)), arr)


def test_read_header(written):
    path, arr = written
    assert io.read_header(path) == (arr.shape[0], arr.shape[1], arr.dtype)


@pytest.mark.parametrize(
    "rows, expected",
    [
        (slice(2, 5), slice(2, 5)),
        ((2, 5), slice(2, 5)),
        (slice(None, 3), slice(0, 3)),
        (slice(8, None), slice(8, 11)),
        (slice(-3, None), slice(8, 11)),
        ((0, 11), slice(0, 11)),
        (slice(4, 4), slice(4, 4)),
        ((11, 11), slice(11, 11)),
        (slice(1, 3, 1), slice(1, 3)),
        ((np.int64(1), np.int32(3)), slice(1, 3)),
    ],
)
@pytest.mark.parametrize("mmap", [True, False])
def test_read_rows(written, rows, expected, mmap):
    path, arr = written
    got = io.read(path, rows=rows, mmap=mmap)
    np.testing.assert_array_equal(got, arr[expected])
    assert got.shape == arr[expected].shape
    assert got.dtype == arr.dtype


def test_vecs_mmap_is_strided_view(tmp_path):
    arr = _array(np.float32)
    path = tmp_path / "x.fvecs"
    io.write(path, arr)
    got = io.read(path, rows=(3, 6))
    assert isinstance(got, np.memmap)
    assert got.strides == (4 + 4 * arr.shape[1], 4)  # skips the per-row dim column
    assert not got.flags.c_contiguous
    copy = io.read(path, rows=(3, 6), mmap=False)
    assert copy.flags.c_contiguous


@pytest.mark.parametrize("ext", BINARY)
def test_bin_layout(tmp_path, ext):
    arr = _array(FORMATS[ext], shape=(3, 5))
    path = tmp_path / f"x{ext}"
    io.write(path, arr)
    raw = path.read_bytes()
    assert np.frombuffer(raw[:8], dtype="<u4").tolist() == [3, 5]
    assert raw[8:] == arr.astype(arr.dtype.newbyteorder("<")).tobytes()


@pytest.mark.parametrize("ext", VECS)
def test_vecs_layout(tmp_path, ext):
    arr = _array(FORMATS[ext], shape=(3, 5))
    path = tmp_path / f"x{ext}"
    io.write(path, arr)
    raw = path.read_bytes()
    row = 4 + 5 * arr.dtype.itemsize
    assert len(raw) == 3 * row
    for i in range(3):
        assert np.frombuffer(raw[i * row : i * row + 4], dtype="<i4")[0] == 5
        assert raw[i * row + 4 : (i + 1) * row] == arr[i].tobytes()


def test_write_big_endian_input(tmp_path):
    arr = _array(np.float32).astype(">f4")
    path = tmp_path / "x.fbin"
    io.write(path, arr)
    got = io.read(path)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, arr)


def test_write_non_contiguous_input(tmp_path):
    arr = _array(np.int32, shape=(10, 8))[::2, ::3]
    for ext in (".ibin", ".ivecs", ".npy"):
        path = tmp_path / f"x{ext}"
        io.write(path, arr)
        np.testing.assert_array_equal(io.read(path), arr)


def test_npy_fortran_order(tmp_path):
    arr = np.asfortranarray(_array(np.float64, shape=(9, 4)))
    path = tmp_path / "x.npy"
    np.save(path, arr)
    np.testing.assert_array_equal(io.read(path, rows=(2, 7)), arr[2:7])
    np.testing.assert_array_equal(io.read(path, rows=(2, 7), mmap=False), arr[2:7])


@pytest.mark.parametrize("ext", BINARY + [".npy"])
def test_empty_array_round_trip(tmp_path, ext):
    arr = np.empty((0, 6), dtype=FORMATS[ext])
    path = tmp_path / f"x{ext}"
    io.write(path, arr)
    got = io.read(path)
    assert got.shape == (0, 6) and got.dtype == arr.dtype
    assert io.read_header(path) == (0, 6, arr.dtype)


@pytest.mark.parametrize("ext", VECS)
def test_empty_vecs_has_no_dimension(tmp_path, ext):
    path = tmp_path / f"x{ext}"
    io.write(path, np.empty((0, 6), dtype=FORMATS[ext]))
    assert path.stat().st_size == 0
    assert io.read(path).shape == (0, 0)
    assert io.read_header(path)[:2] == (0, 0)


def test_extension_is_case_insensitive(tmp_path):
    arr = _array(np.uint8)
    path = tmp_path / "X.U8BIN"
    io.write(path, arr)
    np.testing.assert_array_equal(io.read(path), arr)


# ---------------------------------------------------------------------------
# atomic writes
# ---------------------------------------------------------------------------


def test_write_replaces_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "x.fbin"
    io.write(path, np.zeros((4, 3), np.float32))
    io.write(path, np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(io.read(path), np.ones((2, 3), np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.fbin"]


def test_failed_write_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "x.ivecs"
    old = _array(np.int32)
    io.write(path, old)

    def fail(src, dst):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(io.os, "replace", fail)
    with pytest.raises(OSError, match="simulated"):
        io.write(path, np.zeros((2, 2), np.int32))
    monkeypatch.undo()
    np.testing.assert_array_equal(io.read(path), old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.ivecs"]


def test_rejected_write_keeps_old_file(tmp_path):
    path = tmp_path / "x.u8bin"
    old = _array(np.uint8)
    io.write(path, old)
    with pytest.raises(TypeError):
        io.write(path, old.astype(np.float32))
    np.testing.assert_array_equal(io.read(path), old)


def test_write_missing_directory(tmp_path):
    target = tmp_path / "nope" / "x.fbin"
    with pytest.raises(FileNotFoundError) as err:
        io.write(target, np.zeros((1, 1), np.float32))
    assert str(err.value) == f"[Errno 2] cannot write there, directory {tmp_path / 'nope'} does not exist: '{target}'"


def test_write_error_on_the_temp_file_names_the_target(tmp_path, monkeypatch):
    def fail(tmp):
        raise PermissionError(13, "Permission denied", str(tmp))

    monkeypatch.setattr(io, "_open_new", fail)
    with pytest.raises(PermissionError, match=r"\[Errno 13\] Permission denied: '.*x\.fbin'$"):
        io.write(tmp_path / "x.fbin", np.zeros((1, 1), np.float32))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# errors: arguments
# ---------------------------------------------------------------------------


def test_missing_file(tmp_path):
    path = tmp_path / "missing.fbin"
    with pytest.raises(FileNotFoundError, match="missing.fbin"):
        io.read(path)
    with pytest.raises(FileNotFoundError, match="missing.fbin"):
        io.read_header(path)
    with pytest.raises(FileNotFoundError, match="missing.hdf5"):
        io.read_ann_benchmarks(tmp_path / "missing.hdf5")


def test_directory_is_not_a_file(tmp_path):
    (tmp_path / "dir.fbin").mkdir()
    with pytest.raises(IsADirectoryError, match="dir.fbin"):
        io.read(tmp_path / "dir.fbin")


@pytest.mark.parametrize("name", ["x.txt", "x", "x.bin", "x.fvec"])
def test_unknown_extension(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"\0" * 16)
    expected = r"unknown vector file extension.*\.fvecs, \.ivecs, \.bvecs, \.fbin.*\.npy, \.hdf5, \.h5"
    with pytest.raises(ValueError, match=expected):
        io.read(path)
    with pytest.raises(ValueError, match=expected):
        io.read_header(path)
    with pytest.raises(ValueError, match=expected):
        io.write(path, np.zeros((1, 1), np.float32))


@pytest.mark.parametrize(
    "ext, given",
    [
        (".fvecs", np.float64),
        (".ivecs", np.int64),
        (".bvecs", np.int8),
        (".fbin", np.float16),
        (".ibin", np.uint32),
        (".u8bin", np.float32),
        (".i8bin", np.uint8),
    ],
)
def test_write_wrong_dtype(tmp_path, ext, given):
    path = tmp_path / f"vectors{ext}"
    fmt = np.dtype(FORMATS[ext]).name
    with pytest.raises(
        TypeError,
        match=rf"vectors\{ext}: \{ext} files store {fmt} but the array is {np.dtype(given).name}",
    ):
        io.write(path, np.zeros((2, 3), dtype=given))
    assert not path.exists()


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), ()])
@pytest.mark.parametrize("ext", list(FORMATS))
def test_write_not_2d(tmp_path, ext, shape):
    with pytest.raises(ValueError, match=rf"expected a 2-D array.*got a {len(shape)}-D"):
        io.write(tmp_path / f"x{ext}", np.zeros(shape, dtype=FORMATS[ext]))


@pytest.mark.parametrize("ext", BINARY + VECS)
def test_write_rows_without_columns(tmp_path, ext):
    with pytest.raises(ValueError, match="3 rows but no columns"):
        io.write(tmp_path / f"x{ext}", np.zeros((3, 0), dtype=FORMATS[ext]))


def test_write_object_npy(tmp_path):
    with pytest.raises(TypeError, match="object arrays cannot be written"):
        io.write(tmp_path / "x.npy", np.array([[object()]], dtype=object))


@pytest.mark.parametrize("ext", [".hdf5", ".h5"])
def test_write_refuses_hdf5(tmp_path, ext):
    with pytest.raises(ValueError, match="use write_ann_benchmarks"):
        io.write(tmp_path / f"x{ext}", np.zeros((2, 2), np.float32))


@pytest.mark.parametrize(
    "rows",
    [(0, 12), (5, 3), (-20, 2), slice(0, 100), slice(12, None), (12, 12), slice(-12, None)],
)
def test_rows_out_of_range(written, rows):
    path, _ = written
    with pytest.raises(ValueError, match=r"out of range for a file with 11 rows"):
        io.read(path, rows=rows)


def test_rows_step(written):
    path, _ = written
    with pytest.raises(ValueError, match="only slices with step 1"):
        io.read(path, rows=slice(0, 6, 2))


@pytest.mark.parametrize("rows", [[0, 3], (0, 3, 1), 5, (0.0, 3), ("a", None)])
def test_rows_wrong_type(written, rows):
    path, _ = written
    with pytest.raises(TypeError, match="rows"):
        io.read(path, rows=rows)


def test_dataset_only_for_hdf5(written):
    path, _ = written
    with pytest.raises(ValueError, match="dataset= only applies to HDF5"):
        io.read(path, dataset="train")


# ---------------------------------------------------------------------------
# errors: truncated and corrupt files
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("ext", BINARY)
@pytest.mark.parametrize("cut", [1, 7, "header"])
def test_truncated_bin(tmp_path, ext, cut):
    arr = _array(FORMATS[ext])
    path = tmp_path / f"sift{ext}"
    io.write(path, arr)
    data = path.read_bytes()
    full = len(data)
    keep = 5 if cut == "header" else full - cut
    path.write_bytes(data[:keep])
    if cut == "header":
        expected = r"sift\.\w+: the file has 5 bytes, too few for the 8-byte header"
    else:
        name = np.dtype(FORMATS[ext]).name
        expected = rf"sift\.\w+: header says 11 x 7 {name} \({full} bytes\) but the file has {keep} bytes"
    for call in (io.read, io.read_header):
        with pytest.raises(ValueError, match=expected):
            call(path)


def test_bin_error_message_example(tmp_path):
    path = tmp_path / "sift.fbin"
    path.write_bytes(np.array([1000, 128], "<u4").tobytes() + b"\0" * 4088)
    with pytest.raises(
        ValueError,
        match=re.escape("sift.fbin: header says 1000 x 128 float32 (512008 bytes) but the file has 4096 bytes"),
    ):
        io.read(path)


@pytest.mark.parametrize("ext", BINARY)
def test_bin_trailing_bytes(tmp_path, ext):
    path = tmp_path / f"x{ext}"
    io.write(path, _array(FORMATS[ext]))
    with open(path, "ab") as f:
        f.write(b"\0" * 4)
    with pytest.raises(ValueError, match="header says 11 x 7"):
        io.read(path)


def test_bin_rows_without_columns(tmp_path):
    path = tmp_path / "x.fbin"
    path.write_bytes(np.array([5, 0], "<u4").tobytes())
    with pytest.raises(ValueError, match="header says 5 rows of 0 columns"):
        io.read(path)


@pytest.mark.parametrize("ext", VECS)
@pytest.mark.parametrize("cut", [1, 5])
def test_truncated_vecs(tmp_path, ext, cut):
    arr = _array(FORMATS[ext])
    path = tmp_path / f"sift{ext}"
    io.write(path, arr)
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    row = 4 + 7 * arr.dtype.itemsize
    expected = (
        rf"sift\.\w+: the file has {len(data) - cut} bytes, not a multiple of the row size "
        rf"{row} bytes \(int32 dimension 7"
    )
    for call in (io.read, io.read_header):
        with pytest.raises(ValueError, match=expected):
            call(path)


@pytest.mark.parametrize("ext", VECS)
def test_vecs_too_short_for_dim(tmp_path, ext):
    path = tmp_path / f"x{ext}"
    path.write_bytes(b"\1\0")
    with pytest.raises(ValueError, match="has 2 bytes, too few for the int32 dimension"):
        io.read(path)


@pytest.mark.parametrize("ext", VECS)
@pytest.mark.parametrize("mmap", [True, False])
def test_vecs_inconsistent_dim(tmp_path, ext, mmap):
    arr = _array(FORMATS[ext])
    path = tmp_path / f"x{ext}"
    io.write(path, arr)
    row = 4 + 7 * arr.dtype.itemsize
    data = bytearray(path.read_bytes())
    data[6 * row : 6 * row + 4] = np.array([9], "<i4").tobytes()  # size stays a multiple
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"row 6 says its dimension is 9 but row 0 says 7"):
        io.read(path, mmap=mmap)
    with pytest.raises(ValueError, match=r"row 6 says its dimension is 9"):
        io.read(path, rows=(5, 8), mmap=mmap)
    # rows that do not include the bad one read fine
    np.testing.assert_array_equal(io.read(path, rows=(0, 6), mmap=mmap), arr[:6])


@pytest.mark.parametrize("ext", VECS)
@pytest.mark.parametrize("dim", [0, -3])
def test_vecs_non_positive_dim(tmp_path, ext, dim):
    path = tmp_path / f"x{ext}"
    path.write_bytes(np.array([dim, 0, 0, 0], "<i4").tobytes())
    with pytest.raises(ValueError, match=rf"row 0 says its dimension is {dim}; it must be positive"):
        io.read(path)


@pytest.mark.parametrize("cut", [1, 100, "header"])
def test_truncated_npy(tmp_path, cut):
    arr = _array(np.float32)
    path = tmp_path / "x.npy"
    io.write(path, arr)
    data = path.read_bytes()
    if cut == "header":
        path.write_bytes(data[:20])
        expected = r"x\.npy: not a valid \.npy file"
    else:
        path.write_bytes(data[:-cut])
        expected = rf"x\.npy: header says 11 x 7 float32 \({len(data)} bytes\) but the file has {len(data) - cut} bytes"
    for call in (io.read, io.read_header):
        with pytest.raises(ValueError, match=expected):
            call(path)


def test_npy_not_npy(tmp_path):
    path = tmp_path / "x.npy"
    path.write_bytes(b"hello, this is not numpy")
    with pytest.raises(ValueError, match=r"x\.npy: not a valid \.npy file"):
        io.read(path)


def _npy_bytes(header: bytes, payload: bytes = b"", version=(1, 0)) -> bytes:
    length = struct.pack("<H" if version == (1, 0) else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + length + header + payload


@pytest.mark.parametrize("header, payload, message", [
    # header text that numpy's parser fails on with tokenize.TokenError, IndexError, ...
    (b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3\n", b"", r"not a valid \.npy file"),
    (b"(" * 300 + b"\n", b"", r"not a valid \.npy file"),
    (b"{'descr': ('<f4',), 'fortran_order': False, 'shape': (1, 1), }\n", b"", r"not a valid \.npy file"),
    (b"{'descr': [1, 2], 'fortran_order': False, 'shape': (1, 1), }\n", b"", r"not a valid \.npy file"),
    (b"{'descr': '<f4', 'fortran_order': 0, 'shape': (1, 1), }\n", b"", r"not a valid \.npy file"),
    (b"{'descr': '<f4', 'fortran_order': False, 'shape': (1.5, 1), }\n", b"", r"not a valid \.npy file"),
    (b"\xff\xfe", b"", r"not a valid \.npy file"),
    (b"{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3), }\n", bytes(24),
     r"the header gives the impossible shape \(-2, -3\)"),
    (b"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904), }\n", b"",
     r"the header gives the impossible shape"),
    (b"{'descr': ('<f4', (2,)), 'fortran_order': False, 'shape': (1, 1), }\n", bytes(8),
     r"holds elements of dtype dtype\(\('<f4', \(2,\)\)\); the file is corrupt"),
    (b"{'descr': '|S0', 'fortran_order': False, 'shape': (3, 3), }\n", b"",
     r"holds elements of dtype dtype\('S'\); the file is corrupt"),
    (b"{'descr': '|O', 'fortran_order': False, 'shape': (1, 1), }\n", bytes(8), r"holds Python objects"),
    (b"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }\n", bytes(24),
     r"header says 2 x 3 float64 \(\d+ bytes\) but the file has \d+ bytes"),
])
def test_npy_malformed_header(tmp_path, header, payload, message):
    path = tmp_path / "x.npy"
    path.write_bytes(_npy_bytes(header, payload))
    for call in (io.read, io.read_header):
        with pytest.raises(ValueError, match=r"x\.npy: " + message):
            call(path)


@pytest.mark.parametrize("version", [(0, 1), (4, 0), (9, 9)])
def test_npy_unsupported_version(tmp_path, version):
    path = tmp_path / "x.npy"
    path.write_bytes(_npy_bytes(b"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1), }\n", version=version))
    with pytest.raises(ValueError, match=rf"x\.npy: not a valid \.npy file \(unsupported \.npy format version "
                                         rf"{version[0]}\.{version[1]}\)"):
        io.read(path)


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4)])
def test_npy_not_2d(tmp_path, shape):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match=rf"holds a {len(shape)}-D array"):
        io.read(path)


def test_truncated_hdf5(tmp_path):
    path = tmp_path / "x.hdf5"
    x = _array(np.float32)
    io.write_ann_benchmarks(path, x, x[:2], np.zeros((2, 1), np.int32), np.zeros((2, 1), np.float32), "euclidean")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"x\.hdf5: not a readable HDF5 file"):
        io.read(path)
    with pytest.raises(ValueError, match=r"x\.hdf5: not a readable HDF5 file"):
        io.read_ann_benchmarks(path)


# ---------------------------------------------------------------------------
# HDF5 (ann-benchmarks)
# ---------------------------------------------------------------------------


def _ann_arrays(seed=0):
    rng = np.random.default_rng(seed)
    train = rng.standard_normal((50, 8)).astype(np.float32)
    test = rng.standard_normal((6, 8)).astype(np.float32)
    d = ((test[:, None, :].astype(np.float64) - train[None, :, :]) ** 2).sum(-1)
    neighbors = np.argsort(d, axis=1)[:, :5].astype(np.int32)
    distances = np.sqrt(np.take_along_axis(d, neighbors, axis=1)).astype(np.float32)
    return train, test, neighbors, distances


@pytest.mark.parametrize(
    "metric, stored", [("euclidean", "euclidean"), ("cosine", "angular"), ("inner_product", "dot")]
)
@pytest.mark.parametrize("ext", [".hdf5", ".h5"])
def test_hdf5_round_trip(tmp_path, metric, stored, ext):
    train, test, neighbors, distances = _ann_arrays()
    path = tmp_path / f"toy{ext}"
    io.write_ann_benchmarks(path, train, test, neighbors, distances, metric)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    with h5py.File(path, "r") as f:
        assert f.attrs["distance"] == stored
        assert int(f.attrs["dimension"]) == 8
    data = io.read_ann_benchmarks(path)
    assert set(data) == {"train", "test", "neighbors", "distances", "metric"}
    assert data["metric"] == metric
    for key, arr in zip(("train", "test", "neighbors", "distances"), (train, test, neighbors, distances)):
        assert data[key].dtype == arr.dtype
        np.testing.assert_array_equal(data[key], arr)
    # read() and read_header() on HDF5
    np.testing.assert_array_equal(io.read(path), train)
    np.testing.assert_array_equal(io.read(path, dataset="test", rows=(1, 4)), test[1:4])
    np.testing.assert_array_equal(io.read(path, dataset="neighbors", rows=slice(-2, None)), neighbors[-2:])
    assert io.read_header(path) == (50, 8, np.dtype(np.float32))
    assert io.read_header(path, dataset="neighbors") == (6, 5, np.dtype(np.int32))
    with pytest.raises(ValueError, match="out of range for a file with 6 rows"):
        io.read(path, dataset="test", rows=(0, 7))


def _raw_hdf5(path, distance, as_bytes=False):
    train, test, neighbors, distances = _ann_arrays()
    with h5py.File(path, "w") as f:
        if distance is not None:
            f.attrs["distance"] = np.bytes_(distance) if as_bytes else distance
        f.create_dataset("train", data=train)
        f.create_dataset("test", data=test)
        f.create_dataset("neighbors", data=neighbors)
        f.create_dataset("distances", data=distances)


@pytest.mark.parametrize(
    "distance, metric",
    [("euclidean", "euclidean"), ("angular", "cosine"), ("dot", "inner_product"), ("ip", "inner_product")],
)
@pytest.mark.parametrize("as_bytes", [False, True])
def test_hdf5_metric_mapping(tmp_path, distance, metric, as_bytes):
    path = tmp_path / "x.hdf5"
    _raw_hdf5(path, distance, as_bytes)
    assert io.read_ann_benchmarks(path)["metric"] == metric


@pytest.mark.parametrize("distance", ["jaccard", "hamming"])
def test_hdf5_unsupported_metric(tmp_path, distance):
    path = tmp_path / "x.hdf5"
    _raw_hdf5(path, distance)
    with pytest.raises(ValueError, match=rf"metric '{distance}' .*is not supported"):
        io.read_ann_benchmarks(path)


def test_hdf5_unknown_metric(tmp_path):
    path = tmp_path / "x.hdf5"
    _raw_hdf5(path, "manhattan")
    with pytest.raises(ValueError, match="unknown ann-benchmarks metric 'manhattan'; supported are euclidean, angular"):
        io.read_ann_benchmarks(path)


def test_hdf5_missing_distance_attribute(tmp_path):
    path = tmp_path / "x.hdf5"
    _raw_hdf5(path, None)
    with pytest.raises(ValueError, match="no 'distance' attribute"):
        io.read_ann_benchmarks(path)


def test_hdf5_missing_dataset(tmp_path):
    path = tmp_path / "x.hdf5"
    _raw_hdf5(path, "euclidean")
    with h5py.File(path, "a") as f:
        del f["distances"]
    with pytest.raises(ValueError, match=r"no dataset 'distances'.*'neighbors', 'test', 'train'"):
        io.read_ann_benchmarks(path)
    with pytest.raises(ValueError, match="no dataset 'nope'"):
        io.read(path, dataset="nope")


def test_read_ann_benchmarks_wrong_extension(tmp_path):
    with pytest.raises(ValueError, match="read_ann_benchmarks reads HDF5 files"):
        io.read_ann_benchmarks(tmp_path / "x.fbin")


def test_write_ann_benchmarks_errors(tmp_path):
    train, test, neighbors, distances = _ann_arrays()
    path = tmp_path / "x.hdf5"
    with pytest.raises(ValueError, match="metric must be one of 'euclidean', 'cosine', 'inner_product', got 'angular'"):
        io.write_ann_benchmarks(path, train, test, neighbors, distances, "angular")
    with pytest.raises(ValueError, match="write_ann_benchmarks writes HDF5"):
        io.write_ann_benchmarks(tmp_path / "x.fbin", train, test, neighbors, distances, "euclidean")
    with pytest.raises(ValueError, match="train: expected a 2-D array"):
        io.write_ann_benchmarks(path, train[0], test, neighbors, distances, "euclidean")
    with pytest.raises(ValueError, match="test: expected 8 columns like train, got 7"):
        io.write_ann_benchmarks(path, train, test[:, :7], neighbors, distances, "euclidean")
    with pytest.raises(ValueError, match="distances: expected the shape of neighbors"):
        io.write_ann_benchmarks(path, train, test, neighbors, distances[:, :3], "euclidean")
    with pytest.raises(ValueError, match="neighbors: expected one row per test query"):
        io.write_ann_benchmarks(path, train, test[:4], neighbors, distances, "euclidean")
    with pytest.raises(TypeError, match="neighbors: expected an integer array"):
        io.write_ann_benchmarks(path, train, test, neighbors.astype(np.float32), distances, "euclidean")
    with pytest.raises(TypeError, match="distances: expected a floating-point array"):
        io.write_ann_benchmarks(path, train, test, neighbors, neighbors, "euclidean")
    assert list(tmp_path.iterdir()) == []


def test_read_hdf5_dataset_not_2d(tmp_path):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("train", data=np.zeros(5, np.float32))
    with pytest.raises(ValueError, match=r"dataset 'train' has shape \(5,\); expected 2-D"):
        io.read(path)


@pytest.mark.parametrize("make, message", [
    (lambda f: f.create_dataset("train", data=1.0), r"dataset 'train' has shape \(\); expected 2-D"),
    (lambda f: f.create_dataset("train", shape=None, dtype="f4"), r"dataset 'train' has shape None; expected 2-D"),
    (lambda f: f.create_dataset("train", data=np.array([["a"]], dtype=object), dtype=h5py.string_dtype()),
     r"dataset 'train' has dtype object; expected a numeric dataset"),
    (lambda f: f.create_dataset("train", shape=(2, 2), dtype=np.dtype(("f4", (3,)))),
     r"dataset 'train' has dtype \('<f4', \(3,\)\); expected a numeric dataset"),
    (lambda f: f.create_group("train"), r"no dataset 'train' in this HDF5 file; it has 'x'"),
    (lambda f: f.__setitem__("train", h5py.SoftLink("/nowhere")), r"no dataset 'train' in this HDF5 file"),
    (lambda f: f.__setitem__("train", h5py.ExternalLink("missing.h5", "/x")), r"no dataset 'train' in this HDF5"),
])
def test_read_hdf5_unusable_dataset(tmp_path, make, message):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.zeros((2, 2), np.float32))
        make(f)
    for call in (io.read, io.read_header):
        with pytest.raises(ValueError, match=r"x\.h5: " + message):
            call(path)


@pytest.mark.parametrize("where", [0, 0.1, 0.3, 0.5, 0.7, 0.9])
def test_damaged_hdf5(tmp_path, where):
    # a run of bytes zeroed anywhere: superblock, object headers, B-trees, heaps or data
    path = tmp_path / "x.hdf5"
    train, test, neighbors, distances = _ann_arrays()
    io.write_ann_benchmarks(path, train, test, neighbors, distances, "euclidean")
    raw = bytearray(path.read_bytes())
    start = int(len(raw) * where)
    raw[start:start + 64] = bytes(64)
    path.write_bytes(bytes(raw))
    for call in (io.read, io.read_header, io.read_ann_benchmarks):
        try:
            call(path)
        except ValueError as exc:
            assert str(exc).startswith(f"{path}: "), exc


def test_hdf5_not_hdf5(tmp_path):
    path = tmp_path / "x.hdf5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8)
    for call in (io.read, io.read_header, io.read_ann_benchmarks):
        with pytest.raises(ValueError, match=r"x\.hdf5: not a readable HDF5 file, or it is corrupt \(OSError: "):
            call(path)


def test_module_exports():
    assert set(io.__all__) >= {"read", "read_header", "read_ann_benchmarks", "write", "write_ann_benchmarks"}
    assert os.path.splitext("a.u8bin")[1] in io.SUPPORTED_EXTENSIONS
