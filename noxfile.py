"""Nox sessions: the staged verification job (lint, unit, integration, benchmark, report, verify)
and the project's own test suite (tests)."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["verify"]

# Inside the CUDA image torch comes with the image: reuse it instead of downloading it again.
SYSTEM_TORCH = os.environ.get("AMPTRAIN_SYSTEM_TORCH") == "1"
VENV_PARAMS = ["--system-site-packages"] if SYSTEM_TORCH else []
# Elsewhere pin torch, so an install never pulls the multi-GB CUDA build by accident.
CONSTRAINTS = [] if SYSTEM_TORCH else ["-c", "constraints-cpu.txt"]


def install(session: nox.Session, *extras: str) -> None:
    """Install the project (editable) with ``extras``, torch pinned or reused."""
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install(*CONSTRAINTS, "-e", spec)


@nox.session(venv_params=VENV_PARAMS, tags=["cpu"])
def tests(session: nox.Session) -> None:
    """Run the project's whole test suite."""
    install(session, "test", "lint")
    session.run("pytest", *session.posargs)
