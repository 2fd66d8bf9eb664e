"""Row blocks loaded one step ahead (:class:`knngraph._prefetch.BlockPrefetcher`) and the partition's
passes over the rows through it (:data:`knngraph.partition.PREFETCH`): the same blocks, labels, border
distances and pieces as the direct reads, on the host here (the ``gpu`` tests at the end: on a GPU, with
the consumer on a stream of its own)."""

import threading
import time
import types

import numpy as np
import pytest

import knngraph
from knngraph import partition as P
from knngraph._device import Device
from knngraph._prefetch import BlockPrefetcher
from knngraph.primitives.distances import DIST_COS, DIST_IP, DIST_L2SQ

HOST = P.HostArrays


class _Recorded:
    """A 2-d row source that takes slices and index arrays (not a NumPy array: read through
    ``__getitem__``), recording what was asked and on which thread."""

    def __init__(self, x):
        self.x = x
        self.shape = x.shape
        self.dtype = x.dtype
        self.asked = []

    def __getitem__(self, key):
        self.asked.append((threading.current_thread().name, key))
        return self.x[key]


def _blobs(n=3000, d=16, centres=12, seed=3):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centres, d)) * 4
    return (c[rng.integers(0, centres, n)] + rng.normal(size=(n, d))).astype(np.float32)


def _sequence():
    return [(0, 100), (100, 101), np.array([3, 5, 499]), (400, 500), np.arange(0, 500, 7), np.array([], np.int64),
            (250, 250)]


def _want(x, item):
    return x[item[0]:item[1]] if isinstance(item, tuple) else x[item]


def test_prefetcher_loads_ranges_and_row_lists_on_the_host(tmp_path):
    x = np.random.default_rng(0).normal(size=(500, 7)).astype(np.float32)
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=x.shape)
    mm[:] = x
    mm.flush()
    for data in (x, np.load(tmp_path / "x.npy", mmap_mode="r")):
        with BlockPrefetcher(data, _sequence()) as fetch:
            assert len(fetch) == len(_sequence())
            got = list(fetch)
            with pytest.raises(StopIteration):
                fetch.next()
        assert len(got) == len(_sequence())
        for block, item in zip(got, _sequence()):
            assert isinstance(block, np.ndarray) and block.flags.c_contiguous and block.dtype == np.float32
            np.testing.assert_array_equal(block, _want(x, item))
        assert fetch.load_seconds >= 0 and fetch.wait_seconds >= 0
    with BlockPrefetcher(x, []) as fetch:
        assert list(fetch) == []


def test_prefetcher_loads_the_next_block_on_its_worker_while_the_current_one_is_used():
    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    src = _Recorded(x)
    seq = [(0, 5), (5, 10), (10, 20)]
    with BlockPrefetcher(src, seq) as fetch:
        np.testing.assert_array_equal(fetch.next(), x[0:5])
        deadline = time.monotonic() + 5
        while len(src.asked) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        # the second block was read without being asked for, on the loader's thread, and the third not yet
        assert [key for _, key in src.asked] == [slice(0, 5), slice(5, 10)]
        assert all(name.startswith("knngraph-load") for name, _ in src.asked)
        np.testing.assert_array_equal(fetch.next(), x[5:10])
        np.testing.assert_array_equal(fetch.next(), x[10:20])


def test_prefetcher_raises_a_loads_error_where_its_block_is_asked_for():
    x = np.zeros((10, 2), np.float32)
    with BlockPrefetcher(x, [(0, 10), np.array([1, 10])]) as fetch:
        assert fetch.next().shape == (10, 2)
        with pytest.raises(IndexError, match="row 10 is out of bounds"):
            fetch.next()


def test_partition_loads_through_the_prefetcher_only_for_host_rows_bound_for_a_gpu(monkeypatch):
    x = np.zeros((10, 4), np.float32)
    gpu = types.SimpleNamespace(xp=object(), device_index=2)  # an engine on another array module
    assert P.PREFETCH == "auto"
    assert P._load_device(HOST, x) == (False, None)
    assert P._load_device(gpu, x) == (True, 2)
    assert P._load_device(gpu, _Recorded(x)) == (False, None)  # not a NumPy array: read directly
    monkeypatch.setattr(P, "PREFETCH", True)
    assert P._load_device(HOST, x) == (True, None)
    monkeypatch.setattr(P, "PREFETCH", False)
    assert P._load_device(gpu, x) == (False, None)


def _assign_both_ways(monkeypatch, x, cent, kind, block_rows, probes, k):
    out = {}
    for mode in (False, True):
        monkeypatch.setattr(P, "PREFETCH", mode)
        stats = {}
        out[mode] = P.nearest_centroids(HOST, x, cent, kind, 3, block_rows, with_border=True, probes=probes, k=k,
                                        stats=stats), stats
    return out


@pytest.mark.parametrize("kind", [DIST_L2SQ, DIST_COS, DIST_IP])
def test_prefetched_assignment_matches_the_direct_reads(monkeypatch, kind):
    """Labels, border distances and probe radii: the same, block for block (blocks of 97 rows)."""
    x = _blobs()
    cent = P.kmeans(x, 10, kind, seed=1)
    probes = P.probe_rows(len(x), 1)
    out = _assign_both_ways(monkeypatch, x, cent, kind, 97, probes, 8)
    (direct, st_direct), (loaded, st_loaded) = out[False], out[True]
    for a, b in zip(direct, loaded):
        np.testing.assert_array_equal(a, b)
    assert st_direct == {}
    assert set(st_loaded) == {"load_seconds", "load_wait_seconds"}
    assert st_loaded["load_seconds"] > 0 and st_loaded["load_wait_seconds"] >= 0
    # "auto" on the host's engine reads directly: no loads counted
    monkeypatch.setattr(P, "PREFETCH", "auto")
    stats = {}
    labels = P.nearest_centroids(HOST, x, cent, kind, 3, 97, stats=stats)
    np.testing.assert_array_equal(labels, direct[0])
    assert stats == {}


def test_prefetched_halvings_match_the_direct_reads(monkeypatch, tmp_path):
    """Clusters halved over several levels (blocks of 50 rows, a memory map): the same pieces."""
    x = _blobs(n=4000, centres=6)
    path = tmp_path / "x.npy"
    np.save(path, x)
    data = np.load(path, mmap_mode="r")
    cent = P.kmeans(x, 4, DIST_L2SQ, seed=2)
    labels, border, _ = P.nearest_centroids(HOST, x, cent, DIST_L2SQ, 2, 512, with_border=True)
    labels[:, 1:][border[:, 1:] > 1.0] = -1
    got = {}
    for mode in (False, True):
        monkeypatch.setattr(P, "PREFETCH", mode)
        stats = {}
        got[mode] = P.split_pieces(data, labels, len(cent), DIST_L2SQ, 7, 300, 50, min_rows=20, border=border,
                                   cut_margin=0.5, stats=stats), stats
    (direct, st_direct), (loaded, st_loaded) = got[False], got[True]
    assert len(direct) >= 16 and max(len(r) for r in direct) <= 300  # halved at several levels
    assert len(direct) == len(loaded)
    for a, b in zip(direct, loaded):
        np.testing.assert_array_equal(a, b)
    assert st_direct == {} and st_loaded["load_seconds"] > 0


def test_out_of_core_build_reports_the_partitions_loads(monkeypatch):
    """The build's info has the partition's loads: none on the CPU (its blocks are read directly); with
    the loader forced on, the same graph and the loader's time."""
    rng = np.random.default_rng(11)
    basis = rng.normal(size=(6, 24))
    centres = rng.normal(size=(40, 6)) * 2.5 @ basis
    x = (centres[rng.integers(0, 40, 2000)] + rng.normal(size=(2000, 6)) @ basis
         + rng.normal(size=(2000, 24)) * 0.05).astype(np.float32)

    def build():
        return knngraph.knn_graph(x, 10, method="nndescent", device="cpu", verbose=False, memory_limit=3 * x.nbytes,
                                  out_of_core="clusters")

    g = build()
    assert g.info["partition_load_seconds"] == 0 and g.info["partition_load_wait_seconds"] == 0
    monkeypatch.setattr(P, "PREFETCH", True)
    g2 = build()
    assert g2.info["partition_load_seconds"] > 0 and g2.info["partition_load_wait_seconds"] >= 0
    assert g2.info["pieces"] == g.info["pieces"]
    np.testing.assert_array_equal(g2.indices, g.indices)
    np.testing.assert_array_equal(g2.distances, g.distances)


# ---------------------------------------------------------------------------------------------------------
# on a GPU


@pytest.mark.gpu
def test_gpu_prefetcher_blocks_are_copied_after_the_consumers_queued_reads():
    """The consumer on a non-blocking stream of its own reads each block behind a long GEMM and lets it go
    before the next: the next blocks may take its memory (CuPy's pool), and must be written only after
    those reads. Host array (page-locked path), ranges and row lists, and a CuPy array."""
    import cupy as cp

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200_000, 64)).astype(np.float32)
    seq = [(lo, lo + 20_000) for lo in range(0, 200_000, 20_000)]
    seq += [np.sort(rng.choice(200_000, 20_000, replace=False)) for _ in range(6)]
    want = np.stack([_want(x, item).astype(np.float64).sum(0) for item in seq])
    slow = cp.asarray(rng.normal(size=(4096, 4096)).astype(np.float32))
    for data in (x, None):
        with cp.cuda.Device(0), cp.cuda.Stream(non_blocking=True) as stream:
            src = x if data is not None else cp.asarray(x)
            sums = []
            with BlockPrefetcher(src, seq, device_index=0) as fetch:
                for block in fetch:
                    assert isinstance(block, cp.ndarray) and block.flags.c_contiguous
                    for _ in range(4):
                        slow = slow @ slow
                        slow /= cp.abs(slow).max()
                    sums.append(block.astype(cp.float64).sum(0))
                    del block
            got = cp.asnumpy(cp.stack(sums))
            stream.synchronize()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_gpu_prefetched_partition_matches_the_direct_reads(monkeypatch):
    from knngraph.nndescent import _build

    x = _blobs(n=60_000, d=32, centres=40)
    engine = _build.make_engine(Device("cuda", 0))
    with engine:
        cent = P.kmeans(x, 24, DIST_L2SQ, seed=1, engine=engine)
        got = {}
        for mode in (False, "auto"):
            monkeypatch.setattr(P, "PREFETCH", mode)
            stats = {}
            labels, border, radii = P.nearest_centroids(engine, x, cent, DIST_L2SQ, 3, 7_000, with_border=True,
                                                        probes=P.probe_rows(len(x), 1), k=16, stats=stats)
            labels[:, 1:][border[:, 1:] > 1.0] = -1
            pieces = P.split_pieces(x, labels, len(cent), DIST_L2SQ, 1, 3_000, 7_000, min_rows=40, engine=engine,
                                    border=border, cut_margin=0.5, stats=stats)
            got[mode] = labels, border, radii, pieces, stats
    (l0, b0, r0, p0, s0), (l1, b1, r1, p1, s1) = got[False], got["auto"]
    np.testing.assert_array_equal(l0, l1)
    np.testing.assert_array_equal(b0, b1)
    np.testing.assert_array_equal(r0, r1)
    assert len(p0) == len(p1) and all(np.array_equal(a, b) for a, b in zip(p0, p1))
    assert s0 == {} and s1["load_seconds"] > 0


@pytest.mark.gpu
def test_gpu_several_device_graphs_engine_loads_to_the_current_device(monkeypatch):
    """The several-device graph's engine names no GPU: the loader takes the current device's."""
    from knngraph._device import device_context
    from knngraph.multidevice import _Engine

    x = _blobs(n=20_000, d=32, centres=20)
    cent = P.kmeans(x, 12, DIST_L2SQ, seed=1)
    dev = Device("cuda", 0)
    got = {}
    for mode in (False, "auto"):
        monkeypatch.setattr(P, "PREFETCH", mode)
        stats = {}
        with device_context(dev):
            got[mode] = P.nearest_centroids(_Engine(dev), x, cent, DIST_L2SQ, 3, 3_000, stats=stats), stats
    np.testing.assert_array_equal(got[False][0], got["auto"][0])
    assert got[False][1] == {} and got["auto"][1]["load_seconds"] > 0
