"""Packaging and first-run behaviour: licence, typing marker, optional dependencies with clear messages,
logging instead of prints, the compile notice, progress bars whose totals are true."""

import ast
import io as _io
import os
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_licence_and_typing_marker_are_packaged():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert (ROOT / "src" / "knngraph" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["knngraph"]


def test_h5py_is_an_extra_only():
    deps = PYPROJECT["project"]["dependencies"]
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert not any(d.startswith("h5py") for d in deps)
    assert any(d.startswith("h5py") for d in extras["hdf5"])


def _child(code):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_hdf5_without_h5py_names_the_extra(tmp_path):
    path = tmp_path / "f.hdf5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    proc = _child(f"import sys; sys.modules['h5py'] = None\nfrom knngraph import io\n"
                  f"try:\n    io.read({str(path)!r})\nexcept ImportError as e:\n    print(e)\n")
    assert "HDF5 files (ann-benchmarks) need h5py: pip install 'knngraph[hdf5]'" in proc.stdout, proc.stderr
    # everything else works without it
    proc = _child("import sys; sys.modules['h5py'] = None\nimport numpy as np, knngraph\n"
                  "print(knngraph.knn_graph(np.eye(4, dtype=np.float32), 1, device='cpu').n)")
    assert proc.stdout.strip() == "4", proc.stderr


def test_library_modules_log_instead_of_printing():
    """print() is for the command line's output; the library reports through the logging module."""
    offenders = []
    for path in sorted((ROOT / "src" / "knngraph").rglob("*.py")):
        if path.relative_to(ROOT / "src" / "knngraph").parts[0] == "cli" or path.name.startswith("_tmp"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_cuda_device_helpers_are_inlined_by_nvvm_not_by_numba_ir():
    """CUDA device helpers are declared with ``primitives.compile.device_function`` (NVVM inlining):
    ``cuda.jit(device=True, inline=...)`` is numba's IR-level inlining, which made each fast-searcher
    kernel take 20-50 s to compile instead of about 1 s."""
    offenders = []
    for path in sorted((ROOT / "src" / "knngraph").rglob("*.py")):
        rel = str(path.relative_to(ROOT / "src" / "knngraph"))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and getattr(dec.func, "attr", None) == "jit"
                        and getattr(dec.func.value, "id", None) == "cuda"
                        and any(kw.arg == "inline" for kw in dec.keywords)):
                    offenders.append(f"{rel}:{node.lineno} {node.name}")
    assert not offenders, offenders


def _probe(name):
    """A numba function that counts as knngraph's (its module is knngraph._probe), new on each call."""
    import numba

    namespace = {"__name__": "knngraph._probe"}
    exec(f"def {name}(a):\n    return a * 2 + 1", namespace)
    return numba.njit(namespace[name])


def test_compiling_is_announced_once_and_timed(caplog, monkeypatch):
    from knngraph import _compiling
    from knngraph.primitives import compile as comp

    monkeypatch.setattr(comp._WATCH, "announced", False)
    monkeypatch.setattr(_compiling, "_SAID", set())
    before = _compiling.compile_seconds()
    with caplog.at_level("INFO", logger="knngraph"):
        assert _probe("first")(3) == 7
        assert _probe("second")(3) == 7
    notes = [r.getMessage() for r in caplog.records if "compiling" in r.getMessage()]
    assert notes == ["compiling CPU kernels (first use on this machine; numba keeps them on disk)"]
    assert _compiling.compile_seconds() > before


def test_a_plain_script_sees_the_compile_notice_once_on_stderr(tmp_path):
    """A script that configures no logging still hears, once, why its first call takes long."""
    import subprocess
    import sys

    script = ("import numba\n"
              "ns = {'__name__': 'knngraph._probe'}\n"
              "exec('def f(a):\\n    return a + 1\\ndef g(a):\\n    return a + 2', ns)\n"
              "import knngraph.primitives.compile\n"
              "assert numba.njit(ns['f'])(1) == 2 and numba.njit(ns['g'])(1) == 3\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if "compiling" in ln]
    assert lines == ["knngraph: compiling CPU kernels (first use on this machine; numba keeps them on disk)"]


def test_cli_timings_leave_compilation_out():
    import time

    from knngraph.cli.common import Timer

    t0 = time.perf_counter()
    with Timer() as t:
        _probe("timed")(1)
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    assert t.compiled > 0 and 0.045 < t.seconds and abs(t.seconds - (wall - t.compiled)) < 0.01
    t.compiled = 1.25  # how a first run's compilation is reported
    assert t.note == " (+ 1.2 s compiling kernels, first run only)"
    with Timer() as warm:
        time.sleep(0.01)
    assert warm.compiled == 0 and warm.note == ""


class _Terminal(_io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_total_is_true_when_work_stops_early(monkeypatch):
    pytest.importorskip("tqdm")
    from knngraph._progress import progress

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    with progress(10, "nn-descent", min_steps=1, upper_bound=True) as bar:
        for _ in range(4):  # converged after 4 of at most 10 iterations
            bar.update(1)
        assert "of at most 10" in term.getvalue() and "<" not in term.getvalue()  # no ETA
    assert bar.total == 4 and "4 of at most 4" in term.getvalue()
    with progress(8, "exact", min_steps=1) as plain:
        plain.update(8)
    assert plain.total == 8
