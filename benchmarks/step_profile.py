"""Where a training step's GPU time goes, and what torch.compile changes: the throughput explained.

Profiles ``--steps`` steps of the benchmark's TrainStep on a preset (CUDA kernels only, after
warm-up) and sums kernel time by kind: matrix multiplies, attention, the fused optimizer, and
the elementwise/normalization/loss kernels around them; the GPU's idle share is wall time not
covered by any kernel (launch overhead, host work). Then times the same step eager and under
``torch.compile`` (the forward and its loss as one graph, as ``TrainStep(compile=True)`` and
the benchmark's ``--compile`` run it), interleaved in rounds, and prints the TFLOP/s of each
(FLOPs per token as the benchmark counts them; MFU is that over the GPU's peak in stagegate's
policy, as docs/benchmark.md's tables show it). Usage:
    python benchmarks/step_profile.py --preset gpu [--precision bf16-mixed] [--steps 10]
        [--rounds 5] [--no-compile] [--top 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from amptrain import TinyGPT
from amptrain.benchmark.environment import machine_info
from amptrain.benchmark.presets import PRESETS, Preset
from amptrain.benchmark.run import preset_model
from amptrain.config import TrainConfig
from amptrain.data import synthetic_token_data
from amptrain.engine import TrainStep
from amptrain.optim import build_optimizer
from amptrain.precision import resolve_precision

# Kernel name fragments, checked in order; the first that matches names the kind.
KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn_generated")),
    ("matmul", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "wgmma")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
)


def kind_of(kernel: str) -> str:
    name = kernel.lower()
    return next((k for k, parts in KINDS if any(p in name for p in parts)), "elementwise/other")


def build_step(base: TinyGPT, precision: str, compiled: bool, preset: Preset) -> TrainStep:
    device = torch.device("cuda")
    plan = resolve_precision(precision, device)
    model = copy.deepcopy(base).to(device=device, dtype=plan.param_dtype).train()
    cfg = TrainConfig(precision=plan.name, learning_rate=preset.learning_rate)
    return TrainStep(model, build_optimizer(model, cfg, device), plan, compile=compiled)


def timed(step: TrainStep, batch: tuple[torch.Tensor, torch.Tensor], steps: int) -> float:
    """Seconds per step over ``steps`` steps, by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step(*batch)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / steps


def kernel_times(
    step: TrainStep, batch: tuple[torch.Tensor, torch.Tensor], steps: int
) -> tuple[Counter[str], float]:
    """Seconds per CUDA kernel name over ``steps`` profiled steps, and their wall time."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        seconds = timed(step, batch, steps) * steps
    kernels: Counter[str] = Counter()
    for event in prof.events():  # kernels (and memcpy/memset) are the events on the device
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name] += event.time_range.elapsed_us() / 1e6
    if not kernels:
        raise RuntimeError("the profiler recorded no CUDA kernel")
    return kernels, seconds


def shares(kernels: Counter[str], seconds: float, top: int) -> dict[str, Any]:
    """Kernel time by kind and the ``top`` kernels, as shares of the wall time; the GPU's idle
    share is the wall time no kernel covered."""
    by_kind: Counter[str] = Counter()
    for name, t in kernels.items():
        by_kind[kind_of(name)] += t
    idle = max(0.0, 1 - sum(kernels.values()) / seconds)
    return {
        "by_kind": {**{k: v / seconds for k, v in by_kind.most_common()}, "gpu idle": idle},
        "top_kernels": [
            {"kernel": name[:120], "kind": kind_of(name), "share": t / seconds}
            for name, t in kernels.most_common(top)
        ],
    }


def compare(arms: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Seconds per step per arm, interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(rounds):
        for name, arm in arms.items():
            times[name].append(arm())
    return times


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpu")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--steps", type=int, default=10, help="steps per profile and per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--top", type=int, default=8, help="kernels listed per mode")
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("step_profile needs CUDA", file=sys.stderr)
        return 2
    preset = PRESETS[args.preset]
    torch.manual_seed(0)
    base = preset_model(preset)
    ids = synthetic_token_data(preset.batch_size, preset.seq_len, preset.vocab_size).cuda()
    batch = (ids, ids.clone())
    modes = {"eager": False} if args.no_compile else {"eager": False, "compiled": True}
    steps = {name: build_step(base, args.precision, c, preset) for name, c in modes.items()}
    for step in steps.values():
        timed(step, batch, 3)  # warm-up: kernel selection, compilation, optimizer state
    profiles = {
        name: shares(*kernel_times(step, batch, args.steps), args.top)
        for name, step in steps.items()
    }
    arms = {name: (lambda s=step: timed(s, batch, args.steps)) for name, step in steps.items()}
    times = compare(arms, args.rounds)
    flops = base.flops_per_token(preset.seq_len) * preset.batch_size * preset.seq_len
    gpu = torch.cuda.get_device_name()
    result: dict[str, Any] = {}
    print(f"{preset.name} preset, {args.precision}, {gpu}, {args.steps} steps x {args.rounds}")
    for name, values in times.items():
        step_s = statistics.median(values)
        tflops = flops / step_s / 1e12
        result[name] = {"step_ms": step_s * 1e3, "tflops": tflops, **profiles[name]}
        where = ", ".join(f"{k} {v:.1%}" for k, v in profiles[name]["by_kind"].items())
        print(f"  {name:9s} {step_s * 1e3:8.2f} ms/step  {tflops:6.1f} TFLOP/s  ({where})")
        for k in profiles[name]["top_kernels"]:
            print(f"      {k['share']:6.1%}  {k['kind']:18s} {k['kernel'][:90]}")
    if args.out:
        doc = {"preset": preset.to_dict(), "precision": args.precision, "modes": result}
        doc["machine_info"] = machine_info(torch.device("cuda"))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
