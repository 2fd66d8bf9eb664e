"""``knngraph search --method ggnn`` (CPU): build, save, reuse, with GGNN's options."""

import json

import knngraph
from knngraph import io
from knngraph.cli import main
from knngraph.evaluate import recall_at_k


def test_cli_builds_saves_and_searches_a_ggnn_index(tmp_path, capsys, sample):
    base, queries = tmp_path / "base.u8bin", tmp_path / "q.u8bin"
    io.write(base, sample.base[:3000])
    io.write(queries, sample.queries[:100])
    idx, out = tmp_path / "s.ggnn", tmp_path / "ids.ibin"
    assert main(["search", str(base), "--method", "ggnn", "--graph-degree", "16", "--refinements", "1",
                 "--save-index", str(idx), "--device", "cpu", "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["built"] is True
    assert main(["search", str(idx), str(queries), "-k", "10", "--tau", "0.6", "--out", str(out),
                 "--device", "cpu", "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_queries"] == 100
    d_true, i_true = knngraph.knn(sample.base[:3000], sample.queries[:100], 10, device="cpu", verbose=False)
    assert recall_at_k(io.read(out), i_true, 10) >= 0.95
    # bad input: a clear message, exit code 2
    assert main(["search", str(idx), str(queries), "-k", "10", "--tau", "-1", "--out", str(tmp_path / "x.npy"),
                 "--device", "cpu", "--quiet"]) == 2
    assert "'tau' parameter of SearchParams" in capsys.readouterr().err


def test_cli_build_method_ggnn_writes_its_search_graph(tmp_path, capsys, sample):
    """``knngraph build --method ggnn``: the bottom layer as a graph file, which ``knngraph search --graph``
    searches (SONG by default, GGNN's search with ``--method ggnn``)."""
    base, queries = tmp_path / "base.u8bin", tmp_path / "q.u8bin"
    io.write(base, sample.base[:3000])
    io.write(queries, sample.queries[:100])
    graph, out = tmp_path / "g.knng", tmp_path / "ids.ibin"
    assert main(["build", str(base), "-k", "16", "--method", "ggnn", "--refinements", "1", "--out", str(graph),
                 "--device", "cpu", "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "ggnn"
    g = knngraph.Graph.load(graph)
    assert g.indices.shape == (3000, 16) and g.info["method"] == "ggnn"
    _, i_true = knngraph.knn(sample.base[:3000], sample.queries[:100], 10, device="cpu", verbose=False)
    for method in ("song", "ggnn"):
        assert main(["search", str(base), str(queries), "-k", "10", "--graph", str(graph), "--method", method,
                     "--out", str(out), "--device", "cpu", "--quiet", "--json"]) == 0
        capsys.readouterr()
        assert recall_at_k(io.read(out), i_true, 10) >= 0.9, method
    assert main(["build", str(base), "-k", "16", "--method", "ggnn", "--tau-build", "-1", "--out", str(graph),
                 "--device", "cpu", "--quiet"]) == 2
    assert "'tau_build' parameter of IndexParams" in capsys.readouterr().err
