"""amptrain's benchmark JSON (format version 1) into :class:`stagegate.model.Benchmark`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from stagegate.collect.jsonfile import load_json
from stagegate.errors import InputError
from stagegate.model import Benchmark, Comparison, PrecisionResult

SUPPORTED_VERSION = 1


def _num(value: Any) -> float | None:
    """A finite number, or None (JSON null, NaN and infinity all mean: not measured)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _get(data: dict[str, Any], key: str, path: Path, where: str) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise InputError(f"benchmark file {path}: {where} has no {key!r}")
    return data[key]


def _precision(name: str, r: dict[str, Any], path: Path) -> PrecisionResult:
    where = f"precisions.{name}"
    status = _get(r, "status", path, where)
    base = {
        "name": name,
        "status": status,
        "error": r.get("error"),
        "precision_used": r.get("precision_used", name),
    }
    if status not in ("ok", "nonfinite"):
        return PrecisionResult(**base)
    stats = _get(r, "stats", path, where)
    steps = _get(r, "steps_per_window", path, where)
    memory = r.get("memory") or {}
    health = _get(r, "health", path, where)
    syncs = health.get("syncs_in_step") or {}
    dtypes = health.get("matmul_dtypes") or {}
    live = health.get("live_tensors") or {}
    latency = health.get("inference_latency_ms") or {}
    iqr = _num(stats.get("iqr"))
    return PrecisionResult(
        **base,
        step_time_ms=_num(r.get("step_time_ms")),
        iqr_ms=iqr / steps * 1e3 if iqr is not None and steps else None,
        window_s=tuple(v for v in (_num(x) for x in _get(r, "window_s", path, where)) if v),
        tokens_per_second=_num(r.get("tokens_per_second")),
        mfu=_num(r.get("mfu")),
        peak_mb=_num(memory.get("peak_allocated_mb")),
        static_mb=_num(memory.get("static_mb")),
        activation_mb=_num(memory.get("activation_mb")),
        val_loss=_num(r.get("val_loss")),
        val_accuracy=_num(r.get("val_accuracy")),
        overflow_steps=r.get("overflow_steps"),
        loss_curve=tuple(_num(v) for v in r.get("loss_curve") or ()),
        memory_growth_mb_per_window=_num(health.get("memory_growth_mb_per_window")),
        memory_source=health.get("memory_source"),
        data_wait_share=_num(health.get("data_wait_share")),
        syncs_measured=bool(syncs.get("measured")),
        sync_method=str(syncs.get("method") or "cuda"),
        syncs_per_step=_num(syncs.get("per_step")),
        matmul_dtypes={str(k): int(v) for k, v in (dtypes.get("observed") or {}).items()},
        matmul_dtype_expected=dtypes.get("expected"),
        live_graph_tensors=live.get("graph_attached_added_max"),
        live_growth_pct_per_window=_num(live.get("growth_pct_per_window")),
        sync_locations=tuple(syncs.get("locations") or ()),
        latency_p50_ms=_num(latency.get("p50")),
        latency_p95_ms=_num(latency.get("p95")),
    )


def _comparison(c: dict[str, Any], path: Path) -> Comparison:
    ci = c.get("speedup_ci95") or [math.nan, math.nan]
    speedup = _num(_get(c, "speedup", path, "a comparison"))
    return Comparison(
        precision=_get(c, "precision", path, "a comparison"),
        baseline=_get(c, "baseline", path, "a comparison"),
        speedup=speedup if speedup is not None else math.nan,
        speedup_ci95=(_num(ci[0]) or math.nan, _num(ci[1]) or math.nan),
        peak_memory_reduction_pct=_num(c.get("peak_memory_reduction_pct")),
        activation_memory_reduction_pct=_num(c.get("activation_memory_reduction_pct")),
        accuracy_diff=_num(c.get("accuracy_diff")),
        val_loss_diff=_num(c.get("val_loss_diff")),
    )


def read_benchmark(path: Path) -> Benchmark:
    """Read and check a benchmark document; wrong versions and missing keys are InputErrors."""
    data = load_json(path, "benchmark file")
    if not isinstance(data, dict) or data.get("kind") != "amptrain-benchmark":
        raise InputError(f"benchmark file {path} is not an amptrain benchmark result")
    if data.get("format_version") != SUPPORTED_VERSION:
        raise InputError(
            f"benchmark file {path} has format_version {data.get('format_version')!r}; "
            f"this stagegate reads {SUPPORTED_VERSION}"
        )
    machine = _get(data, "machine_info", path, "the document")
    precisions = _get(data, "precisions", path, "the document")
    if not isinstance(precisions, dict) or not precisions:
        raise InputError(f"benchmark file {path} measured no precision")
    return Benchmark(
        preset=_get(data, "preset", path, "the document").get("name", "?"),
        device=str(data.get("device", "?")),
        gpu_verified=bool(data.get("gpu_verified")),
        gpu_name=machine.get("gpu_name"),
        torch=machine.get("torch"),
        cuda=machine.get("cuda"),
        driver=machine.get("driver"),
        datetime=str(data.get("datetime", "")),
        commit=(data.get("commit_info") or {}).get("id"),
        precisions=tuple(_precision(n, r, path) for n, r in precisions.items()),
        comparisons=tuple(_comparison(c, path) for c in data.get("comparisons") or ()),
        settings=data.get("settings") or {},
    )
