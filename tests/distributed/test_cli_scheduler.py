"""``knngraph build --scheduler`` and ``knngraph search --scheduler`` on the test cluster."""

import json

import numpy as np

import pytest

pytest.importorskip("distributed")  # the dask extra

import knngraph
from knngraph import io
from knngraph.cli import main
from knngraph.evaluate import recall_at_k


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_search_and_build_on_a_scheduler(capsys, client, sift, tmp_path):
    x, q = sift
    io.write(tmp_path / "base.u8bin", x[:1200])
    io.write(tmp_path / "q.u8bin", q[:40])
    address = client.scheduler.address
    code, out, _ = run(capsys, "search", tmp_path / "base.u8bin", tmp_path / "q.u8bin", "-k", 5, "--method", "exact",
                       "--out", tmp_path / "ids.ibin", "--save-index", tmp_path / "idx", "--scheduler", address,
                       "--device", "cpu", "--json")
    res = json.loads(out)
    assert code == 0 and res["shards"] == 2 and res["n"] == 1200
    exact = knngraph.knn(x[:1200], q[:40], 5, device="cpu")
    np.testing.assert_array_equal(io.read(tmp_path / "ids.ibin"), exact.indices)
    # the saved folder is searched again
    code, out, _ = run(capsys, "search", tmp_path / "idx", tmp_path / "q.u8bin", "-k", 5, "--out",
                       tmp_path / "ids2.npy", "--scheduler", address, "--device", "cpu", "--json")
    assert code == 0 and not json.loads(out)["built"]
    np.testing.assert_array_equal(io.read(tmp_path / "ids2.npy"), exact.indices)
    # a k-NN graph written as .knng shards by the workers
    code, out, _ = run(capsys, "build", tmp_path / "base.u8bin", "-k", 16, "--out", tmp_path / "g",
                       "--scheduler", address, "--device", "cpu", "--json")
    assert code == 0 and json.loads(out)["workers"] == 2
    g = knngraph.distributed.load_graph(tmp_path / "g")
    truth = knngraph.knn_graph(x[:1200], 16, device="cpu")
    assert recall_at_k(g.indices, truth.indices, 16, distances=g.distances, true_distances=truth.distances) >= 0.9


def test_unreachable_scheduler_is_a_clear_error(capsys, tmp_path, rng):
    io.write(tmp_path / "base.fbin", rng.standard_normal((20, 4)).astype(np.float32))
    code, out, err = run(capsys, "build", tmp_path / "base.fbin", "-k", 3, "--out", tmp_path / "g.knng",
                         "--scheduler", "tcp://127.0.0.1:9", "--json")
    assert code != 0
    assert "cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'" in out + err
