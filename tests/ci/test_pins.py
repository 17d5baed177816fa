"""What runs outside a container on the CI hosts is pinned by hash: every pip install there reads
a requirements file of tools/ci/requirements/ with --require-hashes, and every file it lists
has its hashes; no tool is fetched by name alone (pipx, an unpinned install)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .ci_tools import ROOT, TOOLS

REQUIREMENTS = sorted((TOOLS / "requirements").glob("*.txt"))
HOST_SCRIPTS = [
    *sorted((ROOT / ".github" / "workflows").glob("*.yml")),
    ROOT / ".github" / "gpu-runner" / "gpu-runner.yml",
    *sorted(TOOLS.glob("*.sh")),
]


def pins(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a requirements file with hashes."""
    found: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9._-]+)==([^\s\\;]+)", block)
        if head:
            hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
            found[head[1].lower().replace("_", "-")] = (head[2], hashes)
    return found


@pytest.mark.parametrize("path", REQUIREMENTS, ids=lambda p: p.name)
def test_every_pinned_file_has_its_hashes_and_the_inputs_pins(path: Path) -> None:
    text = path.read_text()
    found = pins(text)
    listed = [line for line in text.splitlines() if re.match(r"[A-Za-z0-9]", line)]
    assert found and len(found) == len(listed), "a requirement without an exact pin"
    assert all(hashes for _, hashes in found.values()), "a requirement without a hash"
    wanted = pins(path.with_suffix(".in").read_text())
    assert wanted and all(found[name][0] == version for name, (version, _) in wanted.items())


def test_a_requirement_without_a_hash_is_found() -> None:
    text = "jinja2==3.1.6 \\\n    --hash=sha256:" + "a" * 64 + "\nmarkupsafe==3.0.2\n"
    assert pins(text)["markupsafe"] == ("3.0.2", [])


@pytest.mark.parametrize("path", HOST_SCRIPTS, ids=lambda p: p.name)
def test_every_install_on_a_host_requires_hashes(path: Path) -> None:
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    assert "pipx" not in text
    for line in text.splitlines():
        if re.search(r"pip\"? install|-m pip install", line):
            assert "--require-hashes" in line and "--no-deps" in line, line
            assert re.search(r"-r \S*requirements/\w+\.txt", line), line
