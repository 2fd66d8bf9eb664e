"""A new process's GPU calls load every kernel from the disk cache of compiled kernels: after a first process
ran exact search, NN-Descent, SONG, GRNND and GGNN on 20k rows of the bundled sample, a second process
running the same builds nothing (``knngraph._cuda_launch.kernels_compiled() == 0``), compiles no CPU
kernel either and never imports numba-cuda (its kernels are found by name) nor numba (no CPU kernel runs on
these GPU paths, and their host code does not import one); and after ``knngraph.warmup``
(uint8, squared L2) the same calls compile nothing."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

_CALLS = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import knngraph
    from knngraph import _cuda_launch, ggnn, grnnd, song
    from knngraph.datasets import load_sample
    from knngraph._compiling import compile_seconds

    s = load_sample()
    base, queries = s.base, s.queries
    t0 = time.perf_counter()
    d, i = knngraph.knn(base, queries, 10, device="cuda", verbose=False)
    g = knngraph.knn_graph(base, 32, method="nndescent", device="cuda", verbose=False)
    index = song.build(song.IndexParams(), base, device="cuda", verbose=False)
    ds, i_song = song.search(index, queries, 10, device="cuda", verbose=False)
    grnnd.build(grnnd.IndexParams(), base, device="cuda", verbose=False)
    gindex = ggnn.build(ggnn.IndexParams(), base, device="cuda", verbose=False)
    dg, i_ggnn = ggnn.search(gindex, queries, 10, device="cuda", verbose=False)
    dr, i_rings = ggnn.search(gindex, queries, 10, ggnn.SearchParams(cache="rings"), device="cuda", verbose=False)
    recall = {name: knngraph.recall_at_k(np.asarray(ids), s.gt_indices, 10, distances=np.asarray(dist),
                                         true_distances=s.gt_distances)
              for name, dist, ids in (("exact", d, i), ("song", ds, i_song), ("ggnn", dg, i_ggnn),
                                      ("ggnn_rings", dr, i_rings))}
    print(json.dumps({"kernels_compiled": _cuda_launch.kernels_compiled(), "compile_seconds": compile_seconds(),
                      "seconds": time.perf_counter() - t0, "recall": recall, "graph_degree": g.degree,
                      "numba_cuda_imported": "numba.cuda" in sys.modules, "numba_imported": "numba" in sys.modules}))
""")


def _run(cache):
    done = subprocess.run([sys.executable, "-c", _CALLS], capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, KNNGRAPH_CACHE_DIR=str(cache)))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def _check_answers(run):
    assert run["graph_degree"] == 32
    assert run["recall"]["exact"] >= 0.999
    assert min(run["recall"][name] for name in ("song", "ggnn", "ggnn_rings")) >= 0.9, run["recall"]


def test_a_second_process_compiles_no_kernel(tmp_path):
    first, first_err = _run(tmp_path)  # an empty kernel cache: the first process builds every kernel
    assert first["kernels_compiled"] > 0 and "compiling GPU kernels" in first_err
    second, second_err = _run(tmp_path)
    assert second["kernels_compiled"] == 0 and second["compile_seconds"] == 0
    # every kernel was found by name: the second process never imported a kernel module, nor numba-cuda,
    # nor numba itself (its host code runs no CPU kernel on these GPU paths)
    assert first["numba_cuda_imported"] and not second["numba_cuda_imported"]
    assert not second["numba_imported"]
    assert "compiling" not in second_err
    _check_answers(first)
    _check_answers(second)


def test_after_warmup_a_new_process_compiles_no_kernel(tmp_path, monkeypatch):
    import knngraph

    monkeypatch.setenv("KNNGRAPH_CACHE_DIR", str(tmp_path))
    res = knngraph.warmup(device="cuda", dtypes=["uint8"], metrics=["sqeuclidean"], verbose=False)
    assert res["kernels_compiled"] > 0 and res["device"] == "cuda:0"
    run, err = _run(tmp_path)
    assert run["kernels_compiled"] == 0 and run["compile_seconds"] == 0, json.dumps(run)
    assert not run["numba_cuda_imported"] and not run["numba_imported"]
    assert "compiling" not in err
    _check_answers(run)
