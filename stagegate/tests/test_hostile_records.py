"""Hostile records and stage files: each attack on the report, planted for real, ends in BLOCK
or a clear exit-2 error, never a PASS, a traceback, a forged piece of markdown or a file written
outside ``--out``."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from stagegate.cli import main
from stagegate.record.runner import run_stage
from stagegate.view.github import COMMENT_MARKER
from stagegate.view.parts import Context
from stagegate.view.render import render_stage, render_summary
from stagegate.view.stage import stage_view
from stagegate.view.summary import summary_view

from .builders import (
    CPU_MACHINE,
    build_scenario,
    copy_scenario,
    junit_file,
    report_cli,
    reseal,
)
from .test_report import check_markdown

MARK = "FORGED"  # every planted piece of markup carries it
EXIT_PASS, EXIT_BLOCK, EXIT_BROKEN = 0, 1, 2


def _edit_record(raw: Path, record_of: str, **fields: Any) -> None:
    path = raw / f"{record_of}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _inline_tokens(markdown: str) -> list[Any]:
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    return [child for t in tokens if t.type == "inline" for child in t.children or []]


def assert_nothing_forged(markdown: str, name: str) -> None:
    """No heading, link, image, HTML, table row, mention or bare URL came from the input."""
    check_markdown(markdown)  # every table row has the header's cells
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert sum(t.tag == "h1" for t in tokens if t.type == "heading_open") == 1, name
    assert not [h for h in headings if MARK in h], name
    html = [t.content for t in tokens if t.type == "html_block"]
    assert html in ([], [COMMENT_MARKER + "\n"]), (name, html)
    inline = _inline_tokens(markdown)
    assert not [t for t in inline if t.type in ("image", "html_inline")], name
    hrefs = [t.attrs.get("href", "") for t in inline if t.type == "link_open"]
    assert not [h for h in hrefs if "evil" in str(h)], name
    text = " ".join(t.content for t in inline if t.type == "text")
    assert not re.search(r"@[\w-]", text), (name, "a live mention")
    assert not re.search(r"https?://|www\.", text), (name, "a bare link")


def _reports(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (root / "reports").glob("*.md")}


def _stage(root: Path, name: str) -> dict[str, Any]:
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    return next(s for s in verdict["stages"] if s["name"] == name)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the report runs: the passing scenario's raw directory is ``reports/raw`` here."""
    return copy_scenario(tmp_path, "pass-cpu", monkeypatch)


@pytest.fixture
def scenario(root: Path) -> Path:
    """The passing scenario's raw directory."""
    return root / "reports" / "raw"


# --- stage names -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "stage",
    [
        "static\n\n# Verification Summary: **PASS** FORGED",
        "static](https://evil.example) FORGED",
        "../../../escaped",
        "@org/team",
        "x" * 200,
    ],
)
def test_a_stage_name_that_is_no_identifier_blocks_its_file_and_forges_nothing(
    root: Path, scenario: Path, stage: str
) -> None:
    _edit_record(scenario, "static", stage=stage)
    assert report_cli(root) == EXIT_BLOCK
    static = _stage(root, "static")
    assert static["status"] == "ERROR" and [f["kind"] for f in static["findings"]] == [
        "record_unusable"
    ]
    assert "static.json" in static["findings"][0]["detail"]
    assert "short identifier" in static["findings"][0]["detail"]
    assert not list(root.rglob("escaped*"))
    for name, text in _reports(root).items():
        assert_nothing_forged(text, name)


# --- strings that reach markdown ---------------------------------------------------------------

HOSTILE_TEXT = [
    "# Verification Summary: **PASS** FORGED",
    "x | FORGED | row |\n| --- | --- |",
    "[FORGED link](https://evil.example/x) ![FORGED](https://evil.example/i.png)",
    "<img src=x onerror=alert(1)> FORGED <!-- comment -->",
    "cc @org/team and @octocat FORGED",
    "see https://evil.example and www.evil.example FORGED",
    "- FORGED bullet",
    "1. FORGED item",
]


@pytest.mark.slow
def test_a_commit_that_is_no_commit_id_blocks_its_stage_and_forges_nothing(
    root: Path, scenario: Path
) -> None:
    _edit_record(scenario, "execution", commit="@org/team please merge\n# FORGED")
    assert report_cli(root, "--github") == EXIT_BLOCK
    execution = _stage(root, "execution")
    assert execution["status"] == "ERROR"
    assert "not a commit id" in execution["findings"][0]["detail"]
    for name, text in _reports(root).items():
        assert_nothing_forged(text, name)


@pytest.mark.slow
def test_a_commit_shown_cannot_mention_forge_a_heading_or_break_its_code_span(
    root: Path, scenario: Path
) -> None:
    verdict, _ = build_scenario("pass-cpu")
    hostile = "`@org/team\n\n# FORGED heading ``` <b>x</b> https://evil.example"
    ctx = Context("2026-01-01", hostile, "origin/main", (hostile,), "reports/raw")
    shown = {"summary.md": render_summary(summary_view(verdict, ctx))}
    for stage in verdict.stages:
        shown[f"{stage.name}.md"] = render_stage(stage_view(stage, ctx))
    for name, text in shown.items():
        assert_nothing_forged(text, name)


@pytest.mark.slow
def test_environment_values_and_tails_are_shown_inert(root: Path, scenario: Path) -> None:
    hostile = "\n".join(HOSTILE_TEXT)
    _edit_record(
        scenario,
        "execution",
        environment={**CPU_MACHINE, "github_ref": hostile, "runner_name": "@org/team"},
        stdout_tail=hostile + "\n```\n# FORGED after a fence",
        stderr_tail=hostile,
    )
    assert report_cli(root, "--github") == EXIT_PASS
    for name, text in _reports(root).items():
        assert_nothing_forged(text, name)


@pytest.mark.slow
def test_test_names_and_messages_cannot_forge_markdown(root: Path, scenario: Path) -> None:
    junit_file(scenario / "junit-execution.xml", HOSTILE_TEXT)  # each one fails
    assert report_cli(root, "--github") == EXIT_BLOCK
    reports = _reports(root)
    for name, text in reports.items():
        assert_nothing_forged(text, name)
    assert reports["execution.md"].count(MARK) >= len(HOSTILE_TEXT)  # shown, not dropped


@pytest.mark.slow
def test_a_file_name_cannot_forge_markdown(root: Path, scenario: Path) -> None:
    named = "reports/raw/[FORGED](https://evil.example) @org|team # x.json"
    _edit_record(
        scenario,
        "integration",
        files={"junit": "reports/raw/junit-integration.xml", "metrics": named},
    )
    reseal(scenario)
    assert report_cli(root, "--github") == EXIT_BLOCK  # declared, not produced
    for name, text in _reports(root).items():
        assert_nothing_forged(text, name)


# --- files out of RAW, changed after the stage, and out of --out -------------------------------


@pytest.mark.parametrize(
    "named",
    ["reports/raw/../elsewhere.xml", "reports/elsewhere.xml", "ABSOLUTE", "reports/raw/link.xml"],
)
def test_a_record_naming_a_file_outside_raw_blocks_naming_it(
    root: Path, scenario: Path, named: str
) -> None:
    passing = root / "reports" / "elsewhere.xml"
    junit_file(passing, ["test_ok"], failing=False)
    (scenario / "link.xml").symlink_to(passing)
    named = str(passing) if named == "ABSOLUTE" else named
    _edit_record(scenario, "execution", files={"junit": named})
    reseal(scenario)  # its hash even matches: the place alone is refused
    assert report_cli(root) == EXIT_BLOCK
    summary = (root / "reports" / "summary.md").read_text()
    assert "outside the raw directory" in summary
    assert Path(named).name.replace("_", "\\_") in summary


def test_a_file_changed_after_the_stage_blocks_naming_it(root: Path, scenario: Path) -> None:
    junit_file(scenario / "junit-execution.xml", ["test_broken"])  # the stage saw a failure
    junit_file(scenario / "other.xml", ["test_broken"], failing=False)
    (scenario / "junit-execution.xml").write_bytes((scenario / "other.xml").read_bytes())
    assert report_cli(root) == EXIT_BLOCK
    summary = (root / "reports" / "summary.md").read_text()
    assert "junit-execution.xml refused" in summary and "changed after the stage" in summary


def test_reports_are_written_under_out_only_never_through_a_link(
    root: Path, scenario: Path
) -> None:
    outside = root / "outside.md"
    outside.write_text("keep me")
    (root / "reports" / "summary.md").symlink_to(outside)
    assert report_cli(root) == EXIT_PASS
    assert outside.read_text() == "keep me"
    assert not (root / "reports" / "summary.md").is_symlink()


# --- a detached process of the stage -----------------------------------------------------------

REWRITER = """
import os, subprocess, sys, time
out = sys.argv[1]
child = '''
import os, sys, time
out, parent = sys.argv[1], int(sys.argv[2])
while True:
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        break
    time.sleep(0.01)
passing = '<testsuites><testsuite><testcase classname="t" name="test_ok"/></testsuite></testsuites>'
while True:
    open(os.path.join(out, "junit-execution.xml"), "w").write(passing)
    time.sleep(0.01)
'''
subprocess.Popen([sys.executable, "-c", child, out, str(os.getpid())], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
failing = ('<testsuites><testsuite><testcase classname="t" name="test_broken">'
           '<failure message="boom">t.py:1</failure></testcase></testsuite></testsuites>')
open(os.path.join(out, "junit-execution.xml"), "w").write(failing)
sys.exit(1)
"""


@pytest.mark.slow
def test_a_detached_child_cannot_turn_a_failed_stage_into_a_pass(
    root: Path, scenario: Path
) -> None:
    junit = scenario / "junit-execution.xml"
    Path(f"{junit}.counts.json").unlink()  # the scenario's pytest witness: this stage has none
    _, code = run_stage(
        "execution",
        [sys.executable, "-c", REWRITER, str(scenario)],
        out_dir=scenario,
        files={"junit": str(junit)},
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert code == 1
    assert report_cli(root) == EXIT_BLOCK
    summary = (root / "reports" / "summary.md").read_text()
    assert "test\\_broken" in summary  # the failure the stage saw, read from the intact file


def test_stagegate_run_refuses_hostile_names_and_paths_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["run", "../x", "--out-dir", str(tmp_path), "--", "true"],
        ["run", "x\n# FORGED", "--out-dir", str(tmp_path), "--", "true"],
        ["run", "x", "--out-dir", str(tmp_path), "--junit", "/etc/passwd", "--", "true"],
    ):
        assert main(argv) == EXIT_BROKEN
    assert "Traceback" not in capsys.readouterr().err and list(tmp_path.iterdir()) == []


# --- a test's own name, through a real pytest run ----------------------------------------------

PHISH_ID = "[a](b.md)[All checks passed - open the full report]x[c](d.md)](/attacker/phish)"
EVIL_ID = "[x](//evil.host) <//evil.host> [y]: //evil.host"


def _run_pytest(cwd: Path, files: dict[str, str], junit: Path, *args: str) -> None:
    """Write ``files`` under ``cwd``, run pytest there for real, its JUnit at ``junit`` (the
    records beside it resealed: the file reads as written by the stage)."""
    for name, text in files.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(text)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    subprocess.run(
        [*command, f"--junitxml={junit}", *args],
        cwd=cwd,
        capture_output=True,
        check=False,
        timeout=120,
    )
    reseal(junit.parent)


def _pytest_junit(tmp_path: Path, ids: list[str], junit: Path) -> None:
    """A real pytest run of one failing test parametrized with ``ids``, its JUnit at ``junit``."""
    test = (
        "import pytest\n\n"
        f"@pytest.mark.parametrize('x', [pytest.param(i, id=i) for i in {ids!r}])\n"
        "def test_named(x):\n"
        "    assert x == 'expected'\n"
    )
    _run_pytest(tmp_path / "project", {"test_named.py": test}, junit)


def _hrefs(markdown: str) -> list[str]:
    return [str(t.attrs["href"]) for t in _inline_tokens(markdown) if t.type == "link_open"]


@pytest.mark.slow
def test_a_test_id_cannot_turn_into_a_link_in_the_comment(
    root: Path, scenario: Path, tmp_path: Path
) -> None:
    _pytest_junit(tmp_path, [PHISH_ID, EVIL_ID], scenario / "junit-execution.xml")
    assert "/attacker/phish" in (scenario / "junit-execution.xml").read_text()  # pytest kept it
    assert report_cli(root, "--github") == EXIT_BLOCK
    reports = _reports(root)
    comment, summary = reports["comment.md"], reports["summary.md"]
    assert "attacker/phish" in comment  # the test is named, as text
    assert _hrefs(comment) == []  # no run address given: no link at all
    assert "execution.md" not in comment
    assert "[execution](execution.md)" in summary  # beside the reports, the links stay
    for name, text in reports.items():
        hrefs = _hrefs(text)
        assert all(re.fullmatch(r"[a-z]+\.md", h) for h in hrefs), (name, hrefs)
        assert_nothing_forged(text, name)


@pytest.mark.slow
def test_with_the_run_address_a_comment_links_to_the_run_only(
    root: Path, scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pytest_junit(tmp_path, [PHISH_ID, EVIL_ID], scenario / "junit-execution.xml")
    run = "https://github.com/owner/repo/actions/runs/7"
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "owner/repo")
    monkeypatch.setenv("GITHUB_RUN_ID", "7")
    assert report_cli(root, "--github") == EXIT_BLOCK
    for name, text in _reports(root).items():
        assert set(_hrefs(text)) <= {run}, name


@pytest.mark.slow
def test_a_frame_that_climbs_out_of_the_checkout_is_not_annotated(
    root: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir()
    (outside / "shadow.py").write_text("def check():\n    assert False, 'in shadow'\n")
    test = (
        f"import sys\nsys.path.insert(0, {str(outside)!r})\nimport shadow\n\n"
        "def test_climbs():\n    shadow.check()\n"
    )
    junit = scenario / "junit-execution.xml"
    _run_pytest(root, {"proj/test_climbs.py": test}, junit, "proj")
    assert f"../{outside.name}/shadow.py:2" in junit.read_text()  # pytest wrote it relative
    assert report_cli(root, "--github") == EXIT_BLOCK
    errors = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::error")]
    assert not [e for e in errors if "file=.." in e], errors
    assert any(e.startswith("::error file=proj/test_climbs.py,line=6,") for e in errors), errors


# --- a record that is a link -------------------------------------------------------------------


@pytest.mark.parametrize(("link", "stage"), [("execution", "execution"), ("extra", "raw_inputs")])
def test_a_record_that_is_a_link_is_never_read_through(
    root: Path, scenario: Path, link: str, stage: str
) -> None:
    outside = root / "outside.json"  # a record that reads as a passing run, outside raw
    (scenario / "execution.json").rename(outside)
    (scenario / f"{link}.json").symlink_to(outside)
    assert report_cli(root) == EXIT_BLOCK
    (finding,) = _stage(root, stage)["findings"]
    assert finding["kind"] == "record_unusable"
    assert f"{link}.json" in finding["detail"] and "link" in finding["detail"]
