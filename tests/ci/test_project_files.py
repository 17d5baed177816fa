"""The Dockerfile, the nox sessions, the README's commands and .ci/run agree with each other."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
README = (ROOT / "README.md").read_text()


def instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_dockerfile_base_is_a_cuda_torch_image_pinned_by_digest() -> None:
    (base,) = [arg for op, arg in instructions() if op == "FROM"]
    assert re.fullmatch(
        r"pytorch/pytorch:\d+\.\d+\.\d+-cuda[\d.]+-cudnn\d+-runtime@sha256:[0-9a-f]{64}", base
    ), base


def test_dockerfile_installs_dependencies_before_copying_the_source_and_drops_root() -> None:
    ops = instructions()
    copies = [i for i, (op, arg) in enumerate(ops) if op == "COPY"]
    install = next(i for i, (op, arg) in enumerate(ops) if op == "RUN" and "pip install" in arg)
    source = next(i for i in copies if ops[i][1].endswith(". ."))
    assert ops[copies[0]][1] == "pyproject.toml ./" and copies[0] < install < source
    user = next(i for i, (op, _) in enumerate(ops) if op == "USER")
    assert user < source and ops[user][1].split(":")[0] not in ("0", "root")
    assert ops[-1] == ("CMD", '["nox", "-s", "verify"]')
    assert (
        "ENV",
        next(arg for op, arg in ops if op == "ENV"),
    ) and "AMPTRAIN_SYSTEM_TORCH=1" in DOCKERFILE


def test_dockerignore_keeps_local_state_out_of_the_image() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".nox", "wandb", "reports/*"} <= set(ignored)


@pytest.mark.slow
def test_nox_sessions_exist_with_docstrings_and_tags() -> None:
    stages = ["static", "execution", "integration", "performance", "slow", "regression", "cuda"]
    names = [*stages, "report", "verify", "tests"]
    out = subprocess.run(
        [sys.executable, "-m", "nox", "--list", "--json", "-s", *names],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    sessions = {s["name"]: s for s in json.loads(out.stdout)}
    assert set(sessions) == set(names)
    assert all(s["description"] for s in sessions.values())
    assert {"cpu", "stage"} <= set(sessions["execution"]["tags"])
    assert "gpu" in sessions["performance"]["tags"]
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["stagegate"]["stages"]
    assert list(declared) == stages  # a stage's session is named after it


def _readme_commands() -> list[str]:
    block = README.split("## Set up and run", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#")[0].strip() for line in block.strip().splitlines()]


def test_ci_runs_the_readme_test_command_and_the_main_job() -> None:
    main_job, test_command = _readme_commands()
    assert main_job.endswith("nox -s verify") and test_command.endswith("nox -s tests")
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci and "nox -s verify" in ci
    assert ci.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in ci


def test_torch_is_pinned_where_nox_installs_it() -> None:
    assert (ROOT / "constraints-cpu.txt").read_text().split() == ["torch==2.13.0"]


def _torch_versions() -> dict[str, str]:
    (base,) = [arg for op, arg in instructions() if op == "FROM"]
    readme = re.search(r"install torch (\d+\.\d+\.\d+) through", README.replace("\n", " "))
    return {
        "constraints-cpu.txt": (ROOT / "constraints-cpu.txt").read_text().split("==")[1].strip(),
        "Dockerfile": base.split(":")[1].split("-")[0],
        "README.md": readme.group(1) if readme else "not stated",
    }


def test_one_torch_version_everywhere() -> None:
    versions = _torch_versions()
    assert len(set(versions.values())) == 1, versions


def test_the_image_reads_its_requirements_from_the_pyproject_files() -> None:
    spec = importlib.util.spec_from_file_location("reqs", ROOT / "tools" / "image_requirements.py")
    reqs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reqs)  # type: ignore[union-attr]
    found = reqs.requirements()
    assert not [r for r in found if re.match(r"torch\b", r)]  # the base image brings torch
    assert "torchao==0.18.0" in found  # amptrain[fp8]'s pin: the image installs it
    assert "defusedxml>=0.7.1" in found and "ruff==0.17.6" in found and "pytest>=8" in found
    assert "python tools/image_requirements.py" in DOCKERFILE


def test_linters_are_pinned_exactly_in_one_place() -> None:
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert lint["lint"] and all(re.fullmatch(r"[\w-]+==[\d.]+", r) for r in lint["lint"])
    noxfile = (ROOT / "noxfile.py").read_text()
    assert '"lint")' in noxfile and not re.search(
        r"(ruff|zizmor|hadolint|shellcheck)[=<>]", noxfile
    )


def test_mutation_runs_copy_every_repository_path_their_tests_read() -> None:
    """mutmut runs the tests in a copy (mutants/) holding the sources, tests/ and also_copy:
    a test that reads another path of the repository fails there before any mutant runs."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    copied = {Path(p).parts[0] for p in [*config["source_paths"], *config["also_copy"], "tests"]}
    selection = config["pytest_add_cli_args_test_selection"]
    selected = [a for a in selection if a.startswith("tests/")]
    ignored = {ROOT / a.removeprefix("--ignore=") for a in selection if a.startswith("--ignore=")}
    read = {
        name.split("/")[0]
        for folder in selected
        for test in (ROOT / folder).rglob("*.py")
        if test not in ignored  # mutmut never runs it
        for name in re.findall(r'parents\[2\] / "([^"]+)"', test.read_text())
    }
    assert read, "no test reads a repository path: the pattern no longer finds them"
    assert read <= copied, f"tests read {sorted(read - copied)}, which mutmut does not copy"


CODE = ["src", "stagegate/src", "tools", "benchmarks", "noxfile.py", "tests", "stagegate/tests"]
MAX_FUNCTION_LINES = 60


def long_functions(root: Path, names: list[str]) -> list[str]:
    """Each function under `names` longer than MAX_FUNCTION_LINES (decorators left out)."""
    paths = [
        p for n in names for p in ([root / n] if n.endswith(".py") else (root / n).rglob("*.py"))
    ]
    found = []
    for path in sorted(paths):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if function and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return found


@pytest.mark.slow
def test_every_function_reads_in_one_screen() -> None:
    assert long_functions(ROOT, CODE) == []


def test_a_function_one_line_too_long_is_named(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text(f"def fits():\n{body}\n")
    (tmp_path / "pkg" / "long.py").write_text(
        f"class A:\n  def too_long(self):\n{body}\n    return x0\n"
    )
    (tmp_path / "top.py").write_text(f"async def also():\n{body}\n    return x0\n")
    assert long_functions(tmp_path, ["pkg", "top.py"]) == [
        "pkg/long.py:2 too_long",
        "top.py:1 also",
    ]


def _import_name(path: Path) -> str:
    """The module name pytest's default import mode gives a test file: its dotted path from the
    first folder above it that is not a package."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def test_every_test_module_imports_under_a_name_of_its_own() -> None:
    """Two test files that import under one name stop the whole run at collection."""
    listed = subprocess.run(
        ["git", "ls-files", "*test_*.py", "*_test.py", "*conftest.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    testpaths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]["testpaths"]
    names: dict[str, list[str]] = {}
    for name in listed:
        if any(name.startswith(f"{top}/") for top in testpaths) and "/fixtures/" not in name:
            names.setdefault(_import_name(ROOT / name), []).append(name)
    clashes = {n: p for n, p in names.items() if len(p) > 1 and not n.endswith("conftest")}
    assert not clashes, f"rename one of each: {clashes}"
