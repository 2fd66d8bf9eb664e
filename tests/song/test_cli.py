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


def test_search_paths_and_options_checked_before_building(tmp_path, capsys, monkeypatch, sample):
    from knngraph import song

    def no_building(*args, **kwargs):
        raise AssertionError("bad arguments must be refused before building the index")

    monkeypatch.setattr(song, "build", no_building)
    base, queries = tmp_path / "base.u8bin", tmp_path / "q.u8bin"
    io.write(base, sample.base[:500])
    io.write(queries, sample.queries[:10])
    (tmp_path / "adir").mkdir()
    cases = [
        (["--save-index", str(tmp_path / "adir")], "--save-index", "is a directory"),
        (["--save-index", str(tmp_path / "s.npy")], "--save-index", ".npy is a vector/graph file extension"),
        (["--save-index", str(tmp_path / "nodir" / "s.song")], "--save-index", "does not exist"),
        ([str(queries), "-k", "5", "--out", str(tmp_path / "adir")], "--out", "is a directory"),
        ([str(queries), "-k", "5", "--out", str(tmp_path / "ids.fbin")], "--out", "cannot write ids to a .fbin"),
        ([str(queries), "-k", "5", "--out", str(tmp_path / "ids.ibin"), "--out-distances", str(tmp_path / "d.ibin")],
         "--out-distances", "cannot write distances"),
        ([str(queries), "-k", "5"], "searching QUERIES needs -k and --out", ""),
        ([], "nothing to do", ""),
        (["--save-index", str(tmp_path / "s.song"), "--out", str(tmp_path / "ids.ibin")], "--out and --out-distances "
         "apply when searching QUERIES", ""),
        (["--save-index", str(tmp_path / "s.song"), "--queue-size", "64"], "search options", ""),
        ([str(tmp_path / "adir"), "-k", "5", "--out", str(tmp_path / "ids.ibin")], "QUERIES", "is a directory"),
        ([str(queries), "-k", "5", "--out", str(tmp_path / "ids.ibin"), "--queue-size", "0"],
         "'queue_size' parameter of SearchParams", ""),
        (["--save-index", str(tmp_path / "s.song"), "--alpha", "nan"], "argument --alpha: expected a finite number",
         ""),
        (["--save-index", str(tmp_path / "s.song"), "--graph-degree", "2000"], "'graph_degree' parameter of IndexParams",
         ""),
        (["--save-index", str(tmp_path / "s.song"), "--graph", str(tmp_path / "missing.knng")], "--graph",
         "no such file"),
    ]
    for extra, fragment, fragment2 in cases:
        assert main(["search", str(base), *extra, "--device", "cpu", "--quiet"]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("knngraph search: error: ") and err.count("\n") == 1, err
        assert fragment in err and fragment2 in err, err
    # a corrupt saved index is a failure while running (exit 1)
    (tmp_path / "broken.song").write_bytes(b"PK\x03\x04 not really")
    assert main(["search", str(tmp_path / "broken.song"), str(queries), "-k", "5", "--out",
                 str(tmp_path / "ids.ibin"), "--device", "cpu", "--quiet"]) == 1
    assert "broken.song" in capsys.readouterr().err


def test_prepare_checks_out_before_work(tmp_path, capsys, sample):
    base = tmp_path / "base.u8bin"
    io.write(base, sample.base[:300])
    knngraph.knn_graph(sample.base[:300], 8, device="cpu", verbose=False).save(tmp_path / "g.knng")
    assert main(["prepare", str(tmp_path / "g.knng"), str(base), "--out", str(tmp_path / "p.ibin")]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["prepare", str(tmp_path / "g.knng"), str(base), "--graph-degree", "4", "--reverse-candidates", "-1",
                 "--out", str(tmp_path / "p.knng")]) == 2
    assert "argument --reverse-candidates: expected an integer >= 0" in capsys.readouterr().err
    assert main(["prepare", str(tmp_path / "missing.knng"), str(base), "--out", str(tmp_path / "p.knng")]) == 2
    assert "GRAPH" in capsys.readouterr().err
