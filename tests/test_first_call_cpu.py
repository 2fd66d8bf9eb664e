"""A new process answers without compiling: once a first process has compiled a small NN-Descent graph and a
SONG search on memory-mapped (read-only) and in-memory vectors (numba keeps CPU kernels on disk), a second
one running the same compiles nothing and says nothing about compiling. A memory-mapped dataset compiles
nothing beyond what an in-memory one did (CPU kernels take it as a writable view)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

_BUILD_AND_SEARCH = textwrap.dedent("""
    import json, sys
    import numpy as np
    import knngraph
    from knngraph import song
    from knngraph.primitives.compile import compile_seconds

    def build_and_search(base, queries):
        g = knngraph.knn_graph(base, 10, method="nndescent", device="cpu", verbose=False)
        index = song.from_graph(knngraph.optimize_graph(g, base, 16, device="cpu", verbose=False), base,
                                device="cpu")
        return index, song.search(index, queries, 5, device="cpu", verbose=False)

    mapped = np.load(sys.argv[1], mmap_mode="r")
    in_memory = np.array(mapped)
    c0 = compile_seconds()
    _, (d, i) = build_and_search(in_memory, in_memory[:50])
    c1 = compile_seconds()
    index, (d2, i2) = build_and_search(mapped, in_memory[:50])
    c2 = compile_seconds()
    d3, i3 = song.search(index, mapped[:50], 5, device="cpu", verbose=False)  # read-only queries too
    same = all(bool((np.asarray(i) == np.asarray(other)).all()) for other in (i2, i3))
    print(json.dumps({"writable_compile_seconds": c1 - c0, "read_only_compile_seconds": c2 - c1,
                      "compile_seconds": compile_seconds(), "same_answers": same, "ids": np.asarray(i).tolist()}))
""")


def _run(path, cache):
    done = subprocess.run([sys.executable, "-c", _BUILD_AND_SEARCH, str(path)], capture_output=True, text=True,
                          timeout=1800, env=dict(os.environ, NUMBA_CACHE_DIR=str(cache)))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_a_second_process_compiles_nothing(tmp_path, sample):
    import knngraph
    from knngraph.evaluate import recall_at_k

    path = tmp_path / "x.npy"
    np.save(path, sample.base[:1500])
    _, truth = knngraph.knn(sample.base[:1500], sample.base[:50], 5, device="cpu", verbose=False)
    cache = tmp_path / "numba-cache"  # empty: the first process compiles everything it runs
    first, first_err = _run(path, cache)
    assert first["writable_compile_seconds"] > 0 and "compiling CPU kernels" in first_err
    # a memory-mapped dataset took the kernels compiled for the in-memory one
    assert first["read_only_compile_seconds"] == 0
    second, second_err = _run(path, cache)
    assert second["compile_seconds"] == 0
    assert "compiling" not in second_err
    for run in (first, second):
        assert run["same_answers"] and recall_at_k(np.array(run["ids"]), truth, 5) >= 0.9
