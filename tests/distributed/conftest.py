"""One LocalCluster of 2 CPU worker processes for the whole distributed test package (started once:
a worker process costs ~2 s to start; its numba kernels load from numba's cache)."""

import pytest


def _warm_kernels():
    """Compile (or load) in this process the CPU kernels the workers run, so that numba's disk cache
    holds them before two worker processes would each compile them at once (with a cold cache)."""
    import numpy as np

    import knngraph
    from knngraph import nndescent, song
    from knngraph.graphops import merge_topk

    rng = np.random.default_rng(0)
    for x in (rng.standard_normal((300, 8)).astype(np.float32), rng.integers(0, 255, (300, 8), dtype=np.uint8)):
        d, i = knngraph.knn(x, x[:4], 3, device="cpu")
        merge_topk([d, d], [i, i], 3)
        nndescent.build(nndescent.IndexParams(graph_degree=16), x, device="cpu")
        index = song.build(song.IndexParams(graph_degree=16, intermediate_graph_degree=32), x, device="cpu")
        song.search(index, x[:4], 3, song.SearchParams(queue_size=32), device="cpu")


@pytest.fixture(scope="package")
def client():
    distributed = pytest.importorskip("distributed")
    _warm_kernels()
    # ":0": a free port for the scheduler's HTTP server (8787 may be taken by another cluster)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="package")
def sift():
    """A slice of the bundled real SIFT sample: 3000 base vectors (uint8, 128-d) and 100 queries."""
    from knngraph.datasets import load_sample

    s = load_sample()
    import numpy as np

    return np.ascontiguousarray(s.base[:3000]), np.ascontiguousarray(s.queries[:100])
