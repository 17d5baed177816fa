"""What a benchmark ran on: machine, commit and numeric settings."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from typing import Any

import torch


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine_info(device: torch.device) -> dict[str, Any]:
    """Python, platform, torch, CUDA, driver and GPU; CPU count and name."""
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpu_name": None,
        "gpu_memory_mb": None,
        "gpu_capability": None,
        "driver": None,
        "num_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu_name=props.name,
            gpu_memory_mb=props.total_memory / 2**20,
            gpu_capability=f"{props.major}.{props.minor}",
        )
        # Read once, before any timing: never in a loop.
        info["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return info


def commit_info() -> dict[str, Any]:
    """The git commit of the working tree, whether it has uncommitted changes, and the branch;
    without git (the GPU job's container), the commit the job was given, as GITHUB_SHA."""
    sha = _run(["git", "rev-parse", "HEAD"])
    if sha is None:
        return {"id": os.environ.get("GITHUB_SHA") or None, "dirty": None, "branch": None}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "id": sha,
        "dirty": bool(status),
        "branch": _run(["git", "rev-parse", "--abbrev-ref", "HEAD"]),
    }


def settings_info(
    device: torch.device, precisions: list[str], seed: int, compile: bool = False
) -> dict[str, Any]:
    """The numeric settings that define the baseline: TF32, attention backends, fused AdamW,
    and whether the step's forward and loss ran ``torch.compile``d."""
    cuda = device.type == "cuda"
    return {
        "seed": seed,
        "precisions": precisions,
        "compile": compile,
        "fp32_matmul": "IEEE fp32 (torch.set_float32_matmul_precision('highest')) for 32-true; "
        "TF32 ('high') for 32-tf32",
        "float32_matmul_precision_after_run": torch.get_float32_matmul_precision(),
        "attention": "F.scaled_dot_product_attention",
        "sdpa_backends_enabled": {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(),
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
        }
        if cuda
        else None,
        "fused_optimizer": True,
        "optimizer": "AdamW",
        "timer": "cuda events" if cuda else "time.perf_counter",
    }
