"""Docstrings: every public function's Examples run, and params docstrings state the real defaults."""

import dataclasses
import doctest
import importlib
import re

import pytest

import knngraph

MODULES = ["knngraph._api", "knngraph.evaluate", "knngraph.bruteforce._index", "knngraph.metrics", "knngraph.io",
           "knngraph.graph", "knngraph.handoff", "knngraph.sklearn", "knngraph.ggnn._index"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0


def _params_classes():
    found = []
    for mod_name in ["knngraph.bruteforce", "knngraph.nndescent", "knngraph.song", "knngraph.ggnn"]:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        for attr in dir(mod):
            obj = getattr(mod, attr)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and attr.endswith("Params"):
                found.append(obj)
    return found


@pytest.mark.parametrize("cls", _params_classes(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_params_docstring_defaults_match_signature(cls):
    """Catches a docstring that says one default while the code uses another."""
    doc = cls.__doc__ or ""
    for field in dataclasses.fields(cls):
        if field.name.startswith("_"):
            continue
        m = re.search(rf"^\s*{field.name}\s*:.*default=(.+?)\s*$", doc, re.MULTILINE)
        assert m, f"{cls.__name__}.{field.name} is not documented with its default"
        documented = m.group(1).strip()
        default = field.default
        assert documented == repr(default), f"{cls.__name__}.{field.name}: doc says {documented}, code has {default!r}"


def test_public_names_exist():
    for name in knngraph.__all__:
        assert hasattr(knngraph, name), name
