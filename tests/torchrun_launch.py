"""Tests' way to run a worker script under torchrun: processes on this machine (two unless told;
gloo on the CPU), one torch thread each, and the job's output shown when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def torchrun(
    worker: Path, *args: str, ranks: int = 2, restarts: int = 0, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc_per_node=RANKS --max-restarts=RESTARTS worker *args``;
    what it gave (text), whatever its exit code."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={ranks}", f"--max-restarts={restarts}", str(worker), *args,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def run_two_ranks(worker: Path, *args: str, timeout: float = 300) -> None:
    """``torchrun --standalone --nproc_per_node=2 worker *args``; asserts that it exits 0."""
    done = torchrun(worker, *args, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
