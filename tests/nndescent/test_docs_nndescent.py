"""The Examples in knngraph.nndescent's docstrings run."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["knngraph.nndescent._index"])
def test_doctests(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0 and result.failed == 0
