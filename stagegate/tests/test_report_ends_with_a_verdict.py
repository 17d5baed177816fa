"""Inputs a hostile review planted in the raw folder, each for real: text no encoder takes, a
file name that is not UTF-8, a linter field of the wrong type, garbage where the record's
machine observation belongs, a previous verdict that is a FIFO or endless, and JUnit totals
that claim more than the file holds. Each ends in a verdict (exit 0 or 1), and each wrong
figure or file is a blocking finding of its own kind."""

from __future__ import annotations

import io
import json
import os
import re
import resource
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import stagegate
from stagegate.collect import read_junit
from stagegate.io import write_atomic
from stagegate.record.runner import run_stage
from stagegate.view.text import clean

from .builders import POLICY_FILE, copy_scenario, report_cli, reseal

EXIT_PASS, EXIT_BLOCK = 0, 1
SRC = Path(stagegate.__path__[0]).resolve().parent  # the folder this stagegate is imported from


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the report runs: the passing scenario's raw directory is ``reports/raw`` here."""
    return copy_scenario(tmp_path, "pass-cpu", monkeypatch)


def _raw(root: Path) -> Path:
    return root / "reports" / "raw"


def _edit(path: Path, **fields: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _findings(root: Path, stage: str) -> list[dict[str, Any]]:
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    return next(s for s in verdict["stages"] if s["name"] == stage)["findings"]


def _kinds(root: Path, stage: str) -> dict[str, str]:
    """Each kind of the stage's findings, with the severity of its last one."""
    return {f["kind"]: f["severity"] for f in _findings(root, stage)}


def _pytest(folder: Path, *args: str) -> None:
    """pytest, run for real in ``folder`` with this checkout's stagegate plugin."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        check=False,
        timeout=120,
    )


# --- 1. text no encoder takes ------------------------------------------------------------------


@pytest.mark.slow
def test_a_warning_holding_a_lone_surrogate_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "test_w.py").write_text(
        'import warnings\n\ndef test_warns():\n    warnings.warn("bad \\ud800 text")\n'
    )
    monkeypatch.chdir(tmp_path)
    _, code = run_stage(
        "execution",
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "test_w.py",
            "--junitxml=reports/raw/junit.xml",
            "--stagegate-warnings=reports/raw/warnings.json",
        ],
        out_dir=Path("reports/raw"),
        files={"junit": "reports/raw/junit.xml", "warnings": "reports/raw/warnings.json"},
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert code == 0
    assert "\\ud800" in Path("reports/raw/warnings.json").read_text()
    assert report_cli(tmp_path, "--only", "execution") in (EXIT_PASS, EXIT_BLOCK)
    warned = [f for f in _findings(tmp_path, "execution") if f["kind"] == "other_warning"]
    assert [f["title"] for f in warned] == ["UserWarning: bad \ufffd text"]
    assert "bad \ufffd text" in Path("reports/execution.md").read_text()


def test_a_ruff_message_holding_a_lone_surrogate_is_reported(root: Path) -> None:
    ruff = _raw(root) / "lint-ruff.json"
    finding = {
        "code": "F821",
        "message": "undefined name \ud800",
        "filename": "src/x.py",
        "location": {"row": 3, "column": 1},
    }
    ruff.write_text(json.dumps([finding]))
    reseal(_raw(root))
    assert report_cli(root, "--github") == EXIT_BLOCK
    assert _kinds(root, "static")["lint_error"] == "HIGH"
    assert "undefined name \ufffd" in (root / "reports" / "static.md").read_text()


def test_any_text_is_written_whole_and_shown_by_its_code_points(tmp_path: Path) -> None:
    written = write_atomic(tmp_path / "x.md", "a \ud800 b \udcff c")
    assert written.read_text(encoding="utf-8") == "a \\ud800 b \\udcff c"
    assert clean("x\udcffy") == "x[U+DCFF]y"


# --- 2. a record file whose name is not UTF-8 --------------------------------------------------


def test_a_copy_of_a_record_under_a_name_that_is_not_utf8_blocks(root: Path) -> None:
    raw = os.fsencode(_raw(root))
    with open(raw + b"/\xffx.json", "wb") as f:
        f.write((_raw(root) / "static.json").read_bytes())
    assert report_cli(root) == EXIT_BLOCK
    static = _findings(root, "static")
    assert [f["kind"] for f in static] == ["record_unusable"]
    assert "two records" in static[0]["detail"] and "\\xff" in static[0]["detail"]


# --- 3. a linter field of the wrong type -------------------------------------------------------


@pytest.mark.parametrize("tool", ["shellcheck", "generic"])
@pytest.mark.parametrize(
    "field,value", [("level", []), ("message", {"a": 1}), ("line", "3"), ("code", 7)]
)
def test_a_lint_field_of_the_wrong_type_is_malformed_input(
    root: Path, tool: str, field: str, value: object
) -> None:
    entry = {"code": "SC2086", "message": "quote this", "level": "warning", "file": "a.sh"}
    lint = _raw(root) / f"lint-{tool}.json"
    lint.write_text(json.dumps([{**entry, "line": 2, field: value}]))
    record = _raw(root) / "static.json"
    files = json.loads(record.read_text())["files"]
    _edit(record, files={"lint": {**files["lint"], tool: f"reports/raw/lint-{tool}.json"}})
    reseal(_raw(root))
    assert report_cli(root) == EXIT_BLOCK
    assert _kinds(root, "static")["input_malformed"] in ("CRITICAL", "HIGH")


# --- 4. garbage where the machine observation belongs ------------------------------------------


@pytest.mark.parametrize(
    "environment",
    [
        {"accelerators": {"probe": "nvidia-smi", "found": False, "devices": 1, "error": None}},
        {"accelerators": {"probe": "nvidia-smi", "found": True, "devices": [1], "error": None}},
        {"accelerators": {"probe": "nvidia-smi", "found": True, "devices": [{"name": 3}]}},
        {"accelerators": {"probe": [], "found": "no", "devices": [], "error": None}},
        {"accelerators": {"probe": "nvidia-smi", "found": False, "devices": [], "error": 7}},
        {"accelerators": [1, 2]},
        {"cpu_count": "2"},
        {"cpu_count": True},
        {"cpu_count": -1},
        {"machine": ["x86_64"]},
        {"python": 3.11},
        {"platform": {"os": "Linux"}},
    ],
)
def test_garbage_in_the_observed_machine_blocks_the_record(
    root: Path, environment: dict[str, Any]
) -> None:
    record = _raw(root) / "execution.json"
    _edit(record, environment={**json.loads(record.read_text())["environment"], **environment})
    assert report_cli(root) == EXIT_BLOCK
    findings = _findings(root, "execution")
    assert [f["kind"] for f in findings] == ["record_unusable"]
    assert "environment" in findings[0]["detail"]


# --- 5. the previous verdict as a FIFO, or endless ---------------------------------------------


def _limited() -> None:
    limit = 2 * 2**30  # a report takes far less; an endless read ends in MemoryError
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.slow
@pytest.mark.parametrize("plant", ["fifo", "dev-zero", "huge"])
def test_a_previous_verdict_that_is_no_small_regular_file_is_replaced(
    root: Path, plant: str
) -> None:
    verdict = root / "reports" / "verdict.json"
    if plant == "fifo":
        os.mkfifo(verdict)
    elif plant == "dev-zero":
        verdict.symlink_to("/dev/zero")
    else:
        with verdict.open("w") as f:
            f.write('{"stages": [{"name": "stale"}], "pad": "')
            f.truncate(100 * 2**20)  # 100 MB: no report of ours is that large
    (root / "reports" / "stale.md").write_text("an earlier run's stage")
    args = ["report", "reports/raw", "--out", "reports", "--pyproject", str(POLICY_FILE)]
    done = subprocess.run(
        [sys.executable, "-m", "stagegate", *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limited,
        check=False,
    )
    assert done.returncode == EXIT_PASS, done.stderr[-2000:]
    assert verdict.is_file() and not verdict.is_symlink()
    assert json.loads(verdict.read_text())["decision"] == "PASS"
    # a previous verdict that cannot be read names no stage: its stage reports stay
    assert (root / "reports" / "stale.md").exists()


# --- 6. JUnit totals ---------------------------------------------------------------------------

PYTEST_SUITE = """
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 == 2

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass
"""


@pytest.fixture(scope="module")
def pytest_junit(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A JUnit file pytest wrote for a suite that passes, fails and skips one test each."""
    folder = tmp_path_factory.mktemp("suite")
    (folder / "test_s.py").write_text(textwrap.dedent(PYTEST_SUITE))
    _pytest(folder, "test_s.py", "--junitxml=junit.xml")
    text = (folder / "junit.xml").read_text()
    assert 'skipped="1"' in text and 'failures="1"' in text and "<skipped" in text
    return text


def _no_skipped_element(text: str) -> str:
    return re.sub(r"<skipped [^>]*?(/>|>.*?</skipped>)", "", text, flags=re.S)


def _no_failure_element(text: str, count: str) -> str:
    text = re.sub(r"<failure [^>]*?(/>|>.*?</failure>)", "", text, flags=re.S)
    return text.replace('failures="1"', f'failures="{count}"')


def _failure_outside_any_suite(text: str) -> str:
    text = text.replace('failures="1"', 'failures="0"')
    text = re.sub(r"<failure [^>]*?(/>|>.*?</failure>)", "", text, flags=re.S)
    failure = '<failure message="the session could not start">x</failure>'
    return re.sub(r"(<testsuites[^>]*>)", lambda m: m[1] + failure, text, count=1)


MUTATIONS = {
    "skipped element lost": (_no_skipped_element, "count_mismatch"),
    "failures 1.0, element lost": (lambda t: _no_failure_element(t, "1.0"), "count_mismatch"),
    "failures not a count": (lambda t: _no_failure_element(t, "one"), "count_mismatch"),
    "failure outside any suite": (_failure_outside_any_suite, "test_failed"),
}


@pytest.mark.slow
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_junit_total_or_failure_the_reader_skipped_blocks(
    root: Path, pytest_junit: str, mutation: str
) -> None:
    change, kind = MUTATIONS[mutation]
    junit = _raw(root) / "junit-execution.xml"
    junit.write_text(pytest_junit)
    reseal(_raw(root))
    report_cli(root)
    assert kind not in _kinds(root, "execution") or kind == "test_failed"  # the file as written
    failed = sum(f["kind"] == "test_failed" for f in _findings(root, "execution"))
    junit.write_text(change(pytest_junit))
    reseal(_raw(root))
    assert report_cli(root) == EXIT_BLOCK
    kinds = _kinds(root, "execution")
    assert kinds[kind] in ("CRITICAL", "HIGH")
    if kind == "test_failed":  # the failure outside any suite is a failed test of its own
        outside = [f for f in _findings(root, "execution") if f["kind"] == "test_failed"]
        assert len(outside) == failed and "outside any test case" in outside[0]["title"]


@pytest.mark.slow
def test_a_malformed_count_names_itself(tmp_path: Path, pytest_junit: str) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(pytest_junit.replace('failures="1"', 'failures="1.5"'))
    mismatches = read_junit(path, root=tmp_path).count_mismatches
    assert len(mismatches) == 1 and "1.5" in mismatches[0] and "failures" in mismatches[0]
