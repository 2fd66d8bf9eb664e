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
    # recall is cited where it is defined
    assert "`knngraph.evaluate`" in text and "DESIGN" not in text


def test_missing_required_method_fails_and_writes_nothing(results, tmp_path):
    partial = _write_without(results, tmp_path / "partial.jsonl", lambda ln: ln["method"] == "knngraph-nndescent")
    with pytest.raises(MissingDataError, match="build_test: no measurement of knngraph-nndescent"):
        generate([partial], tmp_path / "REPORT.md", tmp_path / "fig", figures=FIGS)
    assert not (tmp_path / "REPORT.md").exists() and not (tmp_path / "fig").exists()


def test_silently_absent_baseline_fails(results, tmp_path):
    partial = _write_without(results, tmp_path / "partial.jsonl", lambda ln: ln["method"] == "absent-baseline")
    with pytest.raises(MissingDataError, match="baseline absent-baseline neither measured nor skipped"):
        generate([partial], tmp_path / "REPORT.md", tmp_path / "fig", figures=FIGS)
    # allowed, the report is written and names the baseline its runs lack under the figure
    out = generate([partial], tmp_path / "REPORT.md", tmp_path / "fig", figures=FIGS, allow_missing_baselines=True)
    assert "Not in these runs: absent-baseline" in out.read_text()
    # a missing required method stays an error
    neither = _write_without(partial, tmp_path / "neither.jsonl", lambda ln: ln["method"] == "knngraph-nndescent")
    with pytest.raises(MissingDataError, match="no measurement of knngraph-nndescent"):
        generate([neither], tmp_path / "R2.md", tmp_path / "fig2", figures=FIGS, allow_missing_baselines=True)


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


# ----------------------------------------------------------------------------------------------------
# cuVS baselines and time per call: hand-made lines as the GPU suite writes them

from benchmarks.runner import report  # noqa: E402

GPU_DATA = "sift-photos-450k"


def _gpu_line(method, recall, qps, *, task="search", tag="", batch=None, search=None, build=None, call_s=None,
              status="ok", note=None, **extra):
    line = {"suite": "gpu", "tag": tag, "task": task, "method": method, "library": "cuvs" if "cuvs" in method else "knngraph",
            "device": "cuda", "device_name": "NVIDIA H200", "threads": 16, "input": "device", "dataset": GPU_DATA,
            "n": 450_000, "d": 128, "nq": 10_000, "dtype": "uint8", "metric": "sqeuclidean", "k": 10,
            "build_params": build or {}, "search_params": search or {}, "batch_size": batch, "status": status,
            "date": "2026-11-24T00:00:00+00:00", "command": "python -m benchmarks suite gpu --parts sift",
            "env": {"cpu": "Xeon", "cpu_count": 16, "gpu": "NVIDIA H200", "versions": {"cuvs": "26.10.00"},
                    "source": {"commit": "abc"}}}
    if note:
        line["note"] = note
    if status == "ok":
        searched = min(10_000, (batch or 10_000) * 1000)
        line.update({"recall@10": recall, "recall@1": recall, "R@10": recall, "qps": qps, "nq_searched": searched,
                     "search_s": searched / qps, "first_call_s": 0.5, "build_s": 2.0, "build_repeats": 3,
                     "calls": -(-searched // (batch or 10_000)), "peak_host_bytes": 2**30, "peak_gpu_bytes": 2**29,
                     **({"call_s": call_s} if call_s is not None else {}), **extra})
    return line


def _gpu_lines():
    skipped = "cuvs is not installed (pip install cuvs-cu13 ...): skipped, not measured"
    lines = [
        _gpu_line("knngraph-song", 0.95, 2.16e6, search={"queue_size": 64}),
        _gpu_line("knngraph-song", 0.99, 0.73e6, search={"queue_size": 128}),
        _gpu_line("cuvs-cagra", 0.95, 4.59e6, search={"itopk_size": 64, "search_width": 1}),
        _gpu_line("cuvs-cagra", 0.99, 1.56e6, search={"itopk_size": 256, "search_width": 1}),
        _gpu_line("cuvs-cagra-on-knngraph", 0.99, 2.68e6, search={"itopk_size": 128, "search_width": 1}),
        _gpu_line("cuvs-brute-force", None, None, status="skipped", note=skipped),
    ]
    for batch, song_ms, cagra_ms in ((1, 1.41, 0.42), (10, 1.67, 0.37), (100, 1.87, 0.59), (1000, 2.22, 0.68)):
        lines.append(_gpu_line("knngraph-song", 0.96, batch / song_ms * 1e3, tag="batch", batch=batch,
                               search={"queue_size": 64}, call_s=song_ms / 1e3))
        lines.append(_gpu_line("cuvs-cagra", 0.955, batch / cagra_ms * 1e3, tag="batch", batch=batch,
                               search={"itopk_size": 64, "search_width": 1}, call_s=cagra_ms / 1e3))
        # a faster setting below the 0.95 floor must not be picked for that floor
        lines.append(_gpu_line("cuvs-cagra", 0.90, batch / (cagra_ms / 2) * 1e3, tag="batch", batch=batch,
                               search={"itopk_size": 32, "search_width": 1}, call_s=cagra_ms / 2e3))
    graph = {**_gpu_line("cuvs-nn-descent", None, None, status="skipped"), "task": "graph", "k": 64, "status": "ok",
             "build_s": 1.24, "build_repeats": 3, "warmup_s": 0.3, "graph_recall@10": 0.992, "graph_recall@64": 0.98,
             "graph_recall_sample": 1000, "info": {"graph_degree": 65}}
    lines += [graph, {**graph, "method": "knngraph-nndescent", "library": "knngraph", "build_s": 0.351,
                      "graph_recall@10": 0.997, "build_params": {"max_iterations": 6}, "info": {"iterations": 6}}]
    return lines


GPU_FIGS = (
    Figure("pareto_gpu_test", "pareto", "gpu pareto", "cuda", GPU_DATA, ("knngraph-song",),
           ("cuvs-cagra", "cuvs-cagra-on-knngraph", "cuvs-brute-force")),
    Figure("latency_gpu_test", "latency", "gpu latency", "cuda", GPU_DATA, ("knngraph-song",), ("cuvs-cagra",),
           tags=("batch",)),
    Figure("build_gpu_test", "build", "gpu build", "cuda", GPU_DATA, ("knngraph-nndescent",), ("cuvs-nn-descent",)),
)


def _cells(text, start):
    """Cells of the first markdown table row of ``text`` that starts with ``start``."""
    row = next(ln for ln in text.splitlines() if ln.startswith(start))
    return [c.strip() for c in row.strip().strip("|").split("|")]


def test_report_draws_cuvs_lines_and_time_per_call(tmp_path):
    path = tmp_path / "bench_gpu.jsonl"
    path.write_text("\n".join(json.dumps(ln) for ln in _gpu_lines()) + "\n")
    text = generate([path], tmp_path / "REPORT.md", tmp_path / "fig", figures=GPU_FIGS).read_text()
    for name in ("pareto_gpu_test", "latency_gpu_test", "build_gpu_test"):
        assert (tmp_path / "fig" / f"{name}.png").stat().st_size > 1000
    # cuVS's measured points are in the tables; the skipped baseline is named with its note
    assert "| cuvs-cagra-on-knngraph |" in text and "2,680,000" in text and "4,590,000" in text
    assert "cuvs-brute-force: skipped: cuvs is not installed" in text
    # time per call at the same recall: at recall@10 >= 0.95 CAGRA's itopk 64 (0.42 ms at batch 1), not the
    # faster itopk 32 that reaches only 0.90; knngraph's queue 64 at 1.41 ms
    assert _cells(text, "| 0.95 | cuvs-cagra |")[2:] == [f"{ms} (itopk_size=64, search_width=1)"
                                                          for ms in ("0.42", "0.37", "0.59", "0.68")]
    assert _cells(text, "| 0.90 | cuvs-cagra |")[2] == "0.21 (itopk_size=32, search_width=1)"
    assert _cells(text, "| 0.95 | knngraph-song |")[2:] == [f"{ms} (queue_size=64)" for ms in ("1.41", "1.67", "1.87",
                                                                                                "2.22")]
    assert _cells(text, "| 0.99 | knngraph-song |")[2:] == ["-"] * 4  # no batched setting reached 0.99
    # the figure's table: batch 1 searched batch x max_calls of the 10,000 queries, at 1.41 ms per call
    row = next(ln for ln in text.splitlines() if ln.startswith("| knngraph-song |") and "| 1 (1,000 queries) |" in ln)
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    assert cells[4:8] == ["0.96", "0.96", "709", "1.41"]  # recall@10, R@10, QPS, ms/call


def test_cuvs_methods_get_their_own_colours():
    rows = [ln for ln in _gpu_lines() if ln["status"] == "ok" and ln["tag"] == "batch"]
    styled = {label: colour for label, _, colour, _, _ in report._styled(report._series(rows, "search_params"))}
    assert set(styled) == {"knngraph-song", "cuvs-cagra (itopk_size=64)", "cuvs-cagra (itopk_size=32)"}
    assert styled["cuvs-cagra (itopk_size=64)"] == styled["cuvs-cagra (itopk_size=32)"] != styled["knngraph-song"]
    colours = [report._COLOURS[m] for m in ("cuvs-cagra", "cuvs-cagra-on-knngraph", "cuvs-nn-descent",
                                            "cuvs-brute-force", "knngraph-song", "knngraph-exact", "torch-exact")]
    assert len(set(colours)) == len(colours)


def test_gpu_figures_require_cuvs_measured_or_skipped():
    """The committed GPU figures name cuVS as baselines: a run without any cuVS line cannot make the
    report; 'skipped' lines with the install note can."""
    fig = next(f for f in report.FIGURES if f.name == "pareto_gpu_sift450k")
    ok = [ln for ln in _gpu_lines() if "cuvs" not in ln["method"]]
    ok += [_gpu_line("knngraph-exact", 1.0, 3e5), _gpu_line("torch-exact", 1.0, 1e5)]
    problems = report.check(fig, ok)
    assert {p.split("baseline ")[1].split(" ")[0] for p in problems} == {"cuvs-cagra", "cuvs-cagra-on-knngraph",
                                                                        "cuvs-brute-force"}
    skipped = [_gpu_line(m, None, None, status="skipped", note="cuvs is not installed")
               for m in ("cuvs-cagra", "cuvs-cagra-on-knngraph", "cuvs-brute-force")]
    assert report.check(fig, ok + skipped) == []
    latency = next(f for f in report.FIGURES if f.name == "latency_gpu_sift450k")
    assert latency.task == "search" and latency.tags == ("batch",)


def test_time_per_call_of_lines_written_before_call_s():
    old = _gpu_line("knngraph-song", 0.95, 1e5, tag="batch", batch=100)
    for key in ("call_s", "calls", "nq_searched"):
        old.pop(key, None)
    assert report.call_seconds(old) == pytest.approx(old["search_s"] / 100)  # 10,000 queries in 100 calls
    assert report.call_seconds({**old, "call_s": 0.002}) == 0.002


# ----------------------------------------------------------------------------------------------------
# the search graphs of GGNN and GRNND: rows, figures, and a new figure not yet measured

SIFT100K = "sift-photos-100k"


def _cpu_line(method, recall, qps, search, build_s, **extra):
    line = {**_gpu_line(method, recall, qps, search=search, tag="search-graphs"), "device": "cpu",
            "device_name": "AMD EPYC", "threads": 2, "input": None, "dataset": SIFT100K, "n": 100_000,
            "build_s": build_s, "build_repeats": 1, "peak_gpu_bytes": None, "suite": "cpu",
            "command": "python -m benchmarks suite cpu --parts search_graphs --threads 2",
            "info": {"graph_degree": 24 if "ggnn" in method else 32, **extra}}
    line["env"] = {**line["env"], "gpu": None, "cpu": "AMD EPYC", "cpu_count": 2}
    return line


def _search_graph_lines():
    return [
        _cpu_line("knngraph-ggnn", 0.9317, 31_506, {"tau": 0.5, "queue_size": 32}, 89.3),
        _cpu_line("knngraph-ggnn", 0.9923, 5_296, {"tau": 0.7, "queue_size": 512}, 89.3),
        _cpu_line("knngraph-song-on-ggnn", 0.9617, 23_293, {"queue_size": 64}, 91.5, from_graph_s=0.01),
        _cpu_line("knngraph-song-on-grnnd", 0.9670, 25_475, {"queue_size": 64}, 8.9, mean_degree=9.9),
        {**_cpu_line("knngraph-song", 0.9735, 6_236, {"queue_size": 32}, 21.5),
         "build_params": {"graph": "nndescent", "graph_k": 64, "degree": 32}},  # in the earlier vocabulary
        {**_cpu_line("hnswlib", 0.99, 9_000, {"ef": 80}, 30.0), "tag": ""},  # the comparison part: not drawn here
    ]


def _figure(name):
    return next(f for f in report.FIGURES if f.name == name)


def test_report_rows_of_the_search_graphs(tmp_path):
    """The CPU figure of the search graphs draws GGNN's own search and the fast searcher on GGNN's and
    GRNND's graphs, with their build times in the table and their best QPS in the summary, and the same
    searcher on its prepared graph measured in the same run; lines of other runs (tags) stay out."""
    path = tmp_path / "bench_cpu.jsonl"
    path.write_text("\n".join(json.dumps(ln) for ln in _search_graph_lines()) + "\n")
    fig = _figure("search_graphs_cpu_sift100k")
    text = generate([path], tmp_path / "REPORT.md", tmp_path / "fig", figures=(fig,)).read_text()
    assert (tmp_path / "fig" / "search_graphs_cpu_sift100k.png").stat().st_size > 1000
    cells = _cells(text, "| knngraph-song-on-grnnd |")
    assert cells[2] == "queue_size=64" and cells[4] == "0.967" and cells[6] == "25,475" and cells[10] == "8.9 (1x)"
    assert "mean_degree=9.9" in cells[1]
    ggnn = [ln for ln in text.splitlines() if ln.startswith("| knngraph-ggnn |")]
    assert len(ggnn) == 2 and "tau=0.7, queue_size=512" in ggnn[1] and "89.3 (1x)" in ggnn[1]
    # summary: the fastest setting reaching each recall floor, per method
    summary = _cells(text, f"| {SIFT100K} (search-graphs) | CPU | knngraph-ggnn |")
    assert summary[3:] == ["31,506 (tau=0.5, queue_size=32)", "5,296 (tau=0.7, queue_size=512)",
                           "5,296 (tau=0.7, queue_size=512)"]
    assert _cells(text, f"| {SIFT100K} (search-graphs) | CPU | knngraph-song-on-grnnd |")[3:] == (
        ["25,475 (queue_size=64)"] * 2 + ["-"])
    # SONG's line written with the earlier parameter names reads in today's
    song = _cells(text, "| knngraph-song |")
    assert song[1] == "build_algo=nndescent, intermediate_graph_degree=64, graph_degree=32 (graph_degree=32)"
    assert "hnswlib" not in text


def test_required_search_graph_method_missing_refuses(tmp_path):
    path = tmp_path / "bench_cpu.jsonl"
    lines = [ln for ln in _search_graph_lines() if ln["method"] != "knngraph-song-on-grnnd"]
    path.write_text("\n".join(json.dumps(ln) for ln in lines) + "\n")
    with pytest.raises(MissingDataError, match="search_graphs_cpu_sift100k: no measurement of knngraph-song-on-grnnd"):
        generate([path], tmp_path / "REPORT.md", tmp_path / "fig", figures=(_figure("search_graphs_cpu_sift100k"),))


def test_new_gpu_figure_is_not_yet_measured_until_the_gpu_suite_runs(tmp_path):
    """The GPU figure of the search graphs was added before the GPU suite ran with it: the report says
    so in its place (no plot) instead of refusing; once any of its methods is measured it is checked like
    every figure. The figures that existed before keep refusing."""
    fig = _figure("search_graphs_gpu_sift450k")
    assert fig.allow_unmeasured and not any(f.allow_unmeasured for f in report.FIGURES if f is not fig)
    cpu = tmp_path / "bench_cpu.jsonl"
    cpu.write_text("\n".join(json.dumps(ln) for ln in _search_graph_lines()) + "\n")
    gpu = tmp_path / "bench_gpu.jsonl"
    gpu.write_text("\n".join(json.dumps(ln) for ln in _gpu_lines()) + "\n")
    figs = (_figure("search_graphs_cpu_sift100k"), fig)
    text = generate([cpu, gpu], tmp_path / "REPORT.md", tmp_path / "fig", figures=figs).read_text()
    assert f"## {fig.title}\n\nNot yet measured: the results hold no line of knngraph-ggnn" in text
    assert "`python -m benchmarks suite gpu`" in text
    assert not (tmp_path / "fig" / f"{fig.name}.png").exists()
    assert "| sift-photos-450k (search-graphs) | GPU |" not in text
    # one of its methods measured, the others not: refused like any figure
    partial = [{**_gpu_line("knngraph-ggnn", 0.95, 2e6, search={"tau": 0.5}), "tag": "search-graphs"}]
    gpu.write_text("\n".join(json.dumps(ln) for ln in _gpu_lines() + partial) + "\n")
    with pytest.raises(MissingDataError, match="search_graphs_gpu_sift450k: no measurement of knngraph-song-on-ggnn"):
        generate([cpu, gpu], tmp_path / "R2.md", tmp_path / "fig2", figures=figs)
    # an existing figure without its data still refuses
    with pytest.raises(MissingDataError, match="pareto_gpu_sift450k: no measurement of knngraph-exact"):
        generate([cpu], tmp_path / "R3.md", tmp_path / "fig3", figures=(_figure("pareto_gpu_sift450k"),))


def test_earlier_song_parameters_and_machine_paths_read_in_todays_terms():
    old = {**_gpu_line("knngraph-song", 0.95, 1e6, search={"queue_size": 64}),
           "build_params": {"graph": "exact", "graph_k": 96, "degree": 32}, "date": "2026-11-01T00:00:00+00:00"}
    new = {**old, "build_params": {"build_algo": "exact", "intermediate_graph_degree": 96, "graph_degree": 32},
           "qps": 2e6, "date": "2026-12-01T00:00:00+00:00"}
    kept = latest([report._upgrade(dict(old)), report._upgrade(dict(new))])
    assert [ln["qps"] for ln in kept] == [2e6]  # the same point: the later measurement replaces the earlier
    other = {**old, "method": "hnswlib", "build_params": {"graph": "x"}}
    assert report._upgrade(dict(other))["build_params"] == {"graph": "x"}  # only SONG's parameters are renamed
    assert report._command_text("python -m benchmarks suite gpu --out /root/out/bench_gpu.jsonl --plots") == (
        "python -m benchmarks suite gpu --out $OUT/bench_gpu.jsonl --plots")
