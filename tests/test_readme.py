"""The README's Python snippets run as written (in order, in one namespace), on smaller data."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_snippets():
    assert len(_python_blocks()) >= 4


@pytest.mark.slow
def test_readme_snippets_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in _python_blocks():
        code = block.replace("100_000", "3_000")  # the same calls on a smaller base
        exec(compile(code, str(README), "exec"), namespace)
    assert namespace["index"].shape == (4_000, 128)  # the last block extends a 3,000-row index by 1,000
