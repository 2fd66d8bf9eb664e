"""The command line, run in-process through knngraph.cli.main."""

import json

import numpy as np
import pytest

import knngraph
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
    # a path that does not exist: what was typed is wrong (2)
    code, _, err = run(capsys, "knn", str(tmp_path / "missing.fbin"), "-k", "3", "--out", str(tmp_path / "x.ibin"))
    assert code == 2 and "missing.fbin: no such file" in err
    # a file that exists but cannot be read: a failure while running (1)
    bad = tmp_path / "trunc.fbin"
    io.write(bad, np.ones((10, 4), np.float32))
    bad.write_bytes(bad.read_bytes()[:30])
    code, _, err = run(capsys, "knn", str(bad), "-k", "3", "--out", str(tmp_path / "x.ibin"))
    assert code == 1 and "trunc.fbin" in err and err.count("\n") == 1


# ------------------------------------------------------------------------------------------ bad input


@pytest.fixture
def files(tmp_path, capsys):
    """base.fbin (300 x 8), small.fbin (its first 100 rows), q.fbin; ids.ibin / d.fbin: top-5 of the queries;
    g.knng: the exact 5-NN graph of base."""
    x = np.random.default_rng(0).random((300, 8), dtype=np.float32)
    io.write(tmp_path / "base.fbin", x)
    io.write(tmp_path / "small.fbin", x[:100])
    io.write(tmp_path / "q.fbin", x[:20])
    assert main(["knn", str(tmp_path / "base.fbin"), str(tmp_path / "q.fbin"), "-k", "5", "--out",
                 str(tmp_path / "ids.ibin"), "--out-distances", str(tmp_path / "d.fbin"), "--device", "cpu",
                 "--quiet"]) == 0
    assert main(["knn", str(tmp_path / "base.fbin"), "-k", "5", "--out", str(tmp_path / "g.knng"), "--device", "cpu",
                 "--quiet"]) == 0
    capsys.readouterr()
    return tmp_path


def one_error(capsys, argv, status, fragment, command):
    """Run ``argv``: exit ``status``, one line on stderr ``knngraph <command>: error: ...<fragment>...``, nothing
    on stdout; with --json added, also one JSON object on stdout."""
    code, out, err = run(capsys, *argv)
    assert code == status, err
    assert out == "" and err.count("\n") == 1 and err.startswith(f"knngraph {command}: error: "), err
    assert fragment in err, err
    code, out, err = run(capsys, *argv, "--json")
    payload = json.loads(out)
    assert code == status and err.count("\n") == 1 and fragment in payload["error"]
    assert payload["command"] == command and payload["exit_status"] == status
    return payload


def test_eval_refuses_distances_given_as_ids(capsys, files):
    p = one_error(capsys, ["eval", str(files / "d.fbin"), str(files / "ids.ibin")], 2,
                  f"RESULT {files / 'd.fbin'}: holds float32 data, but ids must be integers", "eval")
    assert p["type"] == "ValueError"
    one_error(capsys, ["eval", str(files / "ids.ibin"), str(files / "d.fbin")], 2,
              f"TRUTH {files / 'd.fbin'}: holds float32 data, but ids must be integers", "eval")


def test_eval_argument_combinations(capsys, files):
    ids, g, base = str(files / "ids.ibin"), str(files / "g.knng"), str(files / "base.fbin")
    one_error(capsys, ["eval", ids], 2, "an ids result needs TRUTH", "eval")
    one_error(capsys, ["eval", g], 2, "a graph result needs TRUTH (an exact graph or true ids) or --base", "eval")
    one_error(capsys, ["eval", g, g, "--base", base], 2, "give TRUTH or --base, not both", "eval")
    one_error(capsys, ["eval", ids, ids, "--base", base], 2, "--base applies to a .knng graph result", "eval")
    one_error(capsys, ["eval", g, g, "--sample", "10"], 2, "--sample applies with --base", "eval")
    one_error(capsys, ["eval", g, "--base", base, "--result-distances", str(files / "d.fbin")], 2,
              "--result-distances: a .knng result holds its own distances", "eval")
    for bad in ("0", "-1", "2.5", "x"):
        p = one_error(capsys, ["eval", g, "--base", base, "--sample", bad], 2,
                      f"argument --sample: expected a positive integer, got '{bad}'", "eval")
        assert p["type"] == "ArgumentError"
    one_error(capsys, ["eval", ids, ids, "-k", "0"], 2, "argument -k: expected a positive integer, got '0'", "eval")
    one_error(capsys, ["eval", ids, ids, "-k", "6"], 2, "k=6 but indices has only 5 columns", "eval")
    one_error(capsys, ["eval", g, ids], 2, f"RESULT {g} has 300 rows but TRUTH {ids} has 20", "eval")
    one_error(capsys, ["eval", ids, ids, "--result-distances", str(files / "small.fbin"), "--truth-distances",
                       str(files / "d.fbin")], 2,
              f"--result-distances {files / 'small.fbin'} has shape (100, 8) but RESULT {ids} has shape (20, 5)",
              "eval")


def test_eval_base_of_another_size(capsys, files):
    g = str(files / "g.knng")
    for other, rows in (("small.fbin", 100), ("bigger.fbin", 350)):
        if other == "bigger.fbin":
            io.write(files / other, np.random.default_rng(1).random((350, 8), dtype=np.float32))
        one_error(capsys, ["eval", g, "--base", str(files / other), "--device", "cpu"], 2,
                  f"--base {files / other} has {rows} rows but the graph {g} has 300 nodes", "eval")


def test_eval_graph_against_graph_of_another_metric(capsys, files):
    g = knngraph.Graph.load(files / "g.knng")
    knngraph.Graph(g.indices, g.distances, "cosine").save(files / "cos.knng")
    one_error(capsys, ["eval", str(files / "g.knng"), str(files / "cos.knng")], 2,
              "graph is in metric 'sqeuclidean' but true_graph is in 'cosine'", "eval")
    # euclidean <-> sqeuclidean: converted
    knngraph.Graph(g.indices, np.sqrt(g.distances), "euclidean").save(files / "eu.knng")
    code, out, _ = run(capsys, "eval", str(files / "g.knng"), str(files / "eu.knng"), "-k", "5", "--json")
    assert code == 0 and json.loads(out)["graph_recall"] == 1.0


def test_memory_limit_values(capsys, files):
    base, out = str(files / "base.fbin"), str(files / "x.ibin")
    for bad, fragment in (("1e400GB", "memory_limit must be"), ("abc", "memory_limit must be"),
                          ("-1", "memory_limit must be"), ("0", "memory_limit must be")):
        p = one_error(capsys, ["knn", base, "-k", "3", "--out", out, "--memory-limit", bad], 2,
                      f"argument --memory-limit: {fragment}", "knn")
        assert bad in p["error"]
    assert main(["knn", base, "-k", "3", "--out", out, "--memory-limit", "64MB", "--device", "cpu", "--quiet"]) == 0


def test_directories_and_bad_output_paths(capsys, files, monkeypatch):
    import knngraph as kg

    def no_computing(*args, **kwargs):
        raise AssertionError("the output path must be checked before computing")

    monkeypatch.setattr(kg, "knn_graph", no_computing)
    monkeypatch.setattr(kg, "knn", no_computing)
    base, q = str(files / "base.fbin"), str(files / "q.fbin")
    (files / "adir").mkdir()
    adir = str(files / "adir")
    p = one_error(capsys, ["knn", adir, "-k", "3", "--out", str(files / "x.ibin")], 2,
                  f"BASE {adir}: is a directory, not a file", "knn")
    assert p["type"] == "IsADirectoryError"
    one_error(capsys, ["knn", base, adir, "-k", "3", "--out", str(files / "x.ibin")], 2,
              f"QUERIES {adir}: is a directory, not a file", "knn")
    p = one_error(capsys, ["knn", base, "-k", "3", "--out", adir], 2, f"--out {adir}: is a directory", "knn")
    assert p["type"] == "IsADirectoryError"
    one_error(capsys, ["knn", base, q, "-k", "3", "--out", str(files / "x.ibin"), "--out-distances", adir], 2,
              f"--out-distances {adir}: is a directory", "knn")
    nodir = str(files / "nodir" / "x.ibin")
    p = one_error(capsys, ["knn", base, "-k", "3", "--out", nodir], 2,
                  f"--out {nodir}: folder {str(files / 'nodir')!r} does not exist", "knn")
    assert p["type"] == "FileNotFoundError"
    one_error(capsys, ["knn", base, "-k", "3", "--out", str(files / "x.fbin")], 2,
              "cannot write graph or ids to a .fbin file; use .knng, .ibin, .ivecs, .npy", "knn")
    one_error(capsys, ["knn", base, q, "-k", "3", "--out", str(files / "x.knng")], 2,
              "cannot write ids to a .knng file; use .ibin, .ivecs, .npy", "knn")
    one_error(capsys, ["knn", base, q, "-k", "3", "--out", str(files / "x.ibin"), "--out-distances",
                       str(files / "d.ibin")], 2, "cannot write distances to a .ibin file", "knn")
    one_error(capsys, ["knn", base, "-k", "3", "--out", str(files / "x.knng"), "--out-distances",
                       str(files / "d.fbin")], 2, "--out-distances applies to ids output", "knn")
    one_error(capsys, ["knn", base, q, "-k", "3", "--out", str(files / "r.npy"), "--out-distances",
                       str(files / "r.npy")], 2, "--out and --out-distances are the same file", "knn")
    one_error(capsys, ["knn", base, "-k", "3", "--out", str(files / "result")], 2,
              "cannot write graph or ids to a file without an extension", "knn")
    (files / "notes.txt").write_text("hello")
    one_error(capsys, ["knn", str(files / "notes.txt"), "-k", "3", "--out", str(files / "x.ibin")], 2,
              "notes.txt: unknown vector file extension '.txt'", "knn")
    one_error(capsys, ["knn", base, "-k", "3", "--out", str(files / "x.ibin"), "--base-dataset", "train"], 2,
              "a dataset name applies to HDF5 files only", "knn")
    one_error(capsys, ["eval", adir, str(files / "ids.ibin")], 2, f"RESULT {adir}: is a directory", "eval")


def test_argparse_errors_are_one_line(capsys):
    p = one_error(capsys, ["knn"], 2, "the following arguments are required: base, -k, --out", "knn")
    assert p["type"] == "ArgumentError"
    one_error(capsys, ["knn", "b.fbin", "-k", "3", "--out", "x.ibin", "--metric", "manhattan"], 2,
              "argument --metric: unknown metric 'manhattan'", "knn")
    code, out, err = run(capsys, "frobnicate")
    assert code == 2 and out == "" and err.startswith("knngraph: error: argument command: invalid choice")


def test_failures_while_running_exit_1(capsys, files, monkeypatch):
    import knngraph as kg

    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 80.0 GiB")

    def device_error(*args, **kwargs):
        raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")

    base, q, out = str(files / "base.fbin"), str(files / "q.fbin"), str(files / "x.ibin")
    monkeypatch.setattr(kg, "knn", out_of_memory)
    p = one_error(capsys, ["knn", base, q, "-k", "3", "--out", out], 1, "MemoryError: Unable to allocate 80.0 GiB",
                  "knn")
    assert p["type"] == "MemoryError"
    monkeypatch.setattr(kg, "knn", device_error)
    one_error(capsys, ["knn", base, q, "-k", "3", "--out", out], 1, "RuntimeError: CUDA_ERROR_LAUNCH_FAILED", "knn")
    (files / "bad.knng").write_bytes(b"not a zip")
    p = one_error(capsys, ["eval", str(files / "bad.knng"), "--base", base], 1,
                  f"{files / 'bad.knng'}: not a knngraph graph file or it is truncated/corrupt", "eval")
    assert p["type"] == "ValueError"


@pytest.mark.slow
def test_demo_json(capsys):
    code, out, _ = run(capsys, "demo", "--device", "cpu", "--json")
    res = json.loads(out)
    assert code == 0 and res["exact_search"]["recall@10"] == 1.0 and res["device"] == "cpu"


@pytest.fixture
def angular_file(tmp_path, sample):
    """An ann-benchmarks file (distance='angular') of real SIFT vectors, each scaled by a random factor so
    that their true cosine neighbours (numpy brute force) differ from their euclidean ones."""
    scale = np.random.default_rng(7).uniform(0.3, 3.0, (3000, 1)).astype(np.float32)
    train = np.asarray(sample.base[:3000], np.float32) * scale
    test = np.asarray(sample.queries[:60], np.float32)
    unit = train / np.linalg.norm(train, axis=1, keepdims=True)
    cos = 1.0 - (test / np.linalg.norm(test, axis=1, keepdims=True)) @ unit.T
    neighbors = np.argsort(cos, axis=1, kind="stable")[:, :10].astype(np.int32)
    distances = np.take_along_axis(cos, neighbors, 1).astype(np.float32)
    path = tmp_path / "sift-angular.hdf5"
    io.write_ann_benchmarks(path, train, test, neighbors, distances, "cosine")
    return path, neighbors


def test_knn_on_an_ann_benchmarks_file_uses_test_queries_and_its_metric(capsys, tmp_path, angular_file):
    path, neighbors = angular_file
    out_ids, out_d = str(tmp_path / "ids.ibin"), str(tmp_path / "d.fbin")
    code, out, _ = run(capsys, "knn", str(path), str(path), "-k", "10", "--out", out_ids, "--out-distances", out_d,
                       "--device", "cpu", "--json")
    res = json.loads(out)
    assert code == 0 and res["n_queries"] == 60 and res["metric"] == "cosine"  # 'test', not 'train'
    # scored against the file's own 'neighbors' (and 'distances', counting ties)
    code, out, _ = run(capsys, "eval", out_ids, str(path), "-k", "10", "--result-distances", out_d, "--json")
    res = json.loads(out)
    assert code == 0 and res["recall"] == 1.0 and res["ties_counted"] and res["rows"] == 60
    # an explicit --metric wins over the file's (and scores low against its cosine truth)
    code, out, _ = run(capsys, "knn", str(path), str(path), "-k", "10", "--out", out_ids, "--metric", "sqeuclidean",
                       "--device", "cpu", "--json")
    assert code == 0 and json.loads(out)["metric"] == "sqeuclidean"
    code, out, _ = run(capsys, "eval", out_ids, str(path), "-k", "10", "--truth-dataset", "neighbors", "--json")
    assert code == 0 and json.loads(out)["recall"] < 0.5 and not json.loads(out)["ties_counted"]


def test_eval_truth_dataset_errors(capsys, tmp_path, angular_file):
    path, neighbors = angular_file
    io.write(tmp_path / "ids.ibin", neighbors)
    one_error(capsys, ["eval", str(tmp_path / "ids.ibin"), str(tmp_path / "ids.ibin"), "--truth-dataset", "neighbors"],
              2, "--truth-dataset applies to an HDF5 TRUTH", "eval")
    one_error(capsys, ["eval", str(tmp_path / "ids.ibin"), str(path), "--truth-dataset", "distances"],
              2, "holds float32 data, but ids must be integers", "eval")


def test_choice_options_are_checked_by_argparse(capsys):
    one_error(capsys, ["knn", "b.fbin", "-k", "3", "--out", "x.ibin", "--select", "bubble"], 2,
              "argument --select: invalid choice: 'bubble'", "knn")
    one_error(capsys, ["build", "b.fbin", "-k", "3", "--out", "g.knng", "--method", "song"], 2,
              "argument --method: invalid choice: 'song'", "build")


@pytest.mark.slow
def test_warmup_leaves_nothing_to_compile(capsys, sample):
    """After ``knngraph warmup``, building and searching (threaded and serial kernels) compiles nothing."""
    from knngraph.cli.common import Timer
    from knngraph.primitives.compile import SERIAL_BELOW

    code, out, _ = run(capsys, "warmup", "--dtype", "uint8", "--device", "cpu", "--json")
    res = json.loads(out)
    assert code == 0 and res["task"] == "warmup" and res["dtypes"] == ["uint8"] and res["compile_seconds"] >= 0
    x = np.asarray(sample.base[:SERIAL_BELOW + 500])
    with Timer() as t:
        for rows in (x[:700], x):
            g = knngraph.knn_graph(rows, 12, method="nndescent", device="cpu", verbose=False)
            knngraph.knn(rows, sample.queries[:20], 5, device="cpu", verbose=False)
    assert g.n == x.shape[0] and t.compiled == 0


def test_build_and_search_on_an_ann_benchmarks_file_use_its_metric(capsys, tmp_path, angular_file):
    path, neighbors = angular_file
    code, out, _ = run(capsys, "build", str(path), "-k", "16", "--out", str(tmp_path / "g.knng"), "--device", "cpu",
                       "--json")
    assert code == 0 and json.loads(out)["metric"] == "cosine"
    assert knngraph.Graph.load(tmp_path / "g.knng").metric == "cosine"
    ids = str(tmp_path / "ids.ibin")
    code, out, _ = run(capsys, "search", str(path), str(path), "-k", "10", "--out", ids, "--queue-size", "64",
                       "--device", "cpu", "--json")
    res = json.loads(out)
    assert code == 0 and res["metric"] == "cosine" and res["n_queries"] == 60
    code, out, _ = run(capsys, "eval", ids, str(path), "-k", "10", "--json")
    assert code == 0 and json.loads(out)["recall"] >= 0.9


@pytest.mark.slow
def test_first_run_compiles_nndescent_kernels_in_a_second_process(monkeypatch):
    """The demo's second process (knngraph._firstrun) leaves NN-Descent's threaded iteration kernels on
    disk, where a later build finds them; nothing is started when they are there or when it is refused."""
    import subprocess
    import sys

    from knngraph import _firstrun
    from knngraph.cli.common import Timer
    from knngraph.nndescent import cpu

    child = subprocess.run([sys.executable, "-m", "knngraph._firstrun", "uint8"], capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr
    assert float(child.stdout.strip().splitlines()[-1]) >= 0  # its compile seconds, read by _firstrun.wait
    assert _firstrun._on_disk(cpu.local_join)
    assert _firstrun.start_nndescent_compile(np.uint8) is None
    monkeypatch.setattr(_firstrun, "_on_disk", lambda dispatcher: False)
    monkeypatch.setenv("KNNGRAPH_NO_BACKGROUND_COMPILE", "1")
    assert _firstrun.start_nndescent_compile(np.uint8) is None
    assert _firstrun.wait(None) == 0.0
    # what the child compiled is what this process's threaded build calls: loaded, not compiled again
    from knngraph.datasets import load_sample
    from knngraph.primitives.compile import SERIAL_BELOW

    base = np.ascontiguousarray(load_sample().base[: SERIAL_BELOW + 200])
    with Timer() as t:
        knngraph.knn_graph(base, 8, method="nndescent", device="cpu", verbose=False, init="random",
                           max_iterations=1)
    assert t.compiled == 0
