"""Untrusted text made safe for markdown: one line, no markup, no mention, cut with a pointer."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from stagegate.view.text import (
    code,
    code_block,
    cut,
    inline,
    mermaid_label,
    number,
    without_progress,
)


def test_inline_text_cannot_split_a_cell_open_a_tag_link_or_mention() -> None:
    shown = inline("a|b <script> [x](javascript:y) @octocat\nnext \x1b[31mred")
    assert "\n" not in shown and "\\|" in shown and "<script>" not in shown
    assert "\\[x\\]" in shown and "@octocat" not in shown and "\x1b" not in shown


def test_long_text_is_cut_saying_where_the_rest_is() -> None:
    shown = cut("x" * 500, 100, "reports/raw/execution.json")
    assert shown.startswith("x" * 100) and "500" in shown and "execution.json" in shown
    assert cut("short", 100) == "short"


def test_a_code_block_cannot_be_closed_by_what_it_quotes() -> None:
    block = code_block("```\nescaped?\n````")
    fence = block.splitlines()[0].removesuffix("text")
    assert len(fence) > 4 and block.endswith(fence)
    assert code("a`b").count("``") == 2


def test_numbers_and_chart_labels() -> None:
    assert number(None) == number(math.nan) == number(math.inf) == "-"
    assert number(1234.5, 1, "%") == "1,234.5%"
    assert '"' not in mermaid_label('say "hi" [x]')[1:-1]


@pytest.mark.slow
def test_a_test_runners_progress_lines_are_left_out_of_a_tail(tmp_path: Path) -> None:
    """pytest's own output, as a stage's tail holds it: the progress lines go, counted; the
    lines a reader needs (the failure, the summary) stay."""
    for n in range(3):
        (tmp_path / f"test_{n}.py").write_text(
            "".join(f"def test_{i}():\n    assert {i} != 7\n" for i in range(30))
        )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:stagegate", "."],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    shown = without_progress(run.stdout)
    assert "%]" in run.stdout and "%]" not in shown
    assert shown.startswith("(3 progress lines left out)")
    assert "3 failed, 87 passed" in shown and "assert 7 != 7" in shown
    assert without_progress("1 passed in 0.01s\n") == "1 passed in 0.01s\n"
