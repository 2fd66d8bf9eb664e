"""knngraph's own files (``Graph.save/load``, every index's ``save/load`` through ``save_arrays`` /
``load_arrays``): damaged, hand-edited or foreign files give ValueError naming the file, saves leave
nothing behind, files get the permissions ``open()`` would give, and file objects work like paths."""

from __future__ import annotations

import hashlib
import io as stdio
import json
import os
import re
import struct
import sys
import time
import zipfile

import numpy as np
import pytest

from knngraph import bruteforce, graph as graph_mod, io, nndescent, song
from knngraph.graph import Graph, load_arrays, read_header, save_arrays

POSIX = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")


def _graph(n=20, degree=4, seed=0) -> Graph:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n, degree), dtype=np.int32)
    dist = np.sort(rng.random((n, degree), dtype=np.float32), axis=1)
    return Graph(idx, dist, "euclidean", {"method": "test"})


def _same(a: Graph, b: Graph) -> None:
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.distances, b.distances)
    assert a.metric == b.metric and a.info == b.info


def _members(data: bytes) -> dict:
    with zipfile.ZipFile(stdio.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _zip(members: dict) -> bytes:
    buf = stdio.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)
    return buf.getvalue()


def _edit(path, header_change=None, members_change=None, *, reseal=True) -> None:
    """Rewrite a knngraph file: change its meta.json header and/or its .npy members (name -> bytes, None
    removes); ``reseal`` recomputes the checksum so that only the edit is wrong."""
    members = _members(path.read_bytes())
    header = json.loads(members.pop("meta.json"))
    blobs = {n[:-4]: b for n, b in members.items()}
    for name, blob in (members_change or {}).items():
        if blob is None:
            blobs.pop(name)
        else:
            blobs[name] = blob
    if reseal:
        digest = hashlib.sha256()
        for name in sorted(blobs):
            digest.update(name.encode())
            digest.update(blobs[name])
        header["sha256"] = digest.hexdigest()
    if callable(header_change):
        header = header_change(header)
    meta = header if isinstance(header, (str, bytes)) else json.dumps(header)
    path.write_bytes(_zip({"meta.json": meta, **{n + ".npy": b for n, b in blobs.items()}}))


def _npy(arr) -> bytes:
    buf = stdio.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


@pytest.fixture
def saved(tmp_path):
    g = _graph()
    path = tmp_path / "g.knng"
    g.save(path)
    return path, g


# ------------------------------------------------------------------------------- meta.json header


@pytest.mark.parametrize("header, message", [
    ([1, 2], "g.knng: not a knngraph file (its meta.json holds a list, not an object)"),
    (7, "g.knng: not a knngraph file (its meta.json holds a int, not an object)"),
    ("null", "g.knng: not a knngraph file (its meta.json holds a NoneType, not an object)"),
    ('"text"', "g.knng: not a knngraph file (its meta.json holds a str, not an object)"),
    ("{not json", "g.knng: not a knngraph graph file or it is truncated/corrupt (JSONDecodeError"),
    (b"{\"a\": \"\xff\"}", "g.knng: not a knngraph graph file or it is truncated/corrupt (UnicodeDecodeError"),
    ("[" * 100_000, "g.knng: not a knngraph graph file or it is truncated/corrupt (RecursionError"),
])
def test_meta_json_not_an_object(saved, header, message):
    path, _ = saved
    _edit(path, lambda h: header if isinstance(header, (str, bytes)) else json.dumps(header))
    with pytest.raises(ValueError, match=re.escape(message)):
        Graph.load(path)


@pytest.mark.parametrize("version", ["abc", None, "1", 1.5, True, 0, -3, [1]])
def test_version_not_a_positive_integer(saved, version):
    path, _ = saved
    _edit(path, lambda h: {**h, "version": version})
    message = f"g.knng: invalid format version {version!r} (expected a positive integer); the file is corrupt"
    for call in (Graph.load, read_header):
        with pytest.raises(ValueError, match=re.escape(message)):
            call(path)


def test_version_missing(saved):
    path, _ = saved
    _edit(path, lambda h: {k: v for k, v in h.items() if k != "version"})
    with pytest.raises(ValueError, match=re.escape("g.knng: invalid format version None")):
        Graph.load(path)


def test_version_newer(saved):
    path, _ = saved
    _edit(path, lambda h: {**h, "version": 99})
    with pytest.raises(ValueError, match=r"g\.knng: written by a newer knngraph \(format version 99; this one "
                                         r"reads up to 1\)"):
        Graph.load(path)


@pytest.mark.parametrize("kind", ["missing", None, 3, ["graph"]])
def test_kind_missing_or_not_a_string(saved, kind):
    path, _ = saved
    _edit(path, lambda h: {k: v for k, v in h.items() if k != "kind"} if kind == "missing" else {**h, "kind": kind})
    shown = None if kind == "missing" else kind
    for call in (Graph.load, read_header):
        with pytest.raises(ValueError, match=re.escape(f"g.knng: the file names no object kind (kind={shown!r})")):
            call(path)


def test_format_not_knngraph(saved):
    path, _ = saved
    _edit(path, lambda h: {**h, "format": "other"})
    with pytest.raises(ValueError, match=r"g\.knng: not a knngraph file$"):
        Graph.load(path)


@pytest.mark.parametrize("meta", [[1], "x", 5])
def test_meta_not_an_object(saved, meta):
    path, _ = saved
    _edit(path, lambda h: {**h, "meta": meta})
    with pytest.raises(ValueError, match=f"g.knng: its meta is a {type(meta).__name__}, not an object"):
        Graph.load(path)


@pytest.mark.parametrize("meta, message", [
    ({"metric": "manhattan"}, "unknown metric 'manhattan'"),
    ({"metric": 3}, "unknown metric 3"),
    ({"info": 5}, "'int' object is not iterable"),
    ({"info": "ab"}, "dictionary update sequence element"),
])
def test_graph_meta_values(saved, meta, message):
    path, _ = saved
    _edit(path, lambda h: {**h, "meta": {**h["meta"], **meta}})
    with pytest.raises(ValueError, match=r"g\.knng: not a valid graph file \(.*" + re.escape(message)):
        Graph.load(path)


def test_checksum_missing(saved):
    path, _ = saved
    _edit(path, lambda h: {k: v for k, v in h.items() if k != "sha256"})
    with pytest.raises(ValueError, match=r"g\.knng: checksum mismatch, the file is corrupt"):
        Graph.load(path)


# ------------------------------------------------------------------------------- the zip container


def _eocd(raw: bytes) -> int:
    return raw.rindex(b"PK\x05\x06")


def _first_central(raw: bytes) -> int:
    return struct.unpack_from("<I", raw, _eocd(raw) + 16)[0]


def _mangle(raw: bytes, how: str) -> bytes:
    raw = bytearray(raw)
    if how == "local signature":
        raw[0] ^= 0xFF
    elif how == "local name length":
        raw[26:28] = struct.pack("<H", 60000)
    elif how == "local file name":
        raw[30] ^= 0x20
    elif how == "central signature":
        raw[_first_central(raw)] ^= 0xFF
    elif how == "central offset":
        raw[_first_central(raw) + 42:_first_central(raw) + 46] = struct.pack("<I", 0xFFFFFF00)
    elif how == "central directory offset":
        raw[_eocd(raw) + 16:_eocd(raw) + 20] = struct.pack("<I", 0x7FFFFFFF)
    elif how == "central directory size":
        raw[_eocd(raw) + 12:_eocd(raw) + 16] = struct.pack("<I", 0x7FFFFFFF)
    elif how == "end signature":
        raw[_eocd(raw)] ^= 0xFF
    elif how.startswith("truncate"):
        raw = raw[:int(len(raw) * float(how.split()[1]))]
    elif how in ("compression 99", "compression deflate"):
        method = 99 if how.endswith("99") else zipfile.ZIP_DEFLATED
        raw[8:10] = struct.pack("<H", method)
        raw[_first_central(raw) + 10:_first_central(raw) + 12] = struct.pack("<H", method)
    elif how == "encrypted":
        raw[6] |= 1
        raw[_first_central(raw) + 8] |= 1
    elif how == "crc":
        raw[14] ^= 0xFF
        raw[_first_central(raw) + 16] ^= 0xFF
    elif how == "empty":
        raw = b""
    return bytes(raw)


ZIP_DAMAGE = ["local signature", "local name length", "local file name", "central signature", "central offset",
              "central directory offset", "central directory size", "end signature", "truncate 0.5", "truncate 0.99",
              "truncate 0.01", "compression 99", "compression deflate", "encrypted", "crc", "empty"]


@pytest.mark.parametrize("how", ZIP_DAMAGE)
def test_mangled_zip(saved, how):
    path, _ = saved
    path.write_bytes(_mangle(path.read_bytes(), how))
    expected = r"g\.knng: not a knngraph (graph )?file or it is truncated/corrupt"
    with pytest.raises(ValueError, match=expected):
        Graph.load(path)
    with pytest.raises(ValueError, match=expected):
        read_header(path)


def test_compressed_member_is_refused(saved):
    # a deflated member could be a zip bomb; knngraph never writes one
    path, _ = saved
    path.write_bytes(_mangle(path.read_bytes(), "compression 99"))
    with pytest.raises(ValueError, match=r"member 'meta.json' is compressed \(method 99\); knngraph stores members "
                                         "uncompressed"):
        Graph.load(path)


def test_not_a_zip(tmp_path):
    path = tmp_path / "g.knng"
    path.write_bytes(b"hello")
    with pytest.raises(ValueError, match=r"g\.knng: not a knngraph graph file or it is truncated/corrupt "
                                         r"\(BadZipFile: File is not a zip file\)"):
        Graph.load(path)


def test_no_meta_json(tmp_path):
    path = tmp_path / "g.knng"
    path.write_bytes(_zip({"indices.npy": _npy(np.zeros((2, 2), np.int32))}))
    with pytest.raises(ValueError, match=r"g\.knng: not a knngraph graph file .*KeyError.*meta\.json"):
        Graph.load(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.knng: no such file"):
        Graph.load(tmp_path / "missing.knng")
    with pytest.raises(FileNotFoundError, match=r"missing\.knng: no such file"):
        song.load(tmp_path / "missing.knng")
    (tmp_path / "dir.knng").mkdir()
    with pytest.raises(ValueError, match=r"dir\.knng: is a directory, not a knngraph graph file"):
        Graph.load(tmp_path / "dir.knng")


# ------------------------------------------------------------------------------- the arrays


@pytest.mark.parametrize("blob, message", [
    (b"not npy at all", r"member 'indices\.npy': not a valid \.npy file"),
    (b"\x93NUMPY\x01\x00\x20\x00{'descr': '<i4', 'shape': (2,\n", r"member 'indices\.npy': not a valid \.npy file"),
    (_npy(np.zeros((20, 4), np.int32))[:-5], r"member 'indices\.npy': header says shape \(20, 4\) of int32 \(448 "
                                             r"bytes\) but the member has 443 bytes"),
    (_npy(np.zeros((20, 4), np.int32)).replace(b"(20, 4), ", b"(-20, -4)", 1),
     r"member 'indices\.npy': the header gives the impossible shape \(-20, -4\)"),
])
def test_member_not_a_valid_npy(saved, blob, message):
    path, _ = saved
    _edit(path, members_change={"indices": blob})
    with pytest.raises(ValueError, match=r"g\.knng: " + message):
        Graph.load(path)


@pytest.mark.parametrize("change, message", [
    ({"indices": _npy(np.zeros((20, 4), np.float32))}, "Graph indices must be int32, got float32"),
    ({"distances": _npy(np.zeros((20, 4), np.float64))}, "Graph distances must be float32, got float64"),
    ({"distances": _npy(np.zeros((20, 3), np.float32))}, "same 2-D shape, got (20, 4) and (20, 3)"),
    ({"indices": _npy(np.zeros(80, np.int32)), "distances": _npy(np.zeros(80, np.float32))},
     "same 2-D shape, got (80,) and (80,)"),
    ({"indices": _npy(np.zeros((20, 4), ">i4"))}, "Graph indices must be int32, got >i4"),
])
def test_arrays_wrong_for_a_graph(saved, change, message):
    path, _ = saved
    _edit(path, members_change=change)
    with pytest.raises(ValueError, match=r"g\.knng: not a valid graph file \(.*" + re.escape(message)):
        Graph.load(path)


def test_array_missing(saved):
    path, _ = saved
    _edit(path, members_change={"distances": None})
    with pytest.raises(ValueError, match=r"g\.knng: the knngraph graph file has no 'distances' array; it is "
                                         "incomplete or corrupt"):
        Graph.load(path)


def test_wrong_kind(saved):
    path, _ = saved
    with pytest.raises(ValueError, match=r"g\.knng: holds a knngraph 'graph', expected a 'song-index'"):
        song.load(path)


# ------------------------------------------------------------------------------- saving: paths and junk


def test_save_into_missing_directory_names_the_path(tmp_path):
    target = tmp_path / "nope" / "g.knng"
    for save in (lambda: _graph().save(target), lambda: bruteforce.save(target, _exact_index()),
                 lambda: io.write(tmp_path / "nope" / "x.fbin", np.zeros((2, 2), np.float32))):
        with pytest.raises(FileNotFoundError) as err:
            save()
        message = str(err.value)
        assert "directory " + str(tmp_path / "nope") + " does not exist" in message
        assert re.search(r"nope.(g\.knng|x\.fbin)'$", message), message
        assert ".knngraph-" not in message and ".tmp" not in message
    assert list(tmp_path.iterdir()) == []


def test_save_is_atomic_and_leaves_nothing(saved):
    path, g = saved
    other = _graph(seed=1)
    other.save(path)
    _same(Graph.load(path), other)
    assert [p.name for p in path.parent.iterdir()] == ["g.knng"]


@pytest.mark.parametrize("error", [OSError("disk full (simulated)"), KeyboardInterrupt()])
def test_failed_save_cleans_up_and_keeps_the_old_file(saved, monkeypatch, error):
    path, g = saved

    def fail(fh):
        fh.write(b"partial")
        raise error

    monkeypatch.setattr(graph_mod, "_finish", fail)
    with pytest.raises(type(error)):
        _graph(seed=1).save(path)
    monkeypatch.undo()
    assert [p.name for p in path.parent.iterdir()] == ["g.knng"]
    _same(Graph.load(path), g)


def test_os_error_on_the_temp_file_names_the_target(saved, monkeypatch):
    path, _ = saved

    def fail(tmp):
        raise OSError(28, "No space left on device", str(tmp))

    monkeypatch.setattr(graph_mod, "_open_new", fail)
    with pytest.raises(OSError, match=r"\[Errno 28\] No space left on device: '.*g\.knng'$"):
        _graph().save(path)
    monkeypatch.undo()
    assert [p.name for p in path.parent.iterdir()] == ["g.knng"]


def _age(path, seconds):
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.mark.parametrize("save", ["graph", "index", "io.write", "io.write_ann_benchmarks"])
def test_next_save_removes_temp_files_of_crashed_saves(tmp_path, save):
    stale = tmp_path / ".knngraph-0123456789abcdef.tmp"  # what a killed save leaves
    stale.write_bytes(b"half a file")
    _age(stale, 2 * 3600)
    running = tmp_path / ".knngraph-fedcba9876543210.tmp"  # a save in progress elsewhere: recent
    running.write_bytes(b"being written")
    unrelated = tmp_path / ".other.tmp"
    unrelated.write_bytes(b"not ours")
    _age(unrelated, 2 * 3600)
    x = np.zeros((3, 2), np.float32)
    if save == "graph":
        _graph().save(tmp_path / "g.knng")
    elif save == "index":
        bruteforce.save(tmp_path / "g.knng", _exact_index())
    elif save == "io.write":
        io.write(tmp_path / "x.fbin", x)
    else:
        io.write_ann_benchmarks(tmp_path / "x.hdf5", x, x, np.zeros((3, 1), np.int32), np.zeros((3, 1), np.float32),
                                "euclidean")
    assert not stale.exists()
    assert running.exists() and unrelated.exists()


def test_failed_save_keeps_stale_temp_files(tmp_path):
    # only a successful save cleans up (a failed one may be a full disk or a read-only folder)
    stale = tmp_path / ".knngraph-0123456789abcdef.tmp"
    stale.write_bytes(b"x")
    _age(stale, 2 * 3600)
    with pytest.raises(TypeError):
        io.write(tmp_path / "x.fbin", np.zeros((2, 2)))
    assert stale.exists()


@POSIX
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_saved_files_respect_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        _graph().save(tmp_path / "g.knng")
        song.save(tmp_path / "s.index", _song_index())
        io.write(tmp_path / "x.fbin", np.zeros((2, 2), np.float32))
        with open(tmp_path / "plain", "wb"):
            pass
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"g.knng": mode, "s.index": mode, "x.fbin": mode, "plain": mode}


@POSIX
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores permissions")
def test_save_into_read_only_directory_names_the_path(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match=r"ro.g\.knng'$"):
            _graph().save(folder / "g.knng")
    finally:
        folder.chmod(0o700)
    assert list(folder.iterdir()) == []


# ------------------------------------------------------------------------------- file objects


def test_graph_round_trips_through_file_objects(tmp_path):
    g = _graph()
    buf = stdio.BytesIO()
    g.save(buf)
    buf.seek(0)
    _same(Graph.load(buf), g)
    path = tmp_path / "g.knng"
    with open(path, "wb") as f:
        g.save(f)
    with open(path, "rb") as f:
        _same(Graph.load(f), g)
        f.seek(0)
        assert read_header(f)["kind"] == "graph"
    _same(Graph.load(path), g)


class _Stream:
    """A write-only, unseekable binary stream (a socket or a pipe)."""

    def __init__(self):
        self.chunks = []

    def write(self, b):
        self.chunks.append(bytes(b))
        return len(b)

    def flush(self):
        pass


def test_save_to_an_unseekable_stream():
    g = _graph()
    out = _Stream()
    g.save(out)
    _same(Graph.load(stdio.BytesIO(b"".join(out.chunks))), g)


def test_save_and_load_arrays_with_file_objects():
    buf = stdio.BytesIO()
    arrays = {"a": np.arange(6, dtype=np.int64).reshape(2, 3), "b": np.ones(4, np.float16)}
    save_arrays(buf, "thing", arrays, {"x": 1})
    buf.seek(0)
    got, meta = load_arrays(buf, "thing")
    assert meta == {"x": 1} and set(got) == {"a", "b"}
    for name, arr in arrays.items():
        assert got[name].dtype == arr.dtype and np.array_equal(got[name], arr)
        assert got[name].flags.writeable


def _exact_index(n=30, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)
    return bruteforce.build(bruteforce.IndexParams(metric="euclidean"), x, device="cpu", verbose=False)


def _song_index(n=60, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)
    params = song.IndexParams(graph_degree=6, intermediate_graph_degree=12)
    return song.build(params, x, device="cpu", verbose=False)


def _nndescent_index(n=60, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)
    return nndescent.build(nndescent.IndexParams(graph_degree=5), x, device="cpu", verbose=False)


@pytest.mark.parametrize("mod, make", [(bruteforce, _exact_index), (song, _song_index),
                                       (nndescent, _nndescent_index)])
def test_every_index_round_trips_through_file_objects(tmp_path, mod, make):
    index = make()
    buf = stdio.BytesIO()
    mod.save(buf, index)
    buf.seek(0)
    back = mod.load(buf)
    assert back.params == index.params
    assert np.array_equal(np.asarray(back.dataset), np.asarray(index.dataset))
    if getattr(index, "graph", None) is not None:
        assert np.array_equal(back.graph.indices, index.graph.indices)
    with open(tmp_path / "i.index", "wb") as f:
        mod.save(f, index)
    with open(tmp_path / "i.index", "rb") as f:
        assert mod.load(f).params == index.params


def test_errors_name_the_file_object(tmp_path):
    buf = stdio.BytesIO(b"junk")
    with pytest.raises(ValueError, match=r"^<file object>: not a knngraph graph file or it is truncated/corrupt"):
        Graph.load(buf)
    path = tmp_path / "junk.knng"
    path.write_bytes(b"junk")
    with open(path, "rb") as f, pytest.raises(ValueError, match=r"junk\.knng: not a knngraph graph file"):
        Graph.load(f)
    buf = stdio.BytesIO()
    _graph().save(buf)
    buf.seek(0)
    with pytest.raises(ValueError, match=r"^<file object>: holds a knngraph 'graph', expected a 'song-index'"):
        song.load(buf)
    buf = stdio.BytesIO()
    song.save(buf, _song_index())
    buf.seek(0)
    with pytest.raises(ValueError, match=r"^<file object>: index was saved with metric 'sqeuclidean', not 'cosine'"):
        song.load(buf, metric="cosine")


def test_wrong_file_objects(tmp_path):
    g = _graph()
    path = tmp_path / "g.knng"
    with open(path, "w") as f, pytest.raises(TypeError, match=r"g\.knng: is a text file object; open the file in "
                                                              r"binary mode \('wb'\)"):
        g.save(f)
    g.save(path)
    with open(path) as f, pytest.raises(TypeError, match=r"g\.knng: is a text file object; open the file in binary "
                                                         r"mode \('rb'\)"):
        Graph.load(f)
    with open(path, "rb") as f, pytest.raises(TypeError, match=r"g\.knng: the file object is not writable"):
        g.save(f)
    with open(path, "ab") as f, pytest.raises(TypeError, match=r"g\.knng: the file object is not readable"):
        Graph.load(f)
    f = open(path, "rb")
    f.close()
    with pytest.raises(ValueError, match=r"g\.knng: the file object is closed"):
        Graph.load(f)
    with pytest.raises(TypeError, match="expected a path .* or a binary file object, got _Stream"):
        Graph.load(_Stream())
    with pytest.raises(TypeError, match="expected a path .* or a binary file object, got int"):
        g.save(3)
    with pytest.raises(TypeError, match="expected a path .* or a binary file object, got NoneType"):
        Graph.load(None)


@POSIX
def test_unseekable_file_object_for_loading(tmp_path):
    g = _graph()
    raw = stdio.BytesIO()
    g.save(raw)
    r, w = os.pipe()
    os.write(w, raw.getvalue()[:1000])
    os.close(w)
    with os.fdopen(r, "rb") as f, pytest.raises(TypeError, match=r"^<file object>: the file object is not seekable"):
        Graph.load(f)


# ------------------------------------------------------------------------------- index files


def test_index_params_not_an_object(tmp_path):
    path = tmp_path / "s.index"
    song.save(path, _song_index())
    _edit(path, lambda h: {**h, "meta": {**h["meta"], "params": [1, 2]}})
    with pytest.raises(ValueError, match=r"s\.index: not a complete song index \(TypeError"):
        song.load(path)
    _edit(path, lambda h: {**h, "meta": {k: v for k, v in h["meta"].items() if k != "params"}})
    with pytest.raises(ValueError, match=r"s\.index: not a complete song index \(KeyError"):
        song.load(path)


def test_index_missing_array_names_the_file(tmp_path):
    path = tmp_path / "e.index"
    x = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32)
    bruteforce.save(path, bruteforce.build(bruteforce.IndexParams(graph_degree=3), x, device="cpu", verbose=False))
    _edit(path, members_change={"graph_distances": None})
    with pytest.raises(ValueError, match=r"e\.index: the knngraph bruteforce-index file has no 'graph_distances' "
                                         "array"):
        bruteforce.load(path)


def test_index_damaged(tmp_path):
    path = tmp_path / "n.index"
    nndescent.save(path, _nndescent_index())
    path.write_bytes(_mangle(path.read_bytes(), "compression 99"))
    with pytest.raises(ValueError, match=r"n\.index: not a knngraph nndescent-index file or it is truncated"):
        nndescent.load(path)


def _exact_graph_index(n=30, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)
    return bruteforce.build(bruteforce.IndexParams(metric="euclidean", graph_degree=3), x, device="cpu",
                            verbose=False)


_GRAPH_IDS = {bruteforce: "graph_indices", song: "graph_indices", nndescent: "indices"}


@pytest.mark.parametrize("mod, make", [(bruteforce, _exact_graph_index), (song, _song_index),
                                       (nndescent, _nndescent_index)])
@pytest.mark.parametrize("damage, message", [
    ("id_too_large", r"neighbour ids outside \[-1, "),
    ("id_below_minus_one", r"neighbour ids outside \[-1, "),
    ("fewer_vectors", r"its graph has \d+ rows for \d+ vectors"),
    ("vectors_1d", r"not a 2-D numeric array"),
    ("vectors_text", r"not a 2-D numeric array"),
])
def test_hand_made_index_with_valid_checksum_is_refused(tmp_path, mod, make, damage, message):
    """A file whose checksums are right but whose parts do not belong together fails at load, naming the
    file, instead of at search time (or with a wrong answer)."""
    path = tmp_path / "i.index"
    index = make()
    mod.save(path, index)
    arrays, meta = load_arrays(path, index._file_kind)
    arrays = dict(arrays)
    ids = arrays[_GRAPH_IDS[mod]].copy()
    if damage == "id_too_large":
        ids[3, 1] = len(arrays["dataset"])
        arrays[_GRAPH_IDS[mod]] = ids
    elif damage == "id_below_minus_one":
        ids[0, 0] = -2
        arrays[_GRAPH_IDS[mod]] = ids
    elif damage == "fewer_vectors":
        arrays["dataset"] = arrays["dataset"][:-1]
    elif damage == "vectors_1d":
        arrays["dataset"] = arrays["dataset"].ravel()
    else:
        arrays["dataset"] = arrays["dataset"].astype("U8")
    save_arrays(path, index._file_kind, arrays, meta)
    with pytest.raises(ValueError, match=re.escape(str(path)) + r": not a complete .* index \(ValueError: .*" + message):
        mod.load(path)


def test_song_index_with_entry_point_out_of_range_is_refused(tmp_path):
    path = tmp_path / "i.index"
    index = _song_index()
    song.save(path, index)
    arrays, meta = load_arrays(path, index._file_kind)
    arrays = dict(arrays, entry_points=np.array([0, 60], np.int32))
    save_arrays(path, index._file_kind, arrays, meta)
    with pytest.raises(ValueError, match=re.escape(str(path)) + r": not a complete song index .*entry points"):
        song.load(path)


def test_pickled_index_leaves_its_device_caches_behind():
    """Dask and multiprocessing pickle indexes: the per-process caches (device copies, compiled launches
    with raw pointers) must not travel; the copy rebuilds them and answers the same."""
    import pickle

    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    q = rng.standard_normal((7, 8)).astype(np.float32)
    index = song.build(song.IndexParams(graph_degree=8, intermediate_graph_degree=16), x)
    before = index.search(q, 5, device="cpu")
    assert index._cache  # the search filled it
    copy = pickle.loads(pickle.dumps(index))
    assert copy._cache == {} and index._cache
    assert copy._view is None and index._view is not None  # the searcher's view of the cache stays too
    after = copy.search(q, 5, device="cpu")
    assert np.array_equal(before.indices, after.indices) and np.array_equal(before.distances, after.distances)


def test_a_dropped_index_frees_its_caches_at_once():
    """An index's per-device copies and launch plans (its cache, and the fast searcher's view of it) go
    with the index, without waiting for Python's cycle collector: the view holds the cache, so the cache
    must not hold the view."""
    import gc
    import weakref

    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    index = song.build(song.IndexParams(graph_degree=8, intermediate_graph_degree=16), x, device="cpu")
    index.search(x[:3], 5, device="cpu")
    view, cache_owner = weakref.ref(index._view), weakref.ref(index)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del index
        assert cache_owner() is None and view() is None
    finally:
        if enabled:
            gc.enable()
