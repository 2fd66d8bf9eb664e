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
    monkeypatch.setattr(cl, "_source_hash", lambda: "another source")
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


# --------------------------------------------------------------------------------------------------
# kernels named without importing their module (LazyKernel), found in the cache by name


def test_a_named_kernel_is_one_object_and_resolves_to_the_factorys_kernel():
    kernels = cl.kernel_module(__name__)
    a = kernels._factory(32)
    assert a is kernels._factory(32) and a is not kernels._factory(64)
    assert repr(a) == f"{__name__}._factory(32)"
    assert a.resolve()(1) == 33 and kernels._factory(64).resolve()(1) == 65
    assert cl.kernel_module("math").pow.resolve()(2, 3) == 8.0
    with pytest.raises(TypeError, match="not a kernel factory"):
        a(1)
    with pytest.raises(TypeError, match="plain values"):
        kernels._factory(np.zeros(3))


class _FakeDevice:
    def __init__(self, device_id=0):
        self.id, self.compute_capability = device_id, "90"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def named_cache(cache, monkeypatch):
    """The name path of ``_lazy_function`` with a stand-in GPU: CuPy's Device, the module load and the
    compiler are replaced; returns the lists of loaded images, of builds and of kernels that took the
    full-key path (resolved)."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(Device=_FakeDevice)))
    monkeypatch.setattr(cl, "_LAZY", {})
    loaded, compiled, resolved = [], [], []
    monkeypatch.setattr(cl, "_load", lambda header, image, dev: loaded.append(image) or ("fn:" + image.decode(), None))

    def compiled_locked(kernel, signature, device_id, max_registers=None):
        """The full-key path: the entry of the key, built when missing (a build appends to ``compiled``)."""
        def build():
            image = f"image{len(compiled)}".encode()
            compiled.append(image)
            return "entry_fn", "cubin", image

        resolved.append(kernel)
        key = cl.compile_key(kernel, signature, (9, 0), max_registers)
        return cl._load(*cl.cached_image(key, build), None) + (key,)

    monkeypatch.setattr(cl, "_compiled_locked", compiled_locked)
    return loaded, compiled, resolved


def _new_process(monkeypatch):
    """What a new process knows: no kernel resolved, nothing loaded; resolving is an error (it would import
    the kernel module, which the name entry exists to avoid)."""
    monkeypatch.setattr(cl, "_LAZY", {})

    def no_import(self):
        raise AssertionError(f"{self!r} was resolved")

    monkeypatch.setattr(cl.LazyKernel, "resolve", no_import)


def test_a_new_process_loads_a_named_kernel_without_resolving_it(named_cache, cache, monkeypatch):
    loaded, compiled, resolved = named_cache
    kernel = cl.kernel_module(__name__)._factory(32)
    assert cl._lazy_function(kernel, (3, 4), 0) == ("fn:image0", None)
    assert cl._lazy_function(kernel, (3, 4), 0) == ("fn:image0", None)  # this process's copy
    assert compiled == [b"image0"] and loaded == [b"image0"]
    assert len(list(cache.glob("*.name"))) == 1 and len(list(cache.glob("*.kernel"))) == 1
    with monkeypatch.context() as m:
        _new_process(m)
        assert cl._lazy_function(kernel, (3, 4), 0) == ("fn:image0", None)
    assert compiled == [b"image0"] and loaded == [b"image0", b"image0"]


@pytest.mark.parametrize("change", ["argument types", "register cap", "environment", "source"])
def test_a_named_kernel_of_another_configuration_is_compiled(named_cache, monkeypatch, change):
    loaded, compiled, resolved = named_cache
    kernel = cl.kernel_module(__name__)._factory(32)
    cl._lazy_function(kernel, (3, 4), 0)
    monkeypatch.setattr(cl, "_LAZY", {})
    args, cap = (3, 4), None
    if change == "argument types":
        args = (3, np.float32(4))
    elif change == "register cap":
        cap = 64
    elif change == "environment":
        monkeypatch.setenv("KNNGRAPH_GGNN_MAX_REGISTERS", "96")
    else:
        monkeypatch.setattr(cl, "_source_hash", lambda: "another source")
    cl._lazy_function(kernel, args, 0, cap)
    assert len(resolved) == 2  # another name: the kernel was resolved and its full key looked up
    # (the stand-in's full key leaves out the environment, which a kernel module reads into its kernels)
    assert compiled == ([b"image0"] if change == "environment" else [b"image0", b"image1"])


@pytest.mark.parametrize("damage", ["entry", "name"])
def test_a_damaged_named_entry_is_compiled_again(named_cache, cache, monkeypatch, damage):
    loaded, compiled, resolved = named_cache
    kernel = cl.kernel_module(__name__)._factory(7)
    cl._lazy_function(kernel, (1,), 0)
    (path,) = cache.glob("*.kernel" if damage == "entry" else "*.name")
    path.write_bytes(path.read_bytes()[:-3])
    monkeypatch.setattr(cl, "_LAZY", {})
    assert cl._lazy_function(kernel, (1,), 0) == ("fn:image1" if damage == "entry" else "fn:image0", None)
    assert compiled == ([b"image0", b"image1"] if damage == "entry" else [b"image0"])
    with monkeypatch.context() as m:  # the entry written again is found by name
        _new_process(m)
        assert cl._lazy_function(kernel, (1,), 0)[0] == ("fn:image1" if damage == "entry" else "fn:image0")
