"""The report generator (benchmarks/runner/report.py): built from real runner lines, and refusing to write
a report when a figure's data is missing."""

import json

import pytest

from benchmarks.runner import methods
from benchmarks.runner.cli import main as bench_main
from benchmarks.runner.report import Figure, MissingDataError, generate, latest, load_lines
from benchmarks.runner.run import Runner, RunSpec

DATA = "sample:nq=60"


class _NotInstalled(methods.Method):
    name = "absent-baseline"
    library = "absent-baseline"
    module = "knngraph_test_module_that_does_not_exist"
    tasks = ("search", "graph")


FIGS = (
    Figure("pareto_test", "pareto", "test pareto", "cpu", DATA, ("knngraph-exact",), ("absent-baseline",)),
    Figure("build_test", "build", "test build", "cpu", DATA, ("knngraph-nndescent",)),
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Real lines: exact search, an NN-Descent graph, and a skipped baseline."""
    path = tmp_path_factory.mktemp("report") / "bench_test.jsonl"
    methods.METHODS[_NotInstalled.name] = _NotInstalled()
    try:
        runner = Runner(path, threads=2, suite="test")
        runner.run(RunSpec(DATA, "search", "knngraph-exact", repeats=1))
        runner.run(RunSpec(DATA, "search", _NotInstalled.name))
        # the same build as tests/test_bench_runner.py, so the compiled kernels are shared
        runner.run(RunSpec(DATA, "graph", "knngraph-nndescent", k=10, graph={"sample_size": [8]}, build_repeats=1))
    finally:
        del methods.METHODS[_NotInstalled.name]
    return path


def _write_without(src, dst, drop):
    lines = [ln for ln in src.read_text().splitlines() if not drop(json.loads(ln))]
    dst.write_text("\n".join(lines) + "\n")
    return dst


def test_report_embeds_plots_and_numbers_from_the_lines(results, tmp_path):
    md = generate([results], tmp_path / "REPORT.md", tmp_path / "fig", figures=FIGS)
    text = md.read_text()
    assert "![pareto_test](fig/pareto_test.png)" in text and "![build_test](fig/build_test.png)" in text
    assert (tmp_path / "fig" / "pareto_test.png").stat().st_size > 1000
    rows = {ln["method"]: ln for ln in load_lines([results])}
    # the measured QPS and graph recall appear as written by the runner
    assert f"{rows['knngraph-exact']['qps']:,.0f}" in text
    assert f"{rows['knngraph-nndescent']['graph_recall@10']:.4g}" in text
    # the skipped baseline is named with its note, and where and how it ran is stated
    assert "absent-baseline: skipped: absent-baseline is not installed" in text
    assert "Command: `python -m benchmarks" in text and "Versions:" in text and "Ran on:" in text


def test_missing_required_method_fails_and_writes_nothing(results, tmp_path):
    partial = _write_without(results, tmp_path / "partial.jsonl", lambda ln: ln["method"] == "knngraph-nndescent")
    with pytest.raises(MissingDataError, match="build_test: no measurement of knngraph-nndescent"):
        generate([partial], tmp_path / "REPORT.md", tmp_path / "fig", figures=FIGS)
    assert not (tmp_path / "REPORT.md").exists() and not (tmp_path / "fig").exists()


def test_silently_absent_baseline_fails(results, tmp_path):
    partial = _write_without(results, tmp_path / "partial.jsonl", lambda ln: ln["method"] == "absent-baseline")
    with pytest.raises(MissingDataError, match="baseline absent-baseline neither measured nor skipped"):
        generate([partial], tmp_path / "REPORT.md", tmp_path / "fig", figures=FIGS)


def test_scaling_figure_needs_its_range(results, tmp_path):
    fig = Figure("scaling_test", "scaling", "t", "cpu", "sample", ("knngraph-nndescent",), tags=("", "ooc"),
                 min_n=10_000, max_n=10_000_000)
    with pytest.raises(MissingDataError, match="must span n = 10000 .. 10000000.*no out-of-core"):
        generate([results], tmp_path / "REPORT.md", tmp_path / "fig", figures=(fig,))


def test_missing_results_file_fails(tmp_path):
    with pytest.raises(MissingDataError, match="does not exist"):
        generate([tmp_path / "nope.jsonl"], tmp_path / "REPORT.md", tmp_path / "fig", figures=FIGS)
    # the command line says so and exits non-zero (the committed figures need the committed results)
    assert bench_main(["report", "--results", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "R.md"),
                       "--figures", str(tmp_path / "f")]) == 2


def test_latest_measurement_wins(results):
    lines = load_lines([results])
    exact = next(ln for ln in lines if ln["method"] == "knngraph-exact")
    newer = {**exact, "qps": 1.0, "date": "2999-01-01T00:00:00+00:00"}
    kept = [ln for ln in latest(lines + [newer]) if ln["method"] == "knngraph-exact"]
    assert kept == [newer]


def test_out_of_core_strategies_are_separate_points():
    """Two out-of-core builds with the same parameters but cut differently (shard pairs, then clusters)
    are two points; a later run of the same strategy and overlap replaces the earlier one."""
    head = {"task": "graph", "method": "knngraph-nndescent", "dataset": "synth:n=1000", "device": "cuda", "tag": "ooc",
            "k": 32, "build_params": {"memory_limit": "quarter"}, "status": "ok"}
    pairs = {**head, "info": {"shards": 41}, "date": "2026-01-01"}  # written before info had out_of_core
    clusters = {**head, "info": {"out_of_core": "clusters", "overlap": 2}, "date": "2026-02-01"}
    rerun = {**clusters, "date": "2026-03-01"}
    kept = latest([pairs, clusters, rerun])
    assert len(kept) == 2 and pairs in kept and rerun in kept
