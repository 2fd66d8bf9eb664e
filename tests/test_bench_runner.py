"""The benchmark runner (benchmarks/runner) on the bundled sample and on small synthetic data, on the CPU.

Timings are never asserted; the tests check that each measured point becomes one complete JSON line whose
recall is what the method really achieves, and that a missing baseline is skipped with a note.
"""

import json

import numpy as np
import pytest

from benchmarks.runner import data, methods
from benchmarks.runner.cli import main as bench_main
from benchmarks.runner.cli import parse_sets
from benchmarks.runner.run import Runner, RunSpec
from benchmarks.runner.synthetic import BLOCK_ROWS, GaussianMixture

# the fields issue 5 asks of every measured line
REQUIRED_FIELDS = ("dataset", "method", "build_params", "build_s", "peak_host_bytes", "peak_gpu_bytes",
                   "device_name", "date", "env")


class _NotInstalled(methods.Method):
    name = "not-installed-baseline"
    library = "not-installed-baseline"
    module = "knngraph_test_module_that_does_not_exist"
    tasks = ("search",)


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "lines.jsonl"
    runner = Runner(out, threads=2, suite="test")
    runner.run(RunSpec("sample:nq=200", "search", "knngraph-exact", repeats=1))
    runner.run(RunSpec("sample:nq=200", "graph", "knngraph-nndescent", k=10, graph={"sample_size": [8]},
                       build_repeats=1))
    return out, runner


def test_exact_search_line_is_complete_and_exact(sample_run):
    out, runner = sample_run
    lines = [json.loads(t) for t in out.read_text().splitlines()]
    assert lines == runner.lines
    line = next(ln for ln in lines if ln["task"] == "search")
    assert line["status"] == "ok"
    for field in REQUIRED_FIELDS + ("search_s", "qps", "recall@10", "R@10", "first_call_s"):
        assert field in line, field
    assert (line["dataset"], line["n"], line["d"], line["nq"], line["dtype"]) == ("sample:nq=200", 20000, 128, 200,
                                                                                  "uint8")
    assert line["recall@10"] == 1.0 and line["recall@1"] == 1.0
    assert line["qps"] == pytest.approx(200 / line["search_s"])
    assert line["search_repeats"] == 1 and line["first_call_s"] > 0
    assert line["peak_host_bytes"] > 20000 * 128  # the process holds at least the base
    assert line["peak_gpu_bytes"] is None and line["device"] == "cpu"
    assert line["env"]["versions"]["knngraph"] and line["env"]["versions"]["numpy"] == np.__version__


def test_graph_line_reports_real_graph_recall(sample_run):
    _, runner = sample_run
    line = next(ln for ln in runner.lines if ln["task"] == "graph")
    assert line["status"] == "ok", line.get("note")
    assert line["build_params"] == {"sample_size": 8} and line["k"] == 10
    assert line["build_repeats"] == 1 and line["warmup_rows"] == 20000
    assert line["graph_recall_sample"] == 1000
    # issue 3's CPU floor on this data is 0.95 at k=32; k=10 with p=8 is at least as good here
    assert 0.9 <= line["graph_recall@10"] <= 1.0
    assert line["info"]["iterations"] >= 1


def test_missing_baseline_is_skipped_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setitem(methods.METHODS, _NotInstalled.name, _NotInstalled())
    runner = Runner(tmp_path / "x.jsonl", threads=1)
    (line,) = runner.run(RunSpec("sample", "search", _NotInstalled.name))
    assert line["status"] == "skipped"
    assert "not installed" in line["note"] and "qps" not in line and "recall@10" not in line


def test_song_and_batches_on_the_sample(tmp_path):
    runner = Runner(tmp_path / "s.jsonl", threads=2)
    lines = runner.run(RunSpec("sample:n=4000,nq=100", "search", "knngraph-song", repeats=1, build_repeats=1,
                               build={"graph": ["exact"], "graph_k": [16], "graph_degree": [8]},
                               search={"queue_size": [8, 64]}, batch_sizes=[None, 30]))
    assert [ln["status"] for ln in lines] == ["ok"] * 4
    by = {(ln["search_params"]["queue_size"], ln["batch_size"]): ln for ln in lines}
    # a larger queue finds at least as many true neighbours; batching does not change the answers
    assert by[(64, None)]["recall@10"] >= by[(8, None)]["recall@10"]
    assert by[(64, None)]["recall@10"] >= 0.9
    assert by[(64, 30)]["recall@10"] == by[(64, None)]["recall@10"]
    assert by[(8, None)]["build_s"] > 0 and by[(8, None)]["warmup_rows"] == 4000
    # n= cuts the base, so the ground truth was recomputed by knngraph's exact k-NN over the first 4000 rows
    assert lines[0]["n"] == 4000 and runner.dataset("sample:n=4000,nq=100").gt_ids.max() < 4000


def test_synthetic_truth_comes_from_exact_knn():
    ds = data.load("synth:n=4000,d=12,nq=50,seed=3")
    ids, dist = ds.truth(10)
    brute = ((ds.queries[:, None, :].astype(np.float64) - ds.base[None].astype(np.float64)) ** 2).sum(-1)
    kth = np.sort(brute, axis=1)[:, 9]
    np.testing.assert_allclose(dist[:, 9], kth, rtol=1e-5)
    assert (dist[:, :-1] <= dist[:, 1:] + 1e-6).all()


def test_gaussian_mixture_is_seeded_and_prefix_stable():
    mix = GaussianMixture(8, 20, seed=5)
    a = mix.sample(BLOCK_ROWS + 10)
    np.testing.assert_array_equal(mix.sample(100), a[:100])
    np.testing.assert_array_equal(GaussianMixture(8, 20, seed=5).sample(BLOCK_ROWS + 10, threads=1), a)
    assert not np.array_equal(GaussianMixture(8, 20, seed=6).sample(100), a[:100])
    assert not np.array_equal(mix.sample(100, stream=1), a[:100])
    assert a.dtype == np.float32 and np.isfinite(a).all()


def test_dataset_specs():
    assert data.parse_spec("synth:n=1m,d=64") == ("synth", {"n": "1m", "d": "64"})
    assert data.parse_spec("hdf5:/x/y-angular.hdf5,nq=10") == ("hdf5", {"nq": "10", "path": "/x/y-angular.hdf5"})
    ds = data.load("synth:n=2k,d=4,nq=5")
    assert (ds.n, ds.d, ds.nq, ds.metric) == (2000, 4, 5, "sqeuclidean")
    with pytest.raises(ValueError, match="unknown dataset"):
        data.load("no-such-dataset")
    with pytest.raises(ValueError, match="key=value"):
        data.parse_spec("synth:n")


def test_cli_run_writes_lines(tmp_path, capsys):
    out = tmp_path / "cli.jsonl"
    rc = bench_main(["run", "--dataset", "sample:nq=40", "--method", "knngraph-exact", "--repeats", "1",
                     "--out", str(out), "--threads", "1"])
    assert rc == 0
    lines = [json.loads(t) for t in out.read_text().splitlines()]
    assert lines and all(ln["status"] == "ok" and ln["recall@10"] == 1.0 for ln in lines)
    assert lines[0]["command"].startswith("python -m benchmarks")
    assert parse_sets(["hnswlib.ef=10,40", "hnswlib.M=16", "x.mode=fast"]) == {
        "hnswlib": {"ef": [10, 40], "M": [16]}, "x": {"mode": ["fast"]}}
