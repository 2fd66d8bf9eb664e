"""The benchmark runner (benchmarks/runner) on the bundled sample and on small synthetic data, on the CPU
(the cuVS baselines on a GPU: test_bench_runner_gpu.py).

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

# the fields every measured line carries (what, build time, memory, where, when)
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
    # NN-Descent's CPU floor on this data is 0.95 at k=32; k=10 with p=8 is at least as good here
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
                               build={"build_algo": ["exact"], "intermediate_graph_degree": [16], "graph_degree": [8]},
                               search={"queue_size": [10, 64]}, batch_sizes=[None, 30]))
    assert [ln["status"] for ln in lines] == ["ok"] * 4
    by = {(ln["search_params"]["queue_size"], ln["batch_size"]): ln for ln in lines}
    # a larger queue finds at least as many true neighbours; batching does not change the answers
    assert by[(64, None)]["recall@10"] >= by[(10, None)]["recall@10"]
    assert by[(64, None)]["recall@10"] >= 0.9
    assert by[(64, 30)]["recall@10"] == by[(64, None)]["recall@10"]
    assert by[(10, None)]["build_s"] > 0 and by[(10, None)]["warmup_rows"] == 4000
    assert by[(10, None)]["info"]["graph_degree"] == 8 and 0 < by[(10, None)]["info"]["mean_degree"] <= 8
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


# ----------------------------------------------------------------------------------------------------
# cuVS baselines and small-batch timing

CUVS_TASKS = {"cuvs-cagra": ("search",), "cuvs-cagra-on-knngraph": ("search",), "cuvs-nn-descent": ("graph",),
              "cuvs-brute-force": ("search", "graph")}


def _cuvs_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("cuvs") is not None


@pytest.mark.skipif(_cuvs_importable(), reason="cuVS is installed here: its runs are measured, not skipped")
def test_missing_cuvs_gives_skipped_lines_with_the_install_note(tmp_path):
    runner = Runner(tmp_path / "c.jsonl", threads=1)
    for name, tasks in CUVS_TASKS.items():
        assert methods.get(name).devices == ("cuda",)
        for task in tasks:
            (line,) = runner.run(RunSpec("sample", task, name, device="cuda"))
            assert line["status"] == "skipped" and line["method"] == name and line["library"] == "cuvs"
            assert "cuvs is not installed" in line["note"] and "cuvs-cu13" in line["note"]
            assert "$CUVS_ENV" in line["note"]  # and how to use wheels carried to a machine without network
            assert "qps" not in line and "graph_recall@10" not in line
    # a cuVS baseline asked for on the CPU is an error line naming the device, not a silent skip
    (line,) = runner.run(RunSpec("sample", "search", "cuvs-cagra", device="cpu"))
    assert line["status"] == "error" and "'cpu'" in line["note"]


def test_cuvs_that_does_not_load_says_why(tmp_path, monkeypatch):
    """Installed but broken (a wheel whose native library is not found): the note carries the loader's
    message, so the GPU run's log says what to fix."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "cuvs" else real(name, *a))

    def broken():
        raise OSError("libcuvs_c.so: cannot open shared object file")

    monkeypatch.setattr(methods, "cuvs_modules", broken)
    runner = Runner(tmp_path / "b.jsonl", threads=1)
    (line,) = runner.run(RunSpec("sample", "search", "cuvs-cagra", device="cuda"))
    assert line["status"] == "skipped"
    assert "installed but does not load (OSError: libcuvs_c.so: cannot open shared object file)" in line["note"]
    assert "LD_LIBRARY_PATH" in line["note"]


def test_self_column_is_dropped_from_cuvs_graphs():
    """cuVS returns k + 1 neighbours per node; scoring drops the node itself, or the last column where
    the node is absent, leaving k other nodes in order."""
    ids = np.array([[0, 5, 6, 7], [3, 1, 2, 9], [4, 8, 6, 5]], dtype=np.uint32)  # rows 0 and 1 hold themselves
    for name in ("cuvs-nn-descent", "cuvs-brute-force"):
        out = methods.get(name).finish_graph(ids, 3)
        np.testing.assert_array_equal(out, [[5, 6, 7], [3, 2, 9], [4, 8, 6]])
    # other methods' graphs are scored as returned
    assert methods.get("knngraph-exact").finish_graph(ids, 3) is ids


class _ExactWithHoles(methods.Method):
    """Exact top-k by NumPy, returned as uint32 with the last column set to CAGRA's 'no id' value."""

    name = "exact-with-holes"
    library = "numpy"
    tasks = ("search",)
    has_index = False

    def search(self, ctx, index, queries, k):
        x = index["base"].astype(np.float64)
        q = np.asarray(queries, dtype=np.float64)
        d = (q * q).sum(1)[:, None] - 2 * q @ x.T + (x * x).sum(1)[None, :]
        ids = np.argsort(d, axis=1, kind="stable")[:, :k].astype(np.uint32)
        ids[:, -1] = np.iinfo(np.uint32).max
        return ids


def test_ids_outside_the_base_count_as_misses(tmp_path, monkeypatch):
    monkeypatch.setitem(methods.METHODS, _ExactWithHoles.name, _ExactWithHoles())
    runner = Runner(tmp_path / "h.jsonl", threads=1)
    (line,) = runner.run(RunSpec("sample:n=2000,nq=20", "search", _ExactWithHoles.name, repeats=1))
    assert line["status"] == "ok", line.get("note")
    assert line["recall@10"] == pytest.approx(0.9)  # 9 true neighbours of 10, the 'none' id a miss
    assert line["recall@1"] == 1.0


def test_batch_sizes_time_each_call(tmp_path):
    """--batch-sizes on a CPU searcher: one line per batch size with the median time per call; with
    --max-calls only the first batch x max_calls queries are searched, and batching does not change the
    answers (the batch of 10 covers all 100 queries and scores as one call over all of them does)."""
    out = tmp_path / "b.jsonl"
    rc = bench_main(["run", "--dataset", "sample:n=4000,nq=100", "--method", "knngraph-song", "--threads", "2",
                     "--set", "knngraph-song.build_algo=exact", "--set", "knngraph-song.intermediate_graph_degree=16",
                     "--set", "knngraph-song.graph_degree=8", "--set", "knngraph-song.queue_size=64",
                     "--set", "knngraph-song.visited=hash",  # a SearchParams field outside the default sweep
                     "--batch-sizes", "1,10,all", "--max-calls", "25", "--repeats", "2", "--build-repeats", "1",
                     "--out", str(out)])
    assert rc == 0
    by = {ln["batch_size"]: ln for ln in (json.loads(t) for t in out.read_text().splitlines())}
    assert set(by) == {1, 10, None} and all(ln["status"] == "ok" for ln in by.values())
    one, ten, whole = by[1], by[10], by[None]
    assert (one["nq_searched"], one["calls"]) == (25, 25)
    assert (ten["nq_searched"], ten["calls"]) == (100, 10)
    assert (whole["nq_searched"], whole["calls"]) == (100, 1)
    for ln in by.values():
        assert ln["call_s"] > 0 and ln["call_p90_s"] >= ln["call_s"] and len(ln["search_all_s"]) == 2
        assert ln["qps"] == pytest.approx(ln["nq_searched"] / ln["search_s"])
        assert ln["first_call_s"] > 0 and ln["search_params"] == {"queue_size": 64, "visited": "hash"}
    assert whole["call_s"] == whole["search_s"]
    assert ten["recall@10"] == whole["recall@10"] >= 0.9
    assert one["recall@10"] >= 0.9
    with pytest.raises(SystemExit, match="positive integers"):
        bench_main(["run", "--dataset", "sample", "--method", "knngraph-song", "--batch-sizes", "0",
                    "--out", str(tmp_path / "x.jsonl")])


def test_gpu_suite_puts_cuvs_next_to_knngraph():
    """One `suite gpu --parts sift` run measures each cuVS baseline on the data, k and batch sizes of the
    matching knngraph method; CAGRA-on-knngraph searches the graph of a knngraph-song run (song.build's
    defaults: the exact intermediate_graph_degree-NN graph pruned to graph_degree)."""
    from knngraph import song

    from benchmarks.runner.suites import gpu_suite

    specs = gpu_suite(("sift",))
    by = {}
    for s in specs:
        by.setdefault((s.task, s.method, s.tag), []).append(s)
    for name, tasks in CUVS_TASKS.items():
        for task in tasks:
            assert (task, name, "") in by, (task, name)
    for name in ("knngraph-song", "cuvs-cagra", "cuvs-cagra-on-knngraph", "knngraph-exact", "cuvs-brute-force"):
        (spec,) = by[("search", name, "batch")]
        assert {1, 10, 100, 1000} <= set(spec.batch_sizes) and spec.max_calls == 1000
        assert spec.dataset == "sift-photos-450k" and spec.device == "cuda"
    defaults = song.AUTO_ROUTES["cuda"]  # what song.build's automatic fields take on a GPU
    same_graph = {"build_algo": [defaults.build_algo],
                  "intermediate_graph_degree": [defaults.intermediate_graph_degree],
                  "graph_degree": [defaults.graph_degree]}
    assert any(s.build == same_graph for s in by[("search", "knngraph-song", "")])
    assert by[("search", "knngraph-song", "batch")][0].build == same_graph
    assert all(s.build is None for s in by[("search", "cuvs-cagra-on-knngraph", "")])  # song.build's defaults
    (cagra,) = by[("search", "cuvs-cagra", "")]
    assert cagra.search["search_width"] == [1] and min(cagra.search["itopk_size"]) <= 16 <= 512 <= max(
        cagra.search["itopk_size"])
    assert methods.get("cuvs-cagra").build_sweep == {"graph_degree": [32], "intermediate_graph_degree": [64],
                                                     "build_algo": ["nn_descent"]}
    assert {s.k for s in by[("graph", "cuvs-nn-descent", "")]} == {s.k for s in by[("graph", "knngraph-nndescent", "")]}


# ----------------------------------------------------------------------------------------------------
# every registry algorithm through the one adapter: GGNN and GRNND as builders of search graphs

SMALL = "sample:n=3000,nq=100"


def _brute_force_recall(ds, ids, k=10):
    """recall@k of ``ids`` by NumPy brute force in float64 (independent of knngraph.evaluate and of the
    runner's scoring): a returned id at the true k-th distance counts, an id counts once."""
    base, queries = ds.base.astype(np.float64), ds.queries.astype(np.float64)
    dist = (queries * queries).sum(1)[:, None] - 2 * queries @ base.T + (base * base).sum(1)[None, :]
    kth = np.sort(dist, axis=1)[:, k - 1]
    hits = 0
    for row, got in enumerate(np.asarray(ids)[:, :k]):
        got = {int(i) for i in got if 0 <= i < ds.n}
        hits += sum(dist[row, i] <= kth[row] for i in got)
    return hits / (k * len(ids))


class _Recording(methods.KnngraphMethod):
    """The adapter, keeping the ids of the last search of each setting."""

    def __init__(self, *args):
        super().__init__(*args)
        self.ids = {}

    def search(self, ctx, index, queries, k, **params):
        ids = super().search(ctx, index, queries, k, **params)
        self.ids[json.dumps(params, sort_keys=True)] = np.asarray(ids)
        return ids


@pytest.fixture(scope="module")
def search_graph_run(tmp_path_factory):
    from knngraph import registry

    from benchmarks.runner.suites import search_graph_runs

    recorders = {m.name: m for m in (_Recording(registry.get("ggnn")),
                                     _Recording(registry.get("ggnn"), registry.get("song")),
                                     _Recording(registry.get("grnnd"), registry.get("song")),
                                     _Recording(registry.get("song")))}
    out = tmp_path_factory.mktemp("graphs") / "search_graphs.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        for name, recorder in recorders.items():
            mp.setitem(methods.METHODS, name, recorder)
        runner = Runner(out, threads=2, suite="test")
        for spec in search_graph_runs(SMALL, "cpu", quick=True, build_repeats=1, repeats=1, build_warmup="none"):
            runner.run(spec)
    return out, runner, recorders


def test_search_graph_lines_are_complete_and_scored_against_brute_force(search_graph_run):
    """The CPU suite's GGNN and GRNND runs in quick mode (and SONG on its own prepared graph beside them):
    one well-formed line per setting, whose recall is what the ids the adapter returned score against
    NumPy brute force."""
    out, runner, recorders = search_graph_run
    lines = [json.loads(t) for t in out.read_text().splitlines()]
    assert lines == runner.lines
    assert [ln["status"] for ln in lines] == ["ok"] * len(lines), [ln.get("note") for ln in lines]
    by_method = {}
    for ln in lines:
        by_method.setdefault(ln["method"], []).append(ln)
    assert {m: len(v) for m, v in by_method.items()} == {"knngraph-ggnn": 4, "knngraph-song-on-ggnn": 2,
                                                         "knngraph-song-on-grnnd": 2, "knngraph-song": 2}
    ds = runner.dataset(SMALL)
    for ln in lines:
        assert all(field in ln for field in REQUIRED_FIELDS) and ln["peak_gpu_bytes"] is None  # the CPU
        for field in ("build_s", "search_s", "qps", "recall@10", "R@10", "first_call_s", "info", "peak_host_bytes"):
            assert ln.get(field) is not None, (ln["method"], field)
        assert ln["tag"] == "search-graphs" and ln["build_params"] == {} and ln["build_repeats"] == 1  # defaults
        assert (ln["dataset"], ln["n"], ln["nq"], ln["k"]) == (SMALL, 3000, 100, 10)
        ids = recorders[ln["method"]].ids[json.dumps(ln["search_params"], sort_keys=True)]
        assert ids.shape == (100, 10)
        assert ln["recall@10"] == pytest.approx(_brute_force_recall(ds, ids), abs=1e-12)
    # GGNN searched over its knob (the registry's search_knob) at two queue sizes; more slack, more recall
    ggnn = {(ln["search_params"]["tau"], ln["search_params"]["queue_size"]): ln for ln in by_method["knngraph-ggnn"]}
    assert set(ggnn) == {(0.3, 32), (0.3, 128), (0.7, 32), (0.7, 128)}
    assert ggnn[(0.7, 128)]["recall@10"] >= ggnn[(0.3, 32)]["recall@10"] and ggnn[(0.7, 128)]["recall@10"] >= 0.9
    assert ggnn[(0.3, 32)]["info"]["graph_degree"] == 24
    # the fast searcher on each graph as built: the builder's build, then song.from_graph (timed with it)
    for name, degree in (("knngraph-song-on-ggnn", 24), ("knngraph-song-on-grnnd", 32)):
        small, large = sorted(by_method[name], key=lambda ln: ln["search_params"]["queue_size"])
        assert (small["search_params"], large["search_params"]) == ({"queue_size": 16}, {"queue_size": 64})
        assert large["recall@10"] >= small["recall@10"] and large["recall@10"] >= 0.9
        info = large["info"]
        assert info["graph_degree"] == degree and 0 < info["mean_degree"] <= degree
        assert 0 <= info["from_graph_s"] <= large["build_s"]
    # GRNND's rows are RNG-pruned: sparser than its width
    assert by_method["knngraph-song-on-grnnd"][0]["info"]["mean_degree"] < 32


def test_the_registry_names_each_searchers_knob_and_the_adapter_sweeps_it():
    import dataclasses

    from knngraph import registry

    for algorithm in registry.ALGORITHMS.values():
        if not algorithm.searches:
            assert algorithm.search_knob == "", algorithm.name
            continue
        fields = {f.name for f in dataclasses.fields(algorithm.load().SearchParams)}
        assert algorithm.search_knob in fields or (algorithm.name, algorithm.search_knob) == ("exact", "")
        method = methods.get(f"knngraph-{algorithm.name}")
        assert list(method.search_sweep) == ([algorithm.search_knob] if algorithm.search_knob else [])
        assert method.has_index == bool(algorithm.search_knob)  # an exact search has no index to time
    assert {m.name for m in methods.knngraph_methods()} == (
        {f"knngraph-{name}" for name in registry.ALGORITHMS} | {"knngraph-song-on-ggnn", "knngraph-song-on-grnnd"})
    assert methods.get("knngraph-ggnn").tasks == ("graph", "search")
    assert methods.get("knngraph-grnnd").tasks == ("graph",)
    assert methods.get("knngraph-song-on-grnnd").tasks == ("search",)
    assert methods.get("knngraph-song-on-ggnn").search_sweep == {"queue_size": methods.KNOB_SWEEPS["queue_size"]}


def test_set_routes_search_params_to_the_search_and_others_to_the_build(tmp_path):
    from benchmarks.runner.cli import split_params

    build, search = split_params(methods.get("knngraph-ggnn"), {"tau": [0.5], "graph_degree": [16],
                                                                 "queue_size": [64]})
    assert (build, search) == ({"graph_degree": [16]}, {"tau": [0.5], "queue_size": [64]})
    build, search = split_params(methods.get("knngraph-song-on-grnnd"), {"prune_alpha": [1.1], "visited": ["bloom"]})
    assert (build, search) == ({"prune_alpha": [1.1]}, {"visited": ["bloom"]})
    # a field the algorithm does not have: an error line that names it
    runner = Runner(tmp_path / "e.jsonl", threads=1)
    (line,) = runner.run(RunSpec("sample:n=2000,nq=20", "search", "knngraph-song-on-grnnd",
                                 build={"no_such_field": [1]}, search={"queue_size": [16]}, build_repeats=1))
    assert line["status"] == "error" and "no_such_field" in line["note"]


def test_suites_measure_the_search_graphs():
    from benchmarks.runner.suites import DEFAULT_GPU_PARTS, SEARCH_GRAPH_TAG, cpu_suite, gpu_suite

    graphs = {"knngraph-ggnn", "knngraph-song-on-ggnn", "knngraph-song-on-grnnd", "knngraph-song"}
    cpu = [s for s in cpu_suite() if s.tag == SEARCH_GRAPH_TAG]
    assert {s.method for s in cpu} == graphs and {s.dataset for s in cpu} == {"sift-photos-100k"}
    assert all(s.device == "cpu" and s.build_repeats == 1 for s in cpu)
    # SONG beside them on the graph of the comparison part, so that its earlier lines are the same points
    (song,) = [s for s in cpu if s.method == "knngraph-song"]
    (compared,) = [s for s in cpu_suite(("compare",)) if s.method == "knngraph-song" and s.dataset == song.dataset]
    assert song.build == compared.build and song.search == compared.search
    assert not [s for s in cpu_suite(("compare",)) if s.tag == SEARCH_GRAPH_TAG]
    ggnn = next(s for s in cpu if s.method == "knngraph-ggnn")
    assert set(ggnn.search) == {"tau", "queue_size"}
    assert "search_graphs" in DEFAULT_GPU_PARTS
    gpu = [s for s in gpu_suite() if s.tag == SEARCH_GRAPH_TAG]
    assert {s.method for s in gpu} == graphs and {(s.dataset, s.device) for s in gpu} == {("sift-photos-450k", "cuda")}
