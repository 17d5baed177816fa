"""Nox sessions: the staged verification job and the project's own test suite.

nox -s verify     stages 1-4, then the reports; exits with the gate's code (0 PASS, 1 BLOCK)
nox -s slow       the slow-marked tests, the stage verify leaves out (CI requires it)
nox -s tests      the whole test suite (the README's test command)
nox -s static | execution | integration | performance    one stage on its own (session = stage)
nox -s regression -- REF    the regression stage: REF's training step against this tree's, A/B
nox -s report     judge the recorded stages and write the reports
nox -s cuda       the cuda-marked tests as a stage (needs a CUDA device)
nox -s mutation   mutation testing (slow; weekly in CI): -- "amptrain.precision*" runs some
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import nox
from nox.command import CommandFailed

# uv makes and fills a virtualenv in seconds where pip takes minutes (torch alone is 200 MB);
# where uv is not installed (`pip install nox` alone), nox falls back to venv and pip.
nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["verify"]

ROOT = Path(__file__).resolve().parent
RAW = "reports/raw"
# Other JUnit reporters' test files, under their own licenses, are not in this repository; where
# a copy lies beside the checkout, stagegate's peer tests read it (they skip otherwise).
PEERS = ROOT.parent / "shared" / "junit-peers"


def peer_env() -> dict[str, str]:
    """Environment for the test runs: the peer corpus's folder where there is one."""
    return {"STAGEGATE_JUNIT_PEERS": str(PEERS)} if PEERS.is_dir() else {}


# Inside the CUDA image torch (and the dependencies) come with the image: reuse them, with the
# image's pip (uv's virtualenvs take no --without-pip).
SYSTEM_TORCH = os.environ.get("AMPTRAIN_SYSTEM_TORCH") == "1"
if SYSTEM_TORCH:
    nox.options.default_venv_backend = "venv"
# Without a pip and setuptools of their own, the sessions use the image's (build tools included).
VENV_PARAMS = ["--system-site-packages", "--without-pip"] if SYSTEM_TORCH else []
# Elsewhere torch is pinned, so an install never pulls the multi-GB CUDA build by accident.
# In the image the build tools come with it too: editable installs download nothing.
CONSTRAINTS = ["--no-build-isolation"] if SYSTEM_TORCH else ["-c", "constraints-cpu.txt"]


# pytest as a module of the session's interpreter: in the image the sessions install no pytest
# script of their own, and the image's would run on its interpreter, which has no amptrain.
PYTEST = ["python", "-m", "pytest"]

# What an install depends on: when none of these changed, a reused virtualenv has it already.
INSTALL_INPUTS = ("pyproject.toml", "stagegate/pyproject.toml", "constraints-cpu.txt")


def install_key(args: list[str], root: Path = ROOT) -> str:
    """A digest of an install's arguments and of the files that decide what it installs."""
    digest = hashlib.sha256("\0".join(args).encode())
    for name in INSTALL_INPUTS:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes())
    return digest.hexdigest()


def pip_find_links(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The find-links folders pip itself would use here: ``PIP_FIND_LINKS`` and every
    ``find-links`` of pip's configuration files, as ``pip config list`` reads them."""
    links = environ.get("PIP_FIND_LINKS", "").split()
    try:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    except (OSError, subprocess.SubprocessError):  # no pip beside nox: the variable only
        listed = ""
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            links += value.strip().strip("'\"").split()
    return list(dict.fromkeys(links))


def uv_args(session: nox.Session, environ: Mapping[str, str] = os.environ) -> list[str]:
    """What uv needs to install as pip does here, when uv installs. uv reads no pip
    configuration: without pip's find-links folders (where this machine's torch CPU wheel is)
    it would take PyPI's Linux torch, which pulls the CUDA build."""
    if getattr(session.virtualenv, "venv_backend", None) != "uv":
        return []
    links = pip_find_links(environ)
    return [arg for link in links for arg in ("--find-links", link)]


def install(session: nox.Session, *extras: str) -> None:
    """Install amptrain (editable) with ``extras`` and the stagegate distribution beside it;
    torch pinned or reused. A reused virtualenv whose last install had the same inputs is left
    as it is (the packages are editable: code changes need no install)."""
    # Bytecode is written as each module is first imported, never compiled whole at install:
    # compiling every installed module (all of torch's and transformers') took 18 s of a cold
    # run, compiling those the stages import about 8. Where PYTHONDONTWRITEBYTECODE is set,
    # each process would otherwise compile torch anew; the sessions write it ("" is unset).
    session.env["PYTHONDONTWRITEBYTECODE"] = ""
    spec = f".[{','.join(extras)}]" if extras else "."
    args = [*CONSTRAINTS, *uv_args(session), "-e", spec, "-e", "./stagegate"]
    location = getattr(session.virtualenv, "location", None)
    stamp = Path(location) / "amptrain-install.sha256" if location else None
    key = install_key(args)
    if stamp and stamp.is_file() and stamp.read_text() == key:
        session.log(f"install skipped: {', '.join(INSTALL_INPUTS)} unchanged since the last one")
        return
    if stamp:  # an install cut short must not leave an older stamp that still matches
        stamp.unlink(missing_ok=True)
    session.install(*args)
    if stamp:  # run_install: skipped exactly when nox skipped the install (-R, --no-install)
        write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])"
        session.run_install("python", "-c", write, str(stamp), key, silent=True)


def stage(
    session: nox.Session,
    name: str,
    files: list[str],
    command: list[str],
    env: dict[str, str] | None = None,
    must_pass: bool = True,
) -> bool:
    """Run ``command`` as stage ``name`` through ``stagegate run``; True when it succeeded.

    The record is written whatever happens, and ``stagegate run`` exits with the command's code
    (124 on timeout, 128+N on signal N, 127 when it could not start). ``must_pass`` ends the
    session on failure, as a stage run on its own should; ``verify`` goes on instead.
    """
    try:
        session.run("stagegate", "run", name, "--out-dir", RAW, *files, "--", *command, env=env)
    except CommandFailed:
        if must_pass:
            session.error(f"stage {name} failed; its record is {RAW}/{name}.json")
        return False
    return True


def run_static(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    tools = ("ruff", "zizmor", "hadolint", "shellcheck", "check-jsonschema")
    files = [f"--lint={t}={RAW}/lint/{t}.json" for t in tools]
    files.append(f"--lint=generic={RAW}/lint/imports.json")
    return stage(
        session,
        "static",
        files,
        ["python", "tools/static_checks.py", "--out", f"{RAW}/lint", *extra],
        must_pass=must_pass,
    )


def run_execution(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    junit, cov, warns = f"{RAW}/junit-unit.xml", f"{RAW}/coverage.json", f"{RAW}/warnings-unit.json"
    return stage(
        session,
        "execution",
        [f"--junit={junit}", f"--coverage={cov}", f"--warnings={warns}"],
        [
            *PYTEST,
            "-m",
            "not integration and not slow",  # the slow stage runs the slow-marked tests
            # Independent tests, one worker per core; worksteal keeps both busy to the end.
            "-n",
            "auto",
            "--dist",
            "worksteal",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "--cov",
            f"--cov-report=json:{cov}",
            "--cov-report=term:skip-covered",
            f"--stagegate-warnings={warns}",
            *extra,
        ],
        env=peer_env(),
        must_pass=must_pass,
    )


def run_integration(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    junit, metrics = f"{RAW}/junit-integration.xml", f"{RAW}/integration-metrics.json"
    return stage(
        session,
        "integration",
        [f"--junit={junit}", f"--metrics={metrics}"],
        [
            *PYTEST,
            "tests/integration",
            "-m",
            "integration and not slow",
            # A worker a core, each test file on one worker (its module fixtures run once):
            # 70 s against 100 s in one process on two cores (docs/development.md).
            "-n",
            "auto",
            "--dist",
            "loadfile",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            *extra,
        ],
        env={"AMPTRAIN_INTEGRATION_METRICS": metrics},
        must_pass=must_pass,
    )


def run_slow(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    """The tests marked slow (those that start processes: pytest, torchrun, builds), from the
    unit and the integration suites; verify leaves them to this stage, which CI requires."""
    junit = f"{RAW}/junit-slow.xml"
    # each file on one worker: the torchrun jobs of a module's fixtures run once
    command = [*PYTEST, "-m", "slow", "-n", "auto", "--dist", "loadfile", "-p", "no:cacheprovider"]
    return stage(
        session,
        "slow",
        [f"--junit={junit}"],
        [*command, f"--junitxml={junit}", *extra],
        env=peer_env(),
        must_pass=must_pass,
    )


def _cuda(session: nox.Session) -> bool:
    out = session.run("python", "-c", "import torch; print(torch.cuda.is_available())", silent=True)
    return str(out or "").strip().endswith("True")  # None under --install-only


def run_performance(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    cuda = _cuda(session)
    preset = "gpu" if cuda else "cpu-smoke"
    if not cuda:
        session.warn(
            "no CUDA device: running the cpu-smoke preset; GPU performance is NOT verified"
        )
    out = f"{RAW}/benchmark.json"
    # On a GPU the step runs compiled, as the committed GPU baselines measured it; the CPU
    # preset stays eager (compiling would double verify's benchmark time on two cores).
    compiled = ["--compile"] if cuda else []
    command = ["python", "-m", "amptrain.benchmark", "--preset", preset, *compiled]
    return stage(
        session,
        "performance",
        [f"--benchmark={out}"],
        [*command, "--out", out, "--quiet", *extra],
        must_pass=must_pass,
    )


def run_regression(
    session: nox.Session, base: str, extra: list[str], must_pass: bool = True
) -> bool:
    """The A/B stage: ``base``'s training step against the working tree's, interleaved."""
    preset = "gpu" if _cuda(session) else "cpu-smoke"
    out = f"{RAW}/ab.json"
    command = ["python", "-m", "amptrain.benchmark.ab", "--against", base, "--preset", preset]
    return stage(
        session,
        "regression",
        [f"--ab={out}"],
        [*command, "--out", out, *extra],
        must_pass=must_pass,
    )


def run_cuda(session: nox.Session, extra: list[str], must_pass: bool = True) -> bool:
    """The cuda-marked tests as a stage of their own, with JUnit."""
    junit = f"{RAW}/junit-cuda.xml"
    command = [*PYTEST, "-m", "cuda", "-p", "no:cacheprovider", f"--junitxml={junit}", *extra]
    return stage(session, "cuda", [f"--junit={junit}"], command, must_pass=must_pass)


def run_report(session: nox.Session, *args: str) -> None:
    baseline = (
        [f"--baseline={ROOT / 'reports' / 'baseline'}"]
        if any((ROOT / "reports" / "baseline").glob("*.json"))
        else []
    )
    session.run("stagegate", "report", RAW, "--out", "reports", *baseline, *args)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu", "stage"])
def static(session: nox.Session) -> None:
    """Stage 1: ruff, compile and import checks, zizmor, hadolint, shellcheck, check-jsonschema."""
    install(session, "test", "lint")  # the import check imports every module, extras' too
    run_static(session, session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu", "stage"])
def execution(session: nox.Session) -> None:
    """Stage 2: the unit suite with coverage and captured warnings."""
    install(session, "test", "lint")
    run_execution(session, session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu", "stage"])
def integration(session: nox.Session) -> None:
    """Stage 3: test_fine_tuning end to end on CPU (fp32 and bf16 autocast), W&B offline."""
    install(session, "test")
    run_integration(session, session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["gpu", "stage"])
def performance(session: nox.Session) -> None:
    """Stage 4: the AMP benchmark (gpu preset with CUDA, else the cpu-smoke preset)."""
    install(session, "fp8")  # both presets measure an fp8 arm
    run_performance(session, session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu", "stage"])
def slow(session: nox.Session) -> None:
    """The slow-marked tests (unit and integration) as their stage; judge.yml requires it."""
    install(session, "test", "lint")
    run_slow(session, session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["gpu", "stage"])
def regression(session: nox.Session) -> None:
    """The A/B stage: ``-- REF``'s training step against this tree's, interleaved."""
    install(session)
    if not session.posargs or session.posargs[0].startswith("-"):
        session.error("name the base to compare with: nox -s regression -- origin/main")
    run_regression(session, session.posargs[0], session.posargs[1:])


@nox.session(venv_params=VENV_PARAMS, tags=["gpu", "stage"])
def cuda(session: nox.Session) -> None:
    """The cuda-marked tests (fp16 GradScaler on CUDA, sync debug mode, NCCL) as their stage."""
    install(session, "test")
    if not _cuda(session):
        session.skip("no CUDA device: the cuda-marked tests need one (gpu.yml runs them)")
    run_cuda(session, session.posargs)


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
    for run in (run_static, run_execution, run_integration, run_performance):
        run(session, [], must_pass=False)
    run_report(session, *session.posargs)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu"])
def tests(session: nox.Session) -> None:
    """Run the project's whole test suite."""
    install(session, "test", "lint")
    session.run(*PYTEST, *session.posargs, env=peer_env())


def requirements(*extras: str) -> list[str]:
    """amptrain's dependencies and those of ``extras``, as pyproject.toml lists them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    return [*project["dependencies"], *(r for extra in extras for r in optional[extra])]


@nox.session(venv_params=VENV_PARAMS)
def mutation(session: nox.Session) -> None:
    """Mutation testing (tools/mutation.py): mutmut, then the kill rate per file and every
    mutant no test detected. Not part of verify: it takes hours.

    Arguments name mutants, as globs that start with the package ("amptrain.precision*",
    "stagegate.judge*"). amptrain itself is not installed, only what it needs: mutmut tests a
    mutated copy, which its editable finder would hide. The lint extra comes too: stagegate's
    reader tests read what the real linters write.
    """
    session.install(
        *CONSTRAINTS, *uv_args(session), *requirements("test", "lint"), "-e", "./stagegate"
    )
    session.run("python", "tools/mutation.py", *session.posargs)
