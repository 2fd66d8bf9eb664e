"""The table of bad and edge inputs against the public API: every case asserts the exception type and a
fragment of its message, or the exact result. (File-level cases live in tests/test_io.py,
tests/test_persistence.py and tests/test_fuzz_readers.py; command-line cases in tests/test_cli.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

import knngraph
from knngraph import bruteforce, nndescent, song
from knngraph.metrics import pairwise_distances

RNG = np.random.default_rng(0)
X = RNG.random((60, 4), dtype=np.float32)
Q = RNG.random((5, 4), dtype=np.float32)
G = knngraph.knn_graph(X, 6, device="cpu", verbose=False)
SONG = song.from_graph(knngraph.optimize_graph(G, X, 6, device="cpu", verbose=False), X, device="cpu")


def _nan_row():
    x = X.copy()
    x[17, 2] = np.nan
    return x


def _inf_row():
    x = X.copy()
    x[3, 0] = np.inf
    return x


def _ids_out_of_range():
    ids = G.indices.copy()
    ids[4, 1] = 60
    return knngraph.Graph(ids, G.distances.copy())


# (id, call, exception type, message fragment)
ERRORS = [
    # vectors
    ("base None", lambda: knngraph.knn(None, Q, 3, device="cpu"), TypeError, "base must be a 2-D array of vectors, got None"),
    ("base str", lambda: knngraph.knn("abc", Q, 3, device="cpu"), TypeError, "base must be an array"),
    ("base dict", lambda: knngraph.knn({"a": 1}, Q, 3, device="cpu"), TypeError, "base must be an array"),
    ("base ragged list", lambda: knngraph.knn([[1, 2], [3]], Q, 1, device="cpu"), ValueError, "base is a ragged list"),
    ("base list of strings", lambda: knngraph.knn([["a", "b"]], Q, 1, device="cpu"), TypeError, "base must hold numbers"),
    ("base 1-D", lambda: knngraph.knn(X[0], Q, 1, device="cpu"), ValueError, "base must be a 2-D array"),
    ("base 3-D", lambda: knngraph.knn(X[None], Q, 1, device="cpu"), ValueError, "got 3-D shape"),
    ("base no rows", lambda: knngraph.knn(X[:0], Q, 1, device="cpu"), ValueError, "base is empty"),
    ("base no columns", lambda: knngraph.knn(X[:, :0], Q, 1, device="cpu"), ValueError, "base is empty"),
    ("base int32", lambda: knngraph.knn(X.astype(np.int32), Q, 1, device="cpu"), TypeError, "base has dtype int32"),
    ("base int64", lambda: knngraph.knn(X.astype(np.int64), Q, 1, device="cpu"), TypeError, "base has dtype int64"),
    ("base complex", lambda: knngraph.knn(X.astype(np.complex64), Q, 1, device="cpu"), TypeError, "base has dtype complex64"),
    ("base bool", lambda: knngraph.knn(X > 0.5, Q, 1, device="cpu"), TypeError, "base has dtype bool"),
    ("base object", lambda: knngraph.knn(X.astype(object), Q, 1, device="cpu"), TypeError, "base has dtype object"),
    ("base NaN row", lambda: knngraph.knn(_nan_row(), Q, 1, device="cpu"), ValueError, "base row 17 contains NaN or inf"),
    ("base inf row", lambda: knngraph.knn(_inf_row(), Q, 1, device="cpu"), ValueError, "base row 3 contains NaN or inf"),
    ("base float64 beyond float32", lambda: knngraph.knn(X.astype(np.float64) * 1e39, Q, 1, device="cpu"), ValueError,
     "base row 0 has values beyond the float32 range"),
    ("queries None", lambda: knngraph.knn(X, None, 1, device="cpu"), TypeError, "queries must be a 2-D array of vectors"),
    ("queries dimension", lambda: knngraph.knn(X, Q[:, :3], 1, device="cpu"), ValueError, "queries has 3 dimensions but base has 4"),
    ("queries NaN", lambda: knngraph.knn(X, _nan_row()[15:20], 1, device="cpu"), ValueError, "queries row 2 contains NaN or inf"),
    ("queries 1-D", lambda: knngraph.knn(X, Q[0], 1, device="cpu"), ValueError, "queries must be a 2-D array"),
    ("queries ragged", lambda: knngraph.knn(X, [[1, 2, 3, 4], [1]], 1, device="cpu"), ValueError, "queries is a ragged list"),
    ("graph base None", lambda: knngraph.knn_graph(None, 3, device="cpu"), TypeError, "base must be a 2-D array of vectors"),
    ("graph base NaN", lambda: knngraph.knn_graph(_nan_row(), 3, device="cpu"), ValueError, "base row 17 contains NaN or inf"),
    # k
    ("k 0", lambda: knngraph.knn(X, Q, 0, device="cpu"), ValueError, "k must be at least 1, got 0"),
    ("k negative", lambda: knngraph.knn(X, Q, -2, device="cpu"), ValueError, "k must be at least 1, got -2"),
    ("k float", lambda: knngraph.knn(X, Q, 1.5, device="cpu"), TypeError, "k must be an integer, got float"),
    ("k bool", lambda: knngraph.knn(X, Q, True, device="cpu"), TypeError, "k must be an integer, got bool"),
    ("k str", lambda: knngraph.knn(X, Q, "3", device="cpu"), TypeError, "k must be an integer, got str"),
    ("k None", lambda: knngraph.knn(X, Q, None, device="cpu"), TypeError, "k must be an integer, got NoneType"),
    ("k > n", lambda: knngraph.knn(X, Q, 61, device="cpu"), ValueError, "k=61 is larger than the number of base vectors n=60"),
    ("graph k = n", lambda: knngraph.knn_graph(X, 60, device="cpu"), ValueError, "smaller than the number of vectors"),
    ("graph k 0", lambda: knngraph.knn_graph(X, 0, device="cpu"), ValueError, "k must be in the range [1, inf], got 0"),
    ("graph k float", lambda: knngraph.knn_graph(X, 2.0, device="cpu"), TypeError, "k must be an integer"),
    ("nndescent k = n", lambda: knngraph.knn_graph(X, 60, method="nndescent", device="cpu"), ValueError,
     "smaller than the number of vectors"),
    # metric, device, method, memory_limit
    ("metric unknown", lambda: knngraph.knn(X, Q, 1, metric="manhattan", device="cpu"), ValueError,
     "unknown metric 'manhattan'; valid metrics are sqeuclidean"),
    ("metric None", lambda: knngraph.knn(X, Q, 1, metric=None, device="cpu"), ValueError, "unknown metric None"),
    ("metric int", lambda: knngraph.knn_graph(X, 2, metric=2, device="cpu"), ValueError, "unknown metric 2"),
    ("device int", lambda: knngraph.knn(X, Q, 1, device=0), TypeError, "device must be a string"),
    ("device tpu", lambda: knngraph.knn(X, Q, 1, device="tpu"), ValueError, "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"),
    ("device cuda:x", lambda: knngraph.knn(X, Q, 1, device="cuda:x"), ValueError, "expected 'cuda:N' with an integer N"),
    ("device cuda without GPU", lambda: knngraph.knn(X, Q, 1, device="cuda"), RuntimeError, "no GPU is usable"),
    ("method unknown", lambda: knngraph.knn_graph(X, 2, method="magic", device="cpu"), ValueError,
     "method='magic' is not a graph builder; graph builders: exact, nndescent, grnnd, ggnn"),
    ("method not a builder", lambda: knngraph.knn_graph(X, 2, method="song", device="cpu"), ValueError,
     "method='song' does not build k-NN graphs; graph builders: exact, nndescent"),
    ("method param unknown", lambda: knngraph.knn_graph(X, 2, method="nndescent", magic=1, device="cpu"), TypeError,
     "unexpected keyword argument 'magic'"),
    ("memory_limit 0.5", lambda: knngraph.knn(X, Q, 1, memory_limit=0.5, device="cpu"), ValueError,
     "memory_limit must be between 1 byte and 1 PiB, got 0.5"),
    ("memory_limit 0", lambda: knngraph.knn(X, Q, 1, memory_limit=0, device="cpu"), ValueError, "memory_limit must be between"),
    ("memory_limit -1", lambda: knngraph.knn(X, Q, 1, memory_limit=-1, device="cpu"), ValueError, "memory_limit must be between"),
    ("memory_limit inf", lambda: knngraph.knn(X, Q, 1, memory_limit=math.inf, device="cpu"), ValueError,
     "memory_limit must be between 1 byte and 1 PiB, got inf"),
    ("memory_limit nan", lambda: knngraph.knn(X, Q, 1, memory_limit=math.nan, device="cpu"), ValueError, "got nan"),
    ("memory_limit text", lambda: knngraph.knn(X, Q, 1, memory_limit="lots", device="cpu"), ValueError,
     "memory_limit must be a number of bytes or a string such as '8GB'"),
    ("memory_limit unit", lambda: knngraph.knn(X, Q, 1, memory_limit="8XB", device="cpu"), ValueError, "units: B, KB"),
    ("memory_limit 1e400GB", lambda: knngraph.knn(X, Q, 1, memory_limit="1e400GB", device="cpu"), ValueError,
     "memory_limit must be between"),
    ("memory_limit bool", lambda: knngraph.knn(X, Q, 1, memory_limit=True, device="cpu"), ValueError, "got True"),
    ("nndescent memory_limit too small", lambda: nndescent.build(nndescent.IndexParams(graph_degree=8), X,
                                                                 memory_limit=100, device="cpu"), MemoryError, "nn-descent needs at least"),
    # params objects
    ("nndescent graph_degree 0", lambda: nndescent.IndexParams(graph_degree=0), ValueError,
     "The 'graph_degree' parameter of IndexParams must be an int in the range [1, inf]. Got 0 instead."),
    ("nndescent sample_size 33", lambda: nndescent.IndexParams(sample_size=33), ValueError, "'sample_size' parameter"),
    ("nndescent threshold nan", lambda: nndescent.IndexParams(termination_threshold=math.nan), ValueError,
     "'termination_threshold' parameter of IndexParams must be a finite number in the range [0.0, 1.0]. Got nan"),
    ("nndescent threshold inf", lambda: nndescent.IndexParams(termination_threshold=math.inf), ValueError, "Got inf instead"),
    ("nndescent threshold negative", lambda: nndescent.IndexParams(termination_threshold=-0.1), ValueError, "Got -0.1"),
    ("nndescent max_iterations 0", lambda: nndescent.IndexParams(max_iterations=0), ValueError, "'max_iterations'"),
    ("nndescent max_iterations float", lambda: nndescent.IndexParams(max_iterations=2.5), ValueError,
     "must be an int in the range [1, inf]. Got 2.5"),
    ("nndescent update", lambda: nndescent.IndexParams(update="some"), ValueError,
     "'update' parameter of IndexParams must be one of {'auto', 'all', 'selective'}"),
    ("nndescent init", lambda: nndescent.IndexParams(init="kmeans"), ValueError, "'init' parameter"),
    ("nndescent seed negative", lambda: nndescent.IndexParams(seed=-1), ValueError, "'seed' parameter"),
    ("nndescent cluster_overlap 9", lambda: nndescent.IndexParams(cluster_overlap=9), ValueError, "[1, 8]"),
    ("nndescent cluster_margin negative", lambda: nndescent.IndexParams(cluster_margin=-0.1), ValueError,
     "The 'cluster_margin' parameter of IndexParams must be a finite number in the range [0.0, inf] or None. "
     "Got -0.1 instead."),
    ("nndescent cluster_margin inf", lambda: nndescent.IndexParams(cluster_margin=math.inf), ValueError, "Got inf"),
    ("nndescent cluster_margin nan", lambda: nndescent.IndexParams(cluster_margin=math.nan), ValueError, "Got nan"),
    ("nndescent cluster_margin text", lambda: nndescent.IndexParams(cluster_margin="0.3"), ValueError,
     "'cluster_margin' parameter of IndexParams must be a finite number"),
    ("nndescent out_of_core", lambda: nndescent.IndexParams(out_of_core="disk"), ValueError, "'out_of_core' parameter"),
    ("nndescent rp_forest on GPU only check", lambda: nndescent.build(nndescent.IndexParams(init="cluster_windows"), X,
                                                                     device="cpu"), ValueError, "only implemented on the GPU"),
    ("nndescent positional params", lambda: nndescent.IndexParams(8), TypeError, "positional argument"),
    ("nndescent params wrong type", lambda: nndescent.build({"graph_degree": 8}, X, device="cpu"), TypeError,
     "params must be a knngraph.nndescent.IndexParams, got dict"),
    ("song queue_size 0", lambda: song.SearchParams(queue_size=0), ValueError, "'queue_size' parameter"),
    ("song queue_size 2000", lambda: song.SearchParams(queue_size=2000), ValueError, "[1, 1024]"),
    ("song visited", lambda: song.SearchParams(visited="set"), ValueError, "{'hash', 'bloom'}"),
    ("song alpha 0.5", lambda: song.IndexParams(alpha=0.5), ValueError, "'alpha' parameter"),
    ("song alpha nan", lambda: song.IndexParams(alpha=math.nan), ValueError, "Got nan"),
    ("song fill str", lambda: song.IndexParams(fill="yes"), ValueError, "'fill' parameter of IndexParams must be True or False"),
    ("song hash_bits 100", lambda: song.IndexParams(hash_bits=100), ValueError, "'hash_bits' parameter"),
    ("song build_algo song", lambda: song.IndexParams(build_algo="song"), ValueError,
     "'build_algo' parameter of IndexParams must be one of {'exact', 'nndescent'"),
    ("song build_params list", lambda: song.IndexParams(build_params=[1]), ValueError, "'build_params' parameter"),
    ("song metric", lambda: song.IndexParams(metric="hamming"), ValueError, "'metric' parameter of IndexParams"),
    ("bruteforce select", lambda: bruteforce.SearchParams(select="sort"), ValueError,
     "'select' parameter of SearchParams must be one of {'auto', 'warp_filter', 'quickselect'}"),
    ("bruteforce graph_degree -1", lambda: bruteforce.IndexParams(graph_degree=-1), ValueError, "'graph_degree' parameter"),
    ("knn select", lambda: knngraph.knn(X, Q, 1, select="sort", device="cpu"), ValueError, "'select' parameter"),
    ("warp_filter k > 1024", lambda: knngraph.knn(RNG.random((1100, 2), dtype=np.float32), Q[:, :2], 1025,
                                                  select="warp_filter", device="cpu"), ValueError, "supports k <= 1024"),
    # searching
    ("song k > queue_size", lambda: song.search(SONG, Q, 20, song.SearchParams(queue_size=16), device="cpu"), ValueError,
     "k=20 is larger than queue_size=16"),
    ("song rerank < k", lambda: song.search(SONG, Q, 5, song.SearchParams(rerank=3), device="cpu"), ValueError,
     "rerank=3 must be at least k=5"),
    ("song queries dimension", lambda: song.search(SONG, Q[:, :2], 3, device="cpu"), ValueError,
     "queries has 2 dimensions but the index's vectors has 4"),
    ("song index wrong type", lambda: song.search(G, Q, 3, device="cpu"), TypeError, "index must be a knngraph.song.Index"),
    ("song params wrong type", lambda: song.search(SONG, Q, 3, {"queue_size": 8}, device="cpu"), TypeError,
     "params must be a knngraph.song.SearchParams, got dict"),
    ("song from_graph rows", lambda: song.from_graph(G, X[:50], device="cpu"), ValueError,
     "graph has 60 rows but dataset has 50 vectors"),
    ("song from_graph ids", lambda: song.from_graph(_ids_out_of_range(), X, device="cpu"), ValueError,
     "graph row 4 holds neighbour ids outside [-1, 60)"),
    ("song from_graph metric", lambda: song.from_graph(G, X, song.IndexParams(metric="cosine"), device="cpu"), ValueError,
     "graph was built with metric 'sqeuclidean' but the index uses 'cosine'"),
    ("song entry points 2-D", lambda: song.from_graph(G, X, entry_points=np.zeros((2, 2), int), device="cpu"), ValueError,
     "entry_points must be a non-empty 1-D array"),
    ("song entry points range", lambda: song.from_graph(G, X, entry_points=np.array([70]), device="cpu"), ValueError,
     "entry_points must be ids in [0, 60)"),
    ("song entry points float", lambda: song.from_graph(G, X, entry_points=np.array([1.0]), device="cpu"), TypeError,
     "entry_points must hold integer ids"),
    ("builder has no search", lambda: nndescent.build(nndescent.IndexParams(graph_degree=4), X, device="cpu",
                                                      verbose=False).search(Q, 3), TypeError, "has no search of its own"),
    ("exact index wrong type", lambda: bruteforce.search(SONG, Q, 3, device="cpu"), TypeError,
     "index must be a knngraph.bruteforce.Index"),
    # graph operations, merges, extensions
    ("optimize_graph wrong graph", lambda: knngraph.optimize_graph(G.indices, X, device="cpu"), TypeError,
     "graph must be a knngraph.Graph, got ndarray"),
    ("optimize_graph rows", lambda: knngraph.optimize_graph(G, X[:10], device="cpu"), ValueError,
     "graph has 60 rows but base has 10 vectors"),
    ("optimize_graph degree 0", lambda: knngraph.optimize_graph(G, X, 0, device="cpu"), ValueError,
     "graph_degree must be in the range [1, 1024], got 0"),
    ("optimize_graph alpha", lambda: knngraph.optimize_graph(G, X, alpha=0.9, device="cpu"), ValueError,
     "alpha must be a number >= 1, got 0.9"),
    ("optimize_graph fill", lambda: knngraph.optimize_graph(G, X, fill="no", device="cpu"), TypeError,
     "fill must be True or False"),
    ("optimize_graph reverse_candidates", lambda: knngraph.optimize_graph(G, X, reverse_candidates=-1, device="cpu"),
     ValueError, "reverse_candidates must be in the range [0, 4096]"),
    ("optimize_graph ids", lambda: knngraph.optimize_graph(_ids_out_of_range(), X, device="cpu"), ValueError,
     "graph row 4 holds neighbour ids outside"),
    ("merge metrics differ", lambda: knngraph.merge_graphs(G, knngraph.knn_graph(X, 6, metric="cosine", device="cpu"),
                                                           X, X, device="cpu"), ValueError, "use different metrics"),
    ("merge degree too large", lambda: knngraph.merge_graphs(G, G, X, X, graph_degree=7, device="cpu"), ValueError,
     "graph_degree must be in [1, 6]"),
    ("merge base rows", lambda: knngraph.merge_graphs(G, G, X, X[:30], device="cpu"), ValueError,
     "g2 has 60 nodes but base2 has 30 vectors"),
    ("merge dimensions", lambda: knngraph.merge_graphs(G, G, X, X[:, :3], device="cpu"), ValueError,
     "base2 has 3 dimensions but base1 has 4"),
    ("merge not graphs", lambda: knngraph.merge_graphs(G.indices, G, X, X, device="cpu"), TypeError,
     "g1 and g2 must be knngraph.Graph objects, got ndarray"),
    ("extend dtype", lambda: bruteforce.extend(bruteforce.build(bruteforce.IndexParams(), X), X.astype(np.float16),
                                               device="cpu"), TypeError, "new_vectors has dtype float16 but the index holds float32"),
    ("extend dimension", lambda: song.extend(SONG, Q[:, :3], device="cpu"), ValueError,
     "new_vectors has 3 dimensions but the index's vectors has 4"),
    ("extend NaN", lambda: song.extend(SONG, _nan_row()[15:20], device="cpu"), ValueError,
     "new_vectors row 2 contains NaN or inf"),
    ("Graph shapes", lambda: knngraph.Graph(G.indices, G.distances[:, :3]), ValueError,
     "Graph needs indices and distances of the same 2-D shape"),
    ("Graph index dtype", lambda: knngraph.Graph(G.indices.astype(np.int64), G.distances), TypeError,
     "Graph indices must be int32, got int64"),
    ("Graph distance dtype", lambda: knngraph.Graph(G.indices, G.distances.astype(np.float64)), TypeError,
     "Graph distances must be float32, got float64"),
    ("Graph metric", lambda: knngraph.Graph(G.indices, G.distances, "cityblock"), ValueError, "unknown metric 'cityblock'"),
    # evaluation helpers (more in tests/test_evaluate.py)
    ("recall k 0", lambda: knngraph.recall_at_k(G.indices, G.indices, 0), ValueError, "k must be a positive integer"),
    ("recall rows differ", lambda: knngraph.recall_at_k(G.indices[:5], G.indices, 3), ValueError, ""),
]


@pytest.mark.parametrize("call, exc, fragment", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_bad_input_is_refused_clearly(call, exc, fragment, monkeypatch):
    from knngraph import _device

    monkeypatch.setattr(_device, "_gpu_probe", lambda: (False, "no GPU here (test)"))
    with pytest.raises(exc) as info:
        call()
    assert fragment in str(info.value), str(info.value)


def _exact_ids(base, queries, k, metric="sqeuclidean"):
    d = pairwise_distances(np.asarray(queries, np.float64), np.asarray(base, np.float64), metric)
    return np.argsort(d, axis=1, kind="stable")[:, :k]


def _matrix():
    import warnings

    with warnings.catch_warnings():  # NumPy discourages np.matrix; users still pass it
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        return np.matrix(X)


def _dataframe():
    pd = pytest.importorskip("pandas")
    return pd.DataFrame(X, columns=list("abcd"))


ACCEPTED = [
    ("np.matrix", _matrix),
    ("list of lists", lambda: X.tolist()),
    ("tuple of tuples", lambda: tuple(map(tuple, X.tolist()))),
    ("pandas DataFrame", _dataframe),
    ("float64", lambda: X.astype(np.float64)),
    ("Fortran order", lambda: np.asfortranarray(X)),
    ("negative strides", lambda: X[::-1][::-1]),
    ("every other column", lambda: np.repeat(X, 2, axis=1)[:, ::2]),
]


@pytest.mark.parametrize("make", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_array_likes_are_accepted_as_vectors(make):
    base = make()
    d, i = knngraph.knn(base, Q, 5, device="cpu")
    assert np.array_equal(i, _exact_ids(X, Q, 5))
    g = knngraph.knn_graph(base, 4, device="cpu")
    assert np.array_equal(g.indices, _exact_ids(X, X, 5)[:, 1:])


def test_edge_cases_with_exact_results():
    # one vector, one query; k = n; duplicate vectors (ties by lower id); a zero vector under cosine
    assert knngraph.knn(X[:1], Q[:1], 1, device="cpu").indices.tolist() == [[0]]
    d, i = knngraph.knn(X, Q, 60, device="cpu")
    assert sorted(i[0].tolist()) == list(range(60))
    dup = np.repeat(X[:3], 2, axis=0)
    assert knngraph.knn(dup, dup[:1], 2, device="cpu").indices.tolist() == [[0, 1]]
    z = X.copy()
    z[5] = 0
    d, i = knngraph.knn(z, z[5:6], 3, metric="cosine", device="cpu")
    assert (d == 1).all() and i.tolist() == [[0, 1, 2]]


# --------------------------------------------------------------------------------------------------
# graphs whose ids leave [-1, n): refused where they are made and where they are converted


@pytest.mark.parametrize("bad", [-7, 60, 10**6])
def test_graph_ids_out_of_range_are_refused_at_construction(bad):
    ids = G.indices.copy()
    ids[9, 2] = bad
    with pytest.raises(ValueError, match=rf"graph row 9 holds neighbour ids outside \[-1, 60\): \[{bad}\]"):
        knngraph.Graph(ids, G.distances.copy())


def test_graph_ids_changed_in_place_are_refused_by_the_converters():
    from knngraph.handoff import umap_knn

    pytest.importorskip("scipy")
    g = knngraph.Graph(G.indices.copy(), G.distances.copy())
    g.indices[3, 0] = 10**6  # SciPy would write out of bounds through such a CSR matrix
    with pytest.raises(ValueError, match=r"graph row 3 holds neighbour ids outside \[-1, 60\)"):
        g.to_csr()
    g.indices[3, 0] = 500
    with pytest.raises(ValueError, match=r"graph row 3 holds neighbour ids outside \[-1, 60\): \[500\]"):
        umap_knn(g)


def test_graph_components_and_block_rows():
    ids = np.array([[1, -1], [0, -1], [3, -1], [2, 4], [3, -1]], np.int32)
    g = knngraph.Graph(ids, np.where(ids >= 0, 1.0, np.inf).astype(np.float32))
    count, labels = g.components(return_labels=True)
    assert count == 2 and labels.tolist() == [0, 0, 1, 1, 1]
    # a block of rows of a larger graph (sharded builds) may hold ids up to info["n"]
    block = knngraph.Graph(np.array([[7]], np.int32), np.ones((1, 1), np.float32), info={"rows": [3, 4], "n": 8})
    assert block.n_nodes == 8
    with pytest.raises(ValueError, match=r"outside \[-1, 8\)"):
        knngraph.Graph(np.array([[8]], np.int32), np.ones((1, 1), np.float32), info={"rows": [3, 4], "n": 8})


@pytest.mark.parametrize("searcher", ["song", "ggnn"])
def test_a_block_of_a_larger_graph_is_refused_by_the_searchers(searcher):
    """A graph whose info says it is a block of a larger graph may hold ids up to info["n"]; handed to a
    searcher over fewer vectors, those ids would be read past the vectors (a crash): the searcher checks the
    ids against its own vectors."""
    from knngraph.handoff import umap_knn

    module = getattr(knngraph, searcher)
    x = RNG.random((50, 8), dtype=np.float32)
    ids = np.tile(np.arange(1, 5, dtype=np.int32), (50, 1))
    ids[7, 2] = 900
    block = knngraph.Graph(ids, np.ones(ids.shape, np.float32), info={"rows": [0, 50], "n": 1000})
    with pytest.raises(ValueError, match=r"graph row 7 holds neighbour ids outside \[-1, 50\): \[900\]"):
        module.from_graph(block, x, device="cpu")
    with pytest.raises(ValueError, match=r"umap_knn needs a whole graph, got a block of 50 rows of a graph over 1000"):
        umap_knn(block)


def test_damaged_hdf5_file_that_hangs_libhdf5_is_refused_within_seconds(tmp_path, monkeypatch):
    """Four flipped bytes in the root attributes of a file written by write_ann_benchmarks make libhdf5 loop
    forever on open; read_ann_benchmarks must give a ValueError naming the file instead of hanging."""
    import time

    from knngraph import io

    pytest.importorskip("h5py")
    path = tmp_path / "good-euclidean.hdf5"
    x = RNG.random((500, 16), dtype=np.float32)
    io.write_ann_benchmarks(path, x, x[:10], np.zeros((10, 1), np.int32), np.zeros((10, 1), np.float32), "euclidean")
    blob = bytearray(path.read_bytes())
    for offset in (1999, 2096, 2193, 2290):
        blob[offset] ^= 169
    bad = tmp_path / "bad-euclidean.hdf5"
    bad.write_bytes(bytes(blob))
    monkeypatch.setenv("KNNGRAPH_HDF5_PROBE_SECONDS", "3")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"bad-euclidean\.hdf5: .*(corrupt|not a readable HDF5)"):
        io.read_ann_benchmarks(bad)
    assert time.perf_counter() - t0 < 30
    assert io.read_ann_benchmarks(path)["train"].shape == (500, 16)  # the intact file still reads


@pytest.mark.parametrize("nq, metric", [(2, "sqeuclidean"), (5, "sqeuclidean"), (2, "cosine"), (1, "euclidean")])
def test_warp_filter_above_1024_is_refused_whatever_the_input_size(nq, metric):
    x = RNG.random((1100, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"select='warp_filter' supports k <= 1024, got k=1025"):
        knngraph.knn(x, x[:nq], 1025, select="warp_filter", metric=metric, device="cpu")


def test_messages_name_the_argument_and_the_arrays():
    big = RNG.random((50, 4), dtype=np.float32) * np.float32(1e20)
    with pytest.raises(ValueError, match=r"^queries against base: sqeuclidean distances .* exceed the float32"):
        knngraph.knn(big, big[:3], 3, device="cpu")
    with pytest.raises(ValueError, match=r"^base \(the distances of its k-NN graph\): sqeuclidean distances"):
        knngraph.knn_graph(big, 3, device="cpu")
    with pytest.raises(ValueError, match=r"graph_degree must be smaller than the number of vectors .* "
                                         r"graph_degree=30, n=30"):
        nndescent.build(nndescent.IndexParams(graph_degree=30), X[:30], device="cpu")
    from knngraph import grnnd

    with pytest.raises(MemoryError, match=r"grnnd needs about \d+\.\d (KiB|MiB) of working memory .* "
                                          r"memory_limit allows 1\.0 KiB"):
        grnnd.build(grnnd.IndexParams(graph_degree=16), RNG.random((3000, 16), dtype=np.float32), device="cpu",
                    memory_limit="1KB")
