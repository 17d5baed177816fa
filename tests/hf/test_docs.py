"""docs/huggingface.md's examples run as written: GPT-2 trains, is saved in its own format, and
gives its metrics, its best weights and its logs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from amptrain.best import load_best

from .conftest import TEXT, build_tokenizer, gpt2

DOC = Path(__file__).parents[2] / "docs" / "huggingface.md"


def test_the_gpt2_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block, saving, outputs = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(block.strip().splitlines()) < 20
    gpt2().save_pretrained(tmp_path / "gpt2-tiny")  # the folder the example loads
    build_tokenizer().save_pretrained(tmp_path / "gpt2-tiny")
    shutil.copy(TEXT, tmp_path / "alice.txt")
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(block, str(DOC), "exec"), scope)
    losses = scope["result"].val_loss_history  # type: ignore[attr-defined]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert (tmp_path / "gpt2-alice" / "model.safetensors").is_file()
    exec(compile(saving, str(DOC), "exec"), scope)  # goes on from the first example
    assert (tmp_path / "gpt2-alice" / "best" / "model.safetensors").is_file()
    exec(compile(outputs, str(DOC), "exec"), scope)
    evals = scope["result"].evals  # type: ignore[attr-defined]
    assert evals[0]["step"] == 0 and all(0 <= e["val/token_accuracy"] <= 1 for e in evals)
    run = tmp_path / "runs" / "alice"
    assert (run / "best" / "model.safetensors").is_file() and list((run / "tb").iterdir())
    assert "val/token_accuracy" in (run / "log.csv").read_text()
    best = load_best(run / "best", torch.device("cpu"))
    assert best["value"] == min(e["val/loss"] for e in evals)
    model = scope["model"]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in best["model"].items())
