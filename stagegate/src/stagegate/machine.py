"""The machine a stage ran on, as ``stagegate run`` observes it itself.

A stage's own files may *claim* a machine (a benchmark's ``machine_info``); the record holds
what the gate saw: the interpreter, the platform, the CPUs and the accelerators, read from the
driver's own tool (``nvidia-smi``), never from the code under test.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

NVIDIA_SMI = "nvidia-smi"
_QUERY = ("name", "driver_version", "memory.total")
PROBE_TIMEOUT_S = 15


def _device(line: str) -> dict[str, Any] | None:
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(_QUERY) or not parts[0]:
        return None
    name, driver, memory = parts
    return {"name": name, "driver": driver, "memory_mb": int(memory) if memory.isdigit() else None}


def accelerators(env: Mapping[str, str]) -> dict[str, Any]:
    """The GPUs ``nvidia-smi`` lists (name, driver, memory in MiB), and how they were looked
    for: ``devices`` is empty where no such tool is found or it lists none; ``error`` says why
    a tool that exists gave no answer (an observation that failed is not "no GPU")."""
    tool = shutil.which(NVIDIA_SMI, path=env.get("PATH"))
    seen: dict[str, Any] = {"probe": NVIDIA_SMI, "found": tool is not None, "devices": []}
    if tool is None:
        return {**seen, "error": None}
    try:
        done = subprocess.run(
            [tool, f"--query-gpu={','.join(_QUERY)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {**seen, "error": f"{type(exc).__name__}: {exc}"}
    devices = [d for d in map(_device, done.stdout.splitlines()) if d is not None]
    error = None
    if done.returncode:
        error = f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    return {**seen, "devices": devices, "error": error}


def observe(env: Mapping[str, str], keys: tuple[str, ...]) -> dict[str, Any]:
    """Where the stage ran: interpreter, platform, CPU count, accelerators, and the variables
    of ``keys`` (CI's) that are set."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "accelerators": accelerators(env),
        **{k.lower(): env[k] for k in keys if k in env},
    }
