"""docs/huggingface.md's examples run as written: GPT-2 trains, and is saved in its own format."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .conftest import TEXT, build_tokenizer, gpt2

DOC = Path(__file__).parents[2] / "docs" / "huggingface.md"


def test_the_gpt2_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block, saving = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
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
