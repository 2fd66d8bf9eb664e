"""The visited sets of primitives.visited (open-addressing hash table, Bloom filter; CPU-compiled) against
Python sets, under random operation sequences."""

import numpy as np
import pytest

from knngraph.primitives import visited
from knngraph.song._layout import bloom_shape, hash_capacity


@pytest.mark.parametrize("seed", range(3))
def test_hash_table_matches_set(seed):
    rng = np.random.default_rng(seed)
    slots, shift = hash_capacity(16)
    assert slots == 64 and shift == 26
    off = 3
    ht = np.full(off + slots + 2, -1, np.int32)
    ht[:off] = 12345
    model = set()
    for _ in range(4000):
        v = int(rng.integers(0, 80))  # small id range: long probe runs, wrap-around, many deletes
        op = rng.integers(0, 3)
        if op == 0 and len(model) < slots // 2:
            visited.hash_insert(ht, off, slots - 1, shift, v)
            model.add(v)
        elif op == 1:
            visited.hash_delete(ht, off, slots - 1, shift, v)
            model.discard(v)
        for w in range(80):
            assert visited.hash_contains(ht, off, slots - 1, shift, w) == (w in model)
    assert (ht[:off] == 12345).all()


def test_bloom_has_no_false_negatives_and_few_false_positives(rng):
    words, nhash = bloom_shape(64)
    bw = np.zeros(words, np.uint32)
    ins = rng.choice(10**6, size=13 * 64, replace=False).astype(np.int64)
    for v in ins:
        visited.bloom_insert(bw, 0, words * 32 - 1, nhash, v)
    assert all(visited.bloom_contains(bw, 0, words * 32 - 1, nhash, v) for v in ins)
    others = np.setdiff1d(np.arange(10**6, 10**6 + 5000), ins)
    fp = np.mean([visited.bloom_contains(bw, 0, words * 32 - 1, nhash, v) for v in others])
    assert fp < 0.03
