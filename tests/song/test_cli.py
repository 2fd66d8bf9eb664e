"""``knngraph search`` / ``knngraph prepare`` (CPU)."""

import json

import numpy as np

import knngraph
from knngraph import io
from knngraph.cli import main
from knngraph.evaluate import recall_at_k


def test_search_build_save_and_reuse(tmp_path, capsys, sample):
    base, queries = tmp_path / "base.u8bin", tmp_path / "q.u8bin"
    io.write(base, sample.base[:5000])
    io.write(queries, sample.queries[:100])
    idx, out = tmp_path / "s.song", tmp_path / "ids.ibin"
    assert main(["search", str(base), "--save-index", str(idx), "--device", "cpu", "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["built"] is True
    assert main(["search", str(idx), str(queries), "-k", "10", "--queue-size", "48", "--out", str(out),
                 "--out-distances", str(tmp_path / "d.fbin"), "--device", "cpu", "--quiet", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["n_queries"] == 100 and payload["built"] is False
    ids = io.read(out)
    d_true, i_true = knngraph.knn(sample.base[:5000], sample.queries[:100], 10, device="cpu", verbose=False)
    assert recall_at_k(ids, i_true, 10, distances=io.read(tmp_path / "d.fbin"), true_distances=d_true) >= 0.95


def test_prepare_then_search_with_graph(tmp_path, capsys, sample):
    base, queries = tmp_path / "base.u8bin", tmp_path / "q.u8bin"
    io.write(base, sample.base[:3000])
    io.write(queries, sample.queries[:50])
    g = knngraph.knn_graph(sample.base[:3000], 32, device="cpu", verbose=False)
    g.save(tmp_path / "g.knng")
    assert main(["prepare", str(tmp_path / "g.knng"), str(base), "--graph-degree", "16", "--out",
                 str(tmp_path / "p.knng"), "--device", "cpu", "--quiet"]) == 0
    assert "degree 16" in capsys.readouterr().out
    assert main(["search", str(base), str(queries), "-k", "5", "--graph", str(tmp_path / "p.knng"), "--out",
                 str(tmp_path / "ids.npy"), "--device", "cpu", "--quiet"]) == 0
    assert np.load(tmp_path / "ids.npy").shape == (50, 5)
    # bad input: a clear message, exit code 2
    assert main(["search", str(base), str(queries), "-k", "80", "--queue-size", "64", "--out",
                 str(tmp_path / "x.npy"), "--device", "cpu", "--quiet"]) == 2
    assert "larger than queue_size" in capsys.readouterr().err
