"""The sorted lists and heaps of primitives.lists (the symmetric min-max heap and the max-heap of SONG's
search, CPU-compiled) against simple Python models, under random operation sequences."""

import numpy as np
import pytest

from knngraph.primitives import lists


@pytest.mark.parametrize("seed", range(4))
def test_smmh_matches_sorted_list(seed):
    rng = np.random.default_rng(seed)
    cap = 37
    off = 5
    hk = np.full(off + cap + 3, np.nan, np.float32)
    hi = np.full(off + cap + 3, -7, np.int32)
    n = 0
    model = []
    for step in range(3000):
        op = rng.integers(0, 4)
        if op <= 1 and n < cap:
            key = np.float32(rng.integers(0, 20))  # many ties: order is (key, id)
            idx = int(rng.integers(0, 1000))
            n = lists.smmh_push(hk, hi, off, n, key, idx)
            model.append((float(key), idx))
        elif op == 2 and n > 0:
            got = (float(hk[off]), int(hi[off]))
            n = lists.smmh_pop_min(hk, hi, off, n)
            model.sort()
            assert got == model.pop(0)
        elif op == 3 and n > 0:
            slot = lists.smmh_max_slot(off, n)
            got = (float(hk[slot]), int(hi[slot]))
            n = lists.smmh_pop_max(hk, hi, off, n)
            model.sort()
            assert got == model.pop()
        assert n == len(model)
        if n:
            model.sort()
            assert (float(hk[off]), int(hi[off])) == model[0]
            slot = lists.smmh_max_slot(off, n)
            assert (float(hk[slot]), int(hi[slot])) == model[-1]
    assert np.isnan(hk[:off]).all() and np.isnan(hk[off + cap:]).all()  # nothing written outside


def test_maxheap_push_replace_sort(rng):
    cap = 25
    tk = np.zeros(cap + 2, np.float32)
    ti = np.zeros(cap + 2, np.int32)
    off = 2
    m = 0
    model = []
    for _ in range(500):
        key = np.float32(rng.integers(0, 30))
        idx = int(rng.integers(0, 100))
        if m < cap:
            m = lists.maxheap_push(tk, ti, off, m, key, idx)
            model.append((float(key), idx))
        elif (float(key), idx) < (float(tk[off]), int(ti[off])):
            model.sort()
            model.pop()
            model.append((float(key), idx))
            lists.maxheap_replace_top(tk, ti, off, m, key, idx)
        model.sort()
        assert (float(tk[off]), int(ti[off])) == model[-1]
    lists.maxheap_sort(tk, ti, off, m)
    assert list(zip(tk[off:off + m].tolist(), ti[off:off + m].tolist())) == sorted(model)
