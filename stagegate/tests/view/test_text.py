"""Untrusted text made safe for markdown: one line, no markup, no mention, cut with a pointer."""

from __future__ import annotations

import math

from stagegate.view.text import code, code_block, cut, inline, mermaid_label, number


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
