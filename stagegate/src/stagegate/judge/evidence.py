"""Benchmark evidence, checked before any threshold: the preset the file names is one the policy
declares and ran on its device, every precision the preset requires is there, and each
precision's raw figures are present, finite and possible.

The benchmark file is untrusted and holds raw figures only: what a preset must hold comes from
the policy, and every figure the judge uses later is derived (:mod:`stagegate.judge.derive`)
from the raw ones that pass here, handed on in :class:`Verified`. A figure that fails is a
finding naming its field, never a quiet gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stagegate.judge.benchpolicy import SIZES, BenchmarkPolicy, PresetSpec, peak_row
from stagegate.judge.derive import is_size, preset_sizes
from stagegate.judge.findings import Findings
from stagegate.kinds import Kind
from stagegate.model import Benchmark, PrecisionResult

FIXES = {
    Kind.EVIDENCE_MISSING: "run the benchmark again and keep the file it writes as it is: its "
    "producer always writes this figure",
    Kind.EVIDENCE_IMPOSSIBLE: "no run of this preset on this device gives this figure: run the "
    "benchmark again and keep the file it writes as it is",
    Kind.EVIDENCE_INCONSISTENT: "the file's figures contradict each other or the preset: run the "
    "benchmark again and never edit its file",
    Kind.EVIDENCE_UNCHECKED: "the gate cannot check this figure: declare what it needs in "
    "[tool.stagegate.benchmark] (the preset, the GPU's peak_tflops), or run the stage again so "
    "that its record and host file are kept with its result",
}


def flag(
    f: Findings, kind: Kind, where: str, problem: str, detail: str = "", fix: str = ""
) -> None:
    """A finding about the benchmark field ``where``."""
    f.add(kind, f"benchmark {where}: {problem}", detail=detail, fix=fix or FIXES.get(kind, ""))


@dataclass
class Verified:
    """What the evidence checks let through: the raw figures the judge recomputes from."""

    gpu: bool = False  # the preset runs on cuda, and so did the file
    gpu_why: str = ""  # why the GPU targets are not verified here
    spec: PresetSpec | None = None
    windows: dict[str, tuple[float, ...]] = field(default_factory=dict)
    memory: dict[str, tuple[float, float]] = field(default_factory=dict)  # peak, activation MB
    accuracy: dict[str, tuple[float, float]] = field(default_factory=dict)  # accuracy, loss
    peaks: Mapping[str, float] | None = None  # the GPU's peak TFLOP/s by compute dtype
    peaks_why: str = ""  # why there are none


def _device_type(device: str) -> str:
    return device.split(":", 1)[0].strip().lower()


def _preset(f: Findings, bench: Benchmark, policy: BenchmarkPolicy) -> Verified:
    """The policy's preset for the file, and whether the file ran where that preset runs."""
    spec = policy.presets.get(bench.preset)
    if spec is None:
        flag(
            f,
            Kind.EVIDENCE_UNCHECKED,
            "preset",
            f"preset {bench.preset!r} is not declared in the policy",
            fix=f"declare it under [tool.stagegate.benchmark.presets.{bench.preset}] (its "
            "device, precisions and measures), or run a declared preset",
        )
        return Verified(gpu_why=f"preset {bench.preset!r} is not declared in the policy")
    device = _device_type(bench.device)
    if device != spec.device:
        flag(
            f,
            Kind.EVIDENCE_IMPOSSIBLE,
            "device",
            f"preset {bench.preset} runs on {spec.device}, the file says {bench.device!r}",
            fix=f"run the {bench.preset} preset on a {spec.device} device",
        )
    gpu = device == spec.device == "cuda"
    if bench.gpu_verified != gpu:
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            "gpu_verified",
            f"is {str(bench.gpu_verified).lower()}, but preset {bench.preset} ran on "
            f"{bench.device!r}",
        )
    why = "" if gpu else f"no GPU: preset {bench.preset} ran on {bench.device}"
    return Verified(gpu=gpu, gpu_why=why, spec=spec)


def _required(f: Findings, bench: Benchmark, spec: PresetSpec, judged: str) -> None:
    if judged not in spec.precisions:
        flag(
            f,
            Kind.EVIDENCE_UNCHECKED,
            "preset",
            f"the policy's preset {bench.preset} does not measure {judged}, the judged baseline",
            fix=f"add {judged} to [tool.stagegate.benchmark.presets.{bench.preset}] precisions",
        )
    for name in spec.precisions:
        if bench.precision(name) is None:
            flag(
                f,
                Kind.EVIDENCE_MISSING,
                f"precisions.{name}",
                f"absent; preset {bench.preset} measures {', '.join(spec.precisions)}",
            )


def _windows(f: Findings, p: PrecisionResult, policy: BenchmarkPolicy) -> tuple[float, ...] | None:
    """The precision's timed windows when every one is a positive finite number."""
    where = f"precisions.{p.name}.window_s"
    if len(p.window_s) < policy.min_windows:
        flag(
            f,
            Kind.EVIDENCE_MISSING,
            where,
            f"{len(p.window_s)} timed windows; at least {policy.min_windows} are needed",
        )
        return None
    if len(p.window_s) > policy.max_windows:
        flag(
            f,
            Kind.EVIDENCE_UNCHECKED,
            where,
            f"{len(p.window_s)} timed windows; the policy checks at most {policy.max_windows}",
            fix="raise [tool.stagegate.benchmark] max_windows, or time fewer windows",
        )
        return None
    bad = [i for i, v in enumerate(p.window_s) if v is None]
    if bad:
        flag(f, Kind.EVIDENCE_MISSING, f"{where}[{bad[0]}]", "is not a finite number")
        return None
    windows = tuple(v for v in p.window_s if v is not None)
    low = min(range(len(windows)), key=windows.__getitem__)
    if windows[low] <= 0:
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"{where}[{low}]", f"a window of {windows[low]:g} s")
        return None
    return windows


def _sizes(f: Findings, bench: Benchmark, spec: PresetSpec) -> dict[str, int] | None:
    """The preset sizes the file states, each a positive whole number and the one the policy
    declares where it declares one, or None."""
    sizes = {k: bench.preset_spec.get(k) for k in SIZES}
    bad = [k for k, v in sizes.items() if not isinstance(v, int) or not is_size(v)]
    for key in bad:
        flag(f, Kind.EVIDENCE_MISSING, f"preset.{key}", "is not a whole number from 1 to 1e9")
    for key, declared in spec.sizes.items():
        if key not in bad and sizes[key] != declared:
            flag(
                f,
                Kind.EVIDENCE_INCONSISTENT,
                f"preset.{key}",
                f"is {sizes[key]}; the policy declares {declared} for preset {bench.preset}",
                fix="run the preset as the policy declares it, or change the declaration in "
                f"[tool.stagegate.benchmark.presets.{bench.preset}]",
            )
    return None if bad else preset_sizes(bench, spec)  # type: ignore[return-value]


def _speed(
    f: Findings, p: PrecisionResult, policy: BenchmarkPolicy, sizes: dict[str, int] | None
) -> tuple[float, ...] | None:
    """The precision's windows, as many as the preset times, of the preset's steps each; None
    when the windows themselves are unusable."""
    windows = _windows(f, p, policy)
    if windows is None:
        return None
    where = f"precisions.{p.name}"
    if sizes is not None and sizes["windows"] != len(windows):
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            f"{where}.window_s",
            f"{len(windows)} windows, not {sizes['windows']}",
        )
    steps = p.steps_per_window
    if steps is None or steps <= 0 or steps != int(steps):
        flag(
            f, Kind.EVIDENCE_MISSING, f"{where}.steps_per_window", "is not a positive whole number"
        )
    elif sizes is not None and steps != sizes["window_steps"]:
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            f"{where}.steps_per_window",
            f"is not {sizes['window_steps']}",
        )
    return windows


def _unmeasured(f: Findings, p: PrecisionResult, preset: str) -> None:
    """On a preset that measures no CUDA memory the file holds no memory figure: one that is
    there was not measured by the run that claims it."""
    held = [v for v in (p.peak_mb, p.static_mb) if v is not None]
    if p.memory_measured or held:
        where = f"precisions.{p.name}.memory"
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, where, f"CUDA memory on preset {preset}, which has none")


ADDRESSABLE_BYTES = 2**48  # x86-64's and arm64's 48-bit virtual address space: 256 TiB
MB = 2**20


def _addressable(f: Findings, where: str, value: float, unit: int) -> bool:
    """Whether ``value`` (in bytes of ``unit``) fits what a process can address; a finding
    where it does not."""
    if abs(value) * unit <= ADDRESSABLE_BYTES:
        return True
    said = f"{value:g}: more than the {ADDRESSABLE_BYTES:,} bytes a process can address"
    flag(f, Kind.EVIDENCE_IMPOSSIBLE, where, said)
    return False


def _positive(f: Findings, where: str, value: float | None) -> float | None:
    if value is None:
        flag(f, Kind.EVIDENCE_MISSING, where, "absent or not a finite number")
        return None
    if value <= 0:
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, where, f"{value:g} MB")
        return None
    return value if _addressable(f, where, value, MB) else None


def _memory(f: Findings, p: PrecisionResult) -> tuple[float, float] | None:
    """Peak and activation memory (peak minus static), when measured, positive, and the static
    part below the peak."""
    where = f"precisions.{p.name}.memory"
    if not p.memory_measured:
        flag(
            f,
            Kind.EVIDENCE_MISSING,
            f"{where}.measured",
            "is not true on a preset that measures it",
        )
        return None
    peak = _positive(f, f"{where}.peak_allocated_mb", p.peak_mb)
    static = _positive(f, f"{where}.static_mb", p.static_mb)
    if peak is None or static is None:
        return None
    if static >= peak:
        problem = f"{static:g} MB is not below the peak ({peak:g} MB): no activation memory"
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"{where}.static_mb", problem)
        return None
    return peak, peak - static


def _accuracy(f: Findings, p: PrecisionResult) -> tuple[float, float] | None:
    where = f"precisions.{p.name}"
    if p.val_accuracy is None or p.val_loss is None:
        missing = "val_accuracy" if p.val_accuracy is None else "val_loss"
        flag(f, Kind.EVIDENCE_MISSING, f"{where}.{missing}", "absent or not a finite number")
        return None
    if not 0 <= p.val_accuracy <= 1:
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"{where}.val_accuracy", f"{p.val_accuracy:g}")
        return None
    problem = _cross_entropy_problem(p.val_loss, p.val_accuracy)
    if problem:
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"{where}.val_loss", problem)
        return None
    return p.val_accuracy, p.val_loss


FLOAT32_MAX = 3.4028234663852886e38  # the largest finite loss a float32 (or narrower) step gives
LN2 = 0.6931471805599453


def _cross_entropy_problem(loss: float, accuracy: float | None = None) -> str:
    """Why ``loss`` is no mean token cross-entropy (natural log) of a model computing in float32
    or narrower whose argmax ``accuracy`` is measured on the same tokens, or ''. A token
    predicted wrong gave the right one at most half the probability: it costs at least ln 2."""
    if loss < 0:
        return f"{loss:g}: a cross-entropy is never negative"
    if loss > FLOAT32_MAX:
        return f"{loss:g}: over the largest finite float32, {FLOAT32_MAX:.4g}"
    floor = (1 - accuracy) * LN2 if accuracy is not None else 0.0
    if loss < floor * (1 - 1e-6):  # float32 rounding of ln 2
        return (
            f"{loss:g} with token accuracy {accuracy:g}: each wrong token costs at least ln 2, "
            f"so the loss is at least {floor:.4g}"
        )
    return ""


def _losses(f: Findings, p: PrecisionResult) -> None:
    """A precision whose status is ok trained on finite losses, one a timed step, and says so."""
    where = f"precisions.{p.name}.loss_curve"
    if not p.loss_curve:
        flag(f, Kind.EVIDENCE_MISSING, where, "empty: no timed step's loss was recorded")
        return
    steps = p.steps_per_window
    if steps is not None and len(p.loss_curve) != len(p.window_s) * steps:
        said = f"holds {len(p.loss_curve)} losses for {len(p.window_s)} windows of {steps:g} steps"
        flag(f, Kind.EVIDENCE_INCONSISTENT, where, said)
    wrong = next(
        (
            (i, why)
            for i, v in enumerate(p.loss_curve)
            if v is not None and (why := _cross_entropy_problem(v))
        ),
        None,
    )
    if wrong is not None:
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"{where}[{wrong[0]}]", wrong[1])
    bad = next((i for i, v in enumerate(p.loss_curve) if v is None), None)
    if bad is not None:
        flag(
            f,
            Kind.EVIDENCE_IMPOSSIBLE,
            f"{where}[{bad}]",
            f"a non-finite training loss beside status {p.status!r}",
            fix="a run with a non-finite loss did not converge: find its first non-finite step",
        )


def _syncs(f: Findings, p: PrecisionResult) -> None:
    where = f"precisions.{p.name}.health.syncs_in_step"
    if not p.syncs_measured:
        flag(f, Kind.EVIDENCE_MISSING, where, "host syncs were not counted; the preset counts them")
        return
    for key, value in (("count", p.sync_count), ("steps", p.sync_steps)):
        if value is None:
            flag(f, Kind.EVIDENCE_MISSING, f"{where}.{key}", "absent or not a whole number")
        elif value < 0 or (key == "steps" and value == 0):
            flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"{where}.{key}", f"{value:g}")


def _samples(
    f: Findings, where: str, samples: tuple[float | None, ...], windows: int, unit: int = 1
) -> None:
    """One finite sample after each of the precision's ``windows``, each a change (in bytes
    of ``unit``) no larger than what a process can address."""
    if not samples:
        flag(f, Kind.EVIDENCE_MISSING, where, "absent or empty: no window's change was recorded")
        return
    if len(samples) != windows:
        flag(f, Kind.EVIDENCE_INCONSISTENT, where, f"{len(samples)} samples for {windows} windows")
    bad = next((i for i, v in enumerate(samples) if v is None), None)
    if bad is not None:
        flag(f, Kind.EVIDENCE_MISSING, f"{where}[{bad}]", "not a finite number")
    for i, value in enumerate(samples):
        if value is not None and not _addressable(f, f"{where}[{i}]", value, unit):
            break


def _growth(f: Findings, p: PrecisionResult) -> None:
    """The samples the growth thresholds judge, on every device: memory in use and the live
    tensors' storage after each window, what the tensors held at the start, and the count of
    those a window left attached to a graph."""
    where = f"precisions.{p.name}.health"
    _samples(f, f"{where}.memory_change_mb", p.memory_change_mb, len(p.window_s), MB)
    _samples(f, f"{where}.live_tensors.bytes_change", p.live_bytes_change, len(p.window_s))
    if p.live_graph_tensors is None:
        where_graph = f"{where}.live_tensors.graph_attached_added_max"
        flag(f, Kind.EVIDENCE_MISSING, where_graph, "absent or not a whole number")
    start = f"{where}.live_tensors.start_bytes"
    if p.live_start_bytes is None:
        flag(f, Kind.EVIDENCE_MISSING, start, "absent or not a finite number")
    elif p.live_start_bytes <= 0:  # the precision's own model was live when it started
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, start, f"{p.live_start_bytes:g}")
    else:
        _addressable(f, start, p.live_start_bytes, 1)


def _ranges(f: Findings, p: PrecisionResult) -> None:
    """Shares within their range and counts not below zero, wherever the file states them."""
    if p.data_wait_share is not None and not 0 <= p.data_wait_share <= 1:
        where = f"precisions.{p.name}.health.data_wait_s"
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, where, f"{p.data_wait_share:g} of timed_host_s")
    figures = (
        ("health.timed_host_s", p.timed_host_s, lambda x: x >= 0),
        ("overflow_steps", p.overflow_steps, lambda x: x >= 0),
        ("health.live_tensors.graph_attached_added_max", p.live_graph_tensors, lambda x: x >= 0),
    )
    for name, value, possible in figures:
        if value is not None and not possible(value):
            flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"precisions.{p.name}.{name}", f"{value:g}")


def _peaks(f: Findings, bench: Benchmark, policy: BenchmarkPolicy, v: Verified) -> None:
    """The GPU's row of the policy's peak table: the pattern with the most words, all of them
    words of the GPU's name."""
    name = bench.gpu_name or ""
    row, best = peak_row(policy, name)
    if row is not None:
        v.peaks = row
        return
    v.peaks_why = f"no peak figures for GPU {name!r} in the policy"
    if not name:
        flag(f, Kind.EVIDENCE_MISSING, "machine_info.gpu_name", "absent on a cuda run")
        return
    flag(
        f,
        Kind.EVIDENCE_UNCHECKED,
        "machine_info.gpu_name",
        f"{v.peaks_why}; its speedup cannot be bounded"
        if not best
        else f"{name!r} fits {' and '.join(best)}, whose figures differ",
        fix="add the GPU's dense peak TFLOP/s (fp32, tf32, fp16, bf16) from its datasheet "
        "under [tool.stagegate.benchmark.peak_tflops]",
    )


def check_evidence(f: Findings, bench: Benchmark, policy: BenchmarkPolicy, judged: str) -> Verified:
    """Findings about the file's preset, device and each precision's raw figures (``judged``:
    the baseline precision every other is compared with); what passed them."""
    v = _preset(f, bench, policy)
    if v.spec is None:
        return v
    _required(f, bench, v.spec, judged)
    if v.gpu:
        _peaks(f, bench, policy, v)
    sizes = _sizes(f, bench, v.spec)
    for p in bench.precisions:
        if p.status != "ok":
            continue  # a failed precision is a finding of its own
        if "memory" not in v.spec.measures:
            _unmeasured(f, p, bench.preset)
        _losses(f, p)
        _growth(f, p)
        _ranges(f, p)
        windows = _speed(f, p, policy, sizes)
        if windows is not None:
            v.windows[p.name] = windows
        if "memory" in v.spec.measures and (memory := _memory(f, p)) is not None:
            v.memory[p.name] = memory
        if (accuracy := _accuracy(f, p)) is not None:
            v.accuracy[p.name] = accuracy
        if "syncs" in v.spec.measures:
            _syncs(f, p)
    return v
