"""amptrain and stagegate are two distributions: amptrain's wheel carries no gate and no pytest
plugin; stagegate's needs no torch and works in an environment of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheels")
    # Built from a copy without build/: setuptools would add what a stale one holds.
    stale = shutil.ignore_patterns("build", ".nox", ".git", "reports", "*.egg-info", "__pycache__")
    copy = shutil.copytree(ROOT, tmp_path_factory.mktemp("tree") / "repo", ignore=stale)
    for project in (copy, copy / "stagegate"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(out),
                str(project),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    names = {"amptrain": "amptrain", "stagegate_ci": "stagegate"}  # wheel name: its directory
    return {names[p.name.split("-")[0]]: zipfile.ZipFile(p) for p in out.glob("*.whl")}


def _metadata(wheel: zipfile.ZipFile, name: str) -> str:
    return next(
        wheel.read(n).decode() for n in wheel.namelist() if n.endswith(f".dist-info/{name}")
    )


@pytest.mark.slow
def test_amptrain_wheel_carries_no_gate_and_no_pytest_plugin(wheels: dict) -> None:
    amptrain = wheels["amptrain"]
    assert not [n for n in amptrain.namelist() if n.startswith("stagegate")]
    entry_points = next(
        (amptrain.read(n).decode() for n in amptrain.namelist() if n.endswith("entry_points.txt")),
        "",
    )
    assert "pytest11" not in entry_points and "stagegate" not in entry_points


@pytest.mark.slow
def test_stagegate_wheel_is_torch_free_and_complete(wheels: dict) -> None:
    stagegate = wheels["stagegate"]
    assert "Name: stagegate-ci\n" in _metadata(stagegate, "METADATA")  # PyPI's stagegate is not
    requires = [
        line.split(":", 1)[1].strip()
        for line in _metadata(stagegate, "METADATA").splitlines()
        if line.startswith("Requires-Dist:")
    ]
    installed = [r for r in requires if "extra ==" not in r]  # the test extra only on request
    assert sorted(r.split(">")[0] for r in installed) == ["defusedxml", "jinja2"]
    assert not [r for r in requires if r.lower().startswith("torch")]
    names = stagegate.namelist()
    assert "stagegate/view/templates/summary.md.j2" in names and "stagegate/py.typed" in names
    assert "stagegate_warnings = stagegate.pytest_plugin" in _metadata(
        stagegate, "entry_points.txt"
    )


@pytest.mark.slow
def test_stagegate_installs_alone_and_judges(tmp_path: Path, wheels: dict) -> None:
    env = tmp_path / "env"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    wheel = wheels["stagegate"].filename
    # Alone: a PYTHONPATH naming a source tree (its egg-info) would make pip skip the wheel.
    env_vars = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = [python, "-m", "pip", "install", "-q", wheel]
    subprocess.run(install, check=True, timeout=300, env=env_vars)
    no_torch = subprocess.run([python, "-c", "import torch"], capture_output=True, env=env_vars)
    assert no_torch.returncode != 0
    raw = tmp_path / "raw"
    shutil.copytree(ROOT / "stagegate" / "tests" / "fixtures" / "stagegate" / "pass-cpu", raw)
    report = subprocess.run(
        [
            env / "bin" / "stagegate",
            "report",
            raw,
            "--out",
            tmp_path / "out",
            "--pyproject",
            ROOT / "pyproject.toml",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_vars,
    )
    assert report.returncode == 0, report.stderr
    assert (
        (tmp_path / "out" / "summary.md").read_text().startswith("# Verification Summary: **PASS**")
    )
