"""Typed use of the public API, checked by mypy in ``tests/test_typing.py`` (never run: it only has to type-check).

Each call is written as an application would write it; ``assert_type`` pins what the signatures promise, so a
public function that loses its hints (an untyped decorator, a missing return type) turns into ``Any`` here and
fails the check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from typing_extensions import assert_type

import knngraph
from knngraph import KNNResult, bruteforce, datasets, evaluate, ggnn, graphops, grnnd, io, metrics, nndescent, registry
from knngraph import beam, song
from knngraph.handoff import distances_in, graph_to_csr, umap_knn
from knngraph.multidevice import MultiDeviceIndex
from knngraph.sklearn import KNNGraphTransformer


def exact(base: np.ndarray, queries: np.ndarray) -> float:
    result = knngraph.knn(base, queries, k=10, metric="cosine", device="cpu", memory_limit="1GB", verbose=False)
    assert_type(result, KNNResult)
    d, i = result
    true_d, true_i = knngraph.knn(base, queries, 10, device="cpu")
    return knngraph.recall_at_k(i, true_i, 10, distances=d, true_distances=true_d) + knngraph.r_at_k(i, true_i, 10)


def graphs(base: np.ndarray, path: Path) -> int:
    g = knngraph.knn_graph(base, 16, method="nndescent", device="cpu", max_iterations=4)
    assert_type(g, knngraph.Graph)
    assert_type(knngraph.graph_recall(g, 10, base=base, sample=100), float)
    search_graph = knngraph.optimize_graph(g, base, graph_degree=8, alpha=1.1, device="cpu")
    assert_type(search_graph, knngraph.Graph)
    assert_type(graphops.connect_graph(g, base, entry_points=[0]), knngraph.Graph)
    assert_type(graphops.unreachable_count(g.indices, np.array([0])), int)
    assert_type(graphops.medoid(base), int)
    assert_type(graphops.default_entry_points(base, n_points=4), np.ndarray)
    merged = knngraph.merge_graphs(g, g, base, base, graph_degree=16, device="cpu")
    assert_type(merged, knngraph.Graph)
    g.save(path)
    with open(path, "rb") as f:
        assert_type(knngraph.Graph.load(f), knngraph.Graph)
    count, labels = g.components(return_labels=True)
    assert_type(labels, np.ndarray)
    assert_type(g.components(), int)
    return count


def handoff(g: knngraph.Graph) -> tuple[np.ndarray, np.ndarray]:
    csr = g.to_csr(include_self=True, metric="sqeuclidean", dtype=np.float64)
    assert csr.shape == graph_to_csr(g, symmetrize=True).shape
    assert_type(distances_in(g.distances, "sqeuclidean", "euclidean"), np.ndarray)
    return umap_knn(g, 15)


def algorithms(base: np.ndarray, queries: np.ndarray, path: Path) -> list[KNNResult]:
    exact_index = bruteforce.build(bruteforce.IndexParams(metric="euclidean"), base, device="cpu")
    assert_type(exact_index, bruteforce.Index)
    nnd = nndescent.build(nndescent.IndexParams(graph_degree=32), base, device="cpu", memory_limit=2**30)
    assert_type(nnd, nndescent.Index)
    assert_type(nndescent.extend(nnd, base[:10]), nndescent.Index)
    rnn = grnnd.build(grnnd.IndexParams(prune_alpha=1.05, graph_degree=48), base)
    assert_type(rnn, grnnd.Index)
    index = song.from_graph(nnd.graph, nnd.dataset, entry_points=[0, 1])
    assert_type(index, song.Index)
    built = song.build(song.IndexParams(graph_degree=32), base, device="cpu")
    assert_type(built, song.Index)
    spread = song.build(song.IndexParams(), base, devices=["cpu", "cpu"], layout="sharded")
    assert_type(spread, MultiDeviceIndex)
    gg = ggnn.build(ggnn.IndexParams(graph_degree=24), base)
    assert_type(gg, ggnn.Index)
    assert_type(ggnn.from_graph(rnn.graph, base), ggnn.Index)
    stats: dict[str, Any] = {}
    out = (np.empty((len(queries), 10), np.float32), np.empty((len(queries), 10), np.int32))
    results = [
        bruteforce.search(exact_index, queries, 10, params=bruteforce.SearchParams(select="quickselect")),
        song.search(index, queries, 10, params=song.SearchParams(queue_size=64), stats=stats, out=out, n_threads=2),
        song.search(spread, queries, 10),
        ggnn.search(gg, queries, 10, params=ggnn.SearchParams(tau=0.5), filter=np.ones(len(base), bool)),
        index.search(queries, 10),
    ]
    song.save(path, index)
    loaded = song.load(path, metric="sqeuclidean")
    assert isinstance(loaded, song.Index)
    assert_type(loaded.graph, knngraph.Graph)
    view = beam.GraphView(index.graph.indices, base, index.entry_points, "sqeuclidean")
    assert_type(beam.search(view, queries, 10, 64, device="cpu"), tuple[Any, Any])
    assert_type(registry.get("nndescent").build_graph(base, 8, device="cpu"), knngraph.Graph)
    assert_type(registry.graph_builders(), tuple[str, ...])
    return results


def files(path: Path, hdf5: Path, x: np.ndarray) -> np.ndarray:
    io.write(path, x)
    n, dim, dtype = io.read_header(path)
    assert_type(io.read_ann_benchmarks(hdf5)["train"], Any)
    assert_type(io.ann_benchmarks_metric(hdf5), str | None)
    assert_type(metrics.canonical_metric("l2"), str)
    assert_type(evaluate.true_distances_in("euclidean", "sqeuclidean", x), np.ndarray)
    assert_type(knngraph.warmup("cpu", dtypes=["float32"], metrics=["cosine"], verbose=False), dict[str, Any])
    sample = datasets.load_sample()
    assert_type(sample, datasets.Sample)
    return io.read(path, rows=(0, min(n, dim)), mmap=False).astype(dtype)


def transformer(x: np.ndarray) -> np.ndarray:
    t = KNNGraphTransformer(n_neighbors=15, method="nndescent", method_params={"max_iterations": 10}, n_jobs=2)
    assert_type(t.fit(x), KNNGraphTransformer)
    d, i = t.kneighbors()
    assert_type(t.kneighbors(x, 5, return_distance=False), np.ndarray)
    return np.asarray(d)[i[:, :1] >= 0]
