"""FSDP against DDP on the same model under torchrun: the step time of each, interleaved, and
the bytes of parameters, gradients and optimizer state each rank holds.

    torchrun --nproc_per_node=2 benchmarks/fsdp_vs_ddp.py [--layers 4] [--d-model 256]
        [--batch 8] [--seq 128] [--steps 10] [--windows 5] [--warmup 3] [--out DIR]

Both arms are amptrain's TrainStep (fp32 AdamW, clipping) on a TinyGPT built from the same seed,
DDP-wrapped in one arm and sharded block by block (``strategy="fsdp"``) in the other. After
``--warmup`` steps of each, every window times ``--steps`` steps of one arm, then of the other,
the first arm alternating from window to window, so that the machine's drift falls on both.
Printed: each window's seconds per step, the median ratio FSDP/DDP over windows, and a table of
the bytes each rank holds; ``--out`` also writes them (raw samples) as JSON, by rank 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from amptrain import TinyGPT
from amptrain.config import TrainConfig
from amptrain.distributed import World, join_world, wrap_model
from amptrain.engine import TrainStep
from amptrain.fsdp import local_bytes, shard
from amptrain.optim import build_optimizer
from amptrain.precision import resolve_precision

VOCAB = 512


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (
        ("--layers", 4), ("--d-model", 256), ("--heads", 4), ("--batch", 8), ("--seq", 128),
        ("--steps", 10), ("--windows", 5), ("--warmup", 3),
    ):  # fmt: skip
        parser.add_argument(name, type=int, default=default)
    parser.add_argument("--out", type=Path, help="folder for fsdp_vs_ddp.json (rank 0)")
    args = parser.parse_args(argv)
    if min(args.layers, args.steps, args.windows, args.batch, args.seq) < 1 or args.warmup < 0:
        parser.error("--layers, --steps, --windows, --batch and --seq must be >= 1, --warmup >= 0")
    return args


class Arm:
    """One strategy's step on its own copy of the model, and what its rank holds."""

    def __init__(self, name: str, net: nn.Module, device: torch.device) -> None:
        self.name, self.seconds = name, []
        plan = resolve_precision("32-true", device)
        optimizer = build_optimizer(net, TrainConfig(), device)
        optimizer.register_step_pre_hook(lambda o, a, k: self.measure(o))
        self.step = TrainStep(net, optimizer, plan)
        self.held: dict[str, int] = {}

    def measure(self, optimizer: torch.optim.Optimizer) -> None:
        params = [p for g in optimizer.param_groups for p in g["params"]]
        states = [t for s in optimizer.state.values() for t in s.values()]
        self.held = {
            "params": local_bytes(params),
            "grads": local_bytes([p.grad for p in params if p.grad is not None]),
            "optimizer": local_bytes(states),  # the state before this step: none at the first
        }

    def run(self, batch: torch.Tensor, steps: int, device: torch.device) -> float:
        """Seconds per step over ``steps`` steps."""
        _sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step(batch, batch)
        _sync(device)
        return (time.perf_counter() - start) / steps


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(args: argparse.Namespace, world: World, device: torch.device) -> list[Arm]:
    """The DDP arm and the FSDP arm, each on the same initial weights."""

    def net() -> TinyGPT:
        torch.manual_seed(0)
        return TinyGPT(VOCAB, args.d_model, args.layers, args.heads, max_seq_len=args.seq)

    plan = resolve_precision("32-true", device)
    ddp = wrap_model(net().to(device), world, device)
    fsdp = shard(net(), plan, device, world)
    return [Arm("ddp", ddp, device), Arm("fsdp", fsdp, device)]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The interleaved windows and each rank's bytes, as every rank measured them."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    world = join_world(device.type)
    if world.distributed and device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
    arms = build(args, world, device)
    generator = torch.Generator().manual_seed(world.rank)
    batch = torch.randint(0, VOCAB, (args.batch, args.seq), generator=generator).to(device)
    for arm in arms:
        arm.run(batch, max(args.warmup, 2), device)  # two at least: the optimizer state exists
    for window in range(args.windows):
        for arm in arms if window % 2 == 0 else arms[::-1]:
            arm.seconds.append(arm.run(batch, args.steps, device))
    held = world.gather({arm.name: arm.held for arm in arms})
    total = sum(p.numel() * p.element_size() for p in arms[0].step.params)
    return {
        "world_size": world.size,
        "device": str(device),
        "settings": vars(args) | {"out": str(args.out) if args.out else None},
        "seconds_per_step": {arm.name: arm.seconds for arm in arms},
        "held_bytes_by_rank": held,
        "param_bytes_whole": total,
        "is_main": world.is_main,
    }


def summary(doc: dict[str, Any]) -> list[str]:
    """The lines printed: each window, the median ratio, and each rank's bytes."""
    times = doc["seconds_per_step"]
    ratios = [f / d for f, d in zip(times["fsdp"], times["ddp"], strict=True)]
    lines = [
        f"{doc['world_size']} ranks on {doc['device']}; seconds per step, window by window:",
        *(f"  ddp {d:.4f}  fsdp {f:.4f}" for d, f in zip(times["ddp"], times["fsdp"], strict=True)),
        f"FSDP/DDP step time: {statistics.median(ratios):.3f} (median of {len(ratios)} windows)",
        "bytes held per rank (params, grads, optimizer state):",
    ]
    for rank, arms in enumerate(doc["held_bytes_by_rank"]):
        for name, held in arms.items():
            parts = ", ".join(f"{k} {v:,}" for k, v in held.items())
            lines.append(f"  rank {rank} {name}: {parts}; total {sum(held.values()):,}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    doc = measure(args)
    if doc.pop("is_main"):
        print("\n".join(summary(doc)), flush=True)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "fsdp_vs_ddp.json").write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
