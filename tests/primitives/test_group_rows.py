"""Rows grouped by label (``knngraph.primitives.group.rows_by_label``) against a plain sort of the keys
``group * n + row``."""

import numpy as np
import pytest

from knngraph.primitives.group import rows_by_label


def _by_sort(labels, n_groups):
    n = labels.shape[0]
    key = labels.astype(np.int64) * n + np.arange(n, dtype=np.int64)[:, None]
    key = np.sort(key[(labels >= 0) & (labels < n_groups)])
    group = key // n
    bounds = np.searchsorted(group, np.arange(n_groups + 1))
    return [(key - group * n)[bounds[g]:bounds[g + 1]] for g in range(n_groups)]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_groups_match_a_sort_of_the_keys(dtype):
    rng = np.random.default_rng(3)
    labels = rng.integers(-1, 40, (5000, 3)).astype(dtype)
    labels[17] = 5  # a label twice: the row is listed twice
    labels[18] = 99  # outside the groups: skipped
    got = rows_by_label(labels, 40)
    want = _by_sort(labels, 40)
    assert len(got) == 40
    for g, w in zip(got, want):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, w)
    assert np.count_nonzero(got[5] == 17) == 3


def test_empty_groups_and_bad_shape():
    got = rows_by_label(np.full((4, 2), -1, np.int32), 3)
    assert [len(g) for g in got] == [0, 0, 0]
    with pytest.raises(ValueError, match="labels must be 2-D"):
        rows_by_label(np.zeros(4, np.int32), 3)
