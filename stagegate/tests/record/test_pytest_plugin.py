"""The pytest plugin: ``--stagegate-warnings FILE`` records each warning once per place, and a
warning a dependency raises is placed at the project's own line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stagegate.collect import read_warnings
from stagegate.model import Location
from stagegate.record.witness_file import GATE_SUFFIX


@pytest.mark.slow
def test_warnings_plugin_records_category_message_location_count(sample_run: dict) -> None:
    (warning,) = [w for w in read_warnings(sample_run["warnings"]) if w.category == "FutureWarning"]
    assert "torch.cuda.amp.autocast" in warning.message
    assert warning.location == Location("test_sample.py", 19) and warning.count == 1


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


@pytest.mark.slow
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


def _record_warnings(tmp_path: Path, *options: str) -> list:
    for name, text in {
        **DEPENDENCY_PROJECT,
        # A collection-time warning: every pytest-xdist worker collects this module.
        "test_collected.py": (
            "import warnings\n\n"
            'warnings.warn("collected once", UserWarning, stacklevel=1)\n\n\n'
            "def test_c():\n    pass\n"
        ),
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    out = tmp_path / "warnings.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options]
    subprocess.run(
        [*command, f"--stagegate-warnings={out}"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        timeout=120,
    )
    return sorted(read_warnings(out), key=lambda w: w.category)


@pytest.mark.slow
def test_workers_of_pytest_xdist_record_what_one_process_records(tmp_path: Path) -> None:
    alone = _record_warnings(tmp_path)
    workers = _record_warnings(tmp_path, "-p", "xdist", "-n", "2", "--dist", "load")
    assert [(w.category, w.location, w.count) for w in alone] == [
        ("DeprecationWarning", Location("mylib.py", 5), 3),
        ("UserWarning", Location("test_collected.py", 3), 1),
    ]
    assert workers == alone


@pytest.mark.slow
def test_the_witnesses_are_written_where_pytest_writes_a_junit_path_it_expands(
    tmp_path: Path,
) -> None:
    """pytest expands variables and ~ in --junitxml and resolves a parent folder by name; so do the
    plugin's witness and the gate's, beside the file pytest wrote."""
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").symlink_to(tmp_path / "out")
    env = {**os.environ, "RD": "elsewhere/../out", "HOME": str(tmp_path)}
    for junit in ("$RD/a.xml", "~/out/b.xml"):
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-p", "stagegate.record.witness_file", f"--junitxml={junit}"],
            cwd=tmp_path, env=env, capture_output=True, check=True, timeout=120,
        )  # fmt: skip
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == [
        "a.xml", "a.xml.counts.json", f"a.xml{GATE_SUFFIX}",
        "b.xml", "b.xml.counts.json", f"b.xml{GATE_SUFFIX}",
    ]  # fmt: skip
