"""stagegate report end to end: gold files, well-formed markdown, escaping, robustness, GitHub."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from stagegate.cli import main
from stagegate.github import COMMENT_LIMIT, COMMENT_MARKER, STEP_SUMMARY_LIMIT
from stagegate.report import ReportOptions, build_report

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stagegate"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
GOLD = FIXTURES / "gold"
ACTUAL = FIXTURES / "actual"
SCENARIOS = {
    "pass-cpu": {},
    "block": {
        "baseline": FIXTURES / "baseline-h100.json",
        "require": ("performance",),
        "github": True,
    },
}


def scrub(text: str) -> str:
    """Remove what changes from run to run: the time of rendering and commit SHAs."""
    text = re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", "<TIME>", text)
    text = re.sub(r'"generated_at": "[^"]*"', '"generated_at": "<TIME>"', text)
    return re.sub(r"\b[0-9a-f]{40}\b|\b[0-9a-f]{12}\b", "<SHA>", text)


def _scenario(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(FIXTURES / name, tmp_path / "reports" / "raw")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_BASE_REF", raising=False)
    return tmp_path


def _build(name: str, **extra: object) -> tuple:
    opts = {
        "raw_dir": Path("reports/raw"),
        "out_dir": Path("reports"),
        "pyproject": PYPROJECT,
        **SCENARIOS[name],
        **extra,
    }
    return build_report(ReportOptions(**opts), {})


def table_shapes(markdown: str) -> list[tuple[int, list[int]]]:
    """For every table in the markdown: header cell count and each body row's cell count."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    shapes, header, rows, cells, in_head = [], 0, [], 0, False
    for t in tokens:
        if t.type == "table_open":
            header, rows = 0, []
        elif t.type == "thead_open":
            in_head = True
        elif t.type == "thead_close":
            in_head = False
        elif t.type == "tr_open":
            cells = 0
        elif t.type in ("th_open", "td_open"):
            cells += 1
        elif t.type == "tr_close":
            if in_head:
                header = cells
            else:
                rows.append(cells)
        elif t.type == "table_close":
            shapes.append((header, rows))
    return shapes


def mermaid_blocks(markdown: str) -> list[str]:
    tokens = MarkdownIt("commonmark").parse(markdown)
    return [t.content for t in tokens if t.type == "fence" and t.info.strip() == "mermaid"]


def check_markdown(markdown: str) -> None:
    """Tables have as many cells in every row as in the header; charts are valid xychart-beta."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    shapes = table_shapes(markdown)
    assert len(shapes) == sum(1 for line in lines if re.fullmatch(r"\|(---\|)+", line))
    for header, rows in shapes:
        assert header > 0 and all(r == header for r in rows), (header, rows)
    for block in mermaid_blocks(markdown):
        body = block.splitlines()
        assert body[0] == "xychart-beta"
        assert re.fullmatch(r'    title "[^"\[\]]*"', body[1])
        assert re.fullmatch(r'    x-axis ("[^"]*" \[\d+(, \d+)*\]|\[("[^"]*"(, )?)+\])', body[2]), (
            body[2]
        )
        assert re.fullmatch(r'    y-axis "[^"]*"( -?[\d.e+-]+ --> [\d.e+-]+)?', body[3]), body[3]
        if "bar [" in block:  # bars start at zero: their heights are proportional
            assert re.fullmatch(r'    y-axis "[^"]*" 0 --> [\d.e+]+', body[3]), body[3]
        for series in body[4:]:
            assert re.fullmatch(r"    (line|bar) \[-?[\d.e+-]+(, -?[\d.e+-]+)*\]", series), series


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_gold_files(scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, scenario, monkeypatch)
    _, files = _build(scenario)
    mismatched = []
    for name, text in sorted(files.items()):
        actual = scrub(text)
        gold = GOLD / scenario / name
        if os.environ.get("STAGEGATE_UPDATE_GOLD") == "1":
            gold.parent.mkdir(parents=True, exist_ok=True)
            gold.write_text(actual)
        if not gold.exists() or gold.read_text() != actual:
            saved = ACTUAL / scenario / name
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(actual)
            mismatched.append(f"{name} (actual saved to {saved})")
    assert not mismatched, "rendered output differs from gold: " + ", ".join(mismatched)
    assert {f.name for f in (GOLD / scenario).iterdir()} == set(files)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_rendered_markdown_is_well_formed(
    scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, scenario, monkeypatch)
    _, files = _build(scenario)
    for name, text in files.items():
        if name.endswith(".md"):
            check_markdown(text)
    assert mermaid_blocks(files["performance.md"])  # charts are there to check


def test_cpu_run_passes_and_says_gpu_was_not_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    verdict, files = _build("pass-cpu")
    assert verdict.decision == "PASS"
    assert "> [!WARNING]\n> GPU performance was NOT VERIFIED" in files["summary.md"]
    assert "**NOT VERIFIED**" in files["performance.md"]
    doc = json.loads(files["verdict.json"])
    assert doc["decision"] == "PASS" and doc["stages"][3]["status"] == "NOT VERIFIED"


def test_requiring_the_gpu_stage_on_a_cpu_run_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    verdict, _ = _build("pass-cpu", require=("performance",))
    assert verdict.decision == "BLOCK"
    assert "required stage performance is FAIL" in verdict.blocking_reasons


def test_block_report_names_the_raising_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "block", monkeypatch)
    verdict, files = _build("block")
    assert verdict.decision == "BLOCK"
    assert "src/trainlib/legacy.py:2" in files["integration.md"]
    assert "KeyError: 'train\\_data'" in files["integration.md"]
    assert files["comment.md"].startswith(COMMENT_MARKER)


def _cli(tmp_path: Path, *extra: str) -> int:
    return main(
        [
            "report",
            str(tmp_path / "reports" / "raw"),
            "--out",
            str(tmp_path / "reports"),
            "--pyproject",
            str(PYPROJECT),
            *extra,
        ]
    )


def test_cli_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    assert _cli(tmp_path) == 0
    assert _cli(tmp_path, "--require", "performance") == 1
    assert _cli(tmp_path, "--baseline", str(tmp_path / "absent.json")) == 2


def test_broken_record_exits_2_and_leaves_earlier_reports_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    assert _cli(tmp_path) == 0
    before = (tmp_path / "reports" / "summary.md").read_text()
    (tmp_path / "reports" / "raw" / "execution.json").write_text(
        '{"format_version": 1, "kind": "stagegate-rec'
    )
    assert _cli(tmp_path) == 2
    assert "execution.json is not valid JSON" in capsys.readouterr().err
    assert (tmp_path / "reports" / "summary.md").read_text() == before


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda raw: shutil.copy(raw / "execution.json", raw / "execution-copy.json"),
            "two records",
        ),
        (lambda raw: [p.unlink() for p in raw.glob("*.json")], "no stage records"),
        (
            lambda raw: (raw / "static.json").write_text(
                json.dumps({**json.loads((raw / "static.json").read_text()), "format_version": 9})
            ),
            "format_version 9",
        ),
        (lambda raw: shutil.rmtree(raw), "is not a directory"),
    ],
)
def test_unusable_input_exits_2_with_a_message(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    damage,
    message: str,
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    damage(tmp_path / "reports" / "raw")
    assert _cli(tmp_path) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("junit-execution.xml", "", "is empty"),
        ("junit-execution.xml", "<testsuites><oops", "well-formed"),
        ("coverage.json", "[1, 2", "not valid JSON"),
        ("benchmark.json", '{"kind": "other"}', "not an amptrain"),
    ],
)
def test_a_broken_stage_output_is_an_error_finding_not_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file: str, content: str, message: str
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    (tmp_path / "reports" / "raw" / file).write_text(content)
    verdict, files = _build("pass-cpu")
    assert verdict.decision == "BLOCK"
    owner = {
        "junit-execution.xml": "execution",
        "coverage.json": "execution",
        "benchmark.json": "performance",
    }[file]
    (stage,) = [s for s in verdict.stages if s.status.value == "ERROR"]
    assert stage.name == owner
    (unreadable,) = [f for f in stage.findings if f.title.startswith("unreadable output")]
    assert message in unreadable.title and file in unreadable.title
    # the summary (and so the PR comment) names the file and what is wrong with it
    assert file in files["summary.md"] and message in files["summary.md"]


def test_nan_and_infinity_in_benchmark_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "block", monkeypatch)
    path = tmp_path / "reports" / "raw" / "benchmark.json"
    text = path.read_text().replace('"accuracy_diff": 0.004', '"accuracy_diff": NaN')
    path.write_text(
        text.replace('"peak_memory_reduction_pct": 30.0', '"peak_memory_reduction_pct": Infinity')
    )
    verdict, files = _build("block")
    perf = next(s for s in verdict.stages if s.name == "performance")
    details = [f.detail for f in perf.findings]
    assert "accuracy_diff was not measured (target < 0.01)" in details
    assert "peak_memory_reduction_pct was not measured (target >= 35%)" in details
    check_markdown(files["performance.md"])


HOSTILE = [
    "test_pipe[a|b]",
    "test_html[<script>alert(1)</script>]",
    "test_mention[@octocat and @github/security]",
    "test_ticks[```]",
    "test_unicode[日本語 ✓ émoji 🚀]",
    "test_link[[click](javascript:alert(1))]",
]


def _hostile_junit(path: Path, names: list[str], failing: bool = True) -> None:
    from xml.sax.saxutils import quoteattr

    cases = "".join(
        f'<testcase classname="tests.test_x" name={quoteattr(n)} time="0.1">'
        + (
            f"<failure message={quoteattr(n + ' failed | <b>' + chr(10) + '@octocat')}>"
            f"tests/test_x.py:3: AssertionError</failure>"
            if failing
            else ""
        )
        + "</testcase>"
        for n in names
    )
    path.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>", encoding="utf-8")


def test_hostile_test_names_cannot_break_tables_inject_html_or_mention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    _hostile_junit(tmp_path / "reports" / "raw" / "junit-execution.xml", HOSTILE)
    _, files = _build("pass-cpu", github=True)
    for name, text in files.items():
        if not name.endswith(".md"):
            continue
        check_markdown(text)
        assert "<script>" not in text and "<b>" not in text
        assert not re.search(r"@(octocat|github)", text), name  # no live mention
        html = MarkdownIt("commonmark").enable("table").render(text)
        assert "<script>" not in html and 'href="javascript' not in html
    assert "日本語 ✓ émoji 🚀" in files["execution.md"]


def test_long_messages_are_cut_with_a_pointer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    _hostile_junit(tmp_path / "reports" / "raw" / "junit-execution.xml", ["test_" + "x" * 5000])
    _, files = _build("pass-cpu")
    assert "cut at" in files["execution.md"] and "junit-execution.xml" in files["execution.md"]
    assert max(len(line) for line in files["execution.md"].splitlines()) < 2000


def test_twenty_thousand_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The time this takes is printed by benchmarks/stagegate_scale.py, not asserted here.
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    names = [f"test_case_{i}" for i in range(20_000)]
    _hostile_junit(tmp_path / "reports" / "raw" / "junit-execution.xml", names, failing=False)
    raw = tmp_path / "reports" / "raw" / "junit-execution.xml"
    raw.write_text(
        raw.read_text().replace(
            'name="test_case_7" time="0.1">',
            'name="test_case_7" time="0.1"><failure message="boom">x</failure>',
        )
    )
    verdict, files = _build("pass-cpu")
    execution = next(s for s in verdict.stages if s.name == "execution")
    assert len(execution.data.suite.cases) == 20_000 and verdict.decision == "BLOCK"
    assert "19999 passed, 1 failed" in files["summary.md"]
    check_markdown(files["execution.md"])


def test_github_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _scenario(tmp_path, "block", monkeypatch)
    summary = tmp_path / "step_summary.md"
    summary.write_text("x" * (STEP_SUMMARY_LIMIT - 2000))  # an earlier step used most of it
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert _cli(tmp_path, "--github") == 1
    assert summary.stat().st_size <= STEP_SUMMARY_LIMIT
    assert "Summary cut to fit" in summary.read_text()
    comment = (tmp_path / "reports" / "comment.md").read_text()
    assert comment.startswith(COMMENT_MARKER) and len(comment) < COMMENT_LIMIT
    errors = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::error ")]
    assert all(re.match(r"::error file=[^,:]+(,line=\d+)?,title=[^:]+::", e) for e in errors)
    assert any(
        e.startswith("::error file=src/trainlib/legacy.py,line=2,title=integration%3A CRITICAL::")
        for e in errors
    )  # the raising line of the integration run
    assert any("%0A" in e for e in errors) and not any("\n" in e for e in errors)


def test_annotations_stop_at_ten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stagegate.github import annotations

    _scenario(tmp_path, "pass-cpu", monkeypatch)
    _hostile_junit(
        tmp_path / "reports" / "raw" / "junit-execution.xml", [f"test_{i}" for i in range(15)]
    )
    verdict, _ = _build("pass-cpu")
    lines = annotations(verdict)
    assert len(lines) == 10 and all("tests/test_x.py,line=3" in line for line in lines)


def test_a_huge_summary_still_fits_a_comment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stagegate.github import comment_body

    body = comment_body("| a |\n|---|\n" + "| row |\n" * 40000)
    assert len(body) < COMMENT_LIMIT and body.startswith(COMMENT_MARKER) and "cut" in body


def test_a_bad_policy_value_exits_2_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[tool.stagegate.thresholds]\nspeedup = { op = ">=", value = "fast" }\n')
    assert main(["report", "reports/raw", "--out", "reports", "--pyproject", str(bad)]) == 2
    assert "thresholds.speedup.value" in capsys.readouterr().err
    assert not (tmp_path / "reports" / "summary.md").exists()


def test_an_internal_error_exits_3_never_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug in a view")

    monkeypatch.setattr("stagegate.report.summary_view", broken)
    assert _cli(tmp_path) == 3
    assert "internal error" in capsys.readouterr().err


def test_a_missing_side_file_is_named_and_stacks_no_second_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    (tmp_path / "reports" / "raw" / "integration-metrics.json").unlink()
    verdict, files = _build("pass-cpu")
    (integration,) = [s for s in verdict.stages if s.name == "integration"]
    (missing,) = [f for f in integration.findings if f.kind == "side_file_missing"]
    assert missing.title == "integration-metrics.json was not written"
    assert "every test passed" in missing.detail and missing.severity.value == "LOW"
    assert integration.status.value == "PASS" and verdict.decision == "PASS"
    assert "unreadable" not in files["integration.md"]


def test_a_broken_collector_is_reported_against_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)

    def crash(path: Path) -> None:
        raise ValueError("invalid literal for int() with base 10: 'abc'")

    monkeypatch.setitem(
        __import__("stagegate.collector").collector._READERS, "coverage", ("coverage", crash)
    )
    verdict, files = _build("pass-cpu")
    (execution,) = [s for s in verdict.stages if s.name == "execution"]
    assert execution.status.value == "ERROR" and verdict.decision == "BLOCK"
    assert "coverage.json could not be read (ValueError" in files["summary.md"]


def test_flaky_tests_are_named_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    shutil.copy(
        Path(__file__).parent / "fixtures" / "junit" / "documented" / "surefire-flaky-only.xml",
        tmp_path / "reports" / "raw" / "junit-execution.xml",
    )
    verdict, files = _build("pass-cpu")
    assert verdict.decision == "PASS"
    assert "## Flaky Tests" in files["summary.md"]
    assert "execution: com.example.NetTest::timesOut (2 attempts)" in files["summary.md"]
    assert "1 passed, 1 flaky" in files["summary.md"]


def test_only_judges_the_named_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    for name in ("static", "execution", "integration"):
        (tmp_path / "reports" / "raw" / f"{name}.json").unlink()
    verdict, _ = _build("pass-cpu", only=("performance",))
    assert [s.name for s in verdict.stages] == ["performance"]
    assert verdict.decision == "PASS"  # the other stages' records are another job's to judge
    verdict, _ = _build("pass-cpu", only=("performance",), require=("performance",))
    assert verdict.decision == "BLOCK"  # a CPU run cannot stand in for a required GPU stage
    verdict, _ = _build("pass-cpu")
    assert verdict.decision == "BLOCK"  # without --only, the missing stages are MISSING


def test_on_github_stage_links_lead_to_the_run_not_to_a_relative_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scenario(tmp_path, "pass-cpu", monkeypatch)
    env = {
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "owner/amptrain",
        "GITHUB_RUN_ID": "12345",
    }
    opts = ReportOptions(
        raw_dir=Path("reports/raw"), out_dir=Path("reports"), pyproject=PYPROJECT, github=True
    )
    _, files = build_report(opts, env)
    run = "https://github.com/owner/amptrain/actions/runs/12345"
    for body in (files["summary.md"], files["comment.md"]):
        assert f"[static]({run})" in body and "(static.md)" not in body
    _, local = _build("pass-cpu")  # read beside the files: relative links
    assert "[static](static.md)" in local["summary.md"]
