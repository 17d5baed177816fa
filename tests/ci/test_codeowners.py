""".github/CODEOWNERS names an owner for every file the policy calls the gate's own definition
(`[tool.stagegate] gate_files`, globs whose `*` crosses folders, as stagegate matches them),
matched with the rules GitHub applies to CODEOWNERS: gitignore's, which git itself applies here
(`git check-ignore`, the last matching rule winning). Files that do not exist yet count too:
a new conftest.py deep in a new folder, a pytest.ini or sitecustomize.py at the root."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from .ci_tools import ROOT

CODEOWNERS = ROOT / ".github" / "CODEOWNERS"
GATE_FILES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["stagegate"]["gate_files"]
TRACKED = subprocess.run(
    ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
    cwd=ROOT, capture_output=True, text=True, check=True,
).stdout.split()  # fmt: skip
NOT_GATE = ["src/amptrain/loop.py", "README.md", "docs/ci.md", "tests/amptrain/test_loop.py"]


def rules(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]  # fmt: skip


def owners_of(paths: list[str], codeowners: str, tmp: Path) -> dict[str, list[str]]:
    """Each path's owners under ``codeowners``, by git's gitignore matching (the last rule that
    matches wins, as in CODEOWNERS); [] for a path no rule matches."""
    found = rules(codeowners)
    (tmp / "patterns").write_text("".join(f"{r[0]}\n" for r in found))
    repo = tmp / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = subprocess.run(
        ["git", "-c", f"core.excludesFile={tmp / 'patterns'}", "check-ignore", "--no-index",
         "-v", "-n", "--stdin"],
        cwd=repo, input="".join(f"{p}\n" for p in paths), capture_output=True, text=True,
    ).stdout  # fmt: skip
    owners = {}
    for line in out.splitlines():
        source, path = line.split("\t", 1)
        number = source.split(":")[1]
        owners[path] = found[int(number) - 1][1:] if number else []
    return owners


def gate(path: str) -> bool:
    """Whether stagegate's summary lists ``path`` first (fnmatch: `*` crosses folders)."""
    return any(fnmatch.fnmatchcase(path, glob) for glob in GATE_FILES)


def new_files(glob: str) -> list[str]:
    """Paths a change could add that ``glob`` covers: at the root, nested, in a new folder."""
    if glob.endswith("/*"):
        folder = glob[:-2]
        return [f"{folder}/new.py", f"{folder}/a/new/folder/deep.txt"]
    if glob.startswith("*"):
        name = glob[1:]
        return [name.lstrip("."), name, f"x{name}", f"src/amptrain/{name}",
                f"tests/new/folder/{name}", f"stagegate/tests/fixtures/{name}"]  # fmt: skip
    return [glob]


def candidates() -> list[str]:
    made = [p for glob in GATE_FILES for p in new_files(glob)]
    return sorted({p for p in [*TRACKED, *made] if gate(p)})


def test_every_gate_file_new_or_nested_has_an_owner(tmp_path: Path) -> None:
    paths = candidates()
    assert {"pytest.ini", "sitecustomize.py", "tests/new/folder/conftest.py"} <= set(paths)
    assert ".github/workflows/judge.yml" in paths and "stagegate/pyproject.toml" in paths
    owners = owners_of(paths, CODEOWNERS.read_text(), tmp_path)
    assert [p for p in paths if not owners.get(p)] == []


def test_the_library_itself_needs_no_code_owner(tmp_path: Path) -> None:
    assert not any(gate(p) for p in NOT_GATE)
    owners = owners_of(NOT_GATE, CODEOWNERS.read_text(), tmp_path)
    assert all(owners[p] == [] for p in NOT_GATE), owners


@pytest.mark.parametrize("dropped", ["*sitecustomize.py", "*conftest.py", "/tools/"])
def test_a_gate_pattern_without_its_rule_is_found(tmp_path: Path, dropped: str) -> None:
    text = "\n".join(line for line in CODEOWNERS.read_text().splitlines()
                     if not line.startswith(f"{dropped} "))  # fmt: skip
    owners = owners_of(candidates(), text, tmp_path)
    assert [p for p in candidates() if not owners.get(p)], f"nothing found without {dropped}"


def test_every_rule_uses_what_codeowners_supports_and_names_owners() -> None:
    # CODEOWNERS takes no negation (!), no character ranges ([ ]) and no escaped #.
    for pattern, *owners in rules(CODEOWNERS.read_text()):
        assert not set(pattern) & set("![]\\"), pattern
        assert owners and all(re.fullmatch(r"@[\w./-]+", o) for o in owners), pattern
