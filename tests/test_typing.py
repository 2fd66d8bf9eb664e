"""Type hints of the public API: every public function is fully annotated, and mypy (run in a subprocess with
the ``[tool.mypy]`` settings of pyproject.toml) accepts typed use of the API in ``tests/support/typed_use.py``
and rejects wrong use, with the types the signatures promise."""

import importlib
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the modules whose ``__all__`` is the public API (knngraph.distributed needs the dask extra)
PUBLIC_MODULES = ["knngraph", "knngraph.bruteforce", "knngraph.nndescent", "knngraph.grnnd", "knngraph.ggnn",
                  "knngraph.song", "knngraph.beam", "knngraph.graphops", "knngraph.io", "knngraph.evaluate",
                  "knngraph.metrics", "knngraph.datasets", "knngraph.registry", "knngraph.handoff", "knngraph.sklearn",
                  "knngraph.index", "knngraph.distributed"]


def _public_functions():
    """(name, function) of every public function and public method of a public class of PUBLIC_MODULES."""
    found, seen = [], set()
    for module_name in PUBLIC_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an extra that is not installed
            continue
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                members = [(name, obj)]
            elif inspect.isclass(obj) and obj.__module__.startswith("knngraph"):
                members = []
                for attr, value in vars(obj).items():
                    if isinstance(value, (classmethod, staticmethod)):
                        value = value.__func__
                    elif isinstance(value, property):
                        value = value.fget
                    if inspect.isfunction(value) and (not attr.startswith("_") or attr == "__init__"):
                        members.append((f"{name}.{attr}", value))
            else:
                continue
            for qualified, fn in members:
                fn = inspect.unwrap(fn)
                if (fn.__module__, fn.__qualname__) not in seen:
                    seen.add((fn.__module__, fn.__qualname__))
                    found.append((f"{module_name}.{qualified}", fn))
    return found


def test_every_public_function_is_fully_annotated():
    functions = _public_functions()
    assert len(functions) >= 120  # the whole API, not a module that failed to import
    missing = []
    for name, fn in functions:
        signature = inspect.signature(fn)
        bare = [p for p, v in signature.parameters.items()
                if p not in ("self", "cls") and v.annotation is inspect.Parameter.empty]
        if bare:
            missing.append(f"{name}: parameters {bare}")
        if signature.return_annotation is inspect.Signature.empty and fn.__name__ != "__init__":
            missing.append(f"{name}: return type")
    assert not missing, "\n".join(missing)


def test_the_typing_marker_is_shipped():
    assert (ROOT / "src" / "knngraph" / "py.typed").is_file()


def _mypy(cache: Path, *files: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
               "--no-color-output", "--no-error-summary", *map(str, files)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    pytest.importorskip("mypy")
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.mark.slow
def test_mypy_accepts_typed_use_of_the_public_api(mypy_cache):
    proc = _mypy(mypy_cache)  # the files of [tool.mypy]: tests/support/typed_use.py
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_rejects_wrong_use_of_the_public_api(mypy_cache, tmp_path):
    """The check has teeth: wrong argument types and wrong expectations of the results are errors."""
    wrong = tmp_path / "wrong_use.py"
    wrong.write_text(textwrap.dedent("""\
        import numpy as np
        from typing_extensions import assert_type

        import knngraph
        from knngraph import nndescent, song

        x = np.zeros((10, 4), np.float32)
        knngraph.knn(x, x, k="10")
        song.build(nndescent.IndexParams(), x)
        assert_type(song.build(song.IndexParams(), x, devices=[0, 1]), song.Index)
        knngraph.knn_graph(x, 4).to_csr(include_self="yes")
        knngraph.optimize_graph(x, x)
        d, i = knngraph.knn(x, x, 1)
        assert_type(knngraph.recall_at_k(i, i, 1), int)
    """))
    proc = _mypy(mypy_cache, wrong)
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    lines = sorted({int(line.split(":")[1]) for line in errors})
    assert proc.returncode == 1 and lines == [8, 9, 10, 11, 12, 14], proc.stdout + proc.stderr
    assert 'Argument "k" to "knn" has incompatible type "str"; expected "int"' in proc.stdout
    assert 'Expression is of type "MultiDeviceIndex", not "Index"' in proc.stdout
