"""The ann-benchmarks wrapper (annbench/knngraph), run through its own BaseANN interface on the bundled
real data, without ann-benchmarks installed (its fallback base class)."""

import importlib.util
import inspect
import itertools
from pathlib import Path

import numpy as np
import pytest

FOLDER = Path(__file__).resolve().parents[1] / "annbench" / "knngraph"


@pytest.fixture(scope="module")
def module():
    spec = importlib.util.spec_from_file_location("knngraph_annbench_module", FOLDER / "module.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _recall(found, truth, k=10):
    return np.mean([len(set(map(int, f[:k])) & set(map(int, t[:k]))) / k for f, t in zip(found, truth)])


def test_song_wrapper_batch_and_single_queries(module, sample):
    algo = module.KnngraphSONG("euclidean", 16, 32, "nndescent")
    algo.fit(np.asarray(sample.base))
    queries, truth = np.asarray(sample.queries[:200], np.float32), sample.gt_indices[:200]
    recalls = []
    for queue_size in (10, 64):
        algo.set_query_arguments(queue_size)
        assert str(algo) == f"knngraph-song(d=16,k=32,nndescent) queue_size={queue_size}"
        algo.batch_query(queries, 10)
        batch = algo.get_batch_results()
        assert batch.shape == (200, 10)
        single = np.stack([algo.query(q, 10) for q in queries[:20]])
        np.testing.assert_array_equal(single, batch[:20])
        recalls.append(_recall(batch, truth))
    assert recalls[1] >= 0.95 and recalls[0] <= recalls[1], recalls  # queue_size: the speed/recall knob


def test_exact_wrapper_angular_is_exact(module, sample):
    scale = np.random.default_rng(3).uniform(0.3, 3.0, (4000, 1)).astype(np.float32)
    base = np.asarray(sample.base[:4000], np.float32) * scale
    queries = np.asarray(sample.queries[:50], np.float32)
    cos = 1 - (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (
        base / np.linalg.norm(base, axis=1, keepdims=True)).T
    truth = np.argsort(cos, axis=1, kind="stable")[:, :10]
    algo = module.KnngraphExact("angular")
    algo.fit(base)
    algo.batch_query(queries, 10)
    assert str(algo) == "knngraph-exact" and _recall(algo.get_batch_results(), truth) == 1.0


def test_unsupported_metric_is_refused(module):
    with pytest.raises(ValueError, match="metric: knngraph supports the ann-benchmarks metrics .*got 'jaccard'"):
        module.KnngraphExact("jaccard")
    with pytest.raises(ValueError, match="build_algo"):
        module.KnngraphSONG("euclidean", 16, 32, "bogus")


def test_config_names_constructors_and_arguments_that_exist(module):
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((FOLDER / "config.yml").read_text())
    entries = config["float"]["any"]
    assert {e["name"] for e in entries} == {"knngraph-song", "knngraph-exact"}
    for entry in entries:
        assert entry["module"] == "ann_benchmarks.algorithms.knngraph"
        cls = getattr(module, entry["constructor"])
        for group in entry["run_groups"].values():
            for args in itertools.product(*group.get("args", [])):
                algo = cls("euclidean", *args)  # '@metric' first, then each combination: all valid
                for query_args in itertools.product(*group.get("query_args", [])):
                    algo.set_query_arguments(*query_args)
                    inspect.signature(algo.set_query_arguments).bind(*query_args)
