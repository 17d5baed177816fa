"""NCCL on the GPU runner: two ranks joined by amptrain's ``join_world`` under torchrun, each on
its own GPU, average gradients through DDP. Needs two CUDA devices; skipped, saying so, where
there are fewer (the cuda stage's report lists the skip and its reason)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = """
import torch
from amptrain.distributed import join_world, wrap_model

world = join_world("cuda")
device = torch.device("cuda", world.local_rank)
model = wrap_model(torch.nn.Linear(4, 1, bias=False).to(device), world, device)
# Rank r's input is r + 1: the averaged gradient of sum(w . x) is the mean of 1 and 2 (1.5).
model(torch.full((1, 4), float(world.rank + 1), device=device)).sum().backward()
grad = model.module.weight.grad
assert torch.allclose(grad, torch.full_like(grad, 1.5)), grad
print("rank", world.rank, "ok", flush=True)
"""


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL across GPUs needs two CUDA devices")
def test_ddp_averages_gradients_over_nccl_on_two_gpus(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(script)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count(" ok") == 2
