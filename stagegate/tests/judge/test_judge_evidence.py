"""Benchmark evidence at its bounds: the judge accepts every figure a run can produce (an
accuracy of 1, no data wait, a window of one step, all memory static) and refuses the first one
past it, naming the field; and what the policy does not check is never passed as checked."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from stagegate.judge import decide, judge_stage
from stagegate.judge.benchpolicy import BenchmarkPolicy, PresetSpec
from stagegate.judge.evidence import agrees, check_summary
from stagegate.judge.findings import Findings
from stagegate.judge.policy import Policy
from stagegate.model import Benchmark, Decision, StageVerdict

from ..builders import PRESET_SPEC, bench, performance, precision, with_precisions

POLICY = Policy()


def judged(b: Benchmark, policy: Policy = POLICY) -> StageVerdict:
    return judge_stage("performance", performance(b), policy)


def named(v: StageVerdict, field: str) -> list[str]:
    """The kinds of the blocking findings whose title names ``field``."""
    return [f.kind for f in v.blocking if field in f.title]


def bf16(**kw: object) -> Benchmark:
    """The gpu preset's clean run with bf16-mixed's figures changed by ``kw``."""
    b = bench()
    mixed = next(p for p in b.precisions if p.name == "bf16-mixed")
    return with_precisions(b, replace(mixed, **kw))


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("val_accuracy", 1.0, 1.0001),
        ("val_accuracy", 0.0, -0.0001),
        ("data_wait_share", 1.0, 1.01),
        ("data_wait_share", 0.0, -0.01),
        ("mfu", 1.0, 1.01),
        ("overflow_steps", 0, -1),
    ],
)
def test_a_share_or_count_at_its_bound_passes_and_past_it_blocks(
    field: str, good: float, bad: float
) -> None:
    assert not [f for f in judged(bf16(**{field: good})).blocking if f.kind.startswith("evidence")]
    v = judged(bf16(**{field: bad}))
    assert decide([v]).decision is Decision.BLOCK
    words = {"data_wait_share": "data_wait_share", "mfu": "mfu"}.get(field, field)
    assert named(v, words) == ["evidence_impossible"], v.blocking


def test_memory_that_is_all_static_is_possible_and_above_the_peak_is_not() -> None:
    mixed = next(p for p in bench().precisions if p.name == "bf16-mixed")
    peak = mixed.peak_mb
    all_static = bf16(static_mb=peak, activation_mb=0.0001)
    assert not named(judged(all_static), "static_mb")
    v = judged(bf16(static_mb=peak * 1.01, activation_mb=0.0001))
    assert named(v, "static_mb") == ["evidence_impossible"]


def test_a_memory_figure_under_one_mb_is_still_a_positive_figure() -> None:
    v = judged(bf16(activation_mb=0.5, static_mb=None))
    assert named(v, "static_mb") == ["evidence_missing"]
    assert not named(v, "activation_mb")  # 0.5 MB: small, not impossible
    assert named(judged(bf16(activation_mb=0.0)), "activation_mb") == ["evidence_impossible"]


def test_a_window_of_one_step_and_a_batch_of_one_are_real_sizes() -> None:
    sizes = {**PRESET_SPEC, "window_steps": 1, "batch_size": 1}
    precisions = tuple(
        precision(p.name, p.step_time_ms, peak_mb=p.peak_mb, accuracy=p.val_accuracy)
        for p in bench().precisions
    )
    one_step = tuple(
        replace(p, steps_per_window=1.0, window_s=tuple(w / 10 for w in p.window_s))
        for p in precisions
    )
    b = with_precisions(replace(bench(), preset_spec=sizes), *one_step)
    v = judged(b)
    assert not named(v, "preset.") and not named(v, "steps_per_window"), v.blocking


def test_steps_per_window_other_than_the_presets_is_inconsistent() -> None:
    v = judged(bf16(steps_per_window=PRESET_SPEC["window_steps"] + 1.0))
    assert named(v, "bf16-mixed.steps_per_window") == ["evidence_inconsistent"]


def test_more_windows_than_the_policy_checks_are_unchecked_not_passed() -> None:
    policy = replace(POLICY, benchmark=replace(POLICY.benchmark, max_windows=4))
    v = judged(bench(), policy)
    assert set(named(v, "window_s")) == {"evidence_unchecked"}
    assert decide([v]).decision is Decision.BLOCK
    at_most = replace(POLICY, benchmark=replace(POLICY.benchmark, max_windows=5))
    assert not named(judged(bench(), at_most), "window_s")  # five windows, five allowed


def test_a_preset_that_does_not_measure_the_judged_baseline_is_unchecked() -> None:
    spec = PresetSpec(
        "cuda", ("32-tf32", "16-mixed", "bf16-mixed"), POLICY.benchmark.presets["gpu"].measures
    )
    bp: BenchmarkPolicy = replace(POLICY.benchmark, presets={"gpu": spec})
    v = judged(bench(), replace(POLICY, benchmark=bp))
    unchecked = [f for f in v.blocking if f.kind == "evidence_unchecked"]
    assert unchecked and "32-true" in unchecked[0].title and "gpu" in unchecked[0].fix


@pytest.mark.parametrize("device", ["cuda:0", "CUDA", " cuda:1 "])
def test_the_device_type_is_read_before_its_index(device: str) -> None:
    assert not named(judged(replace(bench(), device=device)), "device")
    assert named(judged(replace(bench(), device="mps:0")), "device")


def _claim(b: Benchmark, **figures: float) -> Benchmark:
    """``b`` with bf16-mixed vs 32-true's comparison claiming ``figures``."""
    comparisons = tuple(
        replace(c, **figures) if (c.precision, c.baseline) == ("bf16-mixed", "32-true") else c
        for c in b.comparisons
    )
    return replace(b, comparisons=comparisons)


@pytest.mark.parametrize(
    ("field", "close", "far"),
    [
        ("peak_memory_reduction_pct", 0.0009, 0.0011),  # 0.1% of one percentage point
        ("activation_memory_reduction_pct", 0.0009, 0.0011),
        ("accuracy_diff", 0.9e-7, 1.1e-7),  # 0.1% of 1e-4
    ],
)
def test_a_summary_of_zero_is_checked_against_a_floor_not_exactly(
    field: str, close: float, far: float
) -> None:
    same = bench(mem=0.0, acc=0.0)  # bf16-mixed as large and as accurate as fp32
    evidence = lambda v: [k for k in named(v, field) if k.startswith("evidence")]  # noqa: E731
    assert not evidence(judged(_claim(same, **{field: close})))
    assert evidence(judged(_claim(same, **{field: far}))) == ["evidence_inconsistent"]


@pytest.mark.parametrize(
    ("claimed", "actual", "tolerance", "scale", "agree"),
    [
        (1.5, 1.0, 50.0, 0.0, True),  # exactly at the tolerance
        (1.5000001, 1.0, 50.0, 0.0, False),
        (0.5, 0.0, 50.0, 1.0, True),  # a share of the scale when the figure is smaller
        (0.5, 0.0, 50.0, 0.0, False),  # no scale: zero must be claimed exactly
        (1.0, math.inf, 10.0, 0.0, False),  # a recomputation that overflowed agrees with nothing
        (math.inf, 1.0, 10.0, 0.0, False),
        (math.nan, 1.0, 10.0, 0.0, False),
        (1.0, math.nan, 10.0, 0.0, False),
        (None, 1.0, 10.0, 0.0, False),
    ],
)
def test_a_summary_agrees_within_its_tolerance_and_only_when_finite(
    claimed: float | None, actual: float, tolerance: float, scale: float, agree: bool
) -> None:
    assert agrees(claimed, actual, tolerance, scale) is agree


def test_a_summary_is_checked_exactly_at_zero_unless_given_a_scale() -> None:
    f = Findings("performance", POLICY)
    check_summary(f, "x", 0.0005, 0.0, 0.1)
    assert [x.kind for x in f.items] == ["evidence_inconsistent"]
