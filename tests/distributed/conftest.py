"""One LocalCluster of 2 CPU worker processes for the whole distributed test package (started once:
a worker process costs ~2 s to start; its numba kernels load from numba's cache)."""

import pytest

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="package")
def client():
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
