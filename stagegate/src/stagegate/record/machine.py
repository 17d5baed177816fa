"""The machine a stage ran on, as ``stagegate run`` observes it itself.

A stage's own files may *claim* a machine (a benchmark's ``machine_info``); the record holds
what the gate saw: the interpreter, the platform, the CPUs and the accelerators, read from the
driver's own tool (``nvidia-smi``), never from the code under test. The tool is whichever
``nvidia-smi`` comes first on the stage's PATH, so on Linux its list is held against the
kernel driver's own (``/proc/driver/nvidia/gpus``): a GPU the tool names that the driver does
not list makes the observation fail.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NVIDIA_SMI = "nvidia-smi"
_QUERY = ("name", "driver_version", "memory.total", "compute_cap")
PROBE_TIMEOUT_S = 15
UNNAMED = "unknown"  # the driver's Model for a board its table does not name


@dataclass(frozen=True)
class Kernel:
    """Where the kernel's own views are read: its system, the NVIDIA driver's folder of GPUs,
    and its release (read from the kernel, not from the ``platform`` module, which the
    interpreter's path decides)."""

    system: str = sys.platform
    gpus: Path = Path("/proc/driver/nvidia/gpus")
    release: Path = Path("/proc/sys/kernel/osrelease")


KERNEL = Kernel()


def _device(line: str, fields: int) -> dict[str, Any] | None:
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != fields or not parts[0]:
        return None
    name, driver, memory, *capability = parts
    return {
        "name": name,
        "driver": driver,
        "memory_mb": int(memory) if memory.isdigit() else None,
        "compute_capability": capability[0] if capability else None,
    }


def _query(tool: str, fields: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )


def _from_tool(tool: str) -> dict[str, Any]:
    """What ``nvidia-smi`` lists; a driver too old to report compute capability is asked again
    without it."""
    seen: dict[str, Any] = {"probe": NVIDIA_SMI, "found": True, "devices": []}
    try:
        done = _query(tool, _QUERY)
        fields = _QUERY
        if done.returncode and "compute_cap" in done.stdout + done.stderr:
            fields = _QUERY[:-1]
            done = _query(tool, fields)
    except (OSError, subprocess.SubprocessError) as exc:
        return {**seen, "error": f"{type(exc).__name__}: {exc}"}
    devices = [d for d in (_device(x, len(fields)) for x in done.stdout.splitlines()) if d]
    error = f"exit {done.returncode}: {done.stderr.strip()[-300:]}" if done.returncode else None
    return {**seen, "devices": devices, "error": error}


def _from_proc(folder: Path) -> dict[str, Any] | None:
    """The GPUs the NVIDIA driver lists under ``folder`` (its model names), or None where the
    driver is not loaded."""
    try:
        infos = sorted(folder.glob("*/information"))
    except OSError:
        return None
    if not infos:
        return None
    devices = []
    for info in infos:
        try:
            text = info.read_text(errors="replace")
        except OSError:
            continue  # a GPU whose entry cannot be read is not listed
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model" and value.strip():
                devices.append({"name": value.strip(), "driver": None, "memory_mb": None})
    return {"probe": str(folder), "found": True, "devices": devices, "error": None}


def _driver_lists(kernel: Kernel) -> list[str] | None:
    """The GPU models the NVIDIA kernel driver lists (none where it is not loaded), or None
    where the kernel has no such folder for its GPUs: not Linux, or WSL, whose GPUs the Windows
    host's driver serves."""
    if not kernel.system.startswith("linux"):
        return None
    try:
        wsl = "microsoft" in kernel.release.read_text(errors="replace").casefold()
    except OSError:
        wsl = False  # a Linux kernel that does not say its release is held to its driver
    if wsl:
        return None
    found = _from_proc(kernel.gpus)
    return [d["name"] for d in found["devices"]] if found else []


def _words(name: str) -> str:
    return " ".join(name.split()).casefold()


def _unlisted(names: list[str], driver: list[str]) -> list[str]:
    """The GPUs of ``names`` that ``driver`` does not list by the same name, each listed GPU
    matched once; a board the driver cannot name (its Model "Unknown") matches any name."""
    left = [_words(n) for n in driver]
    missing = []
    for name in names:
        words = _words(name)
        match = next((d for d in left if d in (words, UNNAMED)), None)
        if match is None:
            missing.append(name)
        else:
            left.remove(match)
    return missing


def _checked(seen: dict[str, Any], kernel: Kernel) -> dict[str, Any]:
    """``seen`` (the tool's answer) failed where it names a GPU the kernel driver does not
    list, or none where the driver lists some: a program that merely calls itself nvidia-smi,
    first on the PATH, is no driver. A tool that fails where the driver lists no GPU (it is not
    loaded: a CPU machine whose image ships the tool) saw none."""
    driver = _driver_lists(kernel)
    names = [d["name"] for d in seen["devices"]]
    if seen["error"] and driver == []:  # a tool that fails where no NVIDIA driver is loaded
        return {**seen, "devices": [], "error": None}
    if seen["error"] or driver is None:
        return seen
    if not names and driver:  # a tool that hides the GPUs the driver has
        error = f"{NVIDIA_SMI} lists no GPU; the NVIDIA driver lists {', '.join(driver)}"
        return {**seen, "error": f"{error} in {kernel.gpus}"}
    if not _unlisted(names, driver):
        return seen
    listed = ", ".join(driver) if driver else "no GPU (it is not loaded, or lists none here)"
    error = (
        f"{NVIDIA_SMI} lists {', '.join(names)}; the NVIDIA driver lists {listed} in "
        f"{kernel.gpus}: on a machine whose driver lists its GPUs elsewhere (LXD, gVisor, "
        "Jetson) they cannot be observed"
    )
    return {**seen, "error": error}


def accelerators(env: Mapping[str, str], kernel: Kernel | None = None) -> dict[str, Any]:
    """The GPUs ``nvidia-smi`` lists (name, driver, memory in MiB, compute capability), held
    against the kernel driver's list on Linux, or the driver's own list where there is no such
    tool, and how they were looked for: ``devices`` is empty where neither finds one;
    ``error`` says why a tool that exists gave no answer, or one the driver contradicts (an
    observation that failed is not "no GPU")."""
    kernel = kernel or KERNEL
    tool = shutil.which(NVIDIA_SMI, path=env.get("PATH"))
    if tool is not None:
        return _checked(_from_tool(tool), kernel)
    return _from_proc(kernel.gpus) or {
        "probe": NVIDIA_SMI,
        "found": False,
        "devices": [],
        "error": None,
    }


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
