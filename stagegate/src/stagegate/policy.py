"""The written policy (``[tool.stagegate]`` in pyproject.toml): data, checked by pure functions."""

from __future__ import annotations

import math
import operator
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stagegate.errors import ConfigError
from stagegate.model import STAGES, Severity

__all__ = ["STAGES", "BenchmarkPolicy", "Policy", "Threshold", "check_threshold", "load_policy"]
_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass(frozen=True)
class Threshold:
    """``value OP limit`` must hold, e.g. speedup >= 1.5."""

    metric: str
    op: str
    limit: float
    unit: str = ""

    def __str__(self) -> str:
        return f"{self.op} {self.limit:g}{self.unit}"


def check_threshold(threshold: Threshold, value: float | None) -> str | None:
    """Why ``value`` misses ``threshold``, or None when it meets it (a missing value misses)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{threshold.metric} was not measured (target {threshold})"
    if _OPS[threshold.op](value, threshold.limit):
        return None
    return f"{threshold.metric} is {value:.4g}{threshold.unit}, target {threshold}"


DEFAULT_THRESHOLDS = {
    "speedup": Threshold("speedup", ">=", 1.5, "x"),
    "peak_memory_reduction_pct": Threshold("peak_memory_reduction_pct", ">=", 40.0, "%"),
    "activation_memory_reduction_pct": Threshold(
        "activation_memory_reduction_pct", ">=", 40.0, "%"
    ),
    "accuracy_diff": Threshold("accuracy_diff", "<", 0.01),
    "coverage_pct": Threshold("coverage_pct", ">=", 80.0, "%"),
    "memory_growth_mb_per_window": Threshold("memory_growth_mb_per_window", "<=", 2.0, " MB"),
    "syncs_per_step": Threshold("syncs_per_step", "<=", 0.0),
    # Tensors still attached to an autograd graph between steps (each keeps a graph alive).
    "live_graph_tensors": Threshold("live_graph_tensors", "<=", 0.0),
    # Growth of Python-held tensor storage per window, relative to what the run started with.
    "live_tensor_growth_pct_per_window": Threshold(
        "live_tensor_growth_pct_per_window", "<=", 1.0, "%"
    ),
}

DEFAULT_SEVERITY = {
    "test_failed": Severity.CRITICAL,
    "stage_failed": Severity.CRITICAL,
    "integration_raised": Severity.CRITICAL,
    "benchmark_failed": Severity.CRITICAL,
    # Benchmark evidence, checked before any threshold: a figure that is absent or not finite,
    # one no run can produce, a summary the raw figures contradict, or one the policy gives no
    # way to check (an undeclared preset, a GPU without peak figures). Never below HIGH.
    "evidence_missing": Severity.CRITICAL,
    "evidence_impossible": Severity.CRITICAL,
    "evidence_inconsistent": Severity.HIGH,
    "evidence_unchecked": Severity.HIGH,
    "threshold_missed": Severity.HIGH,
    "regression": Severity.HIGH,
    "memory_growth": Severity.HIGH,
    "coverage_below_floor": Severity.HIGH,
    "lint_error": Severity.HIGH,
    "host_sync": Severity.HIGH,  # zero syncs in the step is a promise, not a wish
    "autocast_mismatch": Severity.HIGH,
    "lint_warning": Severity.MEDIUM,
    "deprecation_warning": Severity.LOW,
    "flaky_test": Severity.MEDIUM,
    "count_mismatch": Severity.HIGH,  # a file that lost tests fails closed
    "side_file_missing": Severity.LOW,
    "lint_style": Severity.LOW,
    "other_warning": Severity.INFO,
    "skipped_test": Severity.INFO,
    "slow_test": Severity.INFO,  # durations depend on the machine's load: never scored
    "improvement": Severity.INFO,
}

EVIDENCE_KINDS = (
    "evidence_missing",
    "evidence_impossible",
    "evidence_inconsistent",
    "evidence_unchecked",
)

DEFAULT_DEDUCTION = {
    Severity.CRITICAL: 40,
    Severity.HIGH: 20,
    Severity.MEDIUM: 5,
    Severity.LOW: 1,
    Severity.INFO: 0,
}


MEASURES = ("speed", "memory", "accuracy", "syncs")
DEVICES = ("cuda", "cpu")
DTYPES = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class PresetSpec:
    """What a run of one preset must hold: the device it runs on, the precisions it measures
    and which kinds of figure (speed, memory, accuracy, syncs)."""

    device: str
    precisions: tuple[str, ...]
    measures: tuple[str, ...]


DEFAULT_PRESETS = {
    # amptrain's presets (src/amptrain/benchmark/presets.py): CUDA memory only exists on a GPU.
    "gpu": PresetSpec("cuda", ("32-true", "32-tf32", "16-mixed", "bf16-mixed"), MEASURES),
    "cpu-smoke": PresetSpec("cpu", ("32-true", "bf16-mixed"), ("speed", "accuracy", "syncs")),
}

# Dense peak TFLOP/s by compute dtype, from NVIDIA's datasheets, where the tensor-core figures
# are printed with 2:4 sparsity: halved here. H100 SXM5 and H200 SXM: FP32 67, TF32 989*,
# BF16/FP16 1,979*. H100 PCIe: FP32 51, TF32 756*, BF16/FP16 1,513*. H100 NVL and H200 NVL:
# FP32 60, TF32 835*, BF16/FP16 1,671*. A100 (SXM4 and PCIe, 40 and 80 GB): FP32 19.5,
# TF32 312*, BF16/FP16 624*. A key's words must all be words of the GPU's name; the key with
# the most words wins ("NVIDIA H100 80GB HBM3" is the SXM5 part).
DEFAULT_PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H100": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
    "H200": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
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
    # A summary figure (median, step time, throughput, speedup, reduction, difference) agrees
    # with its recomputation from the raw figures when within this share of it.
    summary_tolerance_pct: float = 0.1
    # Each bound of the file's 95% interval agrees with the gate's own bootstrap when within
    # this share of the gate's interval width (two bootstraps of the same windows drawn with
    # different generators differ by up to 0.35 of the width: see the README).
    interval_tolerance: float = 0.5


@dataclass(frozen=True, kw_only=True)
class Policy:
    """Everything the judge needs to decide; defaults come from the seed reports."""

    required: tuple[str, ...] = STAGES
    # stage -> when it may be skipped; "no-cuda": the benchmark ran without a GPU.
    skippable: Mapping[str, str] = field(default_factory=lambda: {"performance": "no-cuda"})
    thresholds: Mapping[str, Threshold] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    severity: Mapping[str, Severity] = field(default_factory=lambda: dict(DEFAULT_SEVERITY))
    deduction: Mapping[Severity, int] = field(default_factory=lambda: dict(DEFAULT_DEDUCTION))
    regression_margin_pct: float = 10.0
    slow_test_s: float = 5.0
    judged: tuple[str, ...] = STAGES  # --only narrows it; records of other stages are ignored
    # Stages that may execute no test (all skipped or disabled) and still pass.
    allow_no_tests: tuple[str, ...] = ()
    judged_baseline: str = "32-true"  # thresholds apply to comparisons against this precision
    rerun: str = ""  # the command that runs every stage, named in the fix for a missing one
    benchmark: BenchmarkPolicy = field(default_factory=BenchmarkPolicy)

    def require(self, stages: tuple[str, ...]) -> Policy:
        """The same policy with ``stages`` required and no longer skippable."""
        unknown = [s for s in stages if s not in STAGES]
        if unknown:
            raise ConfigError(f"--require {unknown[0]!r}: stages are {', '.join(STAGES)}")
        skippable = {k: v for k, v in self.skippable.items() if k not in stages}
        required = tuple(dict.fromkeys((*self.required, *stages)))
        return replace(self, required=required, skippable=skippable)

    def only(self, stages: tuple[str, ...]) -> Policy:
        """The same policy restricted to ``stages`` (none given: every stage)."""
        if not stages:
            return self
        unknown = [s for s in stages if s not in STAGES]
        if unknown:
            raise ConfigError(f"--only {unknown[0]!r}: stages are {', '.join(STAGES)}")
        return replace(
            self,
            required=tuple(s for s in self.required if s in stages),
            skippable={k: v for k, v in self.skippable.items() if k in stages},
            judged=stages,
        )


def _severity(key: str, value: Any) -> Severity:
    try:
        return Severity(str(value).upper())
    except ValueError:
        names = ", ".join(s.value for s in Severity)
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: use one of {names}") from None


def _number(key: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a finite number is needed")
    if value < minimum:
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: must be >= {minimum:g}")
    return float(value)


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a string is needed")
    return value


def _stage_list(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or any(s not in STAGES for s in value):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a list from {', '.join(STAGES)}")
    return tuple(value)


def _table(key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a table is needed")
    return value


def _skippable(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or any(
        s not in STAGES or c != "no-cuda" for s, c in value.items()
    ):
        raise ConfigError(f'[tool.stagegate] {key} = {value!r}: map a stage to "no-cuda"')
    return dict(value)


def _thresholds(key: str, value: Any) -> dict[str, Threshold]:
    thresholds = dict(DEFAULT_THRESHOLDS)
    for name, spec in _table(key, value).items():
        where = f"{key}.{name}"
        if name not in DEFAULT_THRESHOLDS:
            raise ConfigError(
                f"[tool.stagegate] {where}: unknown metric; known: {', '.join(DEFAULT_THRESHOLDS)}"
            )
        if not isinstance(spec, dict) or spec.get("op") not in _OPS or "value" not in spec:
            raise ConfigError(
                f"[tool.stagegate] {where} = {spec!r}: write "
                '{ op = ">=", value = 1.5 } with op one of >=, >, <=, <'
            )
        limit = _number(f"{where}.value", spec["value"], minimum=-math.inf)
        thresholds[name] = Threshold(name, spec["op"], limit, DEFAULT_THRESHOLDS[name].unit)
    return thresholds


def _severities(key: str, value: Any) -> dict[str, Severity]:
    severity = dict(DEFAULT_SEVERITY)
    for kind, name in _table(key, value).items():
        if kind not in DEFAULT_SEVERITY:
            raise ConfigError(
                f"[tool.stagegate] {key}.{kind}: unknown finding kind; known: "
                f"{', '.join(DEFAULT_SEVERITY)}"
            )
        severity[kind] = _severity(f"{key}.{kind}", name)
    if severity["slow_test"] is not Severity.INFO:
        raise ConfigError(
            f"[tool.stagegate] {key}.slow_test = {value['slow_test']!r}: "
            "must be INFO; a test's duration depends on the machine's load, and the same "
            "code must get the same verdict and score"
        )
    return severity


def _deductions(key: str, value: Any) -> dict[Severity, int]:
    deduction = dict(DEFAULT_DEDUCTION)
    for name, points in _table(key, value).items():
        deduction[_severity(f"{key}.{name}", name)] = int(_number(f"{key}.{name}", points))
    if deduction[Severity.INFO]:
        raise ConfigError(
            f"[tool.stagegate] {key}.INFO = {deduction[Severity.INFO]!r}: must be 0; INFO "
            "findings (slow tests among them) depend on the machine's load, and the same code "
            "must get the same score"
        )
    return deduction


def _fail(key: str, value: Any, need: str) -> ConfigError:
    return ConfigError(f"[tool.stagegate] {key} = {value!r}: {need}")


def _positive(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(key, value, "a finite number is needed")
    if value <= 0:
        raise _fail(key, value, "must be > 0")
    return float(value)


def _words(key: str, value: Any, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or any(not isinstance(v, str) or not v for v in value)
        or (allowed is not None and any(v not in allowed for v in value))
    ):
        need = f"a list from {', '.join(allowed)}" if allowed else "a non-empty list of names"
        raise _fail(key, value, need)
    return tuple(dict.fromkeys(value))


def _preset(key: str, spec: Any) -> PresetSpec:
    if not isinstance(spec, dict) or set(spec) != {"device", "precisions", "measures"}:
        raise _fail(key, spec, 'write { device = "cuda", precisions = [...], measures = [...] }')
    if spec["device"] not in DEVICES:
        raise _fail(f"{key}.device", spec["device"], f"one of {', '.join(DEVICES)}")
    measures = _words(f"{key}.measures", spec["measures"], MEASURES)
    # Speed and accuracy carry the thresholds; CUDA memory exists on cuda, and only there.
    needed = {"speed", "accuracy", "memory"} if spec["device"] == "cuda" else {"speed", "accuracy"}
    if not needed <= set(measures) or ("memory" in measures and spec["device"] != "cuda"):
        raise _fail(
            f"{key}.measures",
            spec["measures"],
            f"a {spec['device']} preset measures {', '.join(sorted(needed))}"
            + (", and syncs if it counts them" if spec["device"] == "cuda" else "; not memory"),
        )
    return PresetSpec(spec["device"], _words(f"{key}.precisions", spec["precisions"]), measures)


def _peaks(key: str, table: Any) -> dict[str, dict[str, float]]:
    if not isinstance(table, dict) or not table:
        raise _fail(key, table, "a table of GPU name patterns")
    peaks = {}
    for pattern, row in table.items():
        where = f"{key}.{pattern}"
        if not pattern.split() or not isinstance(row, dict) or set(row) != set(DTYPES):
            raise _fail(where, row, f"a table of {', '.join(DTYPES)} in TFLOP/s")
        peaks[pattern] = {dtype: _positive(f"{where}.{dtype}", row[dtype]) for dtype in DTYPES}
    return peaks


def _presets(key: str, table: Any) -> dict[str, PresetSpec]:
    if not isinstance(table, dict) or not table:
        raise _fail(key, table, "a table of presets")
    return {name: _preset(f"{key}.{name}", spec) for name, spec in table.items()}


def benchmark_policy(key: str, table: Any) -> BenchmarkPolicy:
    """``[tool.stagegate.benchmark]`` checked; a table given replaces its default whole."""
    if not isinstance(table, dict):
        raise _fail(key, table, "a table is needed")
    readers = {
        "presets": _presets,
        "peak_tflops": _peaks,
        "min_windows": _positive,
        "summary_tolerance_pct": _positive,
        "interval_tolerance": _positive,
    }
    unknown = sorted(set(table) - set(readers))
    if unknown:
        raise ConfigError(
            f"[tool.stagegate] {key}.{unknown[0]}: unknown key; known: {', '.join(readers)}"
        )
    values = {name: readers[name](f"{key}.{name}", value) for name, value in table.items()}
    if "min_windows" in values:
        if values["min_windows"] < 2 or values["min_windows"] != int(values["min_windows"]):
            raise _fail(f"{key}.min_windows", table["min_windows"], "a whole number >= 2")
        values["min_windows"] = int(values["min_windows"])
    return BenchmarkPolicy(**values)


# Each key of [tool.stagegate] and the function that checks and converts its value.
_KEYS: dict[str, Callable[[str, Any], Any]] = {
    "required": _stage_list,
    "skippable": _skippable,
    "thresholds": _thresholds,
    "severity": _severities,
    "deduction": _deductions,
    "regression_margin_pct": _number,
    "slow_test_s": _number,
    "judged_baseline": _text,
    "allow_no_tests": _stage_list,
    "rerun": _text,
    "benchmark": benchmark_policy,
}


def policy_from_mapping(table: Mapping[str, Any]) -> Policy:
    """A Policy from a ``[tool.stagegate]`` table; a bad value raises ConfigError naming it."""
    for key in table:
        if key not in _KEYS:
            raise ConfigError(
                f"[tool.stagegate] has an unknown key {key!r}; known: {', '.join(sorted(_KEYS))}"
            )
    return Policy(**{key: _KEYS[key](key, value) for key, value in table.items()})


def load_policy(pyproject: Path | None) -> Policy:
    """The policy in ``pyproject``'s ``[tool.stagegate]``; the defaults where there is none."""
    if pyproject is None or not pyproject.exists():
        return Policy()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject} is not valid TOML: {exc}") from None
    return policy_from_mapping(data.get("tool", {}).get("stagegate", {}))
