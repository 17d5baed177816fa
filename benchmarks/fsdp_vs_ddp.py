"""FSDP against DDP on the same model under torchrun: the step time of each, interleaved, and
the bytes of parameters, gradients and optimizer state each rank holds (on a GPU also the
peak memory each arm's steps allocate above what is resident when they start).

    torchrun --nproc_per_node=2 benchmarks/fsdp_vs_ddp.py [--layers 4] [--d-model 256]
        [--batch 8] [--seq 128] [--steps 10] [--windows 5] [--warmup 3] [--out DIR]
    python benchmarks/fsdp_vs_ddp.py --preset gpu --precision bf16-mixed --out DIR

Both arms are amptrain's TrainStep (AdamW, clipping) on a TinyGPT built from the same seed,
DDP-wrapped in one arm and sharded block by block (``strategy="fsdp"``) in the other. In one
process the first arm is the model unsharded (what the benchmark's presets train), and FSDP
shards over a group of one: its cost on one device, with nothing to gain. ``--preset`` takes
the model, batch and sequence sizes from an ``amptrain.benchmark`` preset. After
``--warmup`` steps of each, every window times ``--steps`` steps of one arm, then of the other,
the first arm alternating from window to window, so that the machine's drift falls on both.
Printed: each window's seconds per step, the median ratio FSDP/DDP over windows, and a table of
the bytes each rank holds; ``--out`` also writes them (raw samples) and the machine as JSON, by
rank 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from amptrain import TinyGPT
from amptrain.benchmark.environment import machine_info
from amptrain.benchmark.presets import PRESETS
from amptrain.config import TrainConfig
from amptrain.distributed import World, join_world, wrap_model
from amptrain.engine import TrainStep
from amptrain.fsdp import local_bytes, shard
from amptrain.optim import build_optimizer
from amptrain.precision import PrecisionPlan, resolve_precision

SIZES = {  # option: the preset's field
    "vocab": "vocab_size", "layers": "n_layers", "d_model": "d_model", "heads": "n_heads",
    "batch": "batch_size", "seq": "seq_len",
}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (
        ("--vocab", 512), ("--layers", 4), ("--d-model", 256), ("--heads", 4), ("--batch", 8),
        ("--seq", 128), ("--steps", 10), ("--windows", 5), ("--warmup", 3),
    ):  # fmt: skip
        parser.add_argument(name, type=int, default=default)
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), help="the sizes of this preset (over the size options)"
    )
    parser.add_argument("--precision", choices=("32-true", "bf16-mixed"), default="32-true")
    parser.add_argument("--out", type=Path, help="folder for fsdp_vs_ddp.json (rank 0)")
    args = parser.parse_args(argv)
    if args.preset:
        for option, field in SIZES.items():
            setattr(args, option, getattr(PRESETS[args.preset], field))
    if min(args.layers, args.steps, args.windows, args.batch, args.seq) < 1 or args.warmup < 0:
        parser.error("--layers, --steps, --windows, --batch and --seq must be >= 1, --warmup >= 0")
    return args


class Arm:
    """One strategy's step on its own copy of the model, and what its rank holds."""

    def __init__(
        self, name: str, net: nn.Module, plan: PrecisionPlan, device: torch.device
    ) -> None:
        self.name, self.seconds, self.peak = name, [], 0
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
        """Seconds per step over ``steps`` steps; on a GPU, :attr:`peak` takes the most memory
        they allocated above what was resident before them."""
        _sync(device)
        resident = _allocated(device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step(batch, batch)
        _sync(device)
        seconds = (time.perf_counter() - start) / steps
        if device.type == "cuda":
            self.peak = max(self.peak, torch.cuda.max_memory_allocated(device) - resident)
        return seconds


def _allocated(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(args: argparse.Namespace, world: World, device: torch.device) -> list[Arm]:
    """The DDP arm (the model unsharded in one process) and the FSDP arm, each on the same
    initial weights."""

    def net() -> TinyGPT:
        torch.manual_seed(0)
        return TinyGPT(args.vocab, args.d_model, args.layers, args.heads, max_seq_len=args.seq)

    plan = resolve_precision(args.precision, device)
    ddp = wrap_model(net().to(device), world, device)
    fsdp = shard(net(), plan, device, world)
    first = "ddp" if world.distributed else "unsharded"
    return [Arm(first, ddp, plan, device), Arm("fsdp", fsdp, plan, device)]


@contextlib.contextmanager
def group_of_one(world: World, device: torch.device) -> Iterator[None]:
    """In one process, a process group of one for FSDP to shard over, ended after."""
    if world.distributed or dist.is_initialized():
        yield
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The interleaved windows and each rank's bytes, as every rank measured them."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    world = join_world(device.type)
    if world.distributed and device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
    with group_of_one(world, device):
        return _measure(args, world, device)


def _measure(args: argparse.Namespace, world: World, device: torch.device) -> dict[str, Any]:
    arms = build(args, world, device)
    generator = torch.Generator().manual_seed(world.rank)
    batch = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator).to(device)
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
        "peak_bytes_above_resident_by_rank": world.gather({arm.name: arm.peak for arm in arms}),
        "param_bytes_whole": total,
        "machine": machine_info(device),
        "is_main": world.is_main,
    }


def summary(doc: dict[str, Any]) -> list[str]:
    """The lines printed: each window, the median ratio, and each rank's bytes."""
    times = doc["seconds_per_step"]
    base = next(name for name in times if name != "fsdp")
    pairs = list(zip(times[base], times["fsdp"], strict=True))
    ratios = [f / d for d, f in pairs]
    lines = [
        f"{doc['world_size']} ranks on {doc['device']}; seconds per step, window by window:",
        *(f"  {base} {d:.4f}  fsdp {f:.4f}" for d, f in pairs),
        f"FSDP/{base.upper() if base == 'ddp' else base} step time: "
        f"{statistics.median(ratios):.3f} (median of {len(ratios)} windows)",
        "bytes held per rank (params, grads, optimizer state):",
    ]
    for rank, arms in enumerate(doc["held_bytes_by_rank"]):
        for name, held in arms.items():
            parts = ", ".join(f"{k} {v:,}" for k, v in held.items())
            lines.append(f"  rank {rank} {name}: {parts}; total {sum(held.values()):,}")
    for rank, arms in enumerate(doc.get("peak_bytes_above_resident_by_rank", [])):
        if any(arms.values()):  # measured on a GPU only
            peaks = ", ".join(f"{name} {peak:,}" for name, peak in arms.items())
            lines.append(f"  rank {rank} peak allocated above resident: {peaks}")
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
