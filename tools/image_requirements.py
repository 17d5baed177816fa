"""Print what the verification image installs besides torch: both distributions' dependencies
with their test and lint extras, read from the pyproject.toml files alone.

    python tools/image_requirements.py > requirements.txt

The Dockerfile runs it before copying the source, so the dependency layer is rebuilt only when
a pyproject.toml changes. torch is left out: the image's base brings it.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = ("pyproject.toml", "stagegate/pyproject.toml")
EXTRAS = ("test", "lint")


def requirements(root: Path = ROOT) -> list[str]:
    """Every requirement of both projects and their test and lint extras, but torch."""
    found: set[str] = set()
    for name in PROJECTS:
        project = tomllib.loads((root / name).read_text(encoding="utf-8"))["project"]
        extras = project.get("optional-dependencies", {})
        found.update(project["dependencies"], *(extras.get(e, []) for e in EXTRAS))
    return sorted(r for r in found if _name(r) != "torch")  # torchao is not torch


def _name(requirement: str) -> str:
    """The distribution a requirement names ("torchao==0.18.0": torchao)."""
    return re.split(r"[\s<>=!~\[;@]", requirement, maxsplit=1)[0].lower()


if __name__ == "__main__":
    sys.stdout.write("".join(f"{r}\n" for r in requirements()))
