"""Mutation testing of both distributions: mutmut run where each package's ``[tool.mutmut]``
is, timed-out mutants run again alone, then the kill-rate report over every run.

    python tools/mutation.py [GLOB...] [--out reports/mutation] [--children N]

A GLOB names mutants as ``mutmut run`` takes them and starts with its package
(``"amptrain.precision*"``, ``"stagegate.judge*"``); without one every mutant of both packages
runs. mutmut tests a mutated copy in ``mutants/`` beside the ``pyproject.toml`` it reads:
amptrain's in the repository root, stagegate's in ``stagegate/``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import mutation_report

ROOT = Path(__file__).resolve().parents[1]
# package -> the directory mutmut runs in for it (its [tool.mutmut] is in the pyproject there)
PACKAGES = {"amptrain": ROOT, "stagegate": ROOT / "stagegate"}
MUTMUT = [sys.executable, "-m", "mutmut"]


def split_globs(globs: Sequence[str]) -> dict[str, list[str]]:
    """The globs of each package to run; every package (with no glob: all its mutants) when
    none is given. A glob that names no known package is a ValueError."""
    chosen: dict[str, list[str]] = {}
    for glob in globs:
        package = glob.partition(".")[0]
        if package not in PACKAGES:
            raise ValueError(f"{glob!r}: a glob starts with {' or '.join(PACKAGES)}, then a dot")
        chosen.setdefault(package, []).append(glob)
    return chosen if globs else {package: [] for package in PACKAGES}


def timed_out(results: str) -> list[str]:
    """The mutants ``mutmut results --all true`` lists as timed out."""
    statuses = mutation_report.parse_results(results)
    return [name for name, status in statuses.items() if status == "timeout"]


def _mutmut(where: Path, *args: str, capture: bool = False) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread per mutant: they share the cores
    done = subprocess.run(
        [*MUTMUT, *args], cwd=where, env=env, check=True, text=True, capture_output=capture
    )
    return done.stdout if capture else ""


def run_package(where: Path, globs: Sequence[str], results: Path, children: int) -> list[str]:
    """``mutmut run`` in ``where``; its results written to ``results``. A mutant that timed out
    is run again alone, so one that only timed out beside another (a busy machine) is tested
    again, not counted; returns the ones run again."""
    _mutmut(where, "run", "--max-children", str(children), *globs)
    text = _mutmut(where, "results", "--all", "true", capture=True)
    again = timed_out(text)
    if again:
        _mutmut(where, "run", "--max-children", "1", *again)
        text = _mutmut(where, "results", "--all", "true", capture=True)
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(text)
    return again


def main(argv: list[str] | None = None) -> int:
    """Run the chosen packages' mutants, then report; the report's exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("globs", nargs="*", metavar="GLOB")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "mutation")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    try:
        chosen = split_globs(args.globs)
    except ValueError as exc:
        parser.error(str(exc))
    results = []
    for package, globs in chosen.items():
        path = args.out / f"{package}-results.txt"
        run_package(PACKAGES[package], globs, path, args.children)
        results.append(str(path))
    report = [*results, "--out", str(args.out / "report.md")]
    report += [arg for glob in args.globs for arg in ("--only", glob)]
    return mutation_report.main(report)


if __name__ == "__main__":
    sys.exit(main())
