"""Reachability of fixed-degree graphs: the NumPy level-by-level pass, its hand-over to the compiled pass
(long chains), and the compiled pass alone (large graphs) against a plain breadth-first search."""

from collections import deque

import numpy as np
import pytest

from knngraph.primitives import components


def _reference(ids, entries):
    n = ids.shape[0]
    seen = np.zeros(n, bool)
    todo = deque(e for e in entries if 0 <= e < n)
    for e in todo:
        seen[e] = True
    while todo:
        u = todo.popleft()
        for v in ids[u]:
            if v >= 0 and not seen[v]:
                seen[v] = True
                todo.append(v)
    return seen


def _random_graph(n, degree, seed, holes=0.3):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n, (n, degree)).astype(np.int32)
    ids[rng.random((n, degree)) < holes] = -1
    return ids


@pytest.mark.parametrize("vector_edges", [1 << 24, 0], ids=["numpy-levels", "compiled"])
@pytest.mark.parametrize("seed", range(4))
def test_reachable_matches_a_plain_breadth_first_search(monkeypatch, vector_edges, seed):
    monkeypatch.setattr(components, "_VECTOR_EDGES", vector_edges)
    ids = _random_graph(500, 2, seed, holes=0.45)  # sparse enough to leave vertices unreached
    entries = np.array([0, 7, 7, -3, 10_000])  # repeated and out-of-range entries are ignored
    got = components.reachable(ids, entries)
    want = _reference(ids, entries)
    assert want.sum() < 500  # the case has unreached vertices
    np.testing.assert_array_equal(got, want)


def test_a_chain_longer_than_the_numpy_levels_is_finished_by_the_compiled_pass():
    n = 5 * components._VECTOR_LEVELS + 3
    ids = np.full((n, 2), -1, np.int32)
    ids[:-1, 0] = np.arange(1, n)  # 0 -> 1 -> ... -> n-1
    ids[5, 1] = 2  # a back edge: already seen when met
    got = components.reachable(ids, [0])
    assert got.all()
    got = components.reachable(ids, [n - 10])
    np.testing.assert_array_equal(got, np.arange(n) >= n - 10)


def test_unreachable_count_counts_what_no_search_reaches():
    ids = np.array([[1, -1], [0, -1], [3, -1], [2, 0]], np.int32)  # {0,1} and {2,3} -> 0
    assert components.unreachable_count(ids, [0]) == 2
    assert components.unreachable_count(ids, [2]) == 0
