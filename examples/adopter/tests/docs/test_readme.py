"""Every Python example in README.md runs and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).parents[2] / "README.md"
TEXT = README.read_text(encoding="utf-8")
# A ```python block, an optional line of prose, then the ```text block of what it prints.
EXAMPLE = re.compile(r"```python\n(.*?)```\n+(?:[^`\n]+\n+)?```text\n(.*?)```", re.S)
EXAMPLES = EXAMPLE.findall(TEXT)


def test_every_python_block_says_what_it_prints() -> None:
    assert EXAMPLES and len(EXAMPLES) == TEXT.count("```python")


@pytest.mark.parametrize(("code", "printed"), EXAMPLES, ids=lambda s: s.split("\n")[0][:40])
def test_the_example_prints_what_the_readme_says(code: str, printed: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    assert out.getvalue() == printed
