"""The Examples in SONG's public docstrings run (CPU)."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["knngraph.song._index", "knngraph.song.hashing"])
def test_doctests(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0 and result.failed == 0
