""".github/CODEOWNERS names an owner for every file of the gate's own definition, so the branch
ruleset's "Require review from Code Owners" covers every change the summary flags."""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib

from .ci_tools import ROOT

RULES = [
    line.split()
    for line in (ROOT / ".github" / "CODEOWNERS").read_text().splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]
# The gate's definition as docs/ci.md lists it; the policy's own gate_files list, where the
# policy has one, is checked too.
GATE_GLOBS = [
    ".github/*", "tools/*", ".ci/*", "stagegate/*", "pyproject.toml", "noxfile.py",
    "tests/conftest.py", "tests/ci/*", "Dockerfile", ".dockerignore", "constraints-cpu.txt",
    "reports/baseline/*",
]  # fmt: skip
TRACKED = subprocess.run(
    ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=True,
).stdout.split()


def owned(path: str) -> bool:
    """Whether a rule matches ``path``: anchored files, and folders (a trailing slash) with
    everything under them; the file uses no other pattern (checked below)."""
    for pattern, *_ in RULES:
        name = pattern.lstrip("/")
        if path == name or (name.endswith("/") and path.startswith(name)):
            return True
    return False


def test_every_rule_is_anchored_plain_and_has_an_owner() -> None:
    assert RULES
    for pattern, *owners in RULES:
        assert pattern.startswith("/") and not set(pattern) & set("*?[]!"), pattern
        assert owners and all(o.startswith("@") for o in owners), pattern


def test_every_gate_file_has_an_owner() -> None:
    policy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["stagegate"]
    globs = [*GATE_GLOBS, *policy.get("gate_files", [])]
    gate = [p for p in TRACKED if any(fnmatch.fnmatch(p, g) for g in globs)]
    assert ".github/workflows/judge.yml" in gate and "stagegate/pyproject.toml" in gate
    assert [p for p in gate if not owned(p)] == []


def test_the_library_itself_needs_no_code_owner() -> None:
    assert not owned("src/amptrain/loop.py") and not owned("README.md")
