"""Physics bounds the figures: the arithmetic a run did (its tokens per second, from the raw
windows and the preset's sizes, times the model's FLOPs per token) cannot exceed the dense peak
of the GPU it ran on (the policy's peak table, for the GPU the record observed), or on a CPU
the policy's peak a core times the cores the record observed. MFU is derived
from the same figures (:mod:`stagegate.judge.derive`); a file holds none.

Windows faster than the device can compute are impossible: they block, as is memory above
what the GPU the record saw holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from stagegate.judge.benchpolicy import BenchmarkPolicy, PresetSpec, peak_row
from stagegate.judge.derive import COMPUTE_DTYPE, preset_sizes, tflops, tokens_per_window, usable
from stagegate.judge.evidence import Verified, flag
from stagegate.judge.findings import Findings
from stagegate.kinds import Kind
from stagegate.model import ABRun, ABSide, Benchmark

FLOPS_FIX = (
    "declare the preset's training FLOPs per token (flops_per_token under "
    "[tool.stagegate.benchmark.presets.NAME]), or have the benchmark write model.flops_per_token"
)


def _flops(f: Findings, bench: Benchmark, v: Verified) -> int | None:
    """The model's training FLOPs per token: the policy's declaration for the preset, held
    against what the file states (either alone will do; on a GPU, whose targets need it, the
    two must agree and neither is a finding; a CPU run without either is left unbounded)."""
    declared = v.spec.flops_per_token if v.spec is not None else None
    stated = bench.flops_per_token
    if not v.gpu:
        return declared or stated
    if declared is not None and stated is not None and declared != stated:
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            "model.flops_per_token",
            f"is {stated:,}; the policy declares {declared:,} for preset {bench.preset}",
        )
    flops = declared or stated
    if flops is None:
        flag(
            f,
            Kind.EVIDENCE_UNCHECKED,
            "model.flops_per_token",
            "neither the file nor the policy states the model's FLOPs per token: its "
            "throughput cannot be held against the GPU's peak",
            fix=FLOPS_FIX,
        )
    return flops


# The sizes a window's tokens are counted from: on a GPU the policy's, never the file's own (a
# file that states a batch of one makes any window it times possible)
BOUND_SIZES = ("window_steps", "batch_size", "seq_len")


def _undeclared(f: Findings, preset: str, missing: list[str], where: str) -> bool:
    """True, with a finding, where the policy declares too few (the ``missing`` ones) of the
    sizes a GPU preset's windows are counted from."""
    if missing:
        flag(
            f,
            Kind.EVIDENCE_UNCHECKED,
            where,
            f"preset {preset} declares no {', '.join(missing)}: the file's own sizes cannot "
            "bound the windows it timed by the GPU's peak",
            fix=f"declare {', '.join(missing)} under [tool.stagegate.benchmark.presets.{preset}]",
        )
    return bool(missing)


def _no_peak(f: Findings, name: str, dtype: str) -> None:
    """A precision measured on a GPU whose peak table row has no figure for its dtype: a GPU
    without tensor cores for it (fp8 before compute capability 8.9) cannot have run it."""
    flag(
        f,
        Kind.EVIDENCE_IMPOSSIBLE,
        f"precisions.{name}",
        f"measured on a GPU that cannot compute in {dtype}: its row of the policy's "
        f"peak_tflops has no {dtype}",
        fix=f"run {name} on a GPU that computes in {dtype} (fp8: compute capability 8.9 or "
        f"newer), or add the GPU's dense {dtype} TFLOP/s to its peak_tflops row if it has them",
    )


def _cpu_peak(cores: int | None, policy: BenchmarkPolicy) -> dict[str, float]:
    """Every dtype's peak on a CPU of ``cores`` cores (what stagegate run saw): the policy's
    figure for one core times the cores; none where the record saw no count."""
    if not cores:
        return {}
    peak = cores * policy.cpu_peak_tflops_per_core
    return {dtype: peak for dtype in set(COMPUTE_DTYPE.values())}


def physics(
    f: Findings, bench: Benchmark, v: Verified, cores: int | None, policy: BenchmarkPolicy
) -> None:
    """A finding for each precision whose verified windows imply more arithmetic than its
    device can do: on a GPU its compute dtype's dense peak (an MFU above 1), on a CPU the
    policy's peak a core times the cores the record saw."""
    if v.spec is None:
        return
    peaks = v.peaks if v.gpu else _cpu_peak(cores, policy)
    missing = [k for k in BOUND_SIZES if k not in v.spec.sizes]
    if not peaks or (v.gpu and _undeclared(f, bench.preset, missing, "preset")):
        return
    sizes = preset_sizes(bench, v.spec)
    tokens = tokens_per_window(sizes, sizes.get("window_steps"))
    if tokens is None:
        return  # the evidence checks named the missing size
    flops = _flops(f, bench, v)
    if flops is None:
        return
    device = "the GPU's dense" if v.gpu else f"{cores} CPU cores'"
    for name, windows in v.windows.items():
        dtype = COMPUTE_DTYPE.get(name)
        if dtype is None:
            continue  # the comparison's check names a precision of no known dtype
        if dtype not in peaks:
            _no_peak(f, name, dtype)
            continue
        arithmetic, peak = tflops([min(windows)], tokens, flops), peaks[dtype]
        if arithmetic > peak:
            flag(
                f,
                Kind.EVIDENCE_IMPOSSIBLE,
                f"precisions.{name}.window_s",
                f"{arithmetic:,.1f} TFLOP/s of training arithmetic, above {device} "
                f"{dtype} peak of {peak:g} TFLOP/s",
                detail=f"{tokens:,} tokens a window over its fastest window's "
                f"{min(windows):.4g} s, times {flops:,} FLOPs a token",
            )


def memory_bound(
    f: Findings, figures: Iterable[tuple[str, float | None]], device_mb: float | None
) -> None:
    """Each memory figure (where, MiB) above what the GPU the record saw holds (``device_mb``;
    None where it saw no such figure, and nothing to bound)."""
    if device_mb is None:
        return
    for where, value in figures:
        if value is not None and value > device_mb:
            said = f"{value:,.0f} MB, more than the {device_mb:,.0f} MB of the GPU the record saw"
            flag(f, Kind.EVIDENCE_IMPOSSIBLE, where, said)


def ab_declared(spec: PresetSpec) -> dict[str, int]:
    """The sizes the policy declares for an A/B run of a preset, named as its file names them:
    the batch and sequence sizes, and each window's steps (the file's steps_per_window)."""
    sizes = {k: v for k, v in spec.sizes.items() if k in ("batch_size", "seq_len")}
    if spec.ab_window_steps is not None:
        sizes["steps_per_window"] = spec.ab_window_steps
    return sizes


def _ab_sizes(f: Findings, role: str, side: ABSide, spec: PresetSpec) -> dict[str, object]:
    """One side's preset sizes, each held to the policy's declaration, and the declared ones
    where there are."""
    declared = ab_declared(spec)
    for key, value in declared.items():
        if side.preset.get(key) != value:
            said = f"is {str(side.preset.get(key))[:20]}; the policy declares {value}"
            flag(f, Kind.EVIDENCE_INCONSISTENT, f"A/B {role}.preset.{key}", said)
    return {**side.preset, **declared}


def _ab_bound(
    f: Findings, run: ABRun, spec: PresetSpec, policy: BenchmarkPolicy, cores: int | None
) -> tuple[float | None, int | None]:
    """The device's peak in the A/B precision's compute dtype, and the model's FLOPs per
    token. On a GPU its dense peak, a finding for either that cannot be known (the run is then
    unchecked, never met); on a CPU the policy's peak a core times the cores the record saw,
    the run left unbounded where the cores or the FLOPs are unknown (as a CPU benchmark is)."""
    if spec.device != "cuda":
        dtype = COMPUTE_DTYPE.get(run.precision or "", "")
        return _cpu_peak(cores, policy).get(dtype), spec.flops_per_token
    peaks, _ = peak_row(policy, run.machine.gpu_name or "")
    dtype = COMPUTE_DTYPE.get(run.precision or "", "")
    peak = peaks.get(dtype) if peaks is not None else None
    if peak is None:
        gpu = str(run.machine.gpu_name)[:80]
        said = f"no dense {dtype or '?'} peak for {gpu!r} in the policy's peak_tflops"
        flag(f, Kind.EVIDENCE_UNCHECKED, "A/B machine_info.gpu_name", said)
    if spec.flops_per_token is None:
        said = f"preset {run.preset} declares no flops_per_token: the windows cannot be bounded"
        flag(f, Kind.EVIDENCE_UNCHECKED, "A/B preset", said, fix=FLOPS_FIX)
    missing = [k for k in ("batch_size", "seq_len") if k not in spec.sizes]
    missing += ["ab_window_steps"] if spec.ab_window_steps is None else []
    if _undeclared(f, str(run.preset), missing, "A/B preset"):
        return peak, None
    return peak, spec.flops_per_token


def ab_physics(
    f: Findings, run: ABRun, spec: PresetSpec, policy: BenchmarkPolicy, cores: int | None
) -> None:
    """Each side of an A/B run ran the declared preset, and its windows imply no more
    arithmetic than its device's peak in the precision's compute dtype (on a CPU, of the
    ``cores`` the record saw, or of the fewer threads the file says its step ran on)."""
    if spec.device != "cuda" and cores and run.threads and run.threads > 0:
        cores = min(cores, run.threads)  # a CPU step on fewer threads: a claim that only tightens
    peak, flops = _ab_bound(f, run, spec, policy, cores)
    device = "the GPU's dense peak" if spec.device == "cuda" else f"{cores} CPU cores' peak"
    for role, side in (("base", run.base), ("head", run.head)):
        sizes = _ab_sizes(f, role, side, spec)
        tokens = tokens_per_window(sizes, sizes.get("steps_per_window"))
        windows = usable(side.window_s)
        if tokens is None:
            where = f"A/B {role}.preset"
            flag(f, Kind.EVIDENCE_MISSING, where, "its steps_per_window, batch_size and seq_len")
        if peak is None or flops is None or tokens is None or windows is None:
            continue  # the window checks name windows that are not there
        if (arithmetic := tflops([min(windows)], tokens, flops)) > peak:
            said = f"{arithmetic:,.1f} TFLOP/s, above {device} of {peak:g}"
            said += f" for {run.precision}"
            flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"A/B {role}.window_s", said)
