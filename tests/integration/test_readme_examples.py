"""Every Python example in the README and in docs/ runs as written (each file's examples in order,
in one namespace, in a scratch directory) and does what the text around it says."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from amptrain.best import load_best

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

pytestmark = pytest.mark.integration


def python_blocks(text: str) -> list[str]:
    """The fenced ```python blocks of a markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def _guide(scope: dict[str, Any]) -> None:
    result = scope["result"]
    assert result.checkpoint and Path(result.checkpoint).is_file()
    assert Path(result.checkpoint).resolve().parent == Path("ckpt").resolve()
    assert len(list(Path("ckpt").glob("step-*.pt"))) == 3  # every 4 of 16 steps; 3 kept
    assert {e["step"] for e in result.evals} >= {result.steps}
    best = load_best(Path("ckpt-best") / "best", torch.device("cpu"))  # the best weights...
    assert best["value"] == min(e["val/loss"] for e in scope["best_run"].evals)
    weights = scope["small"].state_dict()  # ...are the model's at the end
    assert all(torch.equal(v, weights[k]) for k, v in best["model"].items())


# What the text around a file's examples says they do, beyond running.
CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "docs/guide.md": _guide,
}


# Files whose examples load what only their own test can build (a model folder, a tokenizer):
# that test runs them, here they are left out.
OWN_TESTS = {
    "README.md": ROOT / "tests" / "hf" / "test_docs.py",
    "docs/huggingface.md": ROOT / "tests" / "hf" / "test_docs.py",
}


def test_examples_left_to_their_own_test_are_run_there() -> None:
    for name, test in OWN_TESTS.items():
        assert python_blocks((ROOT / name).read_text()), name
        assert Path(name).name in test.read_text(), f"{test} does not run {name}"


def test_the_files_with_checks_have_examples() -> None:
    names = {str(p.relative_to(ROOT)) for p in DOCS if python_blocks(p.read_text())}
    assert set(CHECKS) <= names


@pytest.mark.parametrize(
    "doc",
    [p for p in DOCS if python_blocks(p.read_text()) and str(p.relative_to(ROOT)) not in OWN_TESTS],
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
