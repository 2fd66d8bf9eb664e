"""The Examples of knngraph.distributed run (an in-process Dask client of 2 thread workers)."""

import doctest

import pytest

pytest.importorskip("distributed")  # the dask extra

import knngraph.distributed._index as sharded


def test_doctests():
    result = doctest.testmod(sharded, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.attempted >= 5 and result.failed == 0
