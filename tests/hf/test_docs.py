"""The README's GPT-2 example and docs/huggingface.md's, which go on from it, run as written:
GPT-2 trains, is saved in its own format, and gives its metrics, its best weights and its logs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from amptrain.best import load_best

from .conftest import TEXT, build_tokenizer, gpt2

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOC = ROOT / "docs" / "huggingface.md"
BLOCK = r"```python\n(.*?)```"


def test_the_gpt2_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = re.findall(BLOCK, README.read_text(), flags=re.S)
    saving, outputs = re.findall(BLOCK, DOC.read_text(), flags=re.S)
    assert len(block.strip().splitlines()) < 20
    gpt2().save_pretrained(tmp_path / "gpt2-tiny")  # the folder the example loads
    build_tokenizer().save_pretrained(tmp_path / "gpt2-tiny")
    shutil.copy(TEXT, tmp_path / "alice.txt")
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(block, str(README), "exec"), scope)
    assert scope["result"].precision == "bf16-mixed"  # type: ignore[attr-defined]
    losses = scope["result"].val_loss_history  # type: ignore[attr-defined]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert (tmp_path / "gpt2-alice" / "model.safetensors").is_file()
    exec(compile(saving, str(DOC), "exec"), scope)  # goes on from the README's example
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
