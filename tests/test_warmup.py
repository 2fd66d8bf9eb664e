"""``knngraph.warmup``: its argument checks, its report of failed tasks, the lock that lets worker processes
add signatures of one function to numba's disk cache at once, and (slow) that after it a new process's
builds and searches compile nothing."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import knngraph
from knngraph import _warmup


@pytest.mark.parametrize("kwargs, error, match", [
    ({"dtypes": "uint8"}, TypeError, "dtypes must be a sequence of names"),
    ({"dtypes": ["float64"]}, ValueError, "dtypes: unknown dtype 'float64'"),
    ({"dtypes": []}, ValueError, "dtypes is empty"),
    ({"metrics": ["l1"]}, ValueError, "metrics: unknown metric 'l1'"),
    ({"metrics": "cosine"}, TypeError, "metrics must be a sequence of names"),
    ({"dims": 128}, TypeError, "dims must be a sequence of vector dimensions"),
    ({"dims": [0]}, ValueError, r"dims must be in the range \[1, inf\], got 0"),
    ({"dims": [96.5]}, TypeError, "dims must be an integer"),
    ({"dims": []}, ValueError, "dims is empty"),
    ({"processes": -1}, ValueError, r"processes must be in the range \[0, inf\], got -1"),
    ({"processes": 2.0}, TypeError, "processes must be an integer"),
    ({"verbose": "yes"}, TypeError, "verbose must be True or False"),
    ({"device": "tpu"}, ValueError, "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"),
])
def test_bad_arguments_are_refused_naming_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        knngraph.warmup(**{"device": "cpu", **kwargs})


def test_a_failed_task_is_an_error_naming_it(monkeypatch):
    ran = []

    def fine(inputs):
        ran.append((inputs.dtype.name, inputs.metrics))

    def broken(inputs):
        raise ValueError("no such kernel")

    monkeypatch.setattr(_warmup, "FAMILIES", ("exact", "song"))
    monkeypatch.setattr(_warmup, "_FAMILY_RUNS", {"exact": fine, "song": broken})
    with pytest.raises(RuntimeError, match="warm-up failed in 2 of 4 tasks, first song float32: ValueError: "
                                           "no such kernel"):
        knngraph.warmup(device="cpu", dtypes=[np.float32, "uint8"], metrics=["cosine"], processes=1,
                        verbose=False)
    assert sorted(ran) == [("float32", ["cosine"]), ("uint8", ["cosine"])]


_COMPILE_SIGNATURES = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from numba.core import caching
    sys.path.insert(0, os.environ["PROBE_DIR"])
    if os.environ.get("PROBE_LOCK"):
        from knngraph._warmup import lock_numba_cache_writes
        lock_numba_cache_writes(os.environ["PROBE_LOCK"])
    save_index = caching.IndexDataCacheFile._save_index

    def slow_save_index(self, overloads):  # a slow disk: another process's entry may land meanwhile
        time.sleep(0.3)
        save_index(self, overloads)

    caching.IndexDataCacheFile._save_index = slow_save_index
    from probe_kernels import scale
    if os.environ["PROBE_BARRIER"]:  # both processes start together: each waits until both are ready
        open(os.path.join(os.environ["PROBE_BARRIER"], str(os.getpid())), "w").close()
        deadline = time.time() + 240
        while len(os.listdir(os.environ["PROBE_BARRIER"])) < 2:
            assert time.time() < deadline, "the other process never got ready"
            time.sleep(0.002)
    for dtype in os.environ["PROBE_DTYPES"].split(","):
        scale(np.ones(3, dtype), 2)
    print(len(scale.signatures), sum(scale.stats.cache_misses.values()))
""")


def _compile_at_once(tmp_path, lock: bool) -> list:
    """Two processes compile five signatures each of one cached function at the same moment; then a third
    asks for all ten. Returns (signatures, compiled) of the third, or ["loaded another signature's code"]
    when, without the lock, the third process was handed another signature's machine code (numba then
    fails to unbox its arguments)."""
    cache = tmp_path / ("locked" if lock else "unlocked")
    barrier = tmp_path / ("barrier-locked" if lock else "barrier-unlocked")  # a file per process that is ready
    barrier.mkdir()
    groups = [["int8", "int16", "int32", "int64", "float32"], ["uint8", "uint16", "uint32", "uint64", "float64"]]
    # (the processes used to start at a time 8 s ahead, for both to be up by then: 8 s of waiting each run)
    env = dict(os.environ, PROBE_DIR=str(tmp_path), NUMBA_CACHE_DIR=str(cache),
               PROBE_LOCK=str(cache / "lock") if lock else "", PROBE_BARRIER=str(barrier))
    procs = [subprocess.Popen([sys.executable, "-c", _COMPILE_SIGNATURES], stdout=subprocess.DEVNULL,
                              env=dict(env, PROBE_DTYPES=",".join(g))) for g in groups]
    assert [p.wait(300) for p in procs] == [0, 0]
    done = subprocess.run([sys.executable, "-c", _COMPILE_SIGNATURES], capture_output=True, text=True, timeout=300,
                          env=dict(env, PROBE_DTYPES=",".join(sum(groups, [])), PROBE_BARRIER=""))
    if not lock and done.returncode != 0 and "can't unbox" in done.stderr:
        return ["loaded another signature's code"]
    assert done.returncode == 0, done.stderr
    return [int(v) for v in done.stdout.split()]


@pytest.mark.skipif(not _warmup.can_lock(), reason="needs POSIX file locks")
def test_processes_adding_signatures_of_one_function_at_once_keep_every_one(tmp_path):
    """numba's disk cache loses a signature when two processes add one to the same function at once (each
    rewrites the function's index from what it read); the warm-up's workers take a lock around those writes
    and keep all of them, so a third process compiles none."""
    (tmp_path / "probe_kernels.py").write_text("import numba\n\n\n@numba.njit(cache=True)\n"
                                               "def scale(a, f):\n    return a * f\n")
    # without the lock an entry was lost (compiled again) or points at another signature's code (fewer)
    assert _compile_at_once(tmp_path, lock=False) != [10, 0]
    assert _compile_at_once(tmp_path, lock=True) == [10, 0]


_SEARCH_AGAIN = textwrap.dedent("""
    import json, sys
    import numpy as np
    import knngraph
    from knngraph import ggnn, song
    from knngraph._compiling import compile_seconds
    x = np.load(sys.argv[1], mmap_mode="r")
    for base in (x, np.array(x)):
        g = knngraph.knn_graph(base, 16, method="nndescent", device="cpu", verbose=False)
        index = song.from_graph(knngraph.optimize_graph(g, base, 16, device="cpu", verbose=False), base,
                                device="cpu")
        song.search(index, base[:20], 5, device="cpu", verbose=False)
        ggnn.search(ggnn.build(ggnn.IndexParams(), base, device="cpu", verbose=False), base[:20], 5,
                    device="cpu", verbose=False)
    print(json.dumps({"compile_seconds": compile_seconds()}))
""")


@pytest.mark.slow
def test_after_a_cpu_warmup_a_new_process_compiles_nothing(tmp_path):
    """``knngraph warmup`` in its worker processes, then a new process builds and searches memory-mapped
    and in-memory uint8 vectors of both build sizes (serial and threaded kernels) and compiles nothing."""
    from knngraph.datasets import load_sample
    from knngraph.primitives.compile import SERIAL_BELOW

    path = tmp_path / "x.npy"
    np.save(path, load_sample().base[:SERIAL_BELOW + 300])
    res = knngraph.warmup(device="cpu", dtypes=["uint8"], metrics=["sqeuclidean"], processes=2, verbose=False)
    assert res["tasks"] == len(_warmup.FAMILIES) and res["processes"] == 2 and res["seconds"] > 0
    done = subprocess.run([sys.executable, "-c", _SEARCH_AGAIN, str(path)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"compile_seconds": 0.0}
    assert "compiling" not in done.stderr


def test_a_familys_first_task_runs_alone_and_shared_kernels_one_dtype_at_a_time():
    """The scheduling rule of the worker processes: until a task of its family has finished, a task holds
    its family (the family's kernels that do not depend on the dtype are compiled once); families that run
    the same kernels (GGNN and SONG the fast searcher, SONG and NN-Descent NN-Descent) hold them for their
    dtype, so that two workers never compile one kernel at once."""
    ggnn_u8 = {"family": "ggnn", "dtype": "uint8"}
    assert _warmup._busy(ggnn_u8, set()) == {"ggnn", ("fast searcher", "uint8")}
    assert _warmup._busy(ggnn_u8, {"ggnn"}) == {("fast searcher", "uint8")}
    assert _warmup._busy({"family": "exact", "dtype": "int8"}, {"exact"}) == set()
    song_u8, song_i8 = {"family": "song", "dtype": "uint8"}, {"family": "song", "dtype": "int8"}
    assert _warmup._busy(song_u8, {"song"}) & _warmup._busy(ggnn_u8, {"ggnn"})
    assert _warmup._busy(song_i8, {"song"}) & _warmup._busy({"family": "nndescent", "dtype": "int8"}, {"nndescent"})
    assert not _warmup._busy(song_i8, {"song"}) & _warmup._busy(ggnn_u8, {"ggnn"})
