"""The package's shape: every algorithm of the registry is an attribute of ``knngraph``, and the modules
import each other in layers: no import circle, no module importing the package above it.

The import graph is read from the source with ``ast`` (every ``import`` statement, those inside functions
too: a function-level import is a dependency all the same, only a later one)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import knngraph
from knngraph import registry

SRC = Path(knngraph.__file__).resolve().parents[1]
PACKAGE = SRC / "knngraph"

#: the library's users inside the package: the command line (with its ``--scheduler`` commands in
#: distributed/_cli.py), ``python -m knngraph``, the scikit-learn adapter and the demo's compile process
#: call the public API (``knngraph.knn``, ...) as any user does (the tests replace those names on the
#: package to check what the command line calls). Nothing in the library imports them; they may import
#: the package top.
FRONT_ENDS = ("knngraph.cli", "knngraph.distributed._cli", "knngraph.__main__", "knngraph.sklearn",
              "knngraph._firstrun")


def _is_front_end(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FRONT_ENDS)


def _modules() -> dict:
    """Dotted name -> (path, is a package) of every module of knngraph."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(name: str, path: Path, is_package: bool, modules: dict):
    """(imported knngraph module, line) of each import in the module ``name``: ``from X import y`` is an
    import of the module X.y when there is one, else of X (a name defined in X)."""
    here = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "knngraph" or alias.name.startswith("knngraph."):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != "knngraph" and not target.startswith("knngraph."):
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                yield (submodule if submodule in modules else target), node.lineno


def _import_graph() -> dict:
    """Module -> {imported module: first line}, over the modules of knngraph."""
    modules = _modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        edges = graph.setdefault(name, {})
        for target, line in _imports(name, path, is_package, modules):
            assert target in modules, f"{name}:{line} imports {target}, which is not a module of knngraph"
            edges.setdefault(target, line)
    return graph


def _cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (or a module importing itself)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_reads_imports_of_every_kind():
    """The graph sees what the checks below rely on: relative and absolute, module and function level,
    ``from package import module`` as the module."""
    graph = _import_graph()
    assert "knngraph.registry" in graph["knngraph"]                    # from . import registry
    assert "knngraph.cli.common" in graph["knngraph.distributed._cli"]  # from ..cli.common import ...
    assert "knngraph.distributed._cli" in graph["knngraph.cli._build"]  # inside cmd_build
    assert "knngraph.graph" in graph["knngraph.evaluate"]               # inside graph_recall
    assert "knngraph.io" in graph["knngraph.datasets"]                  # from knngraph import io
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_import_circle_between_modules():
    cycles = _cycles(_import_graph())
    assert not cycles, f"modules that import each other (directly or through others): {cycles}"


def test_no_module_imports_the_package_above_it():
    """A module of the library imports the modules it needs, never the package it belongs to (the
    package top ``knngraph`` or its own folder's ``__init__``): those import it, so that is a circle, at
    best one that only a function-level import keeps from failing. Front ends may use the package top."""
    upward = []
    for module, edges in _import_graph().items():
        for target, line in edges.items():
            if module.startswith(target + ".") and not (target == "knngraph" and _is_front_end(module)):
                upward.append(f"{module}:{line} imports {target}")
    assert not upward, upward


def test_the_library_never_imports_its_front_ends():
    graph = _import_graph()
    reached, todo = set(), [m for m in graph if not _is_front_end(m)]
    while todo:
        for target in graph[todo.pop()]:
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert not sorted(m for m in reached if _is_front_end(m))


def test_no_algorithm_imports_another_algorithm():
    """Algorithms sit on primitives, graphops and beam, never on each other: a module of one algorithm's
    folder imports no module of another's (one that needs another algorithm, e.g. the exact search of a
    filtered walk, takes it from the registry at run time)."""
    folders = {a.module for a in registry.ALGORITHMS.values()}
    crossing = []
    for module, edges in _import_graph().items():
        own = [f for f in folders if module == f or module.startswith(f + ".")]
        if not own:
            continue
        for target, line in edges.items():
            for other in folders - set(own):
                if target == other or target.startswith(other + "."):
                    crossing.append(f"{module}:{line} imports {target}")
    assert not crossing, crossing


def test_no_module_is_over_900_lines_unless_it_is_one_kernel_family():
    """A long module is split by topic; a ``_kernels.py`` (one family of CUDA kernels and their device
    helpers) may be longer."""
    long = {name: n for name, (path, _) in _modules().items()
            if (n := len(path.read_text().splitlines())) > 900 and not path.name.endswith("_kernels.py")}
    assert not long, long


def test_the_command_line_shares_its_helpers_by_public_names():
    """The commands and ``knngraph build/search --scheduler`` (distributed/_cli.py) take the shared helpers
    from knngraph.cli.common by public names; no command-line module is over 900 lines."""
    modules = _modules()
    private = []
    for name, (path, is_package) in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            here = name if is_package else name.rpartition(".")[0]
            base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target == "knngraph.cli" or target.startswith("knngraph.cli."):
                private += [f"{name}:{node.lineno} {alias.name}" for alias in node.names
                            if alias.name.startswith("_") and f"{target}.{alias.name}" not in modules]
    assert not private, private
    assert "knngraph.cli.common" in _import_graph()["knngraph.distributed._cli"]
    sizes = {name: len(path.read_text().splitlines()) for name, (path, _) in modules.items()
             if _is_front_end(name) or name == "knngraph.distributed._cli"}
    assert max(sizes.values()) <= 900, sizes


def _fresh(code: str) -> dict:
    """What ``code`` prints as JSON, run in a new interpreter (nothing imported yet)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=str(SRC.parent))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_algorithm_of_the_registry_is_an_attribute_of_the_package():
    """``knngraph.<folder>`` is the module of every algorithm the registry lists (read in a new
    interpreter, where no test has imported the folders before), and ``dir(knngraph)`` and ``__all__``
    name them."""
    found = _fresh("""
import functools, importlib, json, knngraph
from knngraph import registry
before = dir(knngraph)
out = {}
for a in registry.ALGORITHMS.values():
    attribute = functools.reduce(getattr, a.module.split(".")[1:], knngraph)
    out[a.name] = {"is_module": attribute is importlib.import_module(a.module) is a.load(),
                   "folder": a.module.split(".")[1], "in_dir": a.module.split(".")[1] in before,
                   "in_all": a.module.split(".")[1] in knngraph.__all__}
print(json.dumps(out))
""")
    assert sorted(found) == sorted(registry.ALGORITHMS)
    for name, seen in found.items():
        assert seen["is_module"] and seen["in_dir"] and seen["in_all"], (name, seen)
    assert {"bruteforce", "nndescent", "grnnd", "song", "ggnn"} <= {seen["folder"] for seen in found.values()}


def test_distributed_is_an_attribute_of_the_package_loaded_on_first_use():
    pytest.importorskip("distributed")
    found = _fresh("""
import json, sys, knngraph
light = not any(m == "dask" or m.startswith(("dask.", "distributed")) for m in sys.modules)
listed = "distributed" in dir(knngraph)
module = knngraph.distributed
print(json.dumps({"light": light, "listed": listed, "in_all": "distributed" in knngraph.__all__,
                  "is_module": module is sys.modules["knngraph.distributed"], "build": callable(module.build)}))
""")
    assert found == {"light": True, "listed": True, "in_all": False, "is_module": True, "build": True}


def test_unknown_attributes_still_raise():
    with pytest.raises(AttributeError, match="module 'knngraph' has no attribute 'exact'"):
        knngraph.exact  # noqa: B018 - an algorithm's name is not its folder's


def test_python_m_knngraph_cli_runs_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "knngraph.cli", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"knngraph {knngraph.__version__}", proc.stderr
