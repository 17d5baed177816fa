"""stagegate's pytest witness where stagegate is part of the project: its own frames, which
pass a skip on, are not the project's code skipping a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_test_skipped_by_its_mark_is_not_skipped_by_the_code_under_test(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    command = [sys.executable, "-m", "pytest", "tests/amptrain/test_precision.py", "-m", "cuda",
               "-p", "no:cacheprovider", f"--junitxml={junit}"]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert json.loads(Path(f"{junit}.counts.json").read_text())["skipped_by"] == []
