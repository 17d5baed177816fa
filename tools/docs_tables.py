"""The docs' measured tables, generated from the committed result files.

    python tools/docs_tables.py            # rewrite every table in README.md and docs/*.md
    python tools/docs_tables.py --check    # exit 1, naming each table that differs

A table sits between two marker comments, ``<!-- begin table:NAME -->`` and
``<!-- end table:NAME -->``; NAME picks the renderer and the file it reads (``TABLES``). What
lies between the markers is replaced by the renderer's output, so a figure in a table is always
the committed file's, and a test (tests/ci/test_docs.py) fails when a doc was not regenerated.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagegate.collect.benchmark import FORMAT_1_SYNC_STEPS
from stagegate.judge.benchpolicy import BenchmarkPolicy, peak_row
from stagegate.judge.derive import (
    COMPUTE_DTYPE,
    differences,
    paired,
    percentile,
    reduction_pct,
    slope,
    speedup,
)
from stagegate.judge.policy import load_policy
from stagegate.judge.stats import median

ROOT = Path(__file__).resolve().parents[1]
BASELINE = Path("reports/baseline")
H100 = BASELINE / "h100-80gb-hbm3"
H200 = BASELINE / "h200"
# Markers stand at the start of a line; one quoted inside a sentence is left alone.
MARKER = re.compile(
    r"^(<!-- begin table:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)^(<!-- end table:(?P=name) -->)",
    re.S | re.M,
)
BEGIN = re.compile(r"^<!-- begin table:", re.M)


class DocsTableError(Exception):
    """A doc or a result file that the tables cannot be made from; the message says which."""


@dataclass(frozen=True)
class Files:
    """Several committed JSON files read as one table's data, each under its label."""

    paths: dict[str, Path]

    def read(self, root: Path) -> dict[str, Any]:
        return {label: json.loads((root / p).read_text()) for label, p in self.paths.items()}


@dataclass(frozen=True)
class Table:
    """One generated table: the committed file (or files) it reads and the function that
    renders it."""

    source: Path | Files
    render: Callable[[dict[str, Any]], str]

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every committed file the table reads."""
        return (
            tuple(self.source.paths.values()) if isinstance(self.source, Files) else (self.source,)
        )


def _ms(value: float) -> str:
    return f"{value:,.2f}"


# Every figure below is derived from a file's raw samples with stagegate's own functions (a
# format 1 file's summaries are never read): the docs show what the gate judges.
FP32 = "32-true"  # the judged baseline


def _interval(data: dict[str, Any], name: str, baseline: str) -> str:
    arm, base = data["precisions"].get(name), data["precisions"].get(baseline)
    if arm is None or base is None or name == baseline:
        return "-"
    ratio, (low, high) = speedup(base["window_s"], arm["window_s"])
    return f"{ratio:.2f}x ({low:.2f}-{high:.2f})"


def _median_window(arm: dict[str, Any]) -> float:
    return median(arm["window_s"])


def _tokens_per_second(data: dict[str, Any], arm: dict[str, Any]) -> float:
    p = data["preset"]
    return arm["steps_per_window"] * p["batch_size"] * p["seq_len"] / _median_window(arm)


def _activation_mb(arm: dict[str, Any]) -> float:
    return arm["memory"]["peak_allocated_mb"] - arm["memory"]["static_mb"]


def _policy() -> BenchmarkPolicy:
    """The repository's benchmark policy: its peak table is the one every MFU is taken from."""
    return load_policy(ROOT / "pyproject.toml").benchmark


def _flops(data: dict[str, Any]) -> int:
    """Training FLOPs per token: the file's model facts, or the policy's for its preset (files
    written before the benchmark stated them)."""
    model = data.get("model") or {}
    declared = _policy().presets[data["preset"]["name"]].flops_per_token
    return int(model.get("flops_per_token") or declared)


def _peak(gpu: str | None, precision: str) -> float | None:
    """The GPU's dense peak TFLOP/s for the dtype ``precision`` computes in (policy's table)."""
    row, _ = peak_row(_policy(), gpu or "")
    dtype = COMPUTE_DTYPE.get(precision)
    return row[dtype] if row is not None and dtype is not None else None


def benchmark_table(data: dict[str, Any]) -> str:
    """One row per precision of a benchmark file: time, throughput, speedups, MFU (against the
    policy's peak table), memory, validation loss and single-sample latency."""
    flops, gpu = _flops(data), data["machine_info"]["gpu_name"]
    rows = [
        "| precision | ms/step | tokens/s | speedup over IEEE fp32 (95% CI) | over TF32 | MFU "
        "| peak TFLOP/s | peak MB | activation MB | val loss | latency p50 / p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, arm in data["precisions"].items():
        latency = arm["health"]["inference_latency_ms"]["samples_ms"]
        peak = _peak(gpu, name)
        tokens = _tokens_per_second(data, arm)
        mfu = tokens * flops / 1e12 / peak if peak else None
        cells = [
            f"`{name}`",
            _ms(_median_window(arm) / arm["steps_per_window"] * 1e3),
            f"{tokens:,.0f}",
            _interval(data, name, FP32),
            _interval(data, name, "32-tf32") if name != FP32 else "-",
            f"{mfu:.1%}" if mfu is not None else "-",
            f"{peak:g}" if peak is not None else "-",
            f"{arm['memory']['peak_allocated_mb']:,.0f}",
            f"{_activation_mb(arm):,.0f}",
            f"{arm['val_loss']:.4f}",
            f"{percentile(latency, 50):.2f} / {percentile(latency, 95):.2f}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _syncs_per_step(syncs: dict[str, Any]) -> float:
    """The host syncs counted over the steps they were counted over (format 1 wrote no steps)."""
    return syncs["count"] / syncs.get("steps", FORMAT_1_SYNC_STEPS)


def benchmark_findings(data: dict[str, Any]) -> str:
    """What the precision table implies against IEEE fp32: memory cut, accuracy, syncs, skips."""
    lines = []
    base = data["precisions"][FP32]
    for name, arm in data["precisions"].items():
        if name == FP32:
            continue
        memory = (m["memory"]["peak_allocated_mb"] for m in (arm, base))
        peak = reduction_pct(*memory)
        activation = reduction_pct(_activation_mb(arm), _activation_mb(base))
        diffs = differences(
            (arm["val_accuracy"], arm["val_loss"]), (base["val_accuracy"], base["val_loss"])
        )
        lines.append(
            f"| `{name}` | {peak:.1f}% | {activation:.1f}% | {diffs['accuracy_diff']:.4f} "
            f"| {round(diffs['val_loss_diff'], 4) or 0.0:+.4f} |"
        )
    head = [
        f"| against `{FP32}` | peak memory cut | activation memory cut "
        "| token accuracy difference | validation loss difference |",
        "|---|---|---|---|---|",
    ]
    arms = data["precisions"].items()
    health = [
        "",
        "| precision | host syncs per step | skipped (overflow) steps | static MB | "
        "memory growth MB/window |",
        "|---|---|---|---|---|",
        *(
            f"| `{name}` | {_syncs_per_step(a['health']['syncs_in_step']):g} "
            f"| {a['overflow_steps']} | {a['memory']['static_mb']:,.0f} "
            f"| {slope(a['health']['memory_change_mb']):.3f} |"
            for name, a in arms
        ),
    ]
    return "\n".join([*head, *lines, *health]) + "\n"


def benchmark_run(data: dict[str, Any]) -> str:
    """Where and how a benchmark file was measured, as one table row."""
    m, p = data["machine_info"], data["preset"]
    windows = {len(arm["window_s"]) for arm in data["precisions"].values()}
    return (
        "| GPU | driver | torch | CUDA | preset | model | windows x steps | warm-up |\n"
        "|---|---|---|---|---|---|---|---|\n"
        f"| {m['gpu_name']} | {m['driver']} | {m['torch']} | {m['cuda']} "
        f"| `{p['name']}` "
        f"| {p['n_layers']} layers, d_model {p['d_model']}, {p['n_heads']} heads, context "
        f"{p['seq_len']}, batch {p['batch_size']}, vocabulary {p['vocab_size']} "
        f"| {'/'.join(str(n) for n in sorted(windows))} x {p['window_steps']} "
        f"| {p['warmup_steps']} steps |\n"
    )


KINDS = ("matmul", "elementwise/other", "attention", "optimizer", "gpu idle")


def _mode_mfu(data: dict[str, Any], mode: dict[str, Any]) -> float:
    """A profiled mode's MFU: as the file states it (files written with the benchmark's own
    peak table, the same figures), or its TFLOP/s over the policy's peak."""
    if "mfu" in mode:
        return float(mode["mfu"])
    peak = _peak(data["machine_info"]["gpu_name"], data["precision"])
    return float(mode["tflops"]) / peak if peak else math.nan


def step_profile(data: dict[str, Any]) -> str:
    """Eager against compiled step: time, MFU and the share of GPU time per kernel kind."""
    modes = data["modes"]
    names = list(modes)
    rows = [
        f"| {data['precision']} | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
        "| ms/step | " + " | ".join(f"{modes[n]['step_ms']:.2f}" for n in names) + " |",
        "| MFU | " + " | ".join(f"{_mode_mfu(data, modes[n]):.1%}" for n in names) + " |",
    ]
    # step_profile.py writes "by_kind"; files from before it listed top kernels, "kernel_time_share"
    share = {n: modes[n].get("by_kind") or modes[n]["kernel_time_share"] for n in names}
    for kind in KINDS:
        shares = [f"{share[n][kind]:.1%}" for n in names]
        rows.append(f"| {kind} (share of GPU time) | " + " | ".join(shares) + " |")
    return "\n".join(rows) + "\n"


def ab_runs(data: dict[str, Any]) -> str:
    """A/B files side by side: what each compared, its windows, and head/base with its interval."""
    rows = [
        "| A/B (head against base) | windows x steps a side | step time head/base (95% CI) "
        "| half-width | peak memory head/base |",
        "|---|---|---|---|---|",
    ]
    for label, doc in data.items():
        head, base = doc["head"], doc["base"]
        ratio, (low, high) = paired(head["window_s"], base["window_s"])
        memory, _ = paired(head["peak_mb"], base["peak_mb"])
        rows.append(
            f"| {label} "
            f"| {len(head['window_s'])} x {doc['steps_per_window']} "
            f"| {ratio:.3f}x ({low:.3f}-{high:.3f}) "
            f"| +-{(high - low) / 2 / ratio * 100:.1f}% | {memory:.3f}x |"
        )
    return "\n".join(rows) + "\n"


def fsdp_one_device(data: dict[str, Any]) -> str:
    """benchmarks/fsdp_vs_ddp.py in one process: each arm's seconds per step, its ratio to the
    first arm (the median of the windows' ratios) and the memory its steps allocated."""
    times, settings = data["seconds_per_step"], data["settings"]
    first = next(iter(times))
    [peaks] = data["peak_bytes_above_resident_by_rank"]
    rows = [
        f"| {settings['precision']}, {settings['windows']}x{settings['steps']} steps "
        f"| s/step | / {first} | peak above resident |",
        "|---|---|---|---|",
    ]
    for name, seconds in times.items():
        ratio = median([a / b for a, b in zip(seconds, times[first], strict=True)])
        rows.append(
            f"| {name} | {median(seconds):.4f} | {ratio:.3f} | {peaks[name] / 2**30:.1f} GiB |"
        )
    return "\n".join(rows) + "\n"


def fine_tune_throughput(data: dict[str, Any]) -> str:
    """Tokens per second of the bare step and of fine_tune, and their ratio."""
    rows = [
        f"| arm ({data['precision']}, {data['steps']} steps x {data['rounds']} rounds) "
        "| tokens/s | ratio to the bare step |",
        "|---|---|---|",
    ]
    for name, arm in data["arms"].items():
        rows.append(
            f"| `{name}` | {arm['tokens_per_second']:,.0f} | {arm['ratio_to_train_step']:.3f} |"
        )
    return "\n".join(rows) + "\n"


def policy_thresholds(data: dict[str, Any]) -> str:
    """The policy's thresholds, and the severities and the points each costs."""
    policy = data["tool"]["stagegate"]
    rows = ["| threshold | must be |", "|---|---|"]
    for key, rule in policy["thresholds"].items():
        rows.append(f"| `{key}` | {rule['op']} {rule['value']:g} |")
    severities: dict[str, list[str]] = {}
    for kind, level in policy["severity"].items():
        severities.setdefault(level, []).append(f"`{kind}`")
    rows += ["", "| severity | points | findings |", "|---|---|---|"]
    for level, points in policy["deduction"].items():
        rows.append(f"| {level} | {points} | {', '.join(severities.get(level, []))} |")
    return "\n".join(rows) + "\n"


BENCH = BASELINE / "benchmark-h100-80gb-hbm3.json"
H200_BENCH = BASELINE / "benchmark-h200.json"
H200_AB = Files(
    {
        "the commit against itself": H200 / "ab-head-against-itself.json",
        "a planted slowdown": H200 / "ab-planted-slowdown.json",
    }
)
TABLES: dict[str, Table] = {
    "h100-run": Table(BENCH, benchmark_run),
    "h100-precisions": Table(BENCH, benchmark_table),
    "h100-findings": Table(BENCH, benchmark_findings),
    "h100-step-profile": Table(H100 / "step-profile-eager-and-compiled.json", step_profile),
    "h100-fine-tune-throughput": Table(H100 / "fine-tune-throughput.json", fine_tune_throughput),
    "h200-run": Table(H200_BENCH, benchmark_run),
    "h200-precisions": Table(H200_BENCH, benchmark_table),
    "h200-findings": Table(H200_BENCH, benchmark_findings),
    "h200-step-profile": Table(H200 / "step-profile-eager-and-compiled.json", step_profile),
    "h200-ab": Table(H200_AB, ab_runs),
    "h200-fsdp": Table(H200 / "fsdp-vs-unsharded.json", fsdp_one_device),
    "policy": Table(Path("pyproject.toml"), policy_thresholds),
}


def render(name: str, root: Path = ROOT) -> str:
    """The table ``name`` as its committed file (a result file, or the policy) makes it today."""
    if name not in TABLES:
        raise DocsTableError(f"unknown table {name!r}: add it to TABLES in tools/docs_tables.py")
    table = TABLES[name]
    try:
        if isinstance(table.source, Files):
            return table.render(table.source.read(root))
        text = (root / table.source).read_text()
        data = tomllib.loads(text) if table.source.suffix == ".toml" else json.loads(text)
        return table.render(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DocsTableError(
            f"table {name}: {', '.join(map(str, table.paths))} cannot be read as its result "
            f"file ({exc!r}); "
            "restore the file or change the table's renderer"
        ) from exc


def fill(text: str, root: Path = ROOT) -> str:
    """``text`` with every marked table replaced by its generated version."""
    begins = len(BEGIN.findall(text))
    filled, count = MARKER.subn(lambda m: m[1] + render(m["name"], root) + m[4], text)
    if count != begins:
        raise DocsTableError(
            f"{begins} table markers open but {count} close with their own name: every "
            "'<!-- begin table:NAME -->' needs an '<!-- end table:NAME -->' after it"
        )
    return filled


def documents(root: Path = ROOT) -> list[Path]:
    """The files that may hold generated tables: the README and the docs folder."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the docs' tables, or with ``--check`` name those that differ (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    new: dict[Path, str] = {}
    try:  # every doc is made before any is written: a bad one leaves all as they were
        for path in documents():
            try:
                new[path] = fill(path.read_text())
            except DocsTableError as exc:
                raise DocsTableError(f"{path.relative_to(ROOT)}: {exc}") from exc
    except DocsTableError as exc:
        print(f"docs_tables: {exc}", file=sys.stderr)
        return 2
    stale = [path for path, text in new.items() if text != path.read_text()]
    if not args.check:
        for path in stale:
            path.write_text(new[path])
    verb = "differ from their result files" if args.check else "were regenerated"
    for path in stale:
        print(f"{path.relative_to(ROOT)}: tables {verb}", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
