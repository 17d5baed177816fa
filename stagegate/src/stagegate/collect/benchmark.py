"""amptrain's benchmark JSON (format versions 1 and 2) into :class:`stagegate.model.Benchmark`.

Raw figures only: the timed windows, memory, losses, health samples and counts, the model's
facts and the environment. Version 2 holds nothing else; version 1 (the committed baselines)
also holds summaries (medians, throughput, comparisons, health slopes, shares and
percentiles), which are never read: the judge derives every figure from the raw ones
(:mod:`stagegate.judge.derive`), whatever the version. A version 1 file holds no data-wait
seconds, so its data-wait share is absent.

Reading only: a value of the wrong shape (text where an object belongs) is an InputError that
names it; a figure that is absent, null or not finite is read as None, and the judge decides
what its absence means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stagegate.collect.jsonfile import finite as _num
from stagegate.collect.jsonfile import load_document, machine_claim
from stagegate.collect.jsonfile import text as _text
from stagegate.collect.jsonfile import whole as _whole
from stagegate.errors import InputError
from stagegate.model import Benchmark, PrecisionResult

SUPPORTED_VERSIONS = (1, 2)


def _get(data: dict[str, Any], key: str, path: Path, where: str) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise InputError(f"benchmark file {path}: {where} has no {key!r}")
    return data[key]


def _obj(
    data: dict[str, Any], key: str, path: Path, where: str, required: bool = False
) -> dict[str, Any]:
    """``data[key]`` as an object; absent or null reads as empty unless ``required``, any other
    shape is an error."""
    value = _get(data, key, path, where) if required else data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"benchmark file {path}: {where}.{key} is not an object")
    return value


def _list(
    data: dict[str, Any], key: str, path: Path, where: str, required: bool = False
) -> list[Any]:
    """``data[key]`` as a list; absent or null reads as empty unless ``required``, any other
    shape is an error."""
    value = _get(data, key, path, where) if required else data.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise InputError(f"benchmark file {path}: {where}.{key} is not a list")
    return value


def _sync_locations(syncs: dict[str, Any], path: Path, where: str) -> tuple[dict[str, Any], ...]:
    found = _list(syncs, "locations", path, where)
    if any(
        not isinstance(s, dict)
        or _text(s.get("location")) is None
        or _whole(s.get("count")) is None
        for s in found
    ):
        raise InputError(
            f"benchmark file {path}: {where}.locations: each needs a location and a count"
        )
    return tuple(found)


def _dtype_counts(dtypes: dict[str, Any], path: Path, where: str) -> dict[str, int]:
    observed = _obj(dtypes, "observed", path, where)
    counts = {str(k): _whole(v) for k, v in observed.items()}
    if any(v is None for v in counts.values()):
        raise InputError(f"benchmark file {path}: {where}.observed: counts must be whole numbers")
    return {k: v for k, v in counts.items() if v is not None}


# Format 1 counted every precision's host syncs over 3 training steps and wrote the steps
# nowhere (only their ratio, a summary no reader reads); format 2 writes them.
FORMAT_1_SYNC_STEPS = 3


def _numbers(data: dict[str, Any], key: str, path: Path, where: str) -> tuple[float | None, ...]:
    """``data[key]`` as a list of numbers, each None where it is not a finite number; absent
    or null reads as empty."""
    return tuple(_num(v) for v in _list(data, key, path, where))


def _syncs(syncs: dict[str, Any], version: int, path: Path, where: str) -> dict[str, Any]:
    steps = FORMAT_1_SYNC_STEPS if version == 1 else _whole(syncs.get("steps"))
    return {
        "syncs_measured": syncs.get("measured") is True,
        "sync_method": _text(syncs.get("method")) or "cuda",
        "sync_count": _whole(syncs.get("count")),
        "sync_steps": steps,
        "sync_locations": _sync_locations(syncs, path, where),
    }


def _health(r: dict[str, Any], version: int, path: Path, where: str) -> dict[str, Any]:
    """The health samples and counts of one precision, as PrecisionResult fields (no figure
    derived from them: a version 1 file's slopes, shares and percentiles are never read)."""
    health = _obj(r, "health", path, where, required=True)
    where = f"{where}.health"
    dtypes = _obj(health, "matmul_dtypes", path, where)
    live = _obj(health, "live_tensors", path, where)
    latency = _obj(health, "inference_latency_ms", path, where)
    return {
        "memory_change_mb": _numbers(health, "memory_change_mb", path, where),
        "memory_source": _text(health.get("memory_source")),
        "live_bytes_change": _numbers(live, "bytes_change", path, f"{where}.live_tensors"),
        "live_start_bytes": _num(live.get("start_bytes")),
        "live_graph_tensors": _whole(live.get("graph_attached_added_max")),
        "data_wait_s": _num(health.get("data_wait_s")),
        "timed_host_s": _num(health.get("timed_host_s")),
        **_syncs(
            _obj(health, "syncs_in_step", path, where), version, path, f"{where}.syncs_in_step"
        ),
        "matmul_dtypes": _dtype_counts(dtypes, path, f"{where}.matmul_dtypes"),
        "matmul_dtype_expected": _text(dtypes.get("expected")),
        "latency_samples_ms": _numbers(
            latency, "samples_ms", path, f"{where}.inference_latency_ms"
        ),
    }


def _precision(name: str, r: Any, version: int, path: Path) -> PrecisionResult:
    where = f"precisions.{name}"
    status = _get(r, "status", path, where)
    base = {
        "name": name,
        "status": str(status),
        "error": None if r.get("error") is None else str(r["error"]),
        "precision_used": _text(r.get("precision_used")),
        "float32_matmul_precision": _text(r.get("float32_matmul_precision")),
        "fp8_layers": _whole(r.get("fp8_layers")),
        "fp8_emulated": r.get("fp8_emulated") if isinstance(r.get("fp8_emulated"), bool) else None,
    }
    if status not in ("ok", "nonfinite"):
        return PrecisionResult(**base)
    steps = _num(_get(r, "steps_per_window", path, where))
    memory = _obj(r, "memory", path, where)
    return PrecisionResult(
        **base,
        window_s=tuple(_num(x) for x in _list(r, "window_s", path, where, required=True)),
        steps_per_window=steps,
        memory_measured=memory.get("measured") is True,
        peak_mb=_num(memory.get("peak_allocated_mb")),
        static_mb=_num(memory.get("static_mb")),
        val_loss=_num(r.get("val_loss")),
        val_accuracy=_num(r.get("val_accuracy")),
        overflow_steps=_whole(r.get("overflow_steps")),
        loss_curve=tuple(_num(v) for v in _list(r, "loss_curve", path, where)),
        **_health(r, version, path, where),
    )


def read_benchmark(path: Path) -> Benchmark:
    """Read and check a benchmark document; wrong versions and shapes are InputErrors."""
    data = load_document(path, "benchmark file", "amptrain-benchmark", SUPPORTED_VERSIONS)
    machine = _obj(data, "machine_info", path, "the document", required=True)
    preset = _obj(data, "preset", path, "the document", required=True)
    precisions = _get(data, "precisions", path, "the document")
    if not isinstance(precisions, dict) or not precisions:
        raise InputError(f"benchmark file {path} measured no precision")
    return Benchmark(
        preset=str(preset.get("name", "?")),
        device=str(data.get("device", "?")),
        gpu_verified=data.get("gpu_verified") is True,
        gpu_name=_text(machine.get("gpu_name")),
        torch=_text(machine.get("torch")),
        cuda=_text(machine.get("cuda")),
        driver=_text(machine.get("driver")),
        datetime=str(data.get("datetime", "")),
        commit=_text(_obj(data, "commit_info", path, "the document").get("id")),
        precisions=tuple(
            _precision(n, r, data["format_version"], path) for n, r in precisions.items()
        ),
        settings=_obj(data, "settings", path, "the document"),
        preset_spec=preset,
        machine=machine_claim(machine),
        flops_per_token=_flops(data),
    )


def _flops(data: dict[str, Any]) -> int | None:
    """The model's training FLOPs per token, as the file states them (``model``), or None."""
    model = data.get("model")
    flops = _whole(model.get("flops_per_token")) if isinstance(model, dict) else None
    return flops if flops is not None and flops > 0 else None
