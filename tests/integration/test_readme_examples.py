"""Every Python example in the README and in docs/ runs as written (each file's examples in order,
in one namespace, in a scratch directory) and does what the text around it says."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

pytestmark = pytest.mark.integration


def python_blocks(text: str) -> list[str]:
    """The fenced ```python blocks of a markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def _readme(scope: dict[str, Any]) -> None:
    result = scope["result"]
    assert result.precision == "bf16-mixed"
    assert result.val_loss_history[-1] < result.val_loss_history[0]
    assert 16 in {e["step"] for e in result.evals}  # eval_every=16, mid-epoch (32 steps each)


def _guide(scope: dict[str, Any]) -> None:
    result = scope["result"]
    assert result.checkpoint and Path(result.checkpoint).is_file()
    assert Path(result.checkpoint).resolve().parent == Path("ckpt").resolve()
    assert len(list(Path("ckpt").glob("step-*.pt"))) == 3  # every 4 of 16 steps; 3 kept
    assert {e["step"] for e in result.evals} >= {result.steps}


# What the text around a file's examples says they do, beyond running.
CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "README.md": _readme,
    "docs/guide.md": _guide,
}


def test_the_readme_and_the_guide_have_examples() -> None:
    names = {str(p.relative_to(ROOT)) for p in DOCS if python_blocks(p.read_text())}
    assert set(CHECKS) <= names


@pytest.mark.parametrize(
    "doc",
    [p for p in DOCS if python_blocks(p.read_text())],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_examples_run_in_order(
    doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = str(doc.relative_to(ROOT))
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {"__name__": "__example__"}
    for number, block in enumerate(python_blocks(doc.read_text()), 1):
        exec(compile(block, f"{name} (example {number})", "exec"), scope)
    if name in CHECKS:
        CHECKS[name](scope)
