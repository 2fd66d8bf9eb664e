"""The benchmark runner (benchmarks/runner) on a GPU (marker ``gpu``): the cuVS baselines next to knngraph's
SONG on the bundled sample (the CPU tests are in test_bench_runner.py)."""

import pytest

from benchmarks.runner import methods
from benchmarks.runner.run import Runner, RunSpec

pytestmark = pytest.mark.gpu


def test_cuvs_baselines_on_the_gpu(tmp_path):
    """On a GPU with cuVS (source $CUVS_ENV on the lent machine): every cuVS baseline measures
    real recall on the bundled SIFT sample, also in small batches."""
    pytest.importorskip("cuvs", reason="cuVS not installed (see benchmarks.runner.methods.CUVS_HINT)")
    assert methods.get("cuvs-cagra").missing() is None
    runner = Runner(tmp_path / "g.jsonl", threads=1)
    ds = "sample:nq=200"
    lines = runner.run(RunSpec(ds, "search", "cuvs-brute-force", device="cuda", repeats=1))
    lines += runner.run(RunSpec(ds, "search", "cuvs-cagra", device="cuda", repeats=1, build_repeats=1,
                                search={"itopk_size": [64], "search_width": [1]}, batch_sizes=[None, 1, 10],
                                max_calls=20))
    lines += runner.run(RunSpec(ds, "search", "cuvs-cagra-on-knngraph", device="cuda", repeats=1, build_repeats=1,
                                search={"itopk_size": [64], "search_width": [1]}))
    lines += runner.run(RunSpec(ds, "search", "knngraph-song", device="cuda", repeats=1, build_repeats=1,
                                build={"build_algo": ["exact"], "intermediate_graph_degree": [96],
                                       "graph_degree": [32]},
                                search={"queue_size": [64]}, batch_sizes=[None, 1], max_calls=20))
    lines += runner.run(RunSpec(ds, "graph", "cuvs-nn-descent", device="cuda", k=16, build_repeats=1))
    lines += runner.run(RunSpec(ds, "graph", "cuvs-brute-force", device="cuda", k=16, build_repeats=1))
    assert all(ln["status"] == "ok" for ln in lines), [ln.get("note") for ln in lines]
    by = {(ln["task"], ln["method"], ln.get("batch_size")): ln for ln in lines}
    assert by[("search", "cuvs-brute-force", None)]["recall@10"] == 1.0
    for name in ("cuvs-cagra", "cuvs-cagra-on-knngraph", "knngraph-song"):
        assert by[("search", name, None)]["recall@10"] >= 0.95, name
    assert by[("search", "cuvs-cagra", 1)]["nq_searched"] == 20 and by[("search", "cuvs-cagra", 1)]["recall@10"] >= 0.9
    assert by[("search", "cuvs-cagra-on-knngraph", None)]["info"]["knngraph_graph_degree"] == 32
    assert by[("graph", "cuvs-nn-descent", None)]["graph_recall@10"] >= 0.9
    assert by[("graph", "cuvs-brute-force", None)]["graph_recall@10"] == 1.0
