"""The command line, run in-process through knngraph.cli.main."""

import json

import numpy as np
import pytest

from knngraph import io
from knngraph.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_json(capsys):
    code, out, _ = run(capsys, "info", "--json")
    info = json.loads(out)
    assert code == 0 and info["versions"]["knngraph"] and info["cpu_count"] >= 1 and info["gpus"]


def test_knn_search_then_eval(capsys, tmp_path, sample):
    io.write(tmp_path / "base.u8bin", sample.base)
    io.write(tmp_path / "q.u8bin", sample.queries[:100])
    io.write(tmp_path / "gt.ibin", np.ascontiguousarray(sample.gt_indices[:100]))
    io.write(tmp_path / "gt.fbin", np.ascontiguousarray(sample.gt_distances[:100]))
    code, out, _ = run(capsys, "knn", str(tmp_path / "base.u8bin"), str(tmp_path / "q.u8bin"), "-k", "10",
                       "--out", str(tmp_path / "ids.ibin"), "--out-distances", str(tmp_path / "d.fbin"),
                       "--device", "cpu", "--json")
    assert code == 0 and json.loads(out)["n_queries"] == 100
    ids = io.read(tmp_path / "ids.ibin")
    assert ids.shape == (100, 10) and ids.dtype == np.int32
    code, out, _ = run(capsys, "eval", str(tmp_path / "ids.ibin"), str(tmp_path / "gt.ibin"), "-k", "10",
                       "--result-distances", str(tmp_path / "d.fbin"), "--truth-distances", str(tmp_path / "gt.fbin"),
                       "--json")
    res = json.loads(out)
    assert code == 0 and res["recall"] == 1.0 and res["ties_counted"]
    # a deliberately wrong result scores low
    io.write(tmp_path / "bad.ibin", np.ascontiguousarray(ids[:, ::-1] + 1))
    code, out, _ = run(capsys, "eval", str(tmp_path / "bad.ibin"), str(tmp_path / "gt.ibin"), "-k", "10", "--json")
    assert json.loads(out)["recall"] < 0.5


def test_knn_graph_to_file_then_eval_with_base(capsys, tmp_path, sample):
    io.write(tmp_path / "base.npy", sample.base[:2000])
    code, out, _ = run(capsys, "knn", str(tmp_path / "base.npy"), "-k", "8", "--out", str(tmp_path / "g.knng"),
                       "--device", "cpu")
    assert code == 0 and "graph" in out
    code, out, _ = run(capsys, "eval", str(tmp_path / "g.knng"), "--base", str(tmp_path / "base.npy"), "-k", "8",
                       "--sample", "200", "--device", "cpu", "--json")
    assert code == 0 and json.loads(out)["graph_recall"] == 1.0


def test_errors_exit_2_with_message(capsys, tmp_path):
    code, _, err = run(capsys, "knn", str(tmp_path / "missing.fbin"), "-k", "3", "--out", str(tmp_path / "x.ibin"))
    assert code == 2 and "missing.fbin" in err
    bad = tmp_path / "trunc.fbin"
    io.write(bad, np.ones((10, 4), np.float32))
    bad.write_bytes(bad.read_bytes()[:30])
    code, _, err = run(capsys, "knn", str(bad), "-k", "3", "--out", str(tmp_path / "x.ibin"))
    assert code == 2 and "trunc.fbin" in err


@pytest.mark.slow
def test_demo_json(capsys):
    code, out, _ = run(capsys, "demo", "--device", "cpu", "--json")
    res = json.loads(out)
    assert code == 0 and res["exact_search"]["recall@10"] == 1.0 and res["device"] == "cpu"
