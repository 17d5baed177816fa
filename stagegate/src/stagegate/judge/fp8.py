"""An fp8 arm judged by evidence: its float8 layers stated, emulated only where there is no GPU,
and run on a GPU that has float8 tensor cores (compute capability 8.9 or newer, as the stage's
record observed it); and by policy: its own targets against bf16-mixed, the autocast it adds
float8 matmuls to (``fp8_speedup`` on a GPU, ``fp8_accuracy_diff`` anywhere).

An emulated arm (a CPU's) computes float8's numbers in fp32: its accuracy is fp8's, its speed
means nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stagegate.judge.evidence import flag
from stagegate.judge.findings import Findings
from stagegate.kinds import Kind
from stagegate.model import Benchmark, Comparison, PrecisionResult, StageRecord

FP8 = "fp8"
BF16 = "bf16-mixed"
FLOAT8_CAPABILITY = (8, 9)  # Ada and Hopper: the first GPUs with float8 tensor cores
# fp8's own thresholds, for its comparison with bf16-mixed: metric -> the threshold's name
OWN_TARGETS = {"speedup": "fp8_speedup", "accuracy_diff": "fp8_accuracy_diff"}
RUN_AGAIN = "run the benchmark again and keep the file it writes as it is"


def target(c: Comparison, metric: str) -> str | None:
    """The name of fp8's own threshold for ``metric`` of ``c``, or None where it has none."""
    return OWN_TARGETS.get(metric) if (c.precision, c.baseline) == (FP8, BF16) else None


def _capability(device: Any) -> tuple[int, int] | None:
    """A device's compute capability ("9.0") as numbers, or None where it was not observed."""
    text = device.get("compute_capability") if isinstance(device, Mapping) else None
    major, _, minor = str(text).partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


def observed_capabilities(record: StageRecord) -> list[tuple[int, int]]:
    """The compute capabilities of the GPUs the stage's record observed (those it could read)."""
    seen = record.environment.get("accelerators")
    devices = seen.get("devices") if isinstance(seen, Mapping) else None
    found = [_capability(d) for d in devices] if isinstance(devices, list) else []
    return [c for c in found if c is not None]


def _stated(f: Findings, arm: PrecisionResult) -> bool:
    """The arm states its float8 layers and whether they were emulated; if not, a finding."""
    for key, value in (("fp8_layers", arm.fp8_layers), ("fp8_emulated", arm.fp8_emulated)):
        if value is None:
            flag(f, Kind.EVIDENCE_MISSING, f"precisions.fp8.{key}", "absent", fix=RUN_AGAIN)
    if arm.fp8_layers == 0 and arm.precision_used == FP8:
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            "precisions.fp8.fp8_layers",
            "0: no layer trained in float8, yet the arm states it ran as fp8",
        )
    return arm.fp8_layers is not None and arm.fp8_emulated is not None


def _no_float8(f: Findings, bench: Benchmark, record: StageRecord) -> None:
    """Float8 matmuls on a device that has no float8 tensor cores: impossible."""
    caps = observed_capabilities(record)
    if bench.device == "cuda" and caps and max(caps) >= FLOAT8_CAPABILITY:
        return
    if bench.device == "cuda" and not caps:
        return  # not observed: the peak table's row for the GPU's name holds it
    seen = ", ".join(f"{a}.{b}" for a, b in caps) or "none: no GPU"
    flag(
        f,
        Kind.EVIDENCE_IMPOSSIBLE,
        "precisions.fp8",
        f"ran float8 matmuls on a device without float8 tensor cores (compute capability "
        f"observed: {seen}; float8 needs 8.9 or newer)",
        fix="run the fp8 arm on an Ada or Hopper GPU (or newer); elsewhere amptrain falls back "
        "to bf16-mixed, or emulates float8 when asked (fp8_emulate), which the file states",
    )


def fp8_evidence(f: Findings, bench: Benchmark, record: StageRecord) -> None:
    """Findings about the fp8 arm of ``bench`` (none where it has none, or it failed)."""
    arm = next((p for p in bench.precisions if p.name == FP8 and p.status == "ok"), None)
    if arm is None or not _stated(f, arm) or arm.precision_used != FP8:
        return  # what the arm ran as is checked with every precision's
    if arm.fp8_emulated and bench.device == "cuda":
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            "precisions.fp8.fp8_emulated",
            "true on a GPU: its float8 matmuls were emulated in fp32, so its speed is not fp8's",
            fix="run the gpu preset, which never emulates float8",
        )
    elif not arm.fp8_emulated:
        _no_float8(f, bench, record)
