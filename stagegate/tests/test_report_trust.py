"""A pass-cpu run tampered with after its stages: each change that could read as a PASS (a
record removed, records of another commit, a stage named after a report file, a refused input
over an old report) blocks or is refused, and names what it found."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stagegate.cli import main
from stagegate.errors import ConfigError, UsageError
from stagegate.judge.policy import load_policy, policy_from_mapping
from stagegate.model import RESERVED_STAGE_NAMES
from stagegate.record.runner import run_stage

from .builders import POLICY_FILE, copy_scenario, report_cli, reseal

RAW = Path("reports/raw")


def _verdict() -> dict:
    return json.loads(Path("reports/verdict.json").read_text(encoding="utf-8"))


def _status(stage: str) -> str:
    return next(s["status"] for s in _verdict()["stages"] if s["name"] == stage)


def _log_run(stage: str, start: str = "2026-01-01T00:00:00Z") -> None:
    """A line of the run log, as stagegate run writes it when the stage ends."""
    with (RAW / "stagegate-runs.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"stage": stage, "start": start, "record": f"{stage}.json"}) + "\n")


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pass-cpu scenario in ``tmp_path``, every stage in the run log; it passes as it is."""
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    for stage in ("static", "execution", "integration", "performance"):
        _log_run(stage)
    assert report_cli(tmp_path) == 0
    return tmp_path


def test_a_performance_record_removed_after_its_run_blocks_as_removed(run: Path) -> None:
    (RAW / "performance.json").unlink()
    assert report_cli(run) == 1
    assert _status("performance") == "MISSING"
    summary = Path("reports/summary.md").read_text(encoding="utf-8")
    assert "performance's record was removed" in summary
    assert "allowed to be skipped" not in summary


def test_a_performance_stage_that_never_ran_blocks_on_a_cpu_too(run: Path) -> None:
    (RAW / "performance.json").unlink()
    (RAW / "stagegate-runs.jsonl").unlink()
    assert report_cli(run) == 1 and _status("performance") == "MISSING"
    assert "did not run" in Path("reports/performance.md").read_text(encoding="utf-8")


def _set_field(stage: str, key: str, value: object) -> None:
    path = RAW / f"{stage}.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    record[key] = value
    path.write_text(json.dumps(record), encoding="utf-8")


def _set_commit(stage: str, commit: str | None) -> None:
    _set_field(stage, "commit", commit)


def test_records_of_two_commits_block_naming_both(run: Path) -> None:
    head = _verdict()["commit"]
    _set_commit("performance", "feedface" * 5)
    assert report_cli(run) == 1 and _status("performance") == "FAIL"
    (mismatch,) = [
        f for s in _verdict()["stages"] for f in s["findings"] if f["kind"] == "commit_mismatch"
    ]
    assert "feedface" in mismatch["title"] and head[:12] in mismatch["title"]
    assert _verdict()["commit"] == head  # the commit most records name


def test_a_record_naming_no_commit_beside_records_that_do_blocks(run: Path) -> None:
    _set_commit("static", None)
    assert report_cli(run) == 1 and _status("static") == "FAIL"
    assert "no commit" in Path("reports/static.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_stage_run_again_after_an_edit_blocks_naming_the_file(run: Path) -> None:
    """Records of one commit whose stages began or ended on other changes are of two trees:
    an edit between stages, or one a stage's own command made (a formatter)."""
    edited = {"src/lib.py": "1" * 64}
    for stage in ("static", "execution", "integration", "performance"):
        _set_field(stage, "changed_sha256", edited)
        _set_field(stage, "changed_sha256_end", edited)
    assert report_cli(run) == 0
    _set_field("performance", "changed_sha256", {"src/lib.py": "2" * 64})  # edited, run again
    assert report_cli(run) == 1 and _status("performance") == "FAIL"
    (found,) = [
        f for s in _verdict()["stages"] for f in s["findings"] if f["kind"] == "tree_mismatch"
    ]
    assert found["detail"] == "src/lib.py" and "began" in found["title"]
    _set_field("performance", "changed_sha256", edited)
    _set_field("static", "changed_sha256", {})  # its command wrote src/lib.py as it ran
    assert report_cli(run) == 1 and _status("static") == "FAIL"


def test_whichever_record_is_first_the_mismatch_blocks(run: Path) -> None:
    for stage in ("static", "execution", "integration"):
        _set_commit(stage, "1234567")  # the first records read, and most of them
    assert report_cli(run) == 1
    assert _status("performance") == "FAIL" and _verdict()["commit"] == "1234567"


@pytest.mark.parametrize("name", [*RESERVED_STAGE_NAMES, "raw_inputs"])
def test_a_stage_named_after_a_report_file_is_refused_by_run(tmp_path: Path, name: str) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(UsageError, match=name):
        run_stage(name, [sys.executable, "-c", f"open({str(marker)!r}, 'w')"], out_dir=tmp_path)
    assert not marker.exists() and list(tmp_path.iterdir()) == []
    assert main(["run", name, "--out-dir", str(tmp_path), "--", "true"]) == 2


@pytest.mark.parametrize("name", ["summary", "comment"])
def test_a_record_named_after_a_report_file_blocks_and_writes_no_such_stage(
    run: Path, name: str
) -> None:
    record = json.loads((RAW / "static.json").read_text(encoding="utf-8"))
    (RAW / f"{name}.json").write_text(json.dumps({**record, "stage": name}), encoding="utf-8")
    assert report_cli(run, "--github") == 1
    stages = {s["name"]: s for s in _verdict()["stages"]}
    assert name not in stages and stages["raw_inputs"]["status"] == "ERROR"
    (finding,) = stages["raw_inputs"]["findings"]
    assert finding["kind"] == "record_unusable" and f"{name}.json" in finding["detail"]
    assert "report file" in finding["detail"]


def test_a_stage_required_but_left_out_by_only_is_a_usage_error(run: Path) -> None:
    """--require static with --only performance would judge performance alone and PASS
    without static's record: the command line is refused instead."""
    (RAW / "static.json").unlink()
    assert report_cli(run, "--only", "performance", "--require", "static") == 2
    assert report_cli(run, "--only", "static", "--require", "static") == 1  # judged: MISSING


def test_a_policy_naming_a_report_file_as_a_stage_is_refused() -> None:
    for table in ({"required_tests": {"summary": ["t"]}}, {"stages": {"summary": {}}}):
        with pytest.raises(ConfigError, match="summary"):
            policy_from_mapping(table)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_refused_policy_leaves_no_earlier_verdict_behind(run: Path) -> None:
    assert _verdict()["decision"] == "PASS"
    raw_before = _tree(RAW)
    keep = Path("reports/baseline/keep.json")
    keep.parent.mkdir()
    keep.write_text("{}", encoding="utf-8")
    (RAW / "execution.json").write_text("{not json", encoding="utf-8")
    Path("pyproject.toml").write_text("[tool.stagegate]\nslow_test_s = -1\n")
    assert main(["report", "reports/raw", "--out", "reports", "--pyproject", "pyproject.toml"]) == 2
    left = sorted(p.name for p in Path("reports").iterdir())
    assert left == ["baseline", "raw"]  # no summary, comment, verdict or stage report
    assert keep.read_text(encoding="utf-8") == "{}"
    changed = {k for k, v in _tree(RAW).items() if raw_before.get(k) != v}
    assert changed <= {"execution.json"}  # only what the test broke


def test_a_stage_report_this_run_did_not_write_is_removed(run: Path) -> None:
    old = _verdict()
    old["stages"].append({**old["stages"][0], "name": "docs"})
    Path("reports/verdict.json").write_text(json.dumps(old), encoding="utf-8")
    Path("reports/docs.md").write_text("# docs: **PASS**\n", encoding="utf-8")
    Path("reports/notes.md").write_text("mine\n", encoding="utf-8")
    assert report_cli(run) == 0
    assert not Path("reports/docs.md").exists()
    assert Path("reports/notes.md").read_text(encoding="utf-8") == "mine\n"


def _base_raw(root: Path) -> Path:
    """The same run as the base branch's raw results."""
    base = root / "base-raw"
    shutil.copytree(RAW, base)
    return base


def _rewrite_junit(change: Callable[[str], str]) -> None:
    path = RAW / "junit-execution.xml"
    path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")
    reseal(RAW)  # as written by the stage


def test_a_test_deselected_since_the_base_is_named(run: Path) -> None:
    base = _base_raw(run)
    _rewrite_junit(
        lambda x: x.replace(
            '<testcase classname="test_ok" name="test_two" time="0.010" />', ""
        ).replace('tests="3"', 'tests="2"')
    )
    assert report_cli(run, "--base-raw", str(base)) == 0  # MEDIUM in this policy: named
    summary = Path("reports/summary.md").read_text(encoding="utf-8")
    assert "did not run here" in summary
    shown = Path("reports/execution.md").read_text(encoding="utf-8").replace("\\_", "_")
    assert "test_ok::test_two" in shown


def test_a_new_skip_padded_by_new_tests_is_named(run: Path) -> None:
    base = _base_raw(run)
    pads = "".join(
        f'<testcase classname="test_ok" name="test_pad{i}" time="0.010" />' for i in range(5)
    )
    _rewrite_junit(
        lambda x: (
            x.replace(
                '<testcase classname="test_ok" name="test_two" time="0.010" />',
                '<testcase classname="test_ok" name="test_two" time="0.010">'
                '<skipped message="off for now">x</skipped></testcase>' + pads,
            )
            .replace('tests="3"', 'tests="8"')
            .replace('skipped="1"', 'skipped="2"')
        )
    )
    # 33% skipped before, 25% now: test_two ran on the base, so its skip blocks all the same
    assert report_cli(run, "--base-raw", str(base)) == 1
    shown = Path("reports/execution.md").read_text(encoding="utf-8").replace("\\_", "_")
    assert "ran on the base branch skip here" in shown
    assert "test_ok::test_two (off for now)" in shown


@pytest.mark.parametrize(
    "path",
    ["conftest.py", "src/pkg/tests/conftest.py", "pytest.ini", "tox.ini", "setup.cfg",
     ".coveragerc", "tests/unit/pytest.ini"],
)  # fmt: skip
def test_files_that_can_deselect_or_skip_tests_are_gate_files(path: str) -> None:
    policy = load_policy(POLICY_FILE)
    assert policy.gate_files_in((path, "src/amptrain/loop.py")) == (path,)


def _coverage(path: Path, files: dict[str, tuple[int, int]]) -> None:
    """A coverage file of ``files``, each (covered, statements) lines, as coverage json
    writes it."""

    def summary(covered: int, statements: int) -> dict:
        share = 100.0 * covered / statements
        return {"covered_lines": covered, "num_statements": statements, "percent_covered": share}

    entries = {
        name: {"summary": summary(*counts), "missing_lines": list(range(1, 1 + n - c))}
        for name, counts in files.items()
        for c, n in [counts]
    }
    totals = summary(*map(sum, zip(*files.values(), strict=True)))
    path.write_text(json.dumps({"meta": {}, "totals": totals, "files": entries}), encoding="utf-8")


BASE_COVERAGE = {"src/amptrain/trainer.py": (42, 46), "src/amptrain/loop.py": (10, 50)}
NARROWED = {
    "omitted": {"src/amptrain/trainer.py": (42, 46)},
    "excluded": {"src/amptrain/trainer.py": (42, 46), "src/amptrain/loop.py": (18, 20)},
}


@pytest.mark.slow
@pytest.mark.parametrize("change", NARROWED.values(), ids=NARROWED)
def test_coverage_that_measures_less_of_a_file_the_change_leaves_blocks(
    run: Path, change: dict[str, tuple[int, int]]
) -> None:
    base = _base_raw(run)
    _coverage(base / "coverage.json", BASE_COVERAGE)
    _coverage(RAW / "coverage.json", change)
    reseal(RAW)
    reseal(base)
    listed = run / "changed.txt"
    listed.write_text("src/amptrain/trainer.py\n", encoding="utf-8")
    options = ("--base-raw", str(base), "--changed-files", str(listed))
    assert report_cli(run, *options) == 1
    (stage,) = (s for s in _verdict()["stages"] if s["name"] == "execution")
    found = [(f["kind"], f["severity"]) for f in stage["findings"] if "loop.py" in f["title"]]
    assert found == [("coverage_narrowed", "HIGH")]
    # the change touches the file (it removed or rewrote it), or what it touches is not known
    listed.write_text("src/amptrain/loop.py\n", encoding="utf-8")
    assert report_cli(run, *options) == 0
    assert report_cli(run, "--base-raw", str(base)) == 0
