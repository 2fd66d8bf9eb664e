"""knngraph.grnnd's docstrings: the Examples run and IndexParams documents its real defaults."""

import dataclasses
import doctest
import importlib
import re

from knngraph import grnnd


def test_doctests():
    mod = importlib.import_module("knngraph.grnnd._index")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_params_docstring_defaults_match_signature():
    doc = grnnd.IndexParams.__doc__
    for field in dataclasses.fields(grnnd.IndexParams):
        m = re.search(rf"^\s*{field.name}\s*:.*default=(.+?)\s*$", doc, re.MULTILINE)
        assert m, f"{field.name} is not documented with its default"
        assert m.group(1).strip() == repr(field.default), field.name
