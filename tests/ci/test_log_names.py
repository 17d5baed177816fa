"""No name from an artifact, the API or an event reaches a job's log as more than one line: a
line that starts with `::` is a workflow command (`::add-mask::`, `::stop-commands::`, a forged
`::error::`), so every such name is printed escaped (github_api.shown)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .ci_tools import REPO, tool

github_api = tool("github_api")
raw_layout = tool("raw_layout")
trusted_runs = tool("trusted_runs")

EVIL = "x\n::add-mask::y\r\n::error file=a::z\x1b[31m"


def test_a_name_is_shown_on_one_line_with_its_control_characters_escaped() -> None:
    text = github_api.shown(EVIL)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text
    assert text == "x\\n::add-mask::y\\r\\n::error file=a::z\\x1b[31m"
    assert github_api.shown("naïve café ✓") == "naïve café ✓"  # printable text stays as it is


def _no_command_lines(text: str) -> None:
    assert not [line for line in text.splitlines() if line.startswith("::")], text


@pytest.mark.parametrize("kind", ["link", "record"])
def test_a_file_named_like_a_workflow_command_is_refused_on_one_line(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    art = tmp_path / "artifact"
    art.mkdir()
    if kind == "link":
        os.symlink("/etc/passwd", art / EVIL)
    else:  # a record for a stage this judge does not take, in a file of that name
        (art / EVIL).write_text(json.dumps({"kind": "stagegate-record", "stage": "other"}))
    with pytest.raises(raw_layout.LayoutError) as refused:
        raw_layout.lay_out(art, tmp_path / "raw", ["static"])
    assert "\n" not in str(refused.value)
    assert raw_layout.main([str(art), str(tmp_path / "raw2"), "--stage", "static"]) == 2
    _no_command_lines(capsys.readouterr().err)


def test_a_branch_named_like_a_workflow_command_is_refused_on_one_line() -> None:
    origin = trusted_runs.Origin(REPO, "main", "gpu.yml", frozenset({"push"}))
    run = {"id": 1, "path": ".github/workflows/gpu.yml", "head_branch": EVIL, "event": "push"}
    why = trusted_runs.refusal(run, origin)
    assert why and "\n" not in why and "\r" not in why
