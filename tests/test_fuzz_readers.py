"""Fuzz every file reader: valid files, then damaged ones (truncated, bytes flipped or overwritten, junk
appended, random header values). Reading must either give a correctly shaped array or raise one of the
documented exceptions (FileNotFoundError, ValueError, TypeError; a ValueError names the file); anything
else, or a crash, fails.

Each test runs a few seconds; ``KNNGRAPH_FUZZ_EXAMPLES=N`` runs N random examples per test instead (the
default run is derandomized, so it is the same on every machine).
"""

from __future__ import annotations

import hashlib
import io as stdio
import faulthandler
import json
import os
import re
import struct
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from knngraph import bruteforce, io, nndescent, song
from knngraph.graph import Graph, read_header, save_arrays

_LONG = int(os.environ.get("KNNGRAPH_FUZZ_EXAMPLES", "0"))


def fuzz(examples: int):
    """Hypothesis settings: ``examples`` by default, ``KNNGRAPH_FUZZ_EXAMPLES`` when set."""
    return settings(max_examples=_LONG or examples, deadline=None, derandomize=not _LONG, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


DOCUMENTED = (FileNotFoundError, ValueError, TypeError)
HANG_SECONDS = 60


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _put(path, data: bytes):
    # a new inode every time: a memmap of the previous example must never see the file change under it
    path.unlink(missing_ok=True)
    path.write_bytes(data)
    return path


def _outcome(path, call, *args, named: bool = True, **kwargs):
    """``call(*args, **kwargs)``, or None when it raised a documented exception (a ValueError naming the
    file, unless not ``named``); any other exception fails the test."""
    # a reader stuck in C code cannot be interrupted: print where it hangs and end the run
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        return call(*args, **kwargs)
    except DOCUMENTED as exc:
        if isinstance(exc, ValueError) and named:
            assert os.fspath(path) in str(exc), f"the message does not name the file: {exc}"
        return None
    finally:
        faulthandler.cancel_dump_traceback_later()


# ------------------------------------------------------------------------------ mutations

_POSITION = st.integers(0, 2**31 - 1)


@st.composite
def _mutation(draw, header_bytes: int = 16):
    kind = draw(st.sampled_from(["truncate", "flip", "overwrite", "header", "append", "insert", "delete"]))
    if kind == "truncate":
        return kind, draw(_POSITION)
    if kind == "flip":
        return kind, draw(st.lists(st.tuples(_POSITION, st.integers(1, 255)), min_size=1, max_size=6))
    if kind == "overwrite":
        return kind, (draw(_POSITION), draw(st.binary(min_size=1, max_size=12)))
    if kind == "header":  # random values in the first bytes, where the headers are
        return kind, (draw(st.integers(0, header_bytes)), draw(st.binary(min_size=1, max_size=8)))
    if kind == "append":
        return kind, draw(st.binary(min_size=1, max_size=64))
    if kind == "insert":
        return kind, (draw(_POSITION), draw(st.binary(min_size=1, max_size=16)))
    return kind, (draw(_POSITION), draw(st.integers(1, 64)))


def _apply(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, arg in mutations:
        n = max(len(out), 1)
        if kind == "truncate":
            del out[arg % (len(out) + 1):]
        elif kind == "flip":
            for pos, bits in arg:
                if out:
                    out[pos % n] ^= bits
        elif kind in ("overwrite", "header"):
            pos, blob = arg
            pos = pos % n if kind == "overwrite" else pos
            out[pos:pos + len(blob)] = blob
        elif kind == "append":
            out += arg
        elif kind == "insert":
            pos, blob = arg
            out[pos % n:pos % n] = blob
        else:
            pos, count = arg
            del out[pos % n:pos % n + count]
    return bytes(out)


MUTATIONS = st.lists(_mutation(), min_size=1, max_size=3)


def _array_for(dtype, draw, max_rows=12, max_cols=6):
    rows = draw(st.integers(0, max_rows))
    cols = draw(st.integers(1, max_cols))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal((rows, cols)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=(rows, cols), endpoint=True).astype(dtype)


# ------------------------------------------------------------------------------ vector files


def _check_vector_file(path):
    header = _outcome(path, io.read_header, path)
    for mmap in (True, False):
        got = _outcome(path, io.read, path, mmap=mmap)
        if got is None:
            continue
        assert isinstance(got, np.ndarray) and got.ndim == 2
        assert header is not None, "read succeeded where read_header failed"
        nrows, ncols, dtype = header
        assert got.shape == (nrows, ncols) and got.dtype == dtype
        np.ascontiguousarray(got).tobytes()  # every byte of it can be read
    if header is not None and header[0] > 0:
        got = _outcome(path, io.read, path, rows=(header[0] - 1, header[0]), mmap=False)
        assert got is None or got.shape == (1, header[1])


EXT_DTYPES = {".fbin": "<f4", ".ibin": "<i4", ".u8bin": "u1", ".i8bin": "i1",
              ".fvecs": "<f4", ".ivecs": "<i4", ".bvecs": "u1", ".npy": "<f4"}


@fuzz(300)
@given(data=st.data(), ext=st.sampled_from(sorted(EXT_DTYPES)), mutations=MUTATIONS)
def test_fuzz_vector_files(folder, data, ext, mutations):
    arr = _array_for(EXT_DTYPES[ext], data.draw)
    path = folder / f"valid{ext}"
    path.unlink(missing_ok=True)
    io.write(path, arr)
    got = io.read(path, mmap=False)
    assert np.array_equal(got, arr) or (ext.endswith("vecs") and arr.shape[0] == 0)
    damaged = _put(folder / f"damaged{ext}", _apply(path.read_bytes(), mutations))
    _check_vector_file(damaged)


@fuzz(300)
@given(ext=st.sampled_from([".fbin", ".ibin", ".u8bin", ".i8bin"]),
       nrows=st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1)),
       ncols=st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1)),
       payload=st.integers(0, 300))
def test_fuzz_bin_header_values(folder, ext, nrows, ncols, payload):
    path = _put(folder / f"header{ext}", struct.pack("<II", nrows, ncols) + bytes(payload))
    _check_vector_file(path)


@fuzz(300)
@given(ext=st.sampled_from([".fvecs", ".ivecs", ".bvecs"]),
       dims=st.lists(st.one_of(st.integers(-3, 6), st.integers(-2**31, 2**31 - 1)), min_size=1, max_size=4),
       width=st.integers(0, 30))
def test_fuzz_vecs_dimensions(folder, ext, dims, width):
    # rows whose stored dimensions disagree with each other or with the bytes that follow
    path = _put(folder / f"dims{ext}", b"".join(struct.pack("<i", d) + bytes(width) for d in dims))
    _check_vector_file(path)


_DESCRS = ["'<f4'", "'<i4'", "'|u1'", "'>f8'", "'|O'", "'<U3'", "'|V0'", "'|S0'", "('<f4', (2,))", "'<c8'",
           "[('a', '<f4'), ('b', '<i2')]", "'x'", "3", "[]", "[1, 2]", "('<f4',)", "'<M8[s]'", "'<f2'"]
_SHAPES = st.one_of(st.tuples(st.integers(-3, 6), st.integers(-3, 6)),
                    st.lists(st.one_of(st.integers(-3, 6), st.integers(-2**70, 2**70)), max_size=3).map(tuple))


@fuzz(300)
@given(version=st.sampled_from([(1, 0), (2, 0), (3, 0), (0, 1), (9, 9)]),
       descr=st.sampled_from(_DESCRS), shape=_SHAPES, fortran=st.sampled_from(["False", "True", "0", "None"]),
       payload=st.integers(0, 200), mutations=st.lists(_mutation(header_bytes=80), max_size=2))
def test_fuzz_npy_header_values(folder, version, descr, shape, fortran, payload, mutations):
    text = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}".encode() + b"\n"
    length = struct.pack("<H" if version[0] == 1 else "<I", len(text) % (1 << 16 if version[0] == 1 else 1 << 32))
    raw = b"\x93NUMPY" + bytes(version) + length + text + bytes(payload)
    path = _put(folder / "header.npy", _apply(raw, mutations))
    _check_vector_file(path)


@fuzz(300)
@given(data=st.data(), dtype=st.sampled_from(["<f4", ">f4", "<i8", "u1", "<f2", "|b1"]),
       fortran=st.booleans(), mutations=MUTATIONS)
def test_fuzz_npy_files(folder, data, dtype, fortran, mutations):
    arr = _array_for("<f4", data.draw).astype(dtype)
    path = folder / "valid.npy"
    path.unlink(missing_ok=True)
    io.write(path, np.asfortranarray(arr) if fortran else arr)
    assert np.array_equal(io.read(path), arr)
    _check_vector_file(_put(folder / "damaged.npy", _apply(path.read_bytes(), mutations)))


# ------------------------------------------------------------------------------ HDF5


_HDF5 = {}


def _hdf5_bytes(folder, variant: int) -> bytes:
    if variant not in _HDF5:
        rng = np.random.default_rng(variant)
        train = rng.standard_normal((20 + variant, 4)).astype(np.float32)
        test = train[:3]
        path = folder / f"base{variant}.hdf5"
        io.write_ann_benchmarks(path, train, test, np.zeros((3, 2), np.int32), np.zeros((3, 2), np.float32),
                                ["euclidean", "cosine", "inner_product"][variant])
        _HDF5[variant] = path.read_bytes()
    return _HDF5[variant]


def _libhdf5_loops(raw: bytes) -> bool:
    """Whether libhdf5 (1.14) would loop forever on ``raw``: it parses a global heap collection (where
    the variable-length string attribute ``distance`` lives) by stepping over objects by their size, and
    a free-space object (index 0) of size 0 never advances. Bytes past the end of the file read as 0."""
    for match in re.finditer(b"GCOL", raw):
        if match.start() + 16 > len(raw):
            continue
        size = struct.unpack_from("<Q", raw, match.start() + 8)[0]
        heap = raw[match.start():match.start() + size].ljust(min(size, 1 << 20), b"\0")
        at = 16
        while at + 16 <= len(heap):
            index, object_size = struct.unpack_from("<H", heap, at)[0], struct.unpack_from("<Q", heap, at + 8)[0]
            if index == 0 and object_size == 0:
                return True
            at += object_size if index == 0 else 16 + (object_size + 7) // 8 * 8
    return False


def test_libhdf5_loops_on_an_empty_free_space_object(folder):
    raw = bytearray(_hdf5_bytes(folder, 0))
    assert not _libhdf5_loops(bytes(raw))
    heap = raw.index(b"GCOL")
    raw[heap + 16:heap + 32] = bytes(16)
    assert _libhdf5_loops(bytes(raw))
    # the files it hangs on still open and read; only the metric attribute is out of reach
    path = _put(folder / "loops.hdf5", bytes(raw))
    assert io.read(path).shape == (20, 4)


@fuzz(300)
@given(variant=st.integers(0, 2), dataset=st.sampled_from([None, "test", "neighbors", "distances", "nope"]),
       mutations=st.lists(_mutation(header_bytes=2048), min_size=1, max_size=3))
def test_fuzz_hdf5(folder, variant, dataset, mutations):
    raw = _apply(_hdf5_bytes(folder, variant), mutations)
    assume(not _libhdf5_loops(raw))  # a libhdf5 bug, not knngraph's: see _libhdf5_loops
    path = _put(folder / "damaged.hdf5", raw)
    header = _outcome(path, io.read_header, path, dataset=dataset)
    got = _outcome(path, io.read, path, dataset=dataset)
    if got is not None:
        assert got.ndim == 2 and header is not None and got.shape == header[:2] and got.dtype == header[2]
    whole = _outcome(path, io.read_ann_benchmarks, path)
    if whole is not None:
        assert whole["metric"] in ("euclidean", "cosine", "inner_product")
        assert all(whole[k].ndim == 2 for k in ("train", "test", "neighbors", "distances"))


# ------------------------------------------------------------------------------ knngraph files

_SAVED = {}


def _saved_bytes(name: str) -> bytes:
    if name not in _SAVED:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((40, 4)).astype(np.float32)
        buf = stdio.BytesIO()
        if name == "graph":
            idx = rng.integers(0, 40, size=(40, 3), dtype=np.int32)
            Graph(idx, np.sort(rng.random((40, 3), dtype=np.float32), axis=1), "cosine", {"m": 1}).save(buf)
        elif name == "song":
            index = song.build(song.IndexParams(graph_degree=6, intermediate_graph_degree=12, hash_bits=32), x,
                               device="cpu", verbose=False)
            song.save(buf, index)
        elif name == "bruteforce":
            bruteforce.save(buf, bruteforce.build(bruteforce.IndexParams(graph_degree=3), x, device="cpu",
                                                  verbose=False))
        else:
            nndescent.save(buf, nndescent.build(nndescent.IndexParams(graph_degree=4), x, device="cpu",
                                                verbose=False))
        _SAVED[name] = buf.getvalue()
    return _SAVED[name]


_LOADERS = {"graph": Graph.load, "song": song.load, "bruteforce": bruteforce.load, "nndescent": nndescent.load}


def _check_knngraph_file(path, name):
    header = _outcome(path, read_header, path)
    assert header is None or isinstance(header, dict)
    got = _outcome(path, _LOADERS[name], path)
    if got is None:
        return
    assert header is not None, "load succeeded where read_header failed"
    graph = got if name == "graph" else got.graph
    if graph is not None:
        assert graph.indices.ndim == 2 and graph.indices.shape == graph.distances.shape
        assert graph.indices.dtype == np.int32 and graph.distances.dtype == np.float32
    if name != "graph":
        assert np.asarray(got.dataset).shape == (40, 4)


@fuzz(300)
@given(name=st.sampled_from(sorted(_LOADERS)), mutations=st.lists(_mutation(header_bytes=200), min_size=1,
                                                                  max_size=3))
def test_fuzz_knngraph_files(folder, name, mutations):
    path = _put(folder / f"damaged-{name}.knng", _apply(_saved_bytes(name), mutations))
    _check_knngraph_file(path, name)


_JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                          st.sampled_from(["", "graph", "knngraph", "cosine", "euclidean", "abc", "song-index"]))
_JSON = st.recursive(_JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "metric", "params", "info", "x"]), inner,
                                                 max_size=3)), max_leaves=8)
_HEADER_KEYS = ["format", "version", "kind", "sha256", "meta"]


def _reseal(raw: bytes, change) -> bytes:
    """``raw`` with its meta.json header changed by ``change(header)`` (the checksum kept valid)."""
    with zipfile.ZipFile(stdio.BytesIO(raw)) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    header = change(json.loads(members.pop("meta.json")))
    blobs = {n[:-4]: b for n, b in members.items() if n.endswith(".npy")}
    if isinstance(header, dict) and header.get("sha256") == "reseal":
        digest = hashlib.sha256()
        for n in sorted(blobs):
            digest.update(n.encode())
            digest.update(blobs[n])
        header["sha256"] = digest.hexdigest()
    buf = stdio.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("meta.json", json.dumps(header))
        for n, b in blobs.items():
            zf.writestr(n + ".npy", b)
    return buf.getvalue()


@fuzz(300)
@given(name=st.sampled_from(sorted(_LOADERS)), data=st.data())
def test_fuzz_knngraph_header_values(folder, name, data):
    # valid JSON but any values: the header fields, the meta entries and the index params
    def change(header):
        where = data.draw(st.sampled_from(["header", "meta", "params", "whole"]))
        if where == "whole":
            return data.draw(_JSON)
        target = header if where == "header" else header.get("meta", {})
        if where == "params":
            target = target.get("params", {})
        keys = sorted(target) if target else ["x"]
        key = data.draw(st.sampled_from(keys + ["unknown"]))
        if data.draw(st.booleans()):
            target.pop(key, None)
        else:
            target[key] = data.draw(_JSON)
        if where != "header" or key != "sha256":
            header["sha256"] = "reseal"
        return header

    path = _put(folder / f"header-{name}.knng", _reseal(_saved_bytes(name), change))
    _check_knngraph_file(path, name)


_MEMBER_DTYPES = st.sampled_from(["<i4", "<f4", "<f8", "<i8", "u1", ">i4", "|b1"])


@fuzz(300)
@given(data=st.data())
def test_fuzz_graph_arrays(folder, data):
    # well-formed, checksummed files whose arrays are anything
    members = {}
    for member in data.draw(st.lists(st.sampled_from(["indices", "distances", "other"]), unique=True)):
        ndim = data.draw(st.integers(0, 3))
        shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
        members[member] = np.zeros(shape, dtype=data.draw(_MEMBER_DTYPES))
    buf = stdio.BytesIO()
    save_arrays(buf, "graph", members, {"metric": data.draw(st.sampled_from(["cosine", "l2", "nope"]))})
    path = _put(folder / "arrays.knng", buf.getvalue())
    _check_knngraph_file(path, "graph")
