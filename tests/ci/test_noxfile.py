"""What lets a reused virtualenv skip its install: the digest of everything that decides it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from .ci_tools import noxfile as load_noxfile
from .ci_tools import tool

cpu_stage = tool("cpu_stage")

ROOT = Path(__file__).resolve().parents[2]


noxfile = load_noxfile()
ARGS = ["-c", "constraints-cpu.txt", "-e", ".[test,lint]", "-e", "./stagegate"]


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    for name in noxfile.INSTALL_INPUTS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_key_is_the_same_for_the_same_inputs(inputs: Path) -> None:
    assert noxfile.install_key(ARGS, inputs) == noxfile.install_key(ARGS, ROOT)


@pytest.mark.parametrize(
    "name", ["pyproject.toml", "stagegate/pyproject.toml", "constraints-cpu.txt"]
)
def test_a_changed_input_changes_the_key(inputs: Path, name: str) -> None:
    before = noxfile.install_key(ARGS, inputs)
    (inputs / name).write_text((inputs / name).read_text() + "\n# changed\n")
    assert noxfile.install_key(ARGS, inputs) != before


def test_other_extras_change_the_key() -> None:
    other = ["-c", "constraints-cpu.txt", "-e", ".[test]", "-e", "./stagegate"]
    assert noxfile.install_key(other) != noxfile.install_key(ARGS)


def _session(backend: str) -> SimpleNamespace:
    return SimpleNamespace(virtualenv=SimpleNamespace(venv_backend=backend))


def _links(args: list[str]) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == "--find-links"]


def _no_pip_config(tmp_path: Path) -> dict[str, str]:
    """An environment where pip reads no configuration file (pip's rule for os.devnull)."""
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull}


@pytest.mark.slow
def test_uv_is_given_pips_find_links_folders_and_compiles_nothing(tmp_path: Path) -> None:
    env = {**_no_pip_config(tmp_path), "PIP_FIND_LINKS": "/opt/wheels  /srv/more"}
    args = noxfile.uv_args(_session("uv"), env)
    assert _links(args) == ["/opt/wheels", "/srv/more"] and "--compile-bytecode" not in args
    assert "--find-links" not in noxfile.uv_args(_session("uv"), _no_pip_config(tmp_path))


@pytest.mark.slow
def test_uv_is_given_the_find_links_of_pips_configuration_files(tmp_path: Path) -> None:
    """A folder named only in a pip configuration file (no variable) reaches uv too: pip
    itself lists it (``pip config list``)."""
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nfind-links = /srv/wheels /srv/other\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_CONFIG_FILE": str(config)}
    links = _links(noxfile.uv_args(_session("uv"), env))
    assert {"/srv/wheels", "/srv/other"} <= set(links)


def test_pip_reads_its_own_configuration() -> None:
    assert noxfile.uv_args(_session("venv"), {"PIP_FIND_LINKS": "/opt/wheels"}) == []


@pytest.mark.parametrize("installed", [False, True])
def test_every_session_writes_bytecode_as_it_imports(tmp_path: Path, installed: bool) -> None:
    # PYTHONDONTWRITEBYTECODE set here would make each process compile torch again: the
    # sessions write bytecode, whether or not the install runs this time
    calls: list[tuple[str, ...]] = []
    session = SimpleNamespace(
        env={}, virtualenv=SimpleNamespace(venv_backend="venv", location=str(tmp_path)),
        log=lambda *a: calls.append(("log",)), install=lambda *a: calls.append(("install",)),
        run_install=lambda *a, **k: None,
    )  # fmt: skip
    if installed:
        args = [*noxfile.CONSTRAINTS, "-e", ".[test]", "-e", "./stagegate"]
        (tmp_path / "amptrain-install.sha256").write_text(noxfile.install_key(args))
    noxfile.install(session, "test")
    assert session.env["PYTHONDONTWRITEBYTECODE"] == ""  # empty: Python writes bytecode
    assert calls == [("log",) if installed else ("install",)]


def _collected(command: tuple[str, ...]) -> set[str]:
    """The node ids a stage's pytest command selects, as pytest collects them here."""
    args = command[3:]  # after python -m pytest
    selection = [args[i + 1] for i, arg in enumerate(args) if arg == "-m"]
    paths = [a for a in args if a.startswith("tests")]
    marks = ["-m", selection[0]] if selection else []
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"]
    done = subprocess.run(
        [*pytest, "-p", "no:xdist", *marks, *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_every_test_runs_in_exactly_one_of_the_test_stages() -> None:
    """execution, integration and slow as the noxfile runs them: each test in one of them
    (the slow stage is the only one that runs a slow-marked test)."""
    stages = cpu_stage.definitions()
    selected = {n: _collected(stages[n].command) for n in ("execution", "integration", "slow")}
    everything = _collected(("python", "-m", "pytest"))
    assert set().union(*selected.values()) == everything
    assert sum(len(s) for s in selected.values()) == len(everything)  # none in two stages
    assert selected["slow"] and selected["execution"] and selected["integration"]
