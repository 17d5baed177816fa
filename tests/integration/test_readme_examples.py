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


# Files whose examples go on from the README's GPT-2 example: run after it, in its namespace.
README, HF_DOC = ROOT / "README.md", ROOT / "docs" / "huggingface.md"
RUN_WITH_A_MODEL = {"README.md", "docs/huggingface.md"}


def test_the_files_with_checks_have_examples() -> None:
    names = {str(p.relative_to(ROOT)) for p in DOCS if python_blocks(p.read_text())}
    assert set(CHECKS) <= names


@pytest.mark.parametrize(
    "doc",
    [
        p
        for p in DOCS
        if python_blocks(p.read_text()) and str(p.relative_to(ROOT)) not in RUN_WITH_A_MODEL
    ],
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


def test_the_gpt2_example_and_the_pages_that_go_on_from_it_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's GPT-2 example, then docs/huggingface.md's, which go on from it: GPT-2
    trains, is saved in its own format, and gives its metrics, its best weights and its logs.
    Without transformers this test skips, which the policy's required_tests turns into a
    BLOCK."""
    pytest.importorskip("transformers")
    (block,) = python_blocks(README.read_text())
    saving, outputs = python_blocks(HF_DOC.read_text())
    assert len(block.strip().splitlines()) < 20
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(block, str(README), "exec"), scope)
    assert scope["result"].precision == "bf16-mixed"  # type: ignore[attr-defined]
    losses = scope["result"].val_loss_history  # type: ignore[attr-defined]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert (tmp_path / "gpt2-sums" / "model.safetensors").is_file()
    exec(compile(saving, str(HF_DOC), "exec"), scope)  # goes on from the README's example
    assert (tmp_path / "gpt2-sums" / "best" / "model.safetensors").is_file()
    exec(compile(outputs, str(HF_DOC), "exec"), scope)
    evals = scope["result"].evals  # type: ignore[attr-defined]
    assert evals[0]["step"] == 0 and all(0 <= e["val/token_accuracy"] <= 1 for e in evals)
    run = tmp_path / "runs" / "sums"
    assert (run / "best" / "model.safetensors").is_file() and list((run / "tb").iterdir())
    assert "val/token_accuracy" in (run / "log.csv").read_text()
    best = load_best(run / "best", torch.device("cpu"))
    assert best["value"] == min(e["val/loss"] for e in evals)
    model = scope["model"]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in best["model"].items())
