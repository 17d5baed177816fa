"""Nox sessions: the staged verification job and the project's own test suite.

nox -s verify     stages 1-4, then the reports; exits with the gate's code (0 PASS, 1 BLOCK)
nox -s tests      the whole test suite (the README's test command)
nox -s lint | unit | integration | benchmark | report    one stage or step on its own
nox -s mutation   mutation testing (slow; weekly in CI): -- "amptrain.precision*" runs some
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["verify"]

ROOT = Path(__file__).resolve().parent
RAW = "reports/raw"
# Where mutmut runs for each package: amptrain in the repository, stagegate in a workspace.
MUTATION_WORKSPACES = {"amptrain": ROOT, "stagegate": ROOT / "build" / "mutation" / "stagegate"}

# Inside the CUDA image torch (and the dependencies) come with the image: reuse them.
SYSTEM_TORCH = os.environ.get("AMPTRAIN_SYSTEM_TORCH") == "1"
# Without a pip and setuptools of their own, the sessions use the image's (build tools included).
VENV_PARAMS = ["--system-site-packages", "--without-pip"] if SYSTEM_TORCH else []
# Elsewhere torch is pinned, so an install never pulls the multi-GB CUDA build by accident.
# In the image the build tools come with it too: editable installs download nothing.
CONSTRAINTS = ["--no-build-isolation"] if SYSTEM_TORCH else ["-c", "constraints-cpu.txt"]


def install(session: nox.Session, *extras: str) -> None:
    """Install amptrain (editable) with ``extras`` and the stagegate distribution beside it;
    torch pinned or reused."""
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install(*CONSTRAINTS, "-e", spec, "-e", "./stagegate")


def stage(
    session: nox.Session,
    name: str,
    files: list[str],
    command: list[str],
    env: dict[str, str] | None = None,
    must_pass: bool = True,
) -> bool:
    """Run ``command`` as stage ``name`` through ``stagegate run``; True when it succeeded.

    The record is written whatever happens. ``must_pass`` ends the session on failure, as a
    stage run on its own should; ``verify`` goes on to the next stage instead.
    """
    session.run(
        "stagegate",
        "run",
        name,
        "--out-dir",
        RAW,
        *files,
        "--",
        *command,
        env=env,
        success_codes=list(range(256)),
    )
    record = json.loads((ROOT / RAW / f"{name}.json").read_text())
    ok = record["exit_code"] == 0 and not record["timed_out"] and not record["error"]
    if not ok and must_pass:
        session.error(f"stage {name} failed; its record is {RAW}/{name}.json")
    return ok


def run_lint(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    tools = ("ruff", "zizmor", "hadolint", "shellcheck", "check-jsonschema")
    files = [f"--lint={t}={RAW}/lint/{t}.json" for t in tools]
    files.append(f"--lint=generic={RAW}/lint/imports.json")
    return stage(
        session,
        "static",
        files,
        ["python", "tools/static_checks.py", "--out", f"{RAW}/lint"],
        must_pass=must_pass,
    )


def run_unit(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    junit, cov, warns = f"{RAW}/junit-unit.xml", f"{RAW}/coverage.json", f"{RAW}/warnings-unit.json"
    return stage(
        session,
        "execution",
        [f"--junit={junit}", f"--coverage={cov}", f"--warnings={warns}"],
        [
            "pytest",
            "-m",
            "not integration",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "--cov",
            f"--cov-report=json:{cov}",
            "--cov-report=term:skip-covered",
            f"--stagegate-warnings={warns}",
            *extra,
        ],
        must_pass=must_pass,
    )


def run_integration(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    junit, metrics = f"{RAW}/junit-integration.xml", f"{RAW}/integration-metrics.json"
    return stage(
        session,
        "integration",
        [f"--junit={junit}", f"--metrics={metrics}"],
        [
            "pytest",
            "tests/integration",
            "-m",
            "integration",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            *extra,
        ],
        env={"AMPTRAIN_INTEGRATION_METRICS": metrics},
        must_pass=must_pass,
    )


def run_benchmark(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    cuda = (
        session.run("python", "-c", "import torch; print(torch.cuda.is_available())", silent=True)
        .strip()
        .endswith("True")
    )
    preset = "gpu" if cuda else "cpu-smoke"
    if not cuda:
        session.warn(
            "no CUDA device: running the cpu-smoke preset; GPU performance is NOT verified"
        )
    out = f"{RAW}/benchmark.json"
    return stage(
        session,
        "performance",
        [f"--benchmark={out}"],
        ["python", "-m", "amptrain.benchmark", "--preset", preset, "--out", out, "--quiet", *extra],
        must_pass=must_pass,
    )


def run_report(session: nox.Session, *args: str) -> None:
    baseline = (
        [f"--baseline={ROOT / 'reports' / 'baseline'}"]
        if any((ROOT / "reports" / "baseline").glob("*.json"))
        else []
    )
    session.run("stagegate", "report", RAW, "--out", "reports", *baseline, *args)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu", "stage"])
def lint(session: nox.Session) -> None:
    """Stage 1: ruff, compile and import checks, zizmor, hadolint, shellcheck, check-jsonschema."""
    install(session, "test", "lint")  # the import check imports every module, extras' too
    run_lint(session, session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu", "stage"])
def unit(session: nox.Session) -> None:
    """Stage 2: the unit suite with coverage and captured warnings."""
    install(session, "test", "lint")
    run_unit(session, session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu", "stage"])
def integration(session: nox.Session) -> None:
    """Stage 3: test_fine_tuning end to end on CPU (fp32 and bf16 autocast), W&B offline."""
    install(session, "test")
    run_integration(session, session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["gpu", "stage"])
def benchmark(session: nox.Session) -> None:
    """Stage 4: the AMP benchmark (gpu preset with CUDA, else the cpu-smoke preset)."""
    install(session)
    run_benchmark(session, session.posargs)


@nox.session(tags=["report"])
def report(session: nox.Session) -> None:
    """Judge the recorded stages and render the reports (e.g. -- --require performance --github)."""
    session.install("-e", "./stagegate")  # its own distribution: no torch
    run_report(session, *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def verify(session: nox.Session) -> None:
    """Stages 1-4, then the reports (even when a stage fails); exits with the gate's code."""
    install(session, "test", "lint")
    shutil.rmtree(ROOT / RAW, ignore_errors=True)  # records of an earlier run must not leak in
    for run in (run_lint, run_unit, run_integration, run_benchmark):
        run(session, [], must_pass=False)
    run_report(session, *session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu"])
def tests(session: nox.Session) -> None:
    """Run the project's whole test suite."""
    install(session, "test", "lint")
    session.run("pytest", *session.posargs)


def requirements(*extras: str) -> list[str]:
    """amptrain's dependencies and those of ``extras``, as pyproject.toml lists them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    return [*project["dependencies"], *(r for extra in extras for r in optional[extra])]


@nox.session(venv_params=VENV_PARAMS)
def mutation(session: nox.Session) -> None:
    """Mutation testing with mutmut, then the kill rate per file against
    tests/mutation_equivalents.toml. Not part of verify: it takes hours.

    amptrain is mutated here ([tool.mutmut] in pyproject.toml), stagegate in a workspace laid
    out by tools/mutation_workspace.py (its [tool.mutmut] is in stagegate/pyproject.toml).
    mutmut tests a mutated copy in mutants/, so amptrain itself is not installed (its editable
    finder would win over the copy), only what it needs. Arguments name mutants to run, as
    globs that start with the package ("amptrain.precision*", "stagegate.judge*"); the report
    then judges the mutants they name. The lint extra comes too: stagegate's tests read what
    the real linters write.
    """
    session.install(*CONSTRAINTS, *requirements("test", "lint"), "-e", "./stagegate")
    globs = {name: [] for name in MUTATION_WORKSPACES}
    for glob in session.posargs:
        package = glob.partition(".")[0]
        if package not in globs:
            session.error(f"{glob!r}: a glob starts with {' or '.join(globs)}, then a dot")
        globs[package].append(glob)
    out = ROOT / "reports" / "mutation"
    out.mkdir(parents=True, exist_ok=True)
    chosen = [name for name, picked in globs.items() if picked or not session.posargs]
    for name in chosen:
        run_mutmut(session, name, globs[name], out / f"{name}-results.txt")
    named = [arg for glob in session.posargs for arg in ("--only", glob)]
    session.run(
        "python",
        "tools/mutation_report.py",
        *(str(out / f"{name}-results.txt") for name in chosen),
        "--equivalents",
        "tests/mutation_equivalents.toml",
        "--out",
        str(out / "report.md"),
        "--show-command",
        "mutmut show",
        "--workspace",
        f"stagegate={MUTATION_WORKSPACES['stagegate']}",
        *named,
    )


def run_mutmut(session: nox.Session, name: str, globs: list[str], results: Path) -> None:
    """``mutmut run`` in ``name``'s workspace, its results written to ``results``."""
    where = MUTATION_WORKSPACES[name]
    if where != ROOT:
        session.run("python", "tools/mutation_workspace.py", str(where))
    children = str(os.cpu_count() or 1)
    env = {"OMP_NUM_THREADS": "1"}  # one thread per mutant process: the children share cores
    with session.chdir(where):
        session.run("mutmut", "run", "--max-children", children, *globs, env=env)
        text = str(session.run("mutmut", "results", "--all", "true", silent=True))
        # A timeout counts as detected: each is run again alone, so one that only timed out
        # beside another mutant (a busy machine) is tested again, not counted.
        timed_out = [
            ln.split(":")[0].strip() for ln in text.splitlines() if ln.endswith(": timeout")
        ]
        if timed_out:
            session.run("mutmut", "run", "--max-children", "1", *timed_out, env=env)
            text = str(session.run("mutmut", "results", "--all", "true", silent=True))
    results.write_text(text)
