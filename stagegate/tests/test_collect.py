"""Collectors on files produced by real tools: pytest, coverage, ruff, hadolint, zizmor."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stagegate.collect import read_coverage, read_junit, read_lint, read_warnings
from stagegate.collect.junit import last_frame
from stagegate.errors import InputError
from stagegate.model import Location


def _by_name(suite: object) -> dict:
    return {c.name: c for c in suite.cases}  # type: ignore[attr-defined]


@pytest.mark.parametrize("family", ["xunit1", "xunit2"])
def test_junit_from_a_real_pytest_run(tmp_path: Path, family: str, sample_project) -> None:
    suite = read_junit(sample_project(tmp_path, family)["junit"], root=tmp_path)
    cases = _by_name(suite)
    assert cases["test_passes"].outcome == "passed"
    assert cases["test_passes"].nodeid == "test_sample.py::test_passes"
    assert cases["test_method"].nodeid == "test_sample.py::TestGroup::test_method"
    failed = cases["test_fails"]
    assert failed.outcome == "failed" and "assert [1, 2] == [1, 3]" in failed.message
    assert failed.location == Location("test_sample.py", 9)
    raised = cases["test_raises_in_library"]
    assert raised.outcome == "failed" and "KeyError" in raised.message
    assert raised.location == Location("helper.py", 2)  # the raising line, not the test
    assert (
        cases["test_skipped"].outcome == "skipped" and cases["test_skipped"].message == "needs CUDA"
    )
    assert cases["test_fixture_error"].outcome == "error"
    collection = [c for c in suite.cases if "broken_import" in c.nodeid]
    assert len(collection) == 1 and collection[0].outcome == "error"
    assert suite.count("passed") == 3 and suite.count("failed") == 2


def test_warnings_plugin_records_category_message_location_count(sample_run: dict) -> None:
    (warning,) = [w for w in read_warnings(sample_run["warnings"]) if w.category == "FutureWarning"]
    assert "torch.cuda.amp.autocast" in warning.message
    assert warning.location == Location("test_sample.py", 19) and warning.count == 1


def test_coverage_json_from_a_real_run(sample_run: dict) -> None:
    cov = read_coverage(sample_run["coverage"])
    (helper,) = cov.files
    assert helper.path == "helper.py" and cov.percent == 100.0 and helper.missing_lines == ()


def test_last_frame_of_short_and_long_tracebacks() -> None:
    short = (
        "test_x.py:3: in test_a\n    f()\nsrc/pkg/m.py:80: in f\n    env['x']\nE   KeyError: 'x'"
    )
    long = "def test_a():\n>   f()\n\ntest_x.py:3: \n...\nsrc/pkg/m.py:80: KeyError"
    assert last_frame(short) == last_frame(long) == Location("src/pkg/m.py", 80)
    assert last_frame("no frames here") is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"", "is empty"),
        (b"<testsuites><testcase", "not well-formed"),
        (b"<html></html>", "not <testsuites>"),
    ],
)
def test_unusable_junit_is_an_input_error(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "junit.xml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        read_junit(path)


def test_an_empty_but_valid_junit_file_has_no_cases(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text('<testsuites><testsuite name="pytest" tests="0"/></testsuites>')
    assert read_junit(path).cases == ()


@pytest.mark.parametrize(
    ("reader", "content", "message"),
    [
        (read_coverage, "{}", "no 'totals'"),
        (read_coverage, "{not json", "not valid JSON"),
        (read_warnings, '{"warnings": [{"message": "m"}]}', "entry 0"),
        (read_warnings, "[]", "no 'warnings' list"),
    ],
)
def test_malformed_json_files_say_what_is_wrong(
    tmp_path: Path, reader, content: str, message: str
) -> None:
    path = tmp_path / "f.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        reader(path)


def _tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        pytest.skip(f"{name} is not installed (the lint extra installs it)")
    return path


def test_ruff_json_from_a_real_run(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    out = subprocess.run(
        [_tool("ruff"), "check", "--isolated", "--output-format", "json", "bad.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    (tmp_path / "ruff.json").write_text(out.stdout)
    findings = read_lint("ruff", tmp_path / "ruff.json")
    codes = {f.code: f for f in findings}
    assert {"F401", "F821"} <= codes.keys()
    assert codes["F821"].level == "error" and codes["F821"].location.line == 5


def test_hadolint_json_from_a_real_run(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM ubuntu\nRUN apt-get install curl\n")
    out = subprocess.run(
        [_tool("hadolint"), "-f", "json", "Dockerfile"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    (tmp_path / "h.json").write_text(out.stdout)
    findings = read_lint("hadolint", tmp_path / "h.json")
    assert any(f.code == "DL3006" for f in findings)  # untagged base image
    assert all(f.location.file == "Dockerfile" for f in findings)


def test_lint_output_in_the_wrong_format_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps([{"unexpected": 1}]))
    with pytest.raises(InputError, match="not in hadolint's JSON format"):
        read_lint("hadolint", tmp_path / "x.json")
    with pytest.raises(InputError, match="unknown lint tool"):
        read_lint("pylint", tmp_path / "x.json")


DEPENDENCY_PROJECT = {
    "pytest.ini": "[pytest]\nfilterwarnings = always\npythonpath = .venv/lib/site-packages\n",
    ".venv/lib/site-packages/fakedep.py": (
        "import warnings\n\n\ndef old():\n"
        '    warnings.warn("old() is deprecated; use new()", DeprecationWarning, stacklevel=1)\n'
    ),
    "mylib.py": "import fakedep\n\n\ndef train():\n    fakedep.old()\n",
    "test_uses.py": (
        "import mylib\n\n\ndef test_a():\n    mylib.train()\n    mylib.train()\n\n\n"
        "def test_b():\n    mylib.train()\n"
    ),
}


def test_a_warning_raised_inside_a_dependency_points_at_the_project_line(tmp_path: Path) -> None:
    for name, text in DEPENDENCY_PROJECT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    out = tmp_path / "warnings.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--stagegate-warnings={out}",
        ],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        timeout=120,
    )
    (warning,) = read_warnings(out)
    assert warning.location == Location("mylib.py", 5)  # not .venv/.../fakedep.py:5
    assert warning.count == 3 and warning.category == "DeprecationWarning"
