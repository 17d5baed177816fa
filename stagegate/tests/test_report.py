"""stagegate report end to end: gold files, well-formed markdown, escaping, robustness."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from stagegate.collect import stage as collect_stage_module
from stagegate.model import Decision, StageData, StageStatus
from stagegate.report import ReportOptions, _ran_elsewhere, build_report
from stagegate.view.github import COMMENT_MARKER

from .builders import (
    FIXTURES,
    POLICY_FILE,
    SCENARIOS,
    build_scenario,
    case,
    copy_scenario,
    junit_file,
    record,
    reseal,
    suite,
)

GOLD = FIXTURES / "gold"
ACTUAL = FIXTURES / "actual"


def scrub(text: str) -> str:
    """Remove what changes from run to run: the time of rendering and commit SHAs."""
    text = re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", "<TIME>", text)
    text = re.sub(r'"generated_at": "[^"]*"', '"generated_at": "<TIME>"', text)
    return re.sub(r"\b[0-9a-f]{40}\b|\b[0-9a-f]{12}\b", "<SHA>", text)


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
    copy_scenario(tmp_path, scenario, monkeypatch)
    _, files = build_scenario(scenario)
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


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_rendered_markdown_is_well_formed(
    scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, scenario, monkeypatch)
    _, files = build_scenario(scenario)
    for name, text in files.items():
        if name.endswith(".md"):
            check_markdown(text)
    assert mermaid_blocks(files["performance.md"])  # charts are there to check


def test_cpu_run_passes_and_says_gpu_was_not_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    verdict, files = build_scenario("pass-cpu")
    assert verdict.decision is Decision.PASS
    assert "> [!WARNING]\n> GPU performance was NOT VERIFIED" in files["summary.md"]
    assert "**NOT VERIFIED**" in files["performance.md"]
    doc = json.loads(files["verdict.json"])
    assert doc["decision"] == "PASS" and doc["stages"][3]["status"] == "NOT VERIFIED"


def test_requiring_the_gpu_stage_on_a_cpu_run_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    verdict, _ = build_scenario("pass-cpu", require=("performance",))
    assert verdict.decision is Decision.BLOCK
    assert "required stage performance is FAIL" in verdict.blocking_reasons


def test_block_report_names_the_raising_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "block", monkeypatch)
    verdict, files = build_scenario("block")
    assert verdict.decision is Decision.BLOCK
    assert "src/trainlib/legacy.py:2" in files["integration.md"]
    assert "KeyError: 'train\\_data'" in files["integration.md"]
    assert files["comment.md"].startswith(COMMENT_MARKER)


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
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    (tmp_path / "reports" / "raw" / file).write_text(content)
    reseal(tmp_path / "reports" / "raw")  # the stage itself wrote it so
    verdict, files = build_scenario("pass-cpu")
    assert verdict.decision is Decision.BLOCK
    owner = {
        "junit-execution.xml": "execution",
        "coverage.json": "execution",
        "benchmark.json": "performance",
    }[file]
    (stage,) = [s for s in verdict.stages if s.status is StageStatus.ERROR]
    assert stage.name == owner
    (unreadable,) = [f for f in stage.findings if f.title.startswith("unreadable output")]
    assert message in unreadable.title and file in unreadable.title
    # the summary (and so the PR comment) names the file and what is wrong with it
    assert file in files["summary.md"] and message in files["summary.md"]


def test_nan_and_infinity_in_benchmark_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "block", monkeypatch)
    path = tmp_path / "reports" / "raw" / "benchmark.json"
    doc = json.loads(path.read_text())
    arm = doc["precisions"]["bf16-mixed"]
    arm["val_accuracy"], arm["memory"]["peak_allocated_mb"] = math.nan, math.inf
    path.write_text(json.dumps(doc))  # NaN and Infinity, as Python writes them: not JSON
    reseal(path.parent)
    verdict, files = build_scenario("block")
    perf = next(s for s in verdict.stages if s.name == "performance")
    (refused,) = [f for f in perf.blocking if f.kind == "input_malformed"]
    assert "bf16-mixed" in refused.title and "benchmark.json" in refused.title
    check_markdown(files["performance.md"])
    arm["val_accuracy"], arm["memory"]["peak_allocated_mb"] = None, None
    path.write_text(json.dumps(doc))  # null: what a producer writes for "not measured"
    reseal(path.parent)
    verdict, files = build_scenario("block")
    perf = next(s for s in verdict.stages if s.name == "performance")
    missing = [f.title for f in perf.blocking if f.kind == "evidence_missing"]
    assert any("bf16-mixed.val_accuracy" in t for t in missing)
    assert any("bf16-mixed.memory.peak_allocated_mb" in t for t in missing)


HOSTILE = [
    "test_pipe[a|b]",
    "test_html[<script>alert(1)</script>]",
    "test_mention[@octocat and @github/security]",
    "test_ticks[```]",
    "test_unicode[日本語 ✓ émoji 🚀]",
    "test_link[[click](javascript:alert(1))]",
]


@pytest.mark.slow
def test_hostile_test_names_cannot_break_tables_inject_html_or_mention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    junit_file(tmp_path / "reports" / "raw" / "junit-execution.xml", HOSTILE)
    _, files = build_scenario("pass-cpu", github=True)
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
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    junit_file(tmp_path / "reports" / "raw" / "junit-execution.xml", ["test_" + "x" * 5000])
    _, files = build_scenario("pass-cpu")
    assert "cut at" in files["execution.md"] and "junit-execution.xml" in files["execution.md"]
    assert max(len(line) for line in files["execution.md"].splitlines()) < 2000


@pytest.mark.slow
def test_twenty_thousand_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The time this takes is printed by benchmarks/stagegate_scale.py, not asserted here.
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    names = [f"test_case_{i}" for i in range(20_000)]
    junit_file(tmp_path / "reports" / "raw" / "junit-execution.xml", names, failing=False)
    raw = tmp_path / "reports" / "raw" / "junit-execution.xml"
    raw.write_text(
        raw.read_text().replace(
            'name="test_case_7" time="0.1">',
            'name="test_case_7" time="0.1"><failure message="boom">x</failure>',
        )
    )
    reseal(raw.parent)
    verdict, files = build_scenario("pass-cpu")
    execution = next(s for s in verdict.stages if s.name == "execution")
    assert len(execution.data.suite.cases) == 20_000 and verdict.decision is Decision.BLOCK
    assert "19999 passed, 1 failed" in files["summary.md"]
    check_markdown(files["execution.md"])


def test_a_side_file_a_required_stage_did_not_produce_blocks_naming_its_producer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    (tmp_path / "reports" / "raw" / "integration-metrics.json").unlink()
    reseal(tmp_path / "reports" / "raw")  # the stage ended without writing it
    verdict, files = build_scenario("pass-cpu")
    (integration,) = [s for s in verdict.stages if s.name == "integration"]
    (missing,) = [f for f in integration.findings if f.kind == "output_missing"]
    assert missing.title == "integration-metrics.json was not produced"
    assert "--metrics" in missing.detail and "pytest tests/integration" in missing.detail
    assert integration.status is StageStatus.FAIL and verdict.decision is Decision.BLOCK
    assert "integration-metrics.json was not produced" in files["summary.md"]


def test_a_file_removed_between_the_stage_and_the_report_is_said_to_be_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    (tmp_path / "reports" / "raw" / "junit-integration.xml").unlink()  # the record hashed it
    verdict, files = build_scenario("pass-cpu")
    (integration,) = [s for s in verdict.stages if s.name == "integration"]
    (gone,) = [f for f in integration.findings if f.kind == "output_missing"]
    assert "junit-integration.xml is gone" in gone.title and "not produced" not in gone.title
    assert integration.status is StageStatus.ERROR and verdict.decision is Decision.BLOCK
    assert "integration did not run" not in files["summary.md"]


def test_a_broken_collector_is_reported_against_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)

    def crash(path: Path) -> None:
        raise ValueError("invalid literal for int() with base 10: 'abc'")

    monkeypatch.setitem(collect_stage_module.READERS, "coverage", ("coverage", crash))
    verdict, files = build_scenario("pass-cpu")
    (execution,) = [s for s in verdict.stages if s.name == "execution"]
    assert execution.status.value == "ERROR" and verdict.decision is Decision.BLOCK
    assert "coverage.json could not be read (ValueError" in files["summary.md"]


def test_flaky_tests_are_named_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    shutil.copy(
        FIXTURES.parent / "junit" / "documented" / "surefire-flaky-only.xml",
        tmp_path / "reports" / "raw" / "junit-execution.xml",
    )
    reseal(tmp_path / "reports" / "raw")
    verdict, files = build_scenario("pass-cpu")
    assert verdict.decision is Decision.PASS
    assert "## Flaky Tests" in files["summary.md"]
    assert "execution: com.example.NetTest::timesOut (2 attempts)" in files["summary.md"]
    assert "1 passed, 1 flaky" in files["summary.md"]


def test_only_judges_the_named_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    for name in ("static", "execution", "integration"):
        (tmp_path / "reports" / "raw" / f"{name}.json").unlink()
    verdict, _ = build_scenario("pass-cpu", only=("performance",))
    assert [s.name for s in verdict.stages] == ["performance"]
    assert verdict.decision is Decision.PASS  # the other stages' records are another job's to judge
    verdict, _ = build_scenario("pass-cpu", only=("performance",), require=("performance",))
    assert verdict.decision is Decision.BLOCK  # a CPU run cannot stand in for a required GPU stage
    verdict, _ = build_scenario("pass-cpu")
    assert verdict.decision is Decision.BLOCK  # without --only, the missing stages are MISSING


def test_on_github_stage_links_lead_to_the_run_not_to_a_relative_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    env = {
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "owner/amptrain",
        "GITHUB_RUN_ID": "12345",
    }
    opts = ReportOptions(
        raw_dir=Path("reports/raw"), out_dir=Path("reports"), pyproject=POLICY_FILE, github=True
    )
    _, files = build_report(opts, env)
    run = "https://github.com/owner/amptrain/actions/runs/12345"
    for body in (files["summary.md"], files["comment.md"]):
        assert f"[static]({run})" in body and "(static.md)" not in body
    _, local = build_scenario("pass-cpu")  # read beside the files: relative links
    assert "[static](static.md)" in local["summary.md"]


def test_each_stage_is_given_what_the_others_ran_here_and_on_the_base() -> None:
    """The tests the other stages ran (a test moved between stages is neither gone nor run
    nowhere) and ran on the base branch (one moved and skipped is newly skipped), and the
    stages that left a record."""
    quick = StageData(record("quick"), suite=suite(case("a")), base_suite=suite(case("b")))
    slow = StageData(record("slow"), suite=suite(case("b", "skipped")))
    gpu = StageData(record("gpu"), suite=suite(case("c")), base_suite=suite(case("d")))
    stages = {"quick": quick, "slow": slow, "gpu": gpu, "gone": StageData(None)}
    given = _ran_elsewhere(stages, subsets=frozenset({"gpu"}))
    assert given["slow"].ran_elsewhere == {"tests/t.py::a", "tests/t.py::c"}
    assert given["slow"].executed_elsewhere == {"tests/t.py::a"}  # gpu re-runs: excuses none
    assert given["slow"].base_ran_elsewhere == {"tests/t.py::b"}
    assert given["quick"].ran_elsewhere == {"tests/t.py::b", "tests/t.py::c"}  # skips judged there
    assert given["quick"].executed_elsewhere == frozenset()
    assert given["quick"].base_ran_elsewhere == frozenset()
    assert given["gone"].recorded == {"quick", "slow", "gpu"}
