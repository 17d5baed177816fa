"""This project's verification: one session per stage declared in pyproject.toml, each run
through `stagegate run` (its record and files in reports/raw), and `verify`, which runs them
all and judges them with `stagegate report`.

nox -s static | execution | docs    one stage
nox -s verify                        every stage, then the reports in reports/ (fails unless PASS)

stagegate runs the stages and judges them from where nox runs; each session that runs pytest
installs it too (its pytest plugin witnesses which tests raised), from the folder nox's was
installed from or $STAGEGATE_SOURCE.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, distribution
from urllib.parse import unquote, urlparse

import nox
from nox.command import CommandFailed

nox.options.sessions = ["verify"]

RAW = "reports/raw"  # where the stages write; every file a stage declares must lie under it
RUFF, PYTEST = "ruff==0.17.6", "pytest>=8"


def stagegate_source() -> str | None:
    """The folder of stagegate's distribution (a checkout's stagegate/), to install beside
    pytest: $STAGEGATE_SOURCE (stagegate's reusable workflow sets it), else the folder pip
    installed the stagegate nox runs beside from; None where neither says. Never a name for an
    index to resolve: a package of that name there could be anyone's."""
    if os.environ.get("STAGEGATE_SOURCE"):
        return os.environ["STAGEGATE_SOURCE"]
    try:
        found = json.loads(distribution("stagegate-ci").read_text("direct_url.json") or "{}")
    except PackageNotFoundError:
        return None
    if "dir_info" not in found or not found.get("url", "").startswith("file:"):
        return None  # a wheel, or a repository's URL: no folder here to install from
    return os.path.join(unquote(urlparse(found["url"]).path), found.get("subdirectory", ""))


def install_witnessed(session: nox.Session, *also: str) -> None:
    """Install pytest, with stagegate's plugin beside it (it witnesses which tests raised)."""
    source = stagegate_source()
    if source is None:
        session.error(
            "no stagegate to install beside pytest: pip install it from its folder "
            "(pip install ./stagegate in its checkout) or set STAGEGATE_SOURCE to that folder"
        )
    session.install(*also, PYTEST, source)


def stage(session: nox.Session, name: str, files: list[str], *command: str) -> bool:
    """Run ``command`` as stage ``name``, declaring ``files``; False when it failed. The record
    is written whatever happens."""
    try:
        session.run(
            "stagegate", "run", name, "--out-dir", RAW, *files, "--", *command, external=True
        )
    except CommandFailed:
        return False
    return True


def run_static(session: nox.Session) -> bool:
    lint = f"{RAW}/ruff.json"
    # --exit-zero: ruff's findings are judged from its JSON, by the policy
    ruff = ["ruff", "check", "--exit-zero", "--output-format=json", f"--output-file={lint}", "."]
    return stage(session, "static", [f"--lint=ruff={lint}"], *ruff)


def run_execution(session: nox.Session) -> bool:
    junit = f"{RAW}/junit-execution.xml"
    pytest = ["python", "-m", "pytest", "tests/unit", f"--junitxml={junit}"]
    return stage(session, "execution", [f"--junit={junit}"], *pytest)


def run_docs(session: nox.Session) -> bool:
    junit = f"{RAW}/junit-docs.xml"
    pytest = ["python", "-m", "pytest", "tests/docs", f"--junitxml={junit}"]
    return stage(session, "docs", [f"--junit={junit}"], *pytest)


def one(session: nox.Session, run_stage: Callable[[nox.Session], bool]) -> None:
    """Run one stage on its own: the session fails with it."""
    if not run_stage(session):
        session.error(f"stage {session.name} failed; its record is {RAW}/{session.name}.json")


@nox.session
def static(session: nox.Session) -> None:
    """ruff, its findings as JSON."""
    session.install(RUFF)
    one(session, run_static)


@nox.session
def execution(session: nox.Session) -> None:
    """The unit tests, as JUnit."""
    install_witnessed(session)
    one(session, run_execution)


@nox.session
def docs(session: nox.Session) -> None:
    """The README's examples run and print what it says, as JUnit."""
    install_witnessed(session)
    one(session, run_docs)


@nox.session
def verify(session: nox.Session) -> None:
    """Every stage (going on after a failure), then the report; fails unless it says PASS."""
    install_witnessed(session, RUFF)
    shutil.rmtree(RAW, ignore_errors=True)  # no record of an earlier run may be judged
    for run_stage in (run_static, run_execution, run_docs):
        run_stage(session)
    report = ["stagegate", "report", RAW, "--out", "reports", "--pyproject", "pyproject.toml"]
    session.run(*report, external=True)  # exit 0 PASS, 1 BLOCK, 2 input it cannot judge
