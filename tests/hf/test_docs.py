"""docs/huggingface.md's GPT-2 example runs as written and trains."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .conftest import TEXT, build_tokenizer, gpt2

DOC = Path(__file__).parents[2] / "docs" / "huggingface.md"


def test_the_gpt2_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
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
