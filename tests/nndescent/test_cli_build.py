"""``knngraph build --method nndescent`` from a vector file to a graph file, then ``knngraph eval``."""

import json

import numpy as np

from knngraph import io
from knngraph.cli import main
from knngraph.graph import Graph


def test_build_and_eval(tmp_path, capsys, sample):
    base = tmp_path / "base.u8bin"
    io.write(base, sample.base[:3000])
    out = tmp_path / "g.knng"
    assert main(["build", str(base), "-k", "16", "--out", str(out), "--device", "cpu", "--json", "--quiet"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["method"] == "nndescent" and payload["n"] == 3000 and payload["iterations"] >= 1
    g = Graph.load(out)
    assert g.indices.shape == (3000, 16) and g.info["method"] == "nndescent"
    assert main(["eval", str(out), "--base", str(base), "-k", "10", "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["graph_recall"] >= 0.95


def test_build_ids_output_and_errors(tmp_path, capsys):
    x = np.random.default_rng(0).random((200, 8), dtype=np.float32)
    base = tmp_path / "base.fbin"
    io.write(base, x)
    ids = tmp_path / "ids.ibin"
    dist = tmp_path / "dist.fbin"
    assert main(["build", str(base), "-k", "5", "--out", str(ids), "--out-distances", str(dist), "--device", "cpu",
                 "--metric", "cosine", "--quiet"]) == 0
    assert io.read(ids).shape == (200, 5) and io.read(dist).shape == (200, 5)
    capsys.readouterr()
    assert main(["build", str(base), "-k", "500", "--out", str(ids), "--device", "cpu", "--quiet"]) == 2
    assert "smaller than the number of vectors" in capsys.readouterr().err
    assert main(["build", str(base), "-k", "5", "--method", "magic", "--out", str(ids), "--device", "cpu"]) == 2
    assert "argument --method: invalid choice: 'magic'" in capsys.readouterr().err  # argparse choices=


def test_build_out_of_core_options(tmp_path, capsys, sample):
    base = tmp_path / "base.u8bin"
    io.write(base, sample.base[:3000])
    out = tmp_path / "g.knng"
    assert main(["build", str(base), "-k", "8", "--memory-limit", "300KB", "--out-of-core", "clusters",
                 "--cluster-overlap", "3", "--out", str(out), "--device", "cpu", "--json", "--quiet"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["out_of_core"] == "clusters" and payload["pieces"] >= 4
    assert Graph.load(out).info["overlap"] == 3
    assert main(["build", str(base), "-k", "8", "--out-of-core", "disk", "--memory-limit", "300KB", "--out",
                 str(out), "--device", "cpu", "--quiet"]) == 2
    assert "out_of_core" in capsys.readouterr().err


def test_build_bad_values_are_one_line_usage_errors(tmp_path, capsys, monkeypatch):
    import knngraph

    def no_computing(*args, **kwargs):
        raise AssertionError("bad options must be refused before building")

    monkeypatch.setattr(knngraph, "knn_graph", no_computing)
    x = np.random.default_rng(0).random((100, 4), dtype=np.float32)
    base = tmp_path / "base.fbin"
    io.write(base, x)
    out = str(tmp_path / "g.knng")
    for value in ("nan", "inf", "-inf", "abc"):
        assert main(["build", str(base), "-k", "5", f"--termination-threshold={value}", "--out", out]) == 2
        err = capsys.readouterr().err
        assert err == (f"knngraph build: error: argument --termination-threshold: expected a finite number, got "
                       f"'{value}' (see knngraph build --help)\n")
    # in range for a float, out of range for the parameter: the params' own message, before reading the data
    assert main(["build", str(base), "-k", "5", "--termination-threshold", "2", "--out", out, "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["type"] == "ValueError" and payload["command"] == "build" and payload["exit_status"] == 2
    assert "'termination_threshold' parameter of IndexParams must be a finite number in the range [0.0, 1.0]" \
        in payload["error"]
    assert main(["build", str(base), "-k", "0", "--out", out]) == 2
    assert "argument -k/--graph-degree: expected a positive integer, got '0'" in capsys.readouterr().err
    # outputs are checked before the build
    (tmp_path / "adir").mkdir()
    assert main(["build", str(base), "-k", "5", "--out", str(tmp_path / "adir")]) == 2
    assert f"--out {tmp_path / 'adir'}: is a directory" in capsys.readouterr().err
    assert main(["build", str(base), "-k", "5", "--out", str(tmp_path / "g.fvecs")]) == 2
    assert "cannot write graph or ids to a .fvecs file" in capsys.readouterr().err
    assert main(["build", str(base), "-k", "5", "--out", str(tmp_path / "ids.ibin"), "--out-distances",
                 str(tmp_path / "nodir" / "d.fbin")]) == 2
    assert "--out-distances" in capsys.readouterr().err
    assert main(["build", str(base), "-k", "5", "--out", out, "--memory-limit", "1e400GB"]) == 2
    assert "argument --memory-limit" in capsys.readouterr().err
