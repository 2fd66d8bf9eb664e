"""The README runs as written: its Python snippets (in order, in one namespace, on smaller data), its
``knngraph`` command lines (parsed by the real parser) and the repository files it names."""

import re
import shlex
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def _python_blocks():
    return _blocks("python")


def test_readme_has_snippets():
    assert len(_python_blocks()) >= 5


@pytest.mark.slow
def test_readme_snippets_run(tmp_path, monkeypatch):
    pytest.importorskip("umap")
    pytest.importorskip("scanpy")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with warnings.catch_warnings():
        # what the third-party tools of the hand-off example say about themselves
        warnings.filterwarnings("ignore", message=r"precomputed_knn\[2\] \(knn_search_index\) is not an NNDescent")
        warnings.filterwarnings("ignore", category=FutureWarning)
        for block in _python_blocks():
            code = block.replace("100_000", "3_000")  # the same calls on a smaller base, fewer epochs
            code = code.replace("umap.UMAP(", "umap.UMAP(n_epochs=50, ").replace("TSNE(", "TSNE(max_iter=250, ")
            exec(compile(code, str(README), "exec"), namespace)
    assert namespace["embedding"].shape == (1_000, 2) and namespace["tsne"].shape == (1_000, 2)
    assert namespace["adata"].obsp["distances"].shape == (1_000, 1_000)
    assert namespace["index"].shape == (4_000, 128)  # the last block extends a 3,000-row index by 1,000


def _command_lines():
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("knngraph ", ".venv/bin/knngraph ")):
                yield line


def test_readme_command_lines_parse():
    """Every ``knngraph ...`` line of the README is accepted by the real argument parser (options,
    choices, subcommands): the README names no option the command line lacks."""
    from knngraph.cli import build_parser

    lines = list(_command_lines())
    assert len(lines) >= 15 and any(" warmup" in line for line in lines)
    parser = build_parser()
    for line in lines:
        argv = shlex.split(line)[1:]
        parser.parse_args(argv)  # raises (CommandError) on anything it does not know
    with pytest.raises(Exception, match="unrecognized arguments: --device"):
        parser.parse_args(["info", "--device", "cpu"])  # what the README no longer claims


def test_readme_names_only_files_that_exist():
    text = README.read_text()
    named = set(re.findall(r"`((?:benchmarks|scripts|tests|src|annbench)/[\w./-]*\w)`", text))
    named |= set(re.findall(r"\]\(((?:benchmarks|scripts|tests|src|annbench)/[\w./-]*\w)\)", text))
    named |= {n for n in re.findall(r"`([A-Z]+\.md|LICENSE)`", text)}
    assert len(named) >= 10
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, missing
    assert "DESIGN.md" not in text  # lives outside the repository
