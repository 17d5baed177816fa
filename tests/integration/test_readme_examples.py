"""The README's Python examples run as written (in a scratch directory) and do what they say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).parents[2] / "README.md").read_text()
SECTION = README.split("## The library", 1)[1].split("\n## ", 1)[0]

pytestmark = pytest.mark.integration


def test_the_library_examples_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", SECTION, flags=re.S)
    assert len(blocks) == 2  # the first run, then accumulation, checkpoints and early stopping
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(blocks[0], "README.md (first example)", "exec"), scope)
    first = scope["result"]
    exec(compile(blocks[1], "README.md (checkpoint example)", "exec"), scope)
    second = scope["result"]
    assert first.val_loss_history[-1] < first.val_loss_history[0]  # type: ignore[attr-defined]
    assert second.checkpoint and Path(second.checkpoint).is_file()  # type: ignore[attr-defined]
    assert {e["step"] for e in second.evals} >= {second.steps}  # type: ignore[attr-defined]
