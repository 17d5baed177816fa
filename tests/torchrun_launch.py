"""Tests' way to run a worker script under torchrun: two processes on this machine (gloo on
the CPU), one torch thread each, and the job's output shown when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_two_ranks(worker: Path, *args: str, timeout: float = 300) -> None:
    """``torchrun --standalone --nproc_per_node=2 worker *args``; asserts that it exits 0."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(worker), *args,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
