"""Command line: ``python -m amptrain.benchmark --preset {gpu,cpu-smoke} [...]``."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from amptrain.benchmark.presets import PRESETS
from amptrain.benchmark.run import BASELINE, parse_precisions, run_benchmark
from amptrain.benchmark.stats import bootstrap_ratio_ci, ratio_of_medians, summarize
from amptrain.metrics import WandbSink


def _finite(value: Any) -> Any:
    """NaN and infinity become null: the file stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_json(doc: dict[str, Any], path: Path) -> None:
    """Write ``doc`` atomically (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(_finite(doc), f, indent=2, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def _fmt(value: float | None, width: int, decimals: int, suffix: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "-".rjust(width)
    return f"{value:.{decimals}f}{suffix}".rjust(width)


def figures(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For the terminal and W&B only (the file holds raw samples, and the gate derives its own):
    each clean precision's step time, spread, throughput, TFLOP/s and speedup over IEEE fp32."""
    preset, flops = doc["preset"], doc["model"]["flops_per_token"]
    base = doc["precisions"].get(BASELINE, {})
    out: dict[str, dict[str, Any]] = {}
    for name, r in doc["precisions"].items():
        if r["status"] != "ok":
            continue
        stats = summarize(r["window_s"])
        tokens = r["steps_per_window"] * preset["batch_size"] * preset["seq_len"]
        row = {
            "step_time_ms": stats["median"] / r["steps_per_window"] * 1e3,
            "iqr_ms": stats["iqr"] / r["steps_per_window"] * 1e3,
            "tokens_per_second": tokens / stats["median"],
            "tflops": tokens / stats["median"] * flops / 1e12,
        }
        if base.get("status") == "ok" and name != BASELINE:
            row["speedup"] = ratio_of_medians(base["window_s"], r["window_s"])
            row["speedup_ci95"] = bootstrap_ratio_ci(base["window_s"], r["window_s"])
        out[name] = row
    return out


def table(doc: dict[str, Any]) -> str:
    """A short text table of the results."""
    head = (
        f"{'precision':<11} {'status':<9} {'ms/step':>9} {'IQR ms':>8} {'tok/s':>10} "
        f"{'speedup':>8} {'95% CI':>13} {'peak MB':>9} {'act MB':>9} {'val acc':>8} "
        f"{'TFLOP/s':>8}"
    )
    lines = [head, "-" * len(head)]
    derived = figures(doc)
    for name, r in doc["precisions"].items():
        if r["status"] in ("oom", "error"):
            lines.append(f"{name:<11} {r['status']:<9} {r['error']}")
            continue
        f = derived.get(name, {})
        ci = f.get("speedup_ci95")
        mem = r["memory"]
        peak, static = mem.get("peak_allocated_mb"), mem.get("static_mb")
        activation = peak - static if peak is not None and static is not None else None
        lines.append(
            f"{name:<11} {r['status']:<9} {_fmt(f.get('step_time_ms'), 9, 2)} "
            f"{_fmt(f.get('iqr_ms'), 8, 2)} {_fmt(f.get('tokens_per_second'), 10, 0)} "
            f"{_fmt(f.get('speedup'), 8, 2, 'x')} "
            f"{(f'{ci[0]:.2f}-{ci[1]:.2f}' if ci else '-'):>13} "
            f"{_fmt(peak, 9, 0)} {_fmt(activation, 9, 0)} "
            f"{_fmt(r['val_accuracy'], 8, 4)} {_fmt(f.get('tflops'), 8, 1)}"
        )
    return "\n".join(lines)


def _log_wandb(doc: dict[str, Any]) -> None:
    """The headline figures, in the summary of a W&B run (offline unless WANDB_MODE says)."""
    sink = WandbSink(
        "amptrain-benchmark",
        config={"preset": doc["preset"], "machine": doc["machine_info"]},
        mode=os.environ.get("WANDB_MODE", "offline"),
    )
    for name, f in figures(doc).items():
        sink.run.summary[f"{name}/tokens_per_second"] = f["tokens_per_second"]
        sink.run.summary[f"{name}/val_accuracy"] = doc["precisions"][name]["val_accuracy"]
        if "speedup" in f:
            sink.run.summary[f"{name}/speedup_vs_{BASELINE}"] = f["speedup"]
    sink.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, write the JSON, print the table; exit 1 if any precision failed."""
    parser = argparse.ArgumentParser(
        prog="python -m amptrain.benchmark",
        description="AMP benchmark: speed, memory and accuracy per precision.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument(
        "--precisions",
        help="comma-separated, e.g. 32-true,32-tf32,bf16-mixed (default: the preset's)",
    )
    parser.add_argument("--out", type=Path, default=Path("reports/raw/benchmark.json"))
    parser.add_argument("--device", help="default: cuda for the gpu preset, else cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile each step's forward and loss"
    )
    parser.add_argument("--wandb", action="store_true", help="log the summary to W&B (offline)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    preset = PRESETS[args.preset]
    try:
        precisions = parse_precisions(args.precisions or ",".join(preset.precisions))
    except ValueError as exc:
        parser.error(str(exc))
    device = torch.device(args.device or ("cuda" if preset.needs_cuda else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(
            f"preset {preset.name!r} needs CUDA and none is available here; use --preset cpu-smoke"
        )

    bar = tqdm(
        total=preset.windows * len(precisions),
        unit="window",
        desc=preset.name,
        disable=args.quiet or not sys.stderr.isatty(),
    )
    doc = run_benchmark(
        preset,
        precisions,
        device,
        seed=args.seed,
        compile=args.compile,
        on_window=lambda name: (bar.set_postfix_str(name), bar.update()),
    )
    bar.close()
    write_json(doc, args.out)
    if args.wandb:
        _log_wandb(doc)
    print(table(doc))
    print(
        f"\nwrote {args.out} ({doc['device']}, {doc['machine_info'].get('gpu_name') or 'no GPU'})"
    )
    failed = [n for n, r in doc["precisions"].items() if r["status"] != "ok"]
    if failed:
        print(f"not measured cleanly: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
