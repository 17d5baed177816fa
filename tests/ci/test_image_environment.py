"""The image's dependency step, run against a virtualenv that stands in for the image: torch
preinstalled, then what the Dockerfile installs; the nox sessions must reuse that torch and
download nothing (pip is cut off from every index while they run).

In the image the sessions' venvs see the base interpreter's site-packages
(--system-site-packages). A venv made from a venv sees the first one's base instead, so here
the stand-in's site-packages reach the sessions through PYTHONPATH, ahead of any other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("AMPTRAIN_SYSTEM_TORCH") == "1",
    reason="inside the image the sessions already run on its torch (and a stand-in would "
    "download the CUDA build)",
)
def test_sessions_in_the_image_reuse_its_torch_and_download_nothing(tmp_path: Path) -> None:
    image = tmp_path / "image"
    venv.create(image, with_pip=True)
    python = str(image / "bin" / "python")
    # Bytecode is left uncompiled: compiling it, most of the install's time, is not under test.
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    # What the base image brings (the same torch release as constraints-cpu.txt).
    subprocess.run([*pip, "-c", ROOT / "constraints-cpu.txt", "torch"], check=True, timeout=900)
    # The Dockerfile's dependency step, as it is written there.
    requirements = subprocess.run(
        [python, ROOT / "tools" / "image_requirements.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (tmp_path / "requirements.txt").write_text(requirements)
    subprocess.run(
        [*pip, "-r", tmp_path / "requirements.txt", "nox==2026.10.20"], check=True, timeout=900
    )
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
    run = subprocess.run(
        [python, "-m", "nox", "-s", "benchmark"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    session = work / ".nox" / "benchmark"
    assert not list(session.glob("lib/python*/site-packages/torch")), "the session installed torch"
    where = subprocess.run(
        [session / "bin" / "python", "-c", "import torch; print(torch.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert where.startswith(str(image)), where
    assert (work / "reports" / "raw" / "performance.json").exists()
