"""The image's dependency step, run against a virtualenv that stands in for the image: torch
preinstalled, then what the Dockerfile installs; the installs of the nox sessions CI runs there
must reuse that torch and download nothing (pip is cut off from every index while they run).

In the image the sessions' venvs see the base interpreter's site-packages
(--system-site-packages). A venv made from a venv sees the first one's base instead, so here
the stand-in's site-packages reach the sessions through PYTHONPATH, ahead of any other.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from .ci_tools import noxfile as load_noxfile

ROOT = Path(__file__).resolve().parents[2]
# Run in each session's virtualenv: both distributions import there, on the image's torch.
IMPORTS = "import amptrain.benchmark, stagegate.cli, torch; print(torch.__file__)"
LAYERS = "tests/amptrain/test_layers.py"  # a test file that imports amptrain and is quick


def _nox(python: str, work: Path, env: dict[str, str], *args: str) -> None:
    run = subprocess.run(
        [python, "-m", "nox", *args], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def _copy_checkout(dest: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)


def _stand_in_image(image: Path, requirements: Path) -> None:
    """A virtualenv with pip, then what the base image brings (the torch release of
    constraints-cpu.txt), then the Dockerfile's dependency step as it is written there. uv
    builds it where uv is installed (seconds from its cache, given pip's find-links folders as
    the sessions' uv is), pip otherwise (most of a minute: unpacking torch); the packages are the
    same either way, and the sessions under test install with the image's own pip."""
    python = str(image / "bin" / "python")
    requirements.write_text(
        subprocess.run(
            [sys.executable, ROOT / "tools" / "image_requirements.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    wanted = ["-c", ROOT / "constraints-cpu.txt", "torch", "-r", requirements, "nox==2026.10.20"]
    uv = shutil.which("uv")
    if uv is None:
        venv.create(image, with_pip=True)
        # Bytecode is left uncompiled: compiling it, most of the install's time, is not tested.
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
        subprocess.run([*pip, *wanted], check=True, timeout=900)
        return
    subprocess.run([uv, "venv", "-q", "--seed", "--python", sys.executable, image], check=True)
    links = [arg for link in load_noxfile().pip_find_links() for arg in ("--find-links", link)]
    install = [uv, "pip", "install", "-q", "--python", python, *links, *wanted]
    subprocess.run(install, check=True, timeout=900)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("AMPTRAIN_SYSTEM_TORCH") == "1",
    reason="inside the image the sessions already run on its torch (and a stand-in would "
    "download the CUDA build)",
)
def test_sessions_in_the_image_reuse_its_torch_and_download_nothing(tmp_path: Path) -> None:
    image = tmp_path / "image"
    _stand_in_image(image, tmp_path / "requirements.txt")
    python = str(image / "bin" / "python")
    work = tmp_path / "checkout"
    _copy_checkout(work)
    (site,) = image.glob("lib/python*/site-packages")
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "AMPTRAIN_SYSTEM_TORCH": "1",
        "PIP_NO_INDEX": "1",  # any download fails the session
        "PATH": f"{image / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("VIRTUAL_ENV", None)
    # A real image's pip compiled the bytecode at install; the stand-in's is written by the
    # first process that imports each module (kept from being written, every process of the
    # session would compile torch anew).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Each install of the sessions CI runs in the image (static installs what execution does)...
    sessions = ["execution", "integration", "performance"]
    _nox(python, work, env, "--install-only", "-s", *sessions)
    # ...and a pytest stage runs there: pytest on the session's interpreter, which has amptrain
    # (the image's own pytest script would run on the image's, which has not). One small test
    # file in one process; the host's own pytest plugins, which a stand-in sees, left out.
    _nox(python, work, env, "-R", "-s", "execution", "--", "-n", "0", "-p", "no:benchmark", LAYERS)
    record = json.loads((work / "reports" / "raw" / "execution.json").read_text())
    assert record["exit_code"] == 0, record
    for name in sessions:
        session = work / ".nox" / name
        assert not list(session.glob("lib/python*/site-packages/torch")), f"{name} installed torch"
        where = subprocess.run(
            [session / "bin" / "python", "-c", IMPORTS],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
        assert where.startswith(str(image)), (name, where)
