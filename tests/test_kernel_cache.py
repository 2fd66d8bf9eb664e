"""The disk cache of compiled GPU kernels (``knngraph._cuda_launch``), with a stand-in compiler (no GPU
needed): the key follows the source, the closure constants (into captured device functions), the signature,
the register cap and the compute capability; an entry is read back by a later build of the same kernel;
a truncated or corrupt entry is compiled again, never loaded; a folder that cannot be written is skipped
with one log line; processes writing the same entry at once leave one whole entry."""

import logging
import multiprocessing
import os
import stat

import numpy as np
import pytest

from knngraph import _cuda_launch as cl


def _factory(cap, helper=None):
    def kernel(a):
        return a + cap + (helper(a) if helper else 0)

    return kernel


def _helper_factory(scale):
    def helper(a):
        return a * scale

    return helper


def _builder(image, calls):
    def build():
        calls.append(image)
        return "entry_fn", "cubin", image

    return build


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KNNGRAPH_CACHE_DIR", str(tmp_path))
    return tmp_path / "kernels"


def test_key_covers_closure_signature_registers_and_device():
    k = cl.compile_key(_factory(32), ("int32",), (9, 0))
    assert k == cl.compile_key(_factory(32), ("int32",), (9, 0))
    others = {cl.compile_key(_factory(64), ("int32",), (9, 0)), cl.compile_key(_factory(32), ("int64",), (9, 0)),
              cl.compile_key(_factory(32), ("int32",), (8, 0)), cl.compile_key(_factory(32), ("int32",), (9, 0), 64)}
    assert k not in others and len(others) == 4


def test_key_follows_captured_device_functions():
    """Two kernels of one factory differing only in the device function they capture (made by another
    factory for another configuration) must not share an entry."""
    a = cl.compile_key(_factory(1, _helper_factory(2)), ("int32",), (9, 0))
    b = cl.compile_key(_factory(1, _helper_factory(3)), ("int32",), (9, 0))
    assert a != b
    assert a == cl.compile_key(_factory(1, _helper_factory(2)), ("int32",), (9, 0))


def test_key_covers_the_source(monkeypatch):
    k = cl.compile_key(_factory(1), (), (9, 0))
    monkeypatch.setattr(cl, "_source_digest", lambda: "another source")
    assert cl.compile_key(_factory(1), (), (9, 0)) != k


def test_entry_is_read_back(cache):
    calls = []
    key = cl.compile_key(_factory(32), ("int32",), (9, 0))
    h1, img1 = cl.cached_image(key, _builder(b"\x7fELF-first", calls))
    h2, img2 = cl.cached_image(key, _builder(b"\x7fELF-second", calls))
    assert img1 == img2 == b"\x7fELF-first" and calls == [b"\x7fELF-first"]
    assert h2["entry"] == "entry_fn" and h2["kind"] == "cubin"
    assert len(list(cache.glob("*.kernel"))) == 1 and not list(cache.glob("*.tmp"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_entry_is_compiled_again(cache, damage):
    calls = []
    key = cl.compile_key(_factory(7), (), (9, 0))
    cl.cached_image(key, _builder(b"image-bytes" * 100, calls))
    (path,) = cache.glob("*.kernel")
    blob = path.read_bytes()
    if damage == "truncate":
        blob = blob[:-10]
    elif damage == "flip":
        blob = blob[:-5] + bytes([blob[-5] ^ 0x40]) + blob[-4:]
    elif damage == "garbage":
        blob = b"not a kernel entry"
    else:
        blob = b""
    path.write_bytes(blob)
    _, image = cl.cached_image(key, _builder(b"rebuilt", calls))
    assert image == b"rebuilt" and calls[-1] == b"rebuilt"
    _, image = cl.cached_image(key, _builder(b"never", calls))  # the rebuilt entry replaced the damaged one
    assert image == b"rebuilt"


def test_empty_cache_dir_turns_the_cache_off(monkeypatch):
    monkeypatch.setenv("KNNGRAPH_CACHE_DIR", "")
    assert cl.kernel_cache_dir() is None
    calls = []
    for img in (b"x", b"y"):
        assert cl.cached_image("k" * 64, _builder(img, calls))[1] == img
    assert calls == [b"x", b"y"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_is_skipped_with_one_log_line(cache, caplog):
    cache.mkdir()
    cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        calls = []
        with caplog.at_level(logging.WARNING, logger="knngraph"):
            for key in ("a" * 64, "b" * 64):
                assert cl.cached_image(key, _builder(b"img", calls))[1] == b"img"
        assert len(calls) == 2
        assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
        assert "cannot be written" in caplog.records[0].message
    finally:
        cache.chmod(stat.S_IRWXU)


def test_unwritable_cache_path_is_skipped_with_one_log_line(tmp_path, monkeypatch, caplog):
    """A cache location that is a file, not a folder (also what root meets): compiled, not kept, said once."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("KNNGRAPH_CACHE_DIR", str(blocker))
    monkeypatch.setattr(cl, "_UNWRITABLE_SAID", set())
    calls = []
    with caplog.at_level(logging.WARNING, logger="knngraph"):
        for key in ("c" * 64, "d" * 64):
            assert cl.cached_image(key, _builder(b"img", calls))[1] == b"img"
    assert calls == [b"img", b"img"]
    said = [r for r in caplog.records if "cannot be written" in r.message]
    assert len(said) == 1


def _write_many(folder, key, image, n):
    os.environ["KNNGRAPH_CACHE_DIR"] = folder
    for _ in range(n):
        cl._write_entry(os.path.join(folder, "kernels"), os.path.join(folder, "kernels", key[:48] + ".kernel"),
                        {"entry": "e", "kind": "cubin"}, image)


def test_processes_writing_one_entry_at_once_leave_a_whole_entry(tmp_path):
    key = "e" * 64
    image = np.random.default_rng(0).bytes(1 << 20)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(str(tmp_path), key, image, 20)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    found = cl._read_entry(str(tmp_path / "kernels" / (key[:48] + ".kernel")))
    assert found is not None and found[1] == image
    assert not list((tmp_path / "kernels").glob("*.tmp"))
