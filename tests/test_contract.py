"""The module contract (knngraph.index), checked over the registry: every algorithm folder has the same
outward shape, every builder takes every vector dtype and metric, every searcher searches every builder's
graph, results have one form, files round-trip. CPU only (the GPU tests run the same calls on a GPU)."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

import knngraph
from knngraph.graphops import UnreachableVerticesWarning
from knngraph import registry
from knngraph.index import SEARCH_KEYWORDS
from knngraph.metrics import METRICS, pairwise_distances

DTYPES = ("float32", "float16", "uint8", "int8")
BUILDERS = registry.graph_builders()
SEARCHERS = registry.searchers()
GRAPH_SEARCHERS = registry.graph_searchers()


def _data(dtype, n=240, d=8, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        return rng.integers(0, 256, (n, d)).astype(np.uint8)
    if dtype == "int8":
        return rng.integers(-128, 128, (n, d)).astype(np.int8)
    return (rng.standard_normal((n, d)) * 3).astype(dtype)


def _check_result_form(d, i, n_rows, k, n):
    assert d.dtype == np.float32 and i.dtype == np.int32
    assert d.shape == i.shape == (n_rows, k)
    assert ((i >= -1) & (i < n)).all()
    assert np.array_equal(i < 0, np.isinf(d))          # -1 ids exactly where distances are inf
    assert (np.diff(np.where(np.isinf(d), np.float32(3e38), d), axis=1) >= 0).all()  # nearest first
    valid = i >= 0                                       # -1 only after the real neighbours
    assert (valid[:, :-1] | ~valid[:, 1:]).all()


# ---------------------------------------------------------------------------------------------- shape


@pytest.mark.parametrize("name", list(registry.ALGORITHMS))
def test_every_algorithm_has_the_contract_names(name):
    algorithm = registry.get(name)
    mod = algorithm.load()
    needed = {"IndexParams", "Index", "build", "save", "load", "extend"}
    if algorithm.searches:
        needed |= {"SearchParams", "search"}
    if algorithm.searches_graphs:
        needed |= {"from_graph"}
    assert needed <= set(mod.__all__), needed - set(mod.__all__)
    assert issubclass(mod.Index, knngraph.index.Index)
    assert mod.Index.algorithm == name and mod.Index._file_kind == algorithm.file_kind
    for cls in (mod.IndexParams, getattr(mod, "SearchParams", None)):
        if cls is None:
            continue
        params = cls()
        with pytest.raises(dataclasses.FrozenInstanceError):
            params.__setattr__(dataclasses.fields(cls)[0].name, None)
        with pytest.raises(TypeError):
            cls(*[getattr(params, f.name) for f in dataclasses.fields(cls)][:1])  # keyword-only
        names = {f.name for f in dataclasses.fields(cls)}
        assert not names & {"device", "memory_limit", "verbose"}, "run-time concerns are call arguments"
        assert "k" not in names, "the graph degree is graph_degree; k is neighbours per query"
    if algorithm.builds_graphs:
        assert "graph_degree" in {f.name for f in dataclasses.fields(mod.IndexParams)}
    if algorithm.searches:  # one set of search keywords (honoured or refused: test_search_keywords_...)
        names = inspect.signature(mod.search).parameters
        assert {"device", "verbose", *SEARCH_KEYWORDS} <= set(names), set(SEARCH_KEYWORDS) - set(names)
        assert all(names[kw].kind is inspect.Parameter.KEYWORD_ONLY for kw in SEARCH_KEYWORDS)


@pytest.mark.parametrize("name", list(registry.ALGORITHMS))
def test_bad_params_name_the_field(name):
    mod = registry.get(name).load()
    with pytest.raises(ValueError, match="'metric' parameter of IndexParams"):
        mod.IndexParams(metric="manhattan")
    field = next(f for f in dataclasses.fields(mod.IndexParams) if isinstance(f.default, int)
                 and not isinstance(f.default, bool))
    with pytest.raises(ValueError, match=f"'{field.name}' parameter of IndexParams"):
        mod.IndexParams(**{field.name: -5})


def test_registry_names_and_errors():
    assert set(BUILDERS) >= {"exact", "nndescent"} and "song" in GRAPH_SEARCHERS
    with pytest.raises(ValueError, match="unknown algorithm 'magic'; available: exact"):
        registry.get("magic")
    with pytest.raises(ValueError, match="does not build k-NN graphs"):
        knngraph.knn_graph(np.zeros((10, 2), np.float32), 2, method="song")
    assert registry.by_file_kind("song-index").name == "song" and registry.by_file_kind("graph") is None


# ------------------------------------------------------------------------------------------- builders


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", BUILDERS)
def test_builders_take_every_dtype_and_metric(method, dtype, metric):
    x = _data(dtype)
    k = 6
    g = knngraph.knn_graph(x, k, method=method, metric=metric, device="cpu", verbose=False)
    assert g.metric == metric and g.n == x.shape[0] and g.degree == k
    _check_result_form(g.distances, g.indices, x.shape[0], k, x.shape[0])
    assert not (g.indices == np.arange(x.shape[0])[:, None]).any(), "a node is never its own neighbour"
    # the distances are the metric's (float64 reference, float32 tolerance)
    ref = pairwise_distances(x.astype(np.float64), x.astype(np.float64), metric)
    want = np.take_along_axis(ref, np.maximum(g.indices, 0).astype(np.int64), 1)
    want[g.indices < 0] = np.inf                        # search graphs pad rows with -1 / inf
    np.testing.assert_allclose(g.distances, want, rtol=2e-3, atol=2e-3 * (1 + np.abs(ref).max()))
    if registry.get(method).search_graph:
        _check_search_graph(method, g, x, ref, metric)
        return
    # and the lists are (close to) the true ones: exact for 'exact'; NN-Descent on 240 points near exact
    # (inner product is no metric: neighbourhoods are not transitive and NN-Descent finds fewer)
    np.fill_diagonal(ref, np.inf)
    truth = np.sort(ref, axis=1)[:, k - 1]
    hit = g.distances <= truth[:, None] * (1 + 1e-3) + 1e-3 * (1 + np.abs(truth[:, None]))
    floor = 1.0 if method == "exact" else (0.85 if metric == "inner_product" else 0.95)
    assert hit.mean() >= floor, hit.mean()


def _check_search_graph(method, g, x, ref, metric):
    """A search graph (registry ``search_graph``): rows of distinct neighbours, never the node itself; an
    RNG-pruned one (``rng_pruned``) keeps the RNG rule in every row (for kept n1 nearer than n2:
    d(n1, n2) >= d(v, n2)); and every graph searcher finds most true neighbours on it at its default
    search settings (a degree-6 RNG graph of 240 points keeps about 3 edges per node)."""
    tol = 2e-3 * (1 + np.abs(ref).max())
    # edges the connectivity step added to reach what the rule's approximation left unreachable
    linked = {tuple(e) for e in (g.info.get("connect") or {}).get("links", [])}
    for v, row in enumerate(g.indices):
        kept = row[row >= 0]
        assert len(kept) >= 1 and len(set(kept.tolist())) == len(kept) and v not in kept
        if not registry.get(method).rng_pruned:
            continue
        for a in range(len(kept)):
            for b in range(a + 1, len(kept)):
                if (v, int(kept[a])) in linked or (v, int(kept[b])) in linked:
                    continue
                assert ref[kept[a], kept[b]] >= ref[v, kept[b]] - tol, (v, kept[a], kept[b])
    q = _data(x.dtype.name, n=20, seed=9)
    truth = np.sort(pairwise_distances(q.astype(np.float64), x.astype(np.float64), metric), axis=1)[:, 4]
    for searcher in GRAPH_SEARCHERS:
        mod = registry.get(searcher).load()
        d, _ = mod.search(mod.from_graph(g, x, device="cpu"), q, 5, device="cpu")
        hit = d <= truth[:, None] * (1 + 1e-3) + 1e-3 * (1 + np.abs(truth[:, None]))
        assert hit.mean() >= 0.7, (searcher, hit.mean())


@pytest.mark.parametrize("method", BUILDERS)
def test_builders_same_seed_same_graph_on_cpu(method):
    x = _data("float32", n=400, seed=3)
    a = knngraph.knn_graph(x, 8, method=method, device="cpu", verbose=False)
    b = knngraph.knn_graph(x, 8, method=method, device="cpu", verbose=False)
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.distances, b.distances)


@pytest.mark.parametrize("method", BUILDERS)
def test_builder_index_round_trips_and_refuses_another_metric(method, tmp_path):
    mod = registry.get(method).load()
    x = _data("uint8", n=150)
    index = mod.build(mod.IndexParams(graph_degree=5, metric="cosine"), x, device="cpu", verbose=False)
    path = tmp_path / f"{method}.index"
    mod.save(path, index)
    back = mod.load(path)
    assert back.metric == "cosine" and back.params == index.params
    assert np.array_equal(back.graph.indices, index.graph.indices)
    assert np.array_equal(np.asarray(back.dataset), x)
    with pytest.raises(ValueError, match="saved with metric 'cosine', not 'sqeuclidean'"):
        mod.load(path, metric="sqeuclidean")
    other = next(a for a in registry.ALGORITHMS.values() if a.name != method)
    with pytest.raises(ValueError, match=f"holds a knngraph '{index._file_kind}'"):
        other.load().load(path)


@pytest.mark.parametrize("method", BUILDERS)
def test_builder_extend_adds_rows(method):
    mod = registry.get(method).load()
    x = _data("float32", n=300, seed=5)
    index = mod.build(mod.IndexParams(graph_degree=6), x[:250], device="cpu", verbose=False)
    bigger = mod.extend(index, x[250:], device="cpu", verbose=False)
    assert bigger.shape == (300, 8) and index.shape == (250, 8)
    _check_result_form(bigger.graph.distances, bigger.graph.indices, 300, 6, 300)
    ref = pairwise_distances(x, x)
    if registry.get(method).search_graph:
        _check_search_graph(method, bigger.graph, x, ref, "sqeuclidean")
        return
    np.fill_diagonal(ref, np.inf)
    truth = np.sort(ref, axis=1)[:, 5]
    assert (bigger.graph.distances <= truth[:, None] * (1 + 1e-4) + 1e-5).mean() >= 0.95


# ------------------------------------------------------------------------------------------ searchers


def _search_index(name, x, metric):
    mod = registry.get(name).load()
    if name == "exact":
        return mod, mod.build(mod.IndexParams(metric=metric), x, device="cpu")
    params = _index_params(mod, metric=metric, graph_degree=12, intermediate_graph_degree=24)
    return mod, mod.build(params, x, device="cpu", verbose=False)


def _index_params(mod, **fields):
    """``mod.IndexParams`` with the given fields it has (GGNN builds no intermediate k-NN graph)."""
    names = {f.name for f in dataclasses.fields(mod.IndexParams)}
    return mod.IndexParams(**{k: v for k, v in fields.items() if k in names})


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", SEARCHERS)
def test_searchers_take_every_dtype_and_metric(name, dtype, metric):
    x = _data(dtype)
    q = _data(dtype, n=20, seed=9)
    mod, index = _search_index(name, x, metric)
    d, i = mod.search(index, q, 5, device="cpu")
    _check_result_form(d, i, 20, 5, x.shape[0])
    ref = pairwise_distances(q.astype(np.float64), x.astype(np.float64), metric)
    truth = np.sort(ref, axis=1)[:, 4]
    hit = d <= truth[:, None] * (1 + 1e-3) + 1e-3 * (1 + np.abs(truth[:, None]))
    assert hit.mean() >= (1.0 if name == "exact" else 0.9), hit.mean()
    r = index.search(q, 5)  # the Index method is the module function
    assert np.array_equal(np.asarray(r.indices), i)


@pytest.mark.parametrize("name", SEARCHERS)
def test_searcher_round_trips_and_gives_the_same_results(name, tmp_path):
    x = _data("float16", n=200)
    q = _data("float16", n=10, seed=4)
    mod, index = _search_index(name, x, "euclidean")
    path = tmp_path / f"{name}.index"
    mod.save(path, index)
    back = mod.load(path, metric="euclidean")
    a = mod.search(index, q, 4, device="cpu")
    b = mod.search(back, q, 4, device="cpu")
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.distances, b.distances)
    with pytest.raises(ValueError, match="saved with metric 'euclidean'"):
        mod.load(path, metric="cosine")


def _keyword_value(keyword, n, n_queries, k):
    return {"filter": np.arange(n) % 3 == 0, "stats": {}, "memory_limit": "64MB",
            "out": (np.empty((n_queries, k), np.float32), np.empty((n_queries, k), np.int32)),
            "n_threads": 1}[keyword]


@pytest.mark.parametrize("keyword", SEARCH_KEYWORDS)
@pytest.mark.parametrize("name", SEARCHERS)
def test_search_keywords_are_honoured_or_refused_by_name(name, keyword):
    """Every searcher takes every search keyword of the contract (knngraph.index.SEARCH_KEYWORDS): a call
    with it does what the keyword says (checked against brute force and the call without it), or is refused
    with a ValueError naming the searcher and the keyword; never accepted and ignored."""
    x = _data("float32", n=240)
    q = _data("float32", n=12, seed=9)
    mod, index = _search_index(name, x, "sqeuclidean")
    plain_d, plain_i = mod.search(index, q, 5, device="cpu", verbose=False)
    value = _keyword_value(keyword, 240, 12, 5)
    searcher = registry.get(name).module.rsplit(".", 1)[1]
    try:
        d, i = mod.search(index, q, 5, device="cpu", verbose=False, **{keyword: value})
    except ValueError as exc:
        assert f"{searcher}.search does not support {keyword}=" in str(exc), exc
        return
    _check_result_form(d, i, 12, 5, 240)
    if keyword == "filter":  # only allowed ids, (close to) the nearest allowed ones
        assert value[i[i >= 0]].all()
        ref = pairwise_distances(q, x)
        ref[:, ~value] = np.inf
        truth = np.sort(ref, axis=1)[:, 4]
        hit = d <= truth[:, None] * (1 + 1e-4) + 1e-4
        assert hit.mean() >= (1.0 if name == "exact" else 0.9), hit.mean()
        return
    np.testing.assert_array_equal(i, plain_i)  # the other keywords leave the answer as it is
    np.testing.assert_allclose(d, plain_d, rtol=1e-6)
    if keyword == "stats":
        assert isinstance(value["seconds"], float) and value["seconds"] >= 0
        if registry.get(name).searches_graphs:
            assert 5 <= value["distances_per_query"] <= 240 and value["expansions_per_query"] >= 1
    elif keyword == "out":
        assert d is value[0] and i is value[1]
        with pytest.raises(ValueError, match=r"out\[0\] \(distances\) must have shape \(12, 5\)"):
            mod.search(index, q, 5, device="cpu", out=(np.empty((12, 4), np.float32), value[1]))
    elif keyword == "memory_limit":
        with pytest.raises(ValueError, match="memory_limit must be"):
            mod.search(index, q, 5, device="cpu", memory_limit="lots")
    else:
        with pytest.raises(ValueError, match="n_threads must be a positive integer"):
            mod.search(index, q, 5, device="cpu", n_threads=0)


@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize("searcher", GRAPH_SEARCHERS)
def test_every_graph_searcher_takes_every_builders_graph(searcher, builder):
    x = _data("float32", n=400, seed=11)
    q = _data("float32", n=30, seed=12)
    g = knngraph.knn_graph(x, 24, method=builder, device="cpu", verbose=False)
    g = knngraph.optimize_graph(g, x, 12, device="cpu", verbose=False)
    mod = registry.get(searcher).load()
    index = mod.from_graph(g, x, device="cpu")
    d, i = mod.search(index, q, 5, device="cpu")
    _check_result_form(d, i, 30, 5, 400)
    truth = np.sort(pairwise_distances(q, x), axis=1)[:, 4]
    assert (d <= truth[:, None] * (1 + 1e-4) + 1e-5).mean() >= 0.9


@pytest.mark.parametrize("searcher", GRAPH_SEARCHERS)
def test_graph_searcher_pads_with_minus_one_and_inf(searcher):
    """A graph with no edges, one entry point: one vertex is reachable, the rest of each row is padding."""
    x = _data("float32", n=50)
    empty = knngraph.Graph(np.full((50, 4), -1, np.int32), np.full((50, 4), np.inf, np.float32))
    mod = registry.get(searcher).load()
    with pytest.warns(UnreachableVerticesWarning, match="49 of 50 vertices"):
        index = mod.from_graph(empty, x, entry_points=np.array([7]), device="cpu")
    d, i = mod.search(index, x[:3], 3, device="cpu")
    _check_result_form(d, i, 3, 3, 50)
    assert (i[:, 0] == 7).all() and (i[:, 1:] == -1).all()


@pytest.mark.parametrize("searcher", GRAPH_SEARCHERS)
def test_graph_searcher_same_seed_same_result(searcher):
    x = _data("float32", n=300, seed=2)
    mod = registry.get(searcher).load()
    params = _index_params(mod, graph_degree=8, intermediate_graph_degree=16, seed=4)
    r1 = mod.search(mod.build(params, x, device="cpu", verbose=False), x[:20], 5, device="cpu")
    r2 = mod.search(mod.build(params, x, device="cpu", verbose=False), x[:20], 5, device="cpu")
    assert np.array_equal(r1.indices, r2.indices)


def test_builders_have_no_search_and_say_what_to_use():
    mod = registry.get("nndescent").load()
    index = mod.build(mod.IndexParams(graph_degree=4), _data("float32", n=60), device="cpu", verbose=False)
    with pytest.raises(TypeError, match="from_graph"):
        index.search(np.zeros((1, 8), np.float32), 3)


# --------------------------------------------------------------------------------------- light import


def test_import_and_cpu_work_load_neither_numba_cuda_nor_cupy():
    """``import knngraph`` and CPU work never touch the CUDA stack, so an install without the cuda extras
    (no numba-cuda, no CuPy) runs everything on the CPU."""
    import subprocess
    import sys

    code = """
import sys
import numpy as np
import knngraph
from knngraph import song
def cuda_loaded():
    return any(m == 'cupy' or m.startswith('numba.cuda') or m.startswith('numba_cuda') for m in sys.modules)
assert not cuda_loaded(), 'import'
x = np.random.default_rng(0).random((300, 8), dtype=np.float32)
sys.modules['cupy'] = None  # an install without CuPy: importing it fails
knngraph.knn(x, x[:5], 3)
g = knngraph.knn_graph(x, 8, method='nndescent', verbose=False)
index = song.from_graph(knngraph.optimize_graph(g, x, 8, verbose=False), x)
song.search(index, x[:5], 3)
del sys.modules['cupy']
print(cuda_loaded())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PATH": "", "NUMBA_ENABLE_CUDASIM": "0"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_gpu_host_code_imports_no_numba():
    """The host code of every GPU path (the algorithms' packages and their ``cuda`` modules, graph
    operations, k-selection) imports without numba: a GPU process whose kernels are all in the disk cache
    loads them by name and never starts numba (about a third of a second of its first call). numba's
    CPU kernels and the GPU kernels' sources are imported only where they run or compile."""
    import subprocess
    import sys

    code = """
import importlib, sys
import knngraph
for algorithm in knngraph.registry.ALGORITHMS.values():
    algorithm.load()
for name in ('bruteforce.cuda', 'nndescent.cuda', 'song.cuda', 'ggnn.cuda', 'ggnn._build', 'grnnd.cuda',
             'beam.cuda', 'graphops', 'graphops.cuda', 'primitives.kselect', 'primitives.rescore',
             'primitives.components', 'multidevice', 'distributed', 'cli._demo'):
    importlib.import_module('knngraph.' + name)
print(sorted(m for m in sys.modules if m == 'numba' or m.startswith('numba.')))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
