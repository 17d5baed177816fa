"""The machine a stage ran on, observed by stagegate run itself: accelerators from the driver's
own tool, found on the stage's PATH (stand-in programs play the tool: none exists here)."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from stagegate.collect import load_record
from stagegate.machine import accelerators
from stagegate.runner import run_stage


def _tool(folder: Path, body: str) -> dict[str, str]:
    """A PATH whose only nvidia-smi is a shell script running ``body``."""
    folder.mkdir(exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {"PATH": str(folder)}


# What the driver's tool prints for this query on an H200 machine (one GPU)
H200 = "NVIDIA H200, 580.159.04, 143771"


def test_no_tool_on_the_path_observes_no_accelerator(tmp_path: Path) -> None:
    seen = accelerators({"PATH": str(tmp_path)})
    assert seen == {"probe": "nvidia-smi", "found": False, "devices": [], "error": None}


def test_each_gpu_the_tool_lists_is_recorded_with_its_driver_and_memory(tmp_path: Path) -> None:
    env = _tool(
        tmp_path / "bin",
        f'[ "$2" = --format=csv,noheader,nounits ] && echo "{H200}"\n'
        f'echo "NVIDIA H100 80GB HBM3, 580.159.04, 81559"',
    )
    seen = accelerators(env)
    assert seen["found"] and seen["error"] is None
    assert seen["devices"] == [
        {"name": "NVIDIA H200", "driver": "580.159.04", "memory_mb": 143771},
        {"name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "memory_mb": 81559},
    ]


def test_a_tool_that_fails_is_an_error_not_a_machine_without_gpus(tmp_path: Path) -> None:
    env = _tool(tmp_path / "bin", "echo 'NVIDIA-SMI has failed to communicate' >&2; exit 9")
    seen = accelerators(env)
    assert seen["found"] and seen["devices"] == []
    assert seen["error"].startswith("exit 9") and "failed to communicate" in seen["error"]


def test_lines_that_are_not_a_gpu_are_left_out(tmp_path: Path) -> None:
    env = _tool(tmp_path / "bin", f'echo "{H200}"; echo "No devices were found"; echo ", , "')
    assert [d["name"] for d in accelerators(env)["devices"]] == ["NVIDIA H200"]


def test_the_record_holds_what_the_stage_machine_showed(tmp_path: Path) -> None:
    env = {**os.environ, **_tool(tmp_path / "bin", f'echo "{H200}"')}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    run_stage("cuda", ["true"], out_dir=tmp_path, env=env, stdout=io.StringIO())
    saved = load_record(tmp_path / "cuda.json").environment["accelerators"]
    assert [d["name"] for d in saved["devices"]] == ["NVIDIA H200"]
