"""Every figure the judge derives from a benchmark's raw samples, in one place.

Per precision: step time and its spread (the windows' median and IQR over the steps of a
window), throughput (the preset's tokens a window over the median), activation memory (peak
minus static) and MFU (that throughput times the model's FLOPs per token, over the GPU's dense
peak in the precision's compute dtype). Per comparison: the speedup (a ratio of medians, with
its exact bootstrap interval), the memory reductions and the accuracy and loss differences.
Per A/B file: each head/base ratio, the median of the rounds' paired ratios, with its interval.
Health, per precision (:func:`health`): memory growth (the least-squares slope of the
cumulative memory change over the windows), live-tensor growth (the same slope of the live
bytes, in percent of what the run started with), the data-wait share, host syncs per step and
the inference latency's 50th and 95th percentiles, each as amptrain defined it.

Benchmark files hold raw samples (a version 1 file's summaries are never read); which
precisions are compared is decided here, not by the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from stagegate.judge.benchpolicy import SIZES, BenchmarkPolicy, PresetSpec, peak_row
from stagegate.judge.stats import RatioDistribution, median, quartiles, ratio_of_medians
from stagegate.model import Benchmark, PrecisionResult

TF32 = "32-tf32"
BF16 = "bf16-mixed"
FP8 = "fp8"
# The dtype each precision's matmuls compute in, at best: its peak bounds its speed.
COMPUTE_DTYPE = {
    "32-true": "fp32",
    TF32: "tf32",
    "16-mixed": "fp16",
    "16-true": "fp16",
    BF16: "bf16",
    "bf16-true": "bf16",
    FP8: "fp8",  # its blocks' linear layers; the rest of the step computes in bf16
}


def usable(window_s: Sequence[float | None]) -> tuple[float, ...] | None:
    """The windows when there are some and every one is a finite positive number, else None
    (the evidence checks name the one that is not)."""
    values = tuple(w for w in window_s if w is not None and w > 0)
    return values if values and len(values) == len(window_s) else None


def preset_sizes(bench: Benchmark, spec: PresetSpec | None) -> dict[str, object]:
    """The preset's sizes the figures are derived from: those the policy declares for it, the
    file's own for any it does not (the evidence checks hold the file to the declared ones)."""
    declared = spec.sizes if spec is not None else {}
    return {k: declared.get(k, bench.preset_spec.get(k)) for k in SIZES}


def tokens_per_window(sizes: Mapping[str, object], steps: object) -> int | None:
    """The tokens one window trains on: its steps times the preset's batch and sequence sizes,
    each a positive whole number (else None)."""
    sizes = [steps, sizes.get("batch_size"), sizes.get("seq_len")]
    if not all(is_size(s) for s in sizes):
        return None
    return int(sizes[0]) * int(sizes[1]) * int(sizes[2])  # type: ignore[arg-type]


def is_size(value: object) -> bool:
    """A size a preset can run: a positive whole number below the policy's bound of 1e9 (a
    product of larger ones would overflow the arithmetic derived from it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 < value < 1e9 and value == int(value)


def tflops(windows: Sequence[float], tokens: int, flops_per_token: int) -> float:
    """The training arithmetic the windows' median implies, in TFLOP/s."""
    return tokens / median(windows) * flops_per_token / 1e12


def flops_per_token(bench: Benchmark, policy: BenchmarkPolicy) -> int | None:
    """The model's training FLOPs per token: the policy's declaration for the preset, else
    what the file states (the physics check holds the two against each other)."""
    spec = policy.presets.get(bench.preset)
    return (spec.flops_per_token if spec is not None else None) or bench.flops_per_token


def _steps(p: PrecisionResult, sizes: Mapping[str, object]) -> object:
    """A precision's steps a window: the preset's where the policy declares them."""
    return sizes.get("window_steps") if sizes.get("window_steps") else p.steps_per_window


def _mfu(p: PrecisionResult, bench: Benchmark, policy: BenchmarkPolicy) -> dict[str, float]:
    sizes = preset_sizes(bench, policy.presets.get(bench.preset))
    windows, tokens = usable(p.window_s), tokens_per_window(sizes, _steps(p, sizes))
    flops = flops_per_token(bench, policy)
    peaks, _ = peak_row(policy, bench.gpu_name or "")
    dtype = COMPUTE_DTYPE.get(p.name)
    if bench.device.split(":")[0] != "cuda" or None in (windows, tokens, flops, peaks, dtype):
        return {}
    assert windows is not None and tokens is not None and flops is not None and peaks
    arithmetic = tflops(windows, tokens, flops)
    out = {"mfu": arithmetic / peaks[dtype]} if dtype in peaks else {}  # type: ignore[index]
    if dtype == "fp8" and "bf16" in peaks:  # its share of bf16's peak too: what the step reaches
        out["mfu_bf16"] = arithmetic / peaks["bf16"]
    return out


def slope(values: Sequence[float]) -> float:
    """The least-squares slope of ``values`` against their index (0, 1, 2, ...): a straight
    line's fit, as ``numpy.polyfit(x, values, 1)[0]``; 0.0 for fewer than two values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    return covariance / sum((x - mean_x) ** 2 for x in range(n))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linearly interpolated between the order statistics
    (numpy's default ``percentile`` method); at least one value."""
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _complete(samples: Sequence[float | None]) -> list[float] | None:
    """The samples when there are some and every one is a finite number, else None."""
    values = [v for v in samples if v is not None]
    return values if values and len(values) == len(samples) else None


def health(p: PrecisionResult) -> dict[str, float | None]:
    """The health figures of ``p`` derived from its samples: None for each whose samples are
    absent, incomplete or cannot be divided (the evidence checks say which)."""
    memory, live = _complete(p.memory_change_mb), _complete(p.live_bytes_change)
    latency, start = _complete(p.latency_samples_ms), p.live_start_bytes
    wait, host = p.data_wait_s, p.timed_host_s
    return {
        "memory_growth_mb_per_window": slope(memory) if memory else None,
        "live_growth_pct_per_window": (
            slope(live) / start * 100 if live and start is not None and start > 0 else None
        ),
        "data_wait_share": wait / host if wait is not None and host else None,
        "syncs_per_step": (
            p.sync_count / p.sync_steps
            if p.sync_count is not None and p.sync_steps is not None and p.sync_steps > 0
            else None
        ),
        "latency_p50_ms": percentile(latency, 50) if latency else None,
        "latency_p95_ms": percentile(latency, 95) if latency else None,
    }


def figures(p: PrecisionResult, bench: Benchmark, policy: BenchmarkPolicy) -> PrecisionResult:
    """``p`` with every figure derived from its raw ones; None where they do not allow it."""
    spec = policy.presets.get(bench.preset)
    sizes = preset_sizes(bench, spec)
    windows, steps = usable(p.window_s), _steps(p, sizes)
    derived: dict[str, float | None] = {}
    if windows is not None and isinstance(steps, int | float) and steps > 0:
        mid = median(windows)
        q1, q3 = quartiles(windows) if len(windows) > 1 else (mid, mid)
        tokens = tokens_per_window(sizes, steps)
        derived |= {
            "step_time_ms": mid / steps * 1e3,
            "iqr_ms": (q3 - q1) / steps * 1e3,
            "tokens_per_second": tokens / mid if tokens else None,
        }
    measured = spec is None or "memory" in spec.measures  # CUDA memory: on a CUDA preset only
    if measured and p.peak_mb is not None and p.static_mb is not None:
        derived["activation_mb"] = p.peak_mb - p.static_mb
    return replace(p, **derived, **health(p), **_mfu(p, bench, policy))


def figured(bench: Benchmark, policy: BenchmarkPolicy) -> Benchmark:
    """``bench`` with each precision's derived figures (a failed precision has none)."""
    return replace(
        bench,
        precisions=tuple(
            figures(p, bench, policy) if p.status == "ok" else p for p in bench.precisions
        ),
    )


def _compared(name: str, baseline: str, judged: str) -> bool:
    if baseline == BF16:
        return name == FP8
    return name != baseline and not (baseline == TF32 and name == judged)


def pairs(names: Sequence[str], judged: str) -> list[tuple[str, str]]:
    """(precision, baseline) for every comparison the judge derives among ``names`` (the
    precisions that ran cleanly): each against the judged baseline, the others against TF32
    where it ran, and fp8 against bf16-mixed, the autocast it adds float8 matmuls to."""
    return [
        (name, baseline)
        for baseline in dict.fromkeys((judged, TF32, BF16))
        if baseline in names
        for name in names
        if _compared(name, baseline, judged)
    ]


def speedup(base: Sequence[float], arm: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """The baseline's median window over the arm's, with its exact 95% bootstrap interval
    (each side's windows resampled apart: :class:`~stagegate.judge.stats.RatioDistribution`)."""
    return ratio_of_medians(base, arm), RatioDistribution(base, arm).interval()


def reduction_pct(ours: float, base: float) -> float:
    """How much less ``ours`` is than ``base``, in percent of it."""
    return (1 - ours / base) * 100


def differences(ours: tuple[float, float], base: tuple[float, float]) -> dict[str, float]:
    """The accuracy difference (absolute) and the validation loss difference (signed) of two
    precisions' (accuracy, loss)."""
    return {"accuracy_diff": abs(ours[0] - base[0]), "val_loss_diff": ours[1] - base[1]}


def paired(head: Sequence[float], base: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """The median of the rounds' head/base ratios (each round's two windows ran back to back,
    so the load the machine had then cancels out), with its exact bootstrap interval (the
    rounds resampled)."""
    ratios = [h / b for h, b in zip(head, base, strict=True)]
    return median(ratios), RatioDistribution(ratios, (1.0,)).interval()
