"""The machine a stage ran on, observed by stagegate run itself: accelerators from the driver's
own tool, found on the stage's PATH, held against the kernel driver's list (stand-in programs
play the tool and stand-in folders the driver's /proc/driver/nvidia/gpus: neither exists here)."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest

from stagegate.collect import load_record
from stagegate.record import machine
from stagegate.record.machine import Kernel, accelerators
from stagegate.record.runner import run_stage


def _tool(folder: Path, body: str) -> dict[str, str]:
    """A PATH whose only nvidia-smi is a shell script running ``body``."""
    folder.mkdir(exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {"PATH": str(folder)}


def _driver(folder: Path, *models: str, release: str = "6.8.0-1015-aws") -> Kernel:
    """A Linux kernel of ``release`` whose NVIDIA driver lists a GPU of each of ``models`` in
    a stand-in folder (none: not loaded)."""
    (folder / "gpus").mkdir(parents=True)
    for i, model in enumerate(models):
        info = folder / "gpus" / f"0000:0{i}:00.0" / "information"
        info.parent.mkdir()
        info.write_text(f"Model: \t\t {model}\nIRQ:   \t\t 36\nBus Type: \t PCIe\n")
    (folder / "osrelease").write_text(release + "\n")
    return Kernel("linux", folder / "gpus", folder / "osrelease")


# What the driver's tool prints for this query on an H200 machine (one GPU)
H200 = "NVIDIA H200, 580.159.04, 143771, 9.0"
H100 = "NVIDIA H100 80GB HBM3"


def test_no_tool_and_no_driver_observes_no_accelerator(tmp_path: Path) -> None:
    seen = accelerators({"PATH": str(tmp_path)}, _driver(tmp_path / "kernel"))
    assert seen == {"probe": "nvidia-smi", "found": False, "devices": [], "error": None}


def test_without_the_tool_the_drivers_own_list_is_read(tmp_path: Path) -> None:
    seen = accelerators({"PATH": str(tmp_path)}, _driver(tmp_path / "kernel", "NVIDIA H200"))
    assert [d["name"] for d in seen["devices"]] == ["NVIDIA H200"] and seen["found"]


def test_a_driver_too_old_for_compute_capability_is_asked_without_it(tmp_path: Path) -> None:
    old = (
        'case "$1" in *compute_cap*) echo \'Field "compute_cap" is not a valid field to '
        "query.'; exit 2;; esac\n"
        'echo "NVIDIA A100-SXM4-80GB, 470.82.01, 81251"'
    )
    seen = accelerators(
        _tool(tmp_path / "bin", old), _driver(tmp_path / "kernel", "NVIDIA A100-SXM4-80GB")
    )
    assert seen["error"] is None
    assert seen["devices"] == [
        {
            "name": "NVIDIA A100-SXM4-80GB",
            "driver": "470.82.01",
            "memory_mb": 81251,
            "compute_capability": None,
        }
    ]


def test_each_gpu_the_tool_lists_is_recorded_with_its_driver_memory_and_capability(
    tmp_path: Path,
) -> None:
    lines = f'[ "$2" = --format=csv,noheader,nounits ] && echo "{H200}"\n'
    env = _tool(tmp_path / "bin", lines + f'echo "{H100}, 580.159.04, 81559, 9.0"')
    seen = accelerators(env, _driver(tmp_path / "kernel", H100, "NVIDIA H200"))
    assert seen["found"] and seen["error"] is None
    assert seen["devices"] == [
        {"name": "NVIDIA H200", "driver": "580.159.04", "memory_mb": 143771,
         "compute_capability": "9.0"},
        {"name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "memory_mb": 81559,
         "compute_capability": "9.0"},
    ]  # fmt: skip


def test_a_tool_that_fails_is_an_error_not_a_machine_without_gpus(tmp_path: Path) -> None:
    env = _tool(tmp_path / "bin", "echo 'NVIDIA-SMI has failed to communicate' >&2; exit 9")
    seen = accelerators(env, _driver(tmp_path / "kernel", H100))
    assert seen["found"] and seen["devices"] == []
    assert seen["error"].startswith("exit 9") and "failed to communicate" in seen["error"]


def test_a_tool_that_lists_no_gpu_where_the_driver_lists_one_is_an_error(tmp_path: Path) -> None:
    env = _tool(tmp_path / "bin", "exit 0")  # first on the PATH, it hides the GPU
    seen = accelerators(env, _driver(tmp_path / "kernel", H100))
    assert seen["devices"] == [] and H100 in seen["error"]
    assert accelerators(env, _driver(tmp_path / "none"))["error"] is None  # no GPU anywhere


def test_a_failing_tool_where_no_nvidia_driver_is_loaded_saw_no_gpu(tmp_path: Path) -> None:
    env = _tool(tmp_path / "bin", "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    seen = accelerators(env, _driver(tmp_path / "kernel"))  # a CPU machine's image ships it
    assert seen["devices"] == [] and seen["error"] is None
    assert accelerators(env, _driver(tmp_path / "gpu", H100))["error"].startswith("exit 9")


def test_lines_that_are_not_a_gpu_are_left_out(tmp_path: Path) -> None:
    env = _tool(tmp_path / "bin", f'echo "{H200}"; echo "No devices were found"; echo ", , "')
    seen = accelerators(env, _driver(tmp_path / "kernel", "NVIDIA H200"))
    assert [d["name"] for d in seen["devices"]] == ["NVIDIA H200"] and seen["error"] is None


@pytest.mark.slow
def test_the_record_holds_what_the_stage_machine_showed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine, "KERNEL", _driver(tmp_path / "kernel", "NVIDIA H200"))
    env = {**os.environ, **_tool(tmp_path / "bin", f'echo "{H200}"')}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    run_stage("cuda", ["true"], out_dir=tmp_path, env=env, stdout=io.StringIO())
    saved = load_record(tmp_path / "cuda.json").environment["accelerators"]
    assert [d["name"] for d in saved["devices"]] == ["NVIDIA H200"] and saved["error"] is None


WSL = "5.15.153.1-microsoft-standard-WSL2"


@pytest.mark.parametrize(
    ("listed", "driver", "release", "fails"),
    [
        (["NVIDIA H200"], None, None, True),  # the driver is not loaded: no GPU at all
        (["NVIDIA H200"], ["NVIDIA H100 80GB HBM3"], None, True),
        (["NVIDIA H200"], ["NVIDIA H20"], None, True),  # a name that starts the other's
        (["NVIDIA H100"], ["NVIDIA H100 NVL"], None, True),
        (["NVIDIA H200", "NVIDIA H200"], ["NVIDIA H200"], None, True),  # one GPU named twice
        (["NVIDIA H200"], ["NVIDIA H200", "NVIDIA H200"], None, False),  # a job given one of two
        (["nvidia  h200"], ["NVIDIA H200"], None, False),
        (["NVIDIA Graphics Device"], ["Unknown"], None, False),  # a board the driver cannot name
        ([], None, None, False),
        (["NVIDIA H200"], None, WSL, False),
    ],
    ids=[
        "no-driver",
        "another-gpu",
        "longer-name",
        "shorter-name",
        "twice",
        "some-of-them",
        "spelled-otherwise",
        "unnamed-board",
        "none-and-no-driver",
        "wsl-has-no-folder",
    ],
)
def test_a_gpu_the_tool_names_must_be_one_the_kernel_driver_lists(
    tmp_path: Path, listed: list[str], driver: list[str] | None, release: str | None, fails: bool
) -> None:
    lines = "".join(f'echo "{name}, 580.159.04, 143771, 9.0"\n' for name in listed)
    env = _tool(tmp_path / "bin", lines or "true")
    kernel = _driver(tmp_path / "kernel", *(driver or ()), release=release or "6.8.0-1015-aws")
    if driver is None:
        kernel.gpus.rmdir()
    seen = accelerators(env, kernel)
    assert [d["name"] for d in seen["devices"]] == listed  # what the tool said stays on record
    assert (seen["error"] is not None) is fails
    if fails:
        assert str(kernel.gpus) in seen["error"] and listed[0] in seen["error"]


def test_only_linux_is_held_to_the_drivers_folder(tmp_path: Path) -> None:
    env = _tool(tmp_path / "bin", 'echo "NVIDIA H200, 580.159.04, 143771, 9.0"')
    linux = _driver(tmp_path / "kernel")
    assert accelerators(env, linux)["error"] is not None
    assert accelerators(env, Kernel("win32", linux.gpus, linux.release))["error"] is None
