"""What the change touches: the file --changed-files names (the trusted judge's list), a git
diff otherwise, and the gate files among them, listed first in the summary."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stagegate.collect.changes import changed_files
from stagegate.errors import InputError
from stagegate.judge.policy import Policy

from ..builders import build_scenario, copy_scenario, report_cli

GATE = Policy(gate_files=(".github/*", "stagegate/*", "pyproject.toml", "noxfile.py"))


def test_the_listed_files_are_read_one_a_line(tmp_path: Path) -> None:
    listed = tmp_path / "changed.txt"
    listed.write_text("pyproject.toml\n\n  src/amptrain/loop.py \r\npyproject.toml\n")
    where, files = changed_files(listed, "origin/main", {})
    assert files == ("pyproject.toml", "src/amptrain/loop.py") and "list" in where
    with pytest.raises(InputError, match=r"absent\.txt"):
        changed_files(tmp_path / "absent.txt", None, {})


def test_gate_files_match_the_policy_globs_across_folders() -> None:
    changed = (
        ".github/workflows/verify.yml",
        "stagegate/src/stagegate/judge/stage.py",
        "pyproject.toml",
        "src/amptrain/loop.py",
        "docs/pyproject.toml",
    )
    assert GATE.gate_files_in(changed) == changed[:3]
    assert Policy().gate_files_in(changed) == ()


def test_a_git_diff_lists_both_names_of_a_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "a@b.c")
    git("config", "user.name", "a")
    (tmp_path / "noxfile.py").write_text("x = 1\n" * 20)
    git("add", ".")
    git("commit", "-qm", "base")
    git("checkout", "-qb", "change")
    git("mv", "noxfile.py", "tasks.py")
    (tmp_path / "new.txt").write_text("n\n")
    git("add", ".")
    git("commit", "-qm", "change")
    monkeypatch.chdir(tmp_path)
    where, files = changed_files(None, "main", {})
    assert where == "main" and set(files) == {"noxfile.py", "tasks.py", "new.txt"}
    # what the checkout holds beside its commits is the change's too: edited, staged, new
    (tmp_path / "tasks.py").write_text("x = 2\n")
    (tmp_path / "notes.txt").write_text("n\n")
    where, files = changed_files(None, "main", {})
    assert set(files) == {"noxfile.py", "tasks.py", "new.txt", "notes.txt"}
    (tmp_path / "base.txt").write_text("b\n")
    git("add", "base.txt")
    assert "base.txt" in changed_files(None, "main", {})[1]
    # named from the top, whatever the folder it runs in, and as they are (no quoting)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ñ.py").write_text("n\n")
    monkeypatch.chdir(tmp_path / "sub")
    assert {"sub/ñ.py", "notes.txt", "tasks.py"} <= set(changed_files(None, "main", {})[1])
    assert changed_files(None, "no-such-ref", {})[1] is None


def test_the_summary_opens_with_the_gate_files_the_change_edits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    listed = tmp_path / "changed.txt"
    listed.write_text("src/amptrain/loop.py\nnoxfile.py\n.github/workflows/a`b.yml\n")
    _, files = build_scenario("pass-cpu", changed_files=listed)
    top = files["summary.md"].split("| Stage |", 1)[0]
    assert "edits the gate's own definition" in top
    assert "`noxfile.py`" in top and "``.github/workflows/a`b.yml``" in top
    assert "loop.py" not in top and "loop.py" in files["static.md"]  # the audit trail
    _, plain = build_scenario("pass-cpu")
    assert "gate's own definition" not in plain["summary.md"]


def test_a_missing_changed_files_list_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    assert report_cli(tmp_path, "--changed-files", str(tmp_path / "absent.txt")) == 2
    assert "absent.txt" in capsys.readouterr().err
