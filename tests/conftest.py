"""Test configuration.

Two modes, chosen before numba.cuda is first imported:
* default (CI, any machine): the numba CUDA simulator is on, so the CUDA kernels run on the CPU in the
  ``sim`` tests (with the warp intrinsics of ``tests/support/cudasim_warp.py`` and the block scheduler of
  ``tests/support/cudasim_blocks.py``), and ``gpu`` tests are skipped;
* ``KNNGRAPH_GPU_TESTS=1`` (scripts/gpu_check.sh on a GPU machine): real CUDA; ``gpu`` tests run and
  ``sim`` tests are skipped.
"""

import os

GPU_MODE = os.environ.get("KNNGRAPH_GPU_TESTS") == "1"
if not GPU_MODE:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
# tests launch deliberately tiny grids
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# test processes may run side by side (pytest -n's workers, scripts/gpu_check.sh's parallel lanes) and compile
# the same kernels at once; numba's disk cache loses or mixes up signatures of one function added by two
# processes at the same moment, so every test process takes the lock knngraph's own warm-up workers take
# around those writes
from knngraph._warmup import can_lock, lock_numba_cache_writes  # noqa: E402

if can_lock():
    lock_numba_cache_writes()


def pytest_collection_modifyitems(config, items):
    if GPU_MODE:
        from knngraph import gpu_available

        skip_sim = pytest.mark.skip(reason="simulator tests run only without KNNGRAPH_GPU_TESTS=1")
        no_gpu = None if gpu_available() else pytest.mark.skip(reason="no usable GPU (CuPy + numba-cuda)")
        for item in items:
            if "sim" in item.keywords:
                item.add_marker(skip_sim)
            if "gpu" in item.keywords and no_gpu is not None:
                item.add_marker(no_gpu)
    else:
        from tests.support import cudasim_blocks, cudasim_warp

        cudasim_warp.install()
        cudasim_blocks.install()
        skip_gpu = pytest.mark.skip(reason="GPU tests need KNNGRAPH_GPU_TESTS=1 on a machine with an NVIDIA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


def pytest_runtest_logreport(report):
    """In GPU mode, a failure's traceback is printed the moment the test fails, not only in the summary at
    the end: a run cut short by the GPU machine's time limit still says why each test failed."""
    if GPU_MODE and report.failed:
        print(f"\n=== FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n", flush=True)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def sample():
    from knngraph.datasets import load_sample

    return load_sample()


@pytest.fixture(scope="session")
def sift_graphs(sample):
    """(exact k-NN graph of degree 64, the same prepared to degree 32), built once on the CPU for the tests of
    optimize_graph (tests/graphops) and of SONG (tests/song)."""
    import knngraph

    raw = knngraph.knn_graph(sample.base, 64, device="cpu", verbose=False)
    prepared = knngraph.optimize_graph(raw, sample.base, graph_degree=32, device="cpu", verbose=False)
    return raw, prepared


@pytest.fixture(scope="session")
def nnd_index(sample):
    """A SONG index over an NN-Descent graph of the 20k sample, prepared (the ``query()`` recipe); built once
    for the fast searcher's tests (tests/beam) and the CPU query paths (tests/test_cpu_search_speedpath.py)."""
    import knngraph
    from knngraph import nndescent, song

    g = nndescent.build(nndescent.IndexParams(graph_degree=32), sample.base, device="cpu", verbose=False).graph
    prepared = knngraph.optimize_graph(g, sample.base, graph_degree=24, device="cpu", verbose=False)
    return song.from_graph(prepared, sample.base, device="cpu", verbose=False)
