"""The disk cache of compiled PTX (``knngraph._cuda_launch.cached_ptx``), with a stand-in compiler: a
second process-level build of the same kernel reads the file, a different closure constant or signature
builds again, and an empty KNNGRAPH_CACHE_DIR turns the cache off."""

from knngraph import _cuda_launch


def _factory(cap):
    def kernel(a):
        return a + cap

    return kernel


def test_same_build_is_read_back_and_different_builds_are_not(tmp_path, monkeypatch):
    monkeypatch.setenv("KNNGRAPH_CACHE_DIR", str(tmp_path))
    builds = []

    def compile_fn(text):
        def run():
            builds.append(text)
            return text

        return run

    k32 = _factory(32)
    assert _cuda_launch.cached_ptx(k32, ("int32",), (9, 0), compile_fn("ptx-a")) == "ptx-a"
    assert _cuda_launch.cached_ptx(k32, ("int32",), (9, 0), compile_fn("ptx-b")) == "ptx-a"  # from disk
    assert builds == ["ptx-a"]
    assert _cuda_launch.cached_ptx(_factory(64), ("int32",), (9, 0), compile_fn("ptx-c")) == "ptx-c"
    assert _cuda_launch.cached_ptx(k32, ("int64",), (9, 0), compile_fn("ptx-d")) == "ptx-d"
    assert _cuda_launch.cached_ptx(k32, ("int32",), (8, 0), compile_fn("ptx-e")) == "ptx-e"
    assert builds == ["ptx-a", "ptx-c", "ptx-d", "ptx-e"]
    assert len(list((tmp_path / "ptx").glob("*.ptx"))) == 4


def test_empty_cache_dir_turns_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("KNNGRAPH_CACHE_DIR", "")
    assert _cuda_launch.ptx_cache_dir() is None
    calls = []
    for text in ("x", "y"):
        assert _cuda_launch.cached_ptx(_factory(1), (), (9, 0), lambda t=text: calls.append(t) or t) == text
    assert calls == ["x", "y"]
