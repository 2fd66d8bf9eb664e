"""The studies (benchmarks/studies) and what they share (benchmarks/_common.py): the helpers that decide
what a figure means (they run without a GPU), and that every study still imports and names its command."""

import importlib
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import _common
from benchmarks.studies import search_gpu

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p.stem for p in (ROOT / "benchmarks" / "studies").glob("*.py") if p.stem != "__init__")


def test_same_distances_in_another_dtype():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (50, 16)).astype(np.uint8)
    q = rng.integers(0, 256, (5, 16)).astype(np.uint8)

    def l2(a, b):
        return ((a.astype(np.int64)[:, None, :] - b.astype(np.int64)[None]) ** 2).sum(-1)

    for dt in ("int8", "float16", "float32"):
        xs, qs = search_gpu.same_distances_as(x, dt), search_gpu.same_distances_as(q, dt)
        assert xs.dtype == np.dtype(dt)
        if dt == "int8":
            np.testing.assert_array_equal(l2(qs, xs), l2(q, x))  # the shift by -128 keeps L2 distances
        else:
            np.testing.assert_array_equal(xs.astype(np.float32), x.astype(np.float32))
    with pytest.raises(SystemExit, match="not exact in float16"):
        search_gpu.same_distances_as(np.array([[0.1, 1e-9]], np.float32), "float16")
    with pytest.raises(SystemExit, match="needs uint8"):
        search_gpu.same_distances_as(np.zeros((2, 2), np.float16), "int8")


def test_qps_at_a_recall_interpolates_between_queue_sizes():
    sweep = [(0.9822, 3.49e6), (0.991, 2.53e6), (0.9948, 1.92e6)]
    assert _common.qps_at(sweep, 0.99) == pytest.approx(3.49e6 - 0.96e6 * (0.0078 / 0.0088))
    assert _common.qps_at(sweep, 0.999) is None
    assert _common.qps_at([(0.995, 1.0e6)], 0.99) == 1.0e6  # the sweep starts past the target
    # log=True (benchmarks/studies/cpu_search.py): log QPS linear in recall, the geometric mean half-way
    assert _common.qps_at([(0.9, 4e4), (0.99, 1e4)], 0.945, log=True) == pytest.approx(2e4)
    assert _common.qps_at(sweep, 0.999, log=True) is None


def test_host_seconds_runs_before_untimed_after_each_synchronisation():
    from benchmarks.runner import measure

    events = []
    times = measure.host_seconds(lambda: events.append("call"), 3, warmup=1, before=lambda: events.append("before"))
    assert len(times) == 3 and events == ["call"] + ["before", "call"] * 3


def test_search_gpu_scores_by_the_runners_recall():
    """``load`` / ``score`` (what benchmarks/studies/profile_search_width.py imports): the dataset in another
    dtype keeps its ground truth, and the recall of its own true ids is 1, of shifted ids lower."""
    import argparse

    args = argparse.Namespace(dataset="sift", dtype="int8", metric="", minilm_dir="")
    try:
        base, queries, gt, gt_d, metric, row_bytes = search_gpu.load(args)
    except FileNotFoundError:
        pytest.skip("sift-photos not found (../shared/datasets or $KNNGRAPH_DATASETS)")
    assert base.dtype == np.int8 and (metric, row_bytes) == ("sqeuclidean", 128) and gt.shape[1] == 10
    assert search_gpu.score(gt[:50]) == 1.0
    assert search_gpu.score(np.roll(gt[:50], 1, axis=1)[:, :10]) == 1.0  # order within the top 10 is free
    assert search_gpu.score(gt[:50, ::-1] * 0 + gt[:50, :1]) == pytest.approx(0.1)  # one true id, counted once
    np.testing.assert_allclose(gt_d[:, 0], ((base[gt[:, 0]].astype(np.float64) - queries) ** 2).sum(-1))


def test_clustered_sets_are_seeded():
    a = _common.clustered(3000, 8, seed=1, xp=np)
    assert a.shape == (3000, 8) and a.dtype == np.float32
    np.testing.assert_array_equal(a, _common.clustered(3000, 8, seed=1, xp=np))
    assert not np.array_equal(a, _common.clustered(3000, 8, seed=1, overlapping=True, xp=np))


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_imports_and_names_its_command(name):
    """A study imports without a GPU (its heavy imports are inside ``main``), documents itself, and its
    docstring names the command that runs it from its new place."""
    module = importlib.import_module(f"benchmarks.studies.{name}")
    assert module.__doc__ and f"benchmarks/studies/{name}.py" in module.__doc__
    assert callable(getattr(module, "main"))
    text = (ROOT / "benchmarks" / "studies" / f"{name}.py").read_text()
    assert not re.search(r"issue \d+|DESIGN\.md|/root/", text), name


def test_gpu_check_runs_studies_that_exist():
    """Every script scripts/gpu_check.sh's GPU_BENCHMARKS names exists."""
    text = (ROOT / "scripts" / "gpu_check.sh").read_text()
    block = text[text.index("GPU_BENCHMARKS=("):text.index("\n)", text.index("GPU_BENCHMARKS=("))]
    scripts = re.findall(r"python3 (benchmarks/\S+\.py)", block)
    assert scripts and all((ROOT / s).exists() for s in scripts), scripts
    assert all(s.startswith("benchmarks/studies/") for s in scripts)


def test_result_lines_name_no_paths_of_the_machine_that_ran_them(monkeypatch):
    from benchmarks.runner import measure

    root = str(Path(measure.__file__).resolve().parents[2])
    home = str(Path.home())
    monkeypatch.setenv("OUT", home + "/collect")
    text = (f"python x.py --out {home}/collect/multi --graph {home}/w/g.npy --data {root}/.data "
            f"{home}fs/kept {home}")
    assert measure.portable_paths(text) == "python x.py --out $OUT/multi --graph ~/w/g.npy --data ./.data " \
                                           f"{home}fs/kept ~"
    monkeypatch.delenv("OUT")
    assert measure.portable_paths(f"--out {home}/collect") == "--out ~/collect"
    monkeypatch.setattr(measure.sys, "argv", [f"{root}/benchmarks/studies/x.py", "--out", f"{home}/o"])
    monkeypatch.setattr(measure.sys.modules["__main__"], "__spec__", None, raising=False)
    assert measure.command_line() == "python benchmarks/studies/x.py --out ~/o"


def test_the_older_tree_of_the_call_ab_is_imported_under_its_own_name(tmp_path, monkeypatch):
    """benchmarks/studies/search_calls_ab.py imports an older tree beside this one: its package is copied
    as ``knngraph_before`` and reaches its own modules (relative imports), not this tree's; a directory
    without the package is refused naming --before."""
    from benchmarks.studies import search_calls_ab

    with pytest.raises(FileNotFoundError, match=r"--before: .* holds no knngraph package"):
        search_calls_ab.import_before(tmp_path, tmp_path / "work")
    package = tmp_path / "old" / "knngraph"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from ._version import VERSION\n")
    (package / "_version.py").write_text("VERSION = 'older'\n")
    (tmp_path / "work").mkdir()
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        module = search_calls_ab.import_before(tmp_path / "old", tmp_path / "work")
        assert module.__name__ == "knngraph_before" and module.VERSION == "older"
        assert sys.modules["knngraph_before._version"].VERSION == "older"
    finally:
        for name in [m for m in sys.modules if m == "knngraph_before" or m.startswith("knngraph_before.")]:
            del sys.modules[name]
