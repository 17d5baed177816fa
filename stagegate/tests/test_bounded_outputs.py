"""What a stage's files say reaches the reports bounded and inert: invisible direction and width
characters are shown by their code points, every text in verdict.json is cut to a bound, and a
JUnit or JSON file beyond a reader's bounds is refused by name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.collect.jsonfile import load_json
from stagegate.errors import InputError
from stagegate.view.render import TEXT_BOUND
from stagegate.view.text import code_block, inline

from .builders import copy_scenario, junit_file, report_cli, reseal

RLO, PDF, ZWSP, BOM = "\u202e", "\u202c", "\u200b", "\ufeff"


@pytest.mark.parametrize("char", [RLO, PDF, ZWSP, BOM, "\u2066", "\u200f", "\u061c"])
def test_an_invisible_character_is_shown_by_its_code_point(char: str) -> None:
    for shown in (inline(f"test_a{char}b"), code_block(f"trace{char}here")):
        assert char not in shown and f"U+{ord(char):04X}" in shown


def test_a_cut_cannot_leave_an_override_open() -> None:
    shown = inline("x" * 290 + RLO + "evil" + PDF + "y" * 100, limit=295)
    assert RLO not in shown and PDF not in shown


def test_a_test_name_with_an_override_reaches_no_report_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    raw = root / "reports" / "raw"
    junit_file(raw / "junit-execution.xml", [f"test_{RLO}gnp.exe", f"test_{ZWSP}ok"])
    reseal(raw)
    assert report_cli(root) == 1
    for report in (root / "reports").glob("*.md"):
        text = report.read_text()
        assert RLO not in text and ZWSP not in text, report.name
    assert "U+202E" in (root / "reports" / "execution.md").read_text()


def test_every_text_in_verdict_json_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    raw = root / "reports" / "raw"
    huge = "E" * 3_000_000
    xml = (
        '<testsuite name="s" tests="1"><testcase classname="m" name="t">'
        f'<failure message="{huge}">{huge}</failure></testcase></testsuite>'
    )
    (raw / "junit-execution.xml").write_text(xml)
    reseal(raw)
    assert report_cli(root) == 1
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    texts = [
        *verdict["blocking_reasons"],
        *verdict["required_fixes"],
        *(f[k] or "" for s in verdict["stages"] for f in s["findings"] for k in f if k != "kind"),
    ]
    assert max(len(str(t)) for t in texts) <= TEXT_BOUND + 100  # the cut says where it cut
    assert (root / "reports" / "verdict.json").stat().st_size < 200_000


def test_junit_nested_deeper_than_any_producer_writes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text("<testsuites>" + "<x>" * 100 + "</x>" * 100 + "</testsuites>")
    with pytest.raises(InputError, match="deeper than 64 levels") as caught:
        read_junit(path)
    assert str(path) in str(caught.value)


def test_a_json_file_over_its_readers_bound_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "coverage.json"
    path.write_text('{"totals": {}, "pad": "' + "x" * 2048 + '"}')
    with pytest.raises(InputError, match="over the") as caught:
        load_json(path, "coverage file", max_bytes=1024)
    assert "coverage.json" in str(caught.value)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # a reader would wait for ever on it
    with pytest.raises(InputError, match="not a regular file"):
        load_json(fifo, "benchmark file")
