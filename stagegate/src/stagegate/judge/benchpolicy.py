"""The benchmark part of the policy (``[tool.stagegate.benchmark]``): what each preset must
measure and where, each GPU's peak throughput, how many windows it judges, and how far a file's
clock may stray. The benchmark file only names its preset and its GPU: everything the judge
expects of them comes from here."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stagegate.errors import ConfigError

MEASURES = ("speed", "memory", "accuracy", "syncs", "autocast")
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
OPTIONAL_DTYPES = ("fp8",)  # a GPU without float8 tensor cores (before compute capability 8.9)
MAX_WINDOWS = 500  # the exact bootstrap of 500 windows a side takes seconds


# A preset's sizes: its timed windows, the steps of each, and the batch and sequence sizes
SIZES = ("windows", "window_steps", "batch_size", "seq_len")


@dataclass(frozen=True)
class PresetSpec:
    """What a run of one preset must hold: the device it runs on, the precisions it measures
    and which kinds of figure (speed, memory, accuracy, syncs)."""

    device: str
    precisions: tuple[str, ...]
    measures: tuple[str, ...]
    # The model's training FLOPs per token (forward and backward): with the windows and the
    # preset's sizes, what bounds a GPU run's throughput by the device's peak
    flops_per_token: int | None = None
    # The sizes the preset runs with (SIZES), where declared: a file that states others ran
    # other work, and throughput, MFU and the physics bound are derived from these instead
    sizes: Mapping[str, int] = field(default_factory=dict)
    # The steps of each window of an A/B run of the preset (amptrain.benchmark.ab's --steps),
    # where declared: the A/B's tokens a window are counted from these and the batch and
    # sequence sizes above, never from the file's own
    ab_window_steps: int | None = None


DEFAULT_PRESETS = {
    # amptrain's presets (src/amptrain/benchmark/presets.py): CUDA memory only exists on a GPU.
    "gpu": PresetSpec(
        "cuda",
        ("32-true", "32-tf32", "16-mixed", "bf16-mixed"),
        MEASURES,
        633_019_392,
        {"window_steps": 10, "batch_size": 32, "seq_len": 1024},
        ab_window_steps=20,
    ),
    "cpu-smoke": PresetSpec(
        "cpu", ("32-true", "bf16-mixed"), ("speed", "accuracy", "syncs", "autocast"), 189_696
    ),
}

# Dense peak TFLOP/s by compute dtype, from NVIDIA's datasheets, where the tensor-core figures
# are printed with 2:4 sparsity: halved here. H100 SXM5 and H200 SXM: FP32 67, TF32 989*,
# BF16/FP16 1,979*, FP8 3,958*. H100 PCIe: FP32 51, TF32 756*, BF16/FP16 1,513*, FP8 3,026*.
# H100 NVL and H200 NVL: FP32 60, TF32 835*, BF16/FP16 1,671*, FP8 3,341*. A100 (SXM4 and
# PCIe, 40 and 80 GB): FP32 19.5, TF32 312*, BF16/FP16 624*, no FP8 (a row without fp8 is a
# GPU that cannot compute in it). A key's words must all be words of the GPU's name; the key
# with the most words wins ("NVIDIA H100 80GB HBM3" is the SXM5 part).
DEFAULT_PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H100": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5, "fp8": 1513.0},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5},
    "H200": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0},
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5},
    "A100": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
}


@dataclass(frozen=True, kw_only=True)
class BenchmarkPolicy:
    """How benchmark evidence is checked before any threshold."""

    presets: Mapping[str, PresetSpec] = field(default_factory=lambda: dict(DEFAULT_PRESETS))
    peak_tflops: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: {k: dict(v) for k, v in DEFAULT_PEAK_TFLOPS.items()}
    )
    min_windows: int = 5  # timed windows per precision: fewer cannot give an interval
    # The most the judge computes the exact bootstrap for (its time grows with the square).
    max_windows: int = 100
    # The file's datetime lies within the stage's run (its record's start to its end) give or
    # take this: each side is written to the whole second, so 1 s each.
    clock_tolerance_s: float = 2.0
    # What one CPU core can compute, in any dtype: above the matrix units of any current server
    # core (a 2048-FLOP-a-cycle bfloat16 tile unit at 3.5 GHz is 7.2). A run on a CPU is bounded
    # by it times the cores stagegate run saw.
    cpu_peak_tflops_per_core: float = 8.0


def _name_words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def peak_row(
    policy: BenchmarkPolicy, gpu_name: str
) -> tuple[Mapping[str, float] | None, list[str]]:
    """The GPU's row of the peak table: the pattern with the most words, all of them words of
    the GPU's name; and the patterns that fit best (more than one whose figures differ, or
    none: no row)."""
    name = _name_words(gpu_name)
    fits = [(len(k.split()), k) for k in policy.peak_tflops if _name_words(k) <= name]
    best = [k for n, k in fits if n == max(fits)[0]] if fits else []
    if len({tuple(sorted(policy.peak_tflops[k].items())) for k in best}) == 1:
        return policy.peak_tflops[best[0]], best
    return None, best


def _fail(key: str, value: Any, need: str) -> ConfigError:
    return ConfigError(f"[tool.stagegate] {key} = {value!r}: {need}")


def _within(key: str, value: Any, low: float, high: float, whole: bool = False) -> float:
    """``value`` as a number strictly between ``low`` and ``high`` (a whole one if ``whole``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(key, value, "a finite number is needed")
    if not low < value < high or (whole and value != int(value)):
        kind = "a whole number" if whole else "a number"
        raise _fail(key, value, f"{kind} above {low:g} and below {high:g}")
    return int(value) if whole else float(value)


def _words(key: str, value: Any, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or any(not isinstance(v, str) or not v for v in value)
        or (allowed is not None and any(v not in allowed for v in value))
    ):
        raise _fail(
            key, value, f"a list from {', '.join(allowed)}" if allowed else "a list of names"
        )
    return tuple(dict.fromkeys(value))


def _preset(key: str, spec: Any) -> PresetSpec:
    keys = {"device", "precisions", "measures"}
    optional = {"flops_per_token", "ab_window_steps", *SIZES}
    if not isinstance(spec, dict) or not keys <= set(spec) <= keys | optional:
        raise _fail(
            key,
            spec,
            'write { device = "cuda", precisions = [...], measures = [...] } and, optionally, '
            f"flops_per_token = N, the sizes {', '.join(SIZES)} and ab_window_steps",
        )
    sizes = {k: int(_within(f"{key}.{k}", spec[k], 0, 1e9, whole=True)) for k in SIZES if k in spec}
    flops, ab_steps = spec.get("flops_per_token"), spec.get("ab_window_steps")
    if flops is not None:
        flops = int(_within(f"{key}.flops_per_token", flops, 0, 1e18, whole=True))
    if ab_steps is not None:
        ab_steps = int(_within(f"{key}.ab_window_steps", ab_steps, 0, 1e9, whole=True))
    device = spec["device"]
    if device not in ("cuda", "cpu"):
        raise _fail(f"{key}.device", device, "cuda or cpu")
    measures = _words(f"{key}.measures", spec["measures"], MEASURES)
    # Speed and accuracy carry the thresholds; CUDA memory exists on cuda, and only there.
    if {"speed", "accuracy"} - set(measures) or ("memory" in measures) != (device == "cuda"):
        need = "speed, accuracy" + (", memory" if device == "cuda" else " and never memory")
        raise _fail(f"{key}.measures", spec["measures"], f"a {device} preset measures {need}")
    precisions = _words(f"{key}.precisions", spec["precisions"])
    return PresetSpec(device, precisions, measures, flops, sizes, ab_steps)


def _peaks(key: str, table: Any) -> dict[str, dict[str, float]]:
    if not isinstance(table, dict) or not table:
        raise _fail(key, table, "a table of GPU name patterns")
    peaks = {}
    needed = set(DTYPES) - set(OPTIONAL_DTYPES)
    for pattern, row in table.items():
        where = f"{key}.{pattern}"
        if not pattern.split() or not isinstance(row, dict) or not needed <= set(row) <= {*DTYPES}:
            raise _fail(
                where, row, f"a table of {', '.join(DTYPES)} in TFLOP/s (fp8 where it has it)"
            )
        peaks[pattern] = {d: _within(f"{where}.{d}", row[d], 0, math.inf) for d in row}
    return peaks


def _presets(key: str, table: Any) -> dict[str, PresetSpec]:
    if not isinstance(table, dict) or not table:
        raise _fail(key, table, "a table of presets")
    return {name: _preset(f"{key}.{name}", spec) for name, spec in table.items()}


_TABLES: dict[str, Callable[[str, Any], Any]] = {"presets": _presets, "peak_tflops": _peaks}
# The numbers of [tool.stagegate.benchmark]: (above, below, whole)
_NUMBERS = {
    "min_windows": (1, MAX_WINDOWS + 1, True),
    "max_windows": (1, MAX_WINDOWS + 1, True),
    "clock_tolerance_s": (0, 600, False),
    "cpu_peak_tflops_per_core": (0, 1000, False),
}


def _read(key: str, name: str, value: Any) -> Any:
    if name in _TABLES:
        return _TABLES[name](f"{key}.{name}", value)
    return _within(f"{key}.{name}", value, *_NUMBERS[name])


def benchmark_policy(key: str, table: Any) -> BenchmarkPolicy:
    """``[tool.stagegate.benchmark]`` checked; a table given replaces its default whole."""
    if not isinstance(table, dict):
        raise _fail(key, table, "a table is needed")
    known = [*_TABLES, *_NUMBERS]
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(
            f"[tool.stagegate] {key}.{unknown[0]}: unknown key; known: {', '.join(known)}"
        )
    policy = BenchmarkPolicy(**{name: _read(key, name, value) for name, value in table.items()})
    if policy.min_windows > policy.max_windows:
        raise _fail(f"{key}.min_windows", policy.min_windows, "must not exceed max_windows")
    return policy
