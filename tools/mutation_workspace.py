"""Lay out a mutmut workspace for stagegate, which lives outside the repository's ``src/``.

    python tools/mutation_workspace.py DEST

mutmut imports its mutated copy only from ``mutants/`` or ``mutants/src`` under the directory
it runs in, and reads its settings from that directory's ``pyproject.toml``. So DEST gets
stagegate's sources at ``src/stagegate``, its tests at ``tests/stagegate`` (paths inside them
stay true: ``parents[2]`` of a test is DEST, as it is the repository root), and the repository's
``pyproject.toml`` with its ``[tool.mutmut]`` table replaced by ``stagegate/pyproject.toml``'s.
DEST is emptied first.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_TABLE = re.compile(r"^\[tool\.mutmut\]\n(?:(?!\[).*\n|\n)*", re.MULTILINE)


def mutmut_table(pyproject: str) -> str:
    """The ``[tool.mutmut]`` table of a pyproject's text, header included."""
    found = _TABLE.search(pyproject)
    if found is None:
        raise ValueError("no [tool.mutmut] table in it")
    return found.group(0)


def merged_pyproject(repo: str, stagegate: str) -> str:
    """The repository's pyproject with stagegate's ``[tool.mutmut]`` in place of its own."""
    ours = mutmut_table(stagegate).rstrip("\n") + "\n\n"
    merged = repo.replace(mutmut_table(repo), ours)
    wanted = tomllib.loads(stagegate)["tool"]["mutmut"]
    if tomllib.loads(merged)["tool"]["mutmut"] != wanted:
        raise ValueError("the merged pyproject does not hold stagegate's [tool.mutmut]")
    return merged


def build(dest: Path, root: Path = ROOT) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "actual")
    shutil.copytree(root / "stagegate" / "src", dest / "src", ignore=ignore)
    shutil.copytree(root / "stagegate" / "tests", dest / "tests" / "stagegate", ignore=ignore)
    repo = (root / "pyproject.toml").read_text()
    ours = (root / "stagegate" / "pyproject.toml").read_text()
    (dest / "pyproject.toml").write_text(merged_pyproject(repo, ours))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    try:
        build(args.dest)
    except (OSError, ValueError) as exc:
        print(f"mutation workspace: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
