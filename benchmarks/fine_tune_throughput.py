"""fine_tune's tokens/s against the bare TrainStep that the AMP benchmark times, on a preset.

The benchmark module times ``TrainStep`` alone. ``fine_tune`` adds the epoch loop around it:
the learning-rate schedule, the progress bar, and a host read of the loss and gradient norm
every ``log_every`` steps (a sync on a GPU). Each round runs every arm for the same steps over
the same DataLoader (its workers kept alive), from a fresh copy of the same weights; arms are
interleaved so drift hits all alike, and the first round (kernel selection, allocator) is
dropped. Both clocks cover the training steps only, each ending after a device synchronize.
Printed: tokens/s per arm (median over rounds) and the median of the per-round ratios to
TrainStep; ``--out`` writes them as JSON. Usage:
    python benchmarks/fine_tune_throughput.py --preset gpu [--precision bf16-mixed]
        [--steps 40] [--rounds 5] [--log-every 1,10] [--out FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from amptrain import fine_tune
from amptrain.adapters import unpack_batch
from amptrain.benchmark.environment import machine_info
from amptrain.benchmark.presets import PRESETS, Preset
from amptrain.benchmark.run import preset_model
from amptrain.config import TrainConfig
from amptrain.data import make_dataloader, synthetic_token_data
from amptrain.engine import TrainStep
from amptrain.optim import build_optimizer
from amptrain.precision import resolve_precision

TARGET = 0.97  # fine_tune's tokens/s over TrainStep's, at the default log_every

Arm = Callable[[torch.nn.Module], float]  # a fresh model in, seconds for the steps out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step_arm(loader: Any, cfg: TrainConfig, steps: int, device: torch.device) -> Arm:
    """The benchmark's loop: TrainStep on each batch, no host read until the end."""

    def run(model: torch.nn.Module) -> float:
        plan = resolve_precision(cfg.precision, device)
        model.to(device=device, dtype=plan.param_dtype).train()
        step = TrainStep(
            model, build_optimizer(model, cfg, device), plan, max_grad_norm=cfg.max_grad_norm
        )
        _sync(device)
        start = time.perf_counter()
        for _, batch in zip(range(steps), loader, strict=False):
            input_ids, labels = unpack_batch(batch)
            step(input_ids.to(device, non_blocking=True), labels.to(device, non_blocking=True))
        _sync(device)
        return time.perf_counter() - start

    return run


def fine_tune_arm(loader: Any, cfg: TrainConfig) -> Arm:
    """fine_tune for one epoch of the same steps; its own clock (training steps only)."""

    def run(model: torch.nn.Module) -> float:
        result = fine_tune(model, loader, config=cfg)
        return result.epochs[0].wall_time_s

    return run


def measure(arms: dict[str, Arm], base: torch.nn.Module, rounds: int) -> dict[str, list[float]]:
    """Seconds per arm per round, rounds interleaved; the first round is dropped."""
    times: dict[str, list[float]] = {name: [] for name in arms}
    for i in range(rounds + 1):
        for name, arm in arms.items():
            seconds = arm(copy.deepcopy(base))
            if i:
                times[name].append(seconds)
    return times


def summarize(times: dict[str, list[float]], tokens: int, reference: str) -> dict[str, Any]:
    """tokens/s per arm and the median per-round ratio of its tokens/s to ``reference``'s."""
    ref = times[reference]
    return {
        name: {
            "seconds": values,
            "tokens_per_second": tokens / statistics.median(values),
            "ratio_to_train_step": statistics.median(
                r / v for r, v in zip(ref, values, strict=True)
            ),
        }
        for name, values in times.items()
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpu")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--device", help="default: cuda for the gpu preset, else cpu")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per arm per round")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (one more warms)")
    parser.add_argument("--log-every", default="1,10", help="comma-separated log_every values")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.log_every = [int(v) for v in args.log_every.split(",")]
    if args.steps < 1 or args.rounds < 1 or min(args.log_every) < 1:
        parser.error("--steps, --rounds and every --log-every value must be at least 1")
    return args


def build(args: argparse.Namespace, preset: Preset, device: torch.device) -> dict[str, Arm]:
    data = synthetic_token_data(
        args.steps * preset.batch_size, preset.seq_len, preset.vocab_size, seed=0
    )
    loader = make_dataloader(
        data,
        batch_size=preset.batch_size,
        shuffle=True,
        device=device,
        num_workers=preset.num_workers,
    )
    cfg = TrainConfig(
        precision=args.precision,
        epochs=1,
        batch_size=preset.batch_size,
        learning_rate=preset.learning_rate,
        device=str(device),
        progress=False,
    )
    arms = {"train_step": train_step_arm(loader, cfg, args.steps, device)}
    for n in args.log_every:
        arms[f"fine_tune log_every={n}"] = fine_tune_arm(loader, replace(cfg, log_every=n))
    return arms


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    preset = PRESETS[args.preset]
    device = torch.device(args.device or ("cuda" if preset.needs_cuda else "cpu"))
    torch.manual_seed(0)
    base = preset_model(preset)
    times = measure(build(args, preset, device), base, args.rounds)
    tokens = args.steps * preset.batch_size * preset.seq_len
    arms = summarize(times, tokens, "train_step")
    default = f"fine_tune log_every={TrainConfig().log_every}"
    print(f"{preset.name} preset, {args.precision}, {args.steps} steps x {args.rounds} rounds")
    for name, arm in arms.items():
        ms = ", ".join(f"{s / args.steps * 1e3:.2f}" for s in arm["seconds"])
        print(
            f"  {name:24s} {arm['tokens_per_second']:12.0f} tok/s  "
            f"ratio {arm['ratio_to_train_step']:.3f}  (ms/step: {ms})"
        )
    met = default in arms and arms[default]["ratio_to_train_step"] >= TARGET
    print(f"  target {default} / train_step >= {TARGET}: {'met' if met else 'MISSED'}")
    if args.out:
        doc = {
            "kind": "amptrain-fine-tune-throughput",
            "preset": preset.to_dict(),
            "precision": args.precision,
            "steps": args.steps,
            "rounds": args.rounds,
            "machine_info": machine_info(device),
            "arms": arms,
            "target": {"arm": default, "ratio_at_least": TARGET, "met": met},
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
