"""What the change touches: the file ``--changed-files`` names (the trusted judge's list),
else a git diff against the base."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from stagegate.errors import InputError


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def _git_changes(ref: str) -> tuple[str, ...] | None:
    """The files changed since the commit ``ref`` and HEAD share, in the checkout as it is:
    committed, uncommitted and untracked (what a local run judges, edits included), named
    from the repository's top whatever the working directory, unquoted."""
    base = _git("merge-base", ref, "HEAD")
    out = _git("diff", "-z", "--name-status", base.strip()) if base else None
    untracked = _git("ls-files", "-z", "--others", "--exclude-standard", "--full-name", ":/")
    if out is None or untracked is None:
        return None
    fields, paths = out.split("\0"), []
    while fields and fields[0]:  # "M" path, or "R100" old new: both names of a rename
        status, fields = fields[0], fields[1:]
        named = 2 if status[:1] in ("R", "C") else 1
        paths, fields = paths + fields[:named], fields[named:]
    return tuple(dict.fromkeys([*paths, *filter(None, untracked.split("\0"))]))


def changed_files(
    listed: Path | None, base_ref: str | None, env: Mapping[str, str]
) -> tuple[str, tuple[str, ...] | None]:
    """The files the change touches, with where that list came from, in words: the file
    ``listed`` (``--changed-files``), else a git diff against ``base_ref`` or the PR's base;
    None where neither is there."""
    if listed is not None:
        try:
            text = listed.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(
                f"--changed-files {listed} cannot be read ({exc}): give a file "
                "of the change's paths, one a line"
            ) from None
        paths = (line.strip() for line in text.splitlines())
        return "the change's file list", tuple(dict.fromkeys(p for p in paths if p))
    ref = base_ref or (f"origin/{env['GITHUB_BASE_REF']}" if env.get("GITHUB_BASE_REF") else None)
    if not ref:
        return "no base given (pass --base REF or --changed-files FILE)", None
    changes = _git_changes(ref)
    if changes is None:
        return f"{ref} (not available in this clone)", None
    return ref, changes
