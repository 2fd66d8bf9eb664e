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
    from knngraph._compiling import compile_seconds

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
    c3 = compile_seconds()
    same = all(bool((np.asarray(i) == np.asarray(other)).all()) for other in (i2, i3))
    print(json.dumps({"writable_compile_seconds": c1 - c0, "read_only_compile_seconds": c3 - c1,
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


def _read_only_args(dispatcher) -> list:
    """The signatures of a numba dispatcher that take a read-only array (a kind of input of its own)."""
    from numba.core import types

    return [sig for sig in dispatcher.signatures
            if any(isinstance(t, types.Array) and not t.mutable for t in sig)]


def test_read_only_inputs_run_the_kernels_compiled_for_writable_ones(tmp_path, sample):
    """Memory-mapped vectors and queries (read-only arrays) reach every CPU kernel as writable views: the
    fast searcher, GGNN's build and search and the exact search of a few queries answer as with in-memory
    arrays, and none of their kernels holds a signature with a read-only array (each would be a second
    compilation, and a first call in a warm process that compiles)."""
    import knngraph
    from knngraph import ggnn, song
    from knngraph.beam import cpu as beam_cpu
    from knngraph.bruteforce import cpu as exact_cpu
    from knngraph.ggnn import cpu as ggnn_cpu

    base, queries = sample.base[:1500], sample.queries[:40]
    np.save(tmp_path / "base.npy", base)
    np.save(tmp_path / "queries.npy", queries)
    mapped_base = np.load(tmp_path / "base.npy", mmap_mode="r")
    mapped_queries = np.load(tmp_path / "queries.npy", mmap_mode="r")
    assert not mapped_base.flags.writeable and not mapped_queries.flags.writeable

    index = song.build(song.IndexParams(), base, device="cpu", verbose=False)
    index_mapped = song.build(song.IndexParams(), mapped_base, device="cpu", verbose=False)
    for nq in (1, len(queries)):  # one query (the serial kernel) and a batch (the threaded one)
        np.testing.assert_array_equal(
            song.search(index_mapped, mapped_queries[:nq], 5, device="cpu", verbose=False)[1],
            song.search(index, queries[:nq], 5, device="cpu", verbose=False)[1])
    g_mapped = ggnn.build(ggnn.IndexParams(graph_degree=16), mapped_base, device="cpu", verbose=False)
    g_memory = ggnn.build(ggnn.IndexParams(graph_degree=16), base, device="cpu", verbose=False)
    for cache in ("sorted", "rings"):
        p = ggnn.SearchParams(cache=cache)
        np.testing.assert_array_equal(ggnn.search(g_mapped, mapped_queries, 5, p, device="cpu", verbose=False)[1],
                                      ggnn.search(g_memory, queries, 5, p, device="cpu", verbose=False)[1])
    np.testing.assert_array_equal(knngraph.knn(mapped_base, mapped_queries[:2], 5, device="cpu", verbose=False)[1],
                                  knngraph.knn(base, queries[:2], 5, device="cpu", verbose=False)[1])
    kernels = {"beam (threaded)": beam_cpu._BEAM[0], "beam (serial)": beam_cpu._BEAM[1],
               "ggnn search": ggnn_cpu._SEARCH, "ggnn merge": ggnn_cpu._MERGE_QUERIES,
               "ggnn links": ggnn_cpu._SYM_REQUESTS, "ggnn segments": ggnn_cpu._BRUTE_SEGMENTS,
               "exact few queries": exact_cpu._l2_scan}
    assert all(k.signatures for k in kernels.values()), "a kernel did not run"
    assert {name: _read_only_args(k) for name, k in kernels.items() if _read_only_args(k)} == {}
