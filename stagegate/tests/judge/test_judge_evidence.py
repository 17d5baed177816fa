"""Benchmark evidence at its bounds: the judge accepts every figure a run can produce (an
accuracy of 1, no data wait, a window of one step, all memory static) and refuses the first one
past it, naming the field; and what the policy does not check is never passed as checked."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stagegate.judge import decide, judge_stage
from stagegate.judge.benchpolicy import BenchmarkPolicy, PresetSpec
from stagegate.judge.policy import Policy
from stagegate.model import Benchmark, Decision, StageVerdict

from ..builders import PRESET_SPEC, bench, performance, precision, with_precisions

POLICY = Policy()


def judged(b: Benchmark, policy: Policy = POLICY) -> StageVerdict:
    return judge_stage("performance", performance(b), policy)


def declaring(**sizes: int) -> Policy:
    """The default policy with the gpu preset's sizes declared as ``sizes``."""
    presets = dict(POLICY.benchmark.presets)
    presets["gpu"] = replace(presets["gpu"], sizes=sizes)
    return replace(POLICY, benchmark=replace(POLICY.benchmark, presets=presets))


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
        ("data_wait_s", 1.0, 1.01),  # of the 1.0 timed host seconds: all of them and more
        ("data_wait_s", 0.0, -0.01),
        ("overflow_steps", 0, -1),
    ],
)
def test_a_share_or_count_at_its_bound_passes_and_past_it_blocks(
    field: str, good: float, bad: float
) -> None:
    assert not [f for f in judged(bf16(**{field: good})).blocking if f.kind.startswith("evidence")]
    v = judged(bf16(**{field: bad}))
    assert decide([v]).decision is Decision.BLOCK
    assert named(v, field) == ["evidence_impossible"], v.blocking


def test_memory_nearly_all_static_is_possible_and_at_or_above_the_peak_is_not() -> None:
    """Activation memory is derived, peak minus static: a step allocates some."""
    mixed = next(p for p in bench().precisions if p.name == "bf16-mixed")
    peak = mixed.peak_mb
    assert peak is not None
    assert not named(judged(bf16(static_mb=peak - 0.5)), "static_mb")  # 0.5 MB: small, possible
    for static in (peak, peak * 1.01):
        assert named(judged(bf16(static_mb=static)), "static_mb") == ["evidence_impossible"]
    assert named(judged(bf16(static_mb=None)), "static_mb") == ["evidence_missing"]


def test_a_window_of_one_step_and_a_batch_of_one_are_real_sizes() -> None:
    sizes = {**PRESET_SPEC, "window_steps": 1, "batch_size": 1}
    precisions = tuple(
        precision(p.name, p.window_s[2] * 100, peak_mb=p.peak_mb, accuracy=p.val_accuracy)
        for p in bench().precisions
    )
    one_step = tuple(
        replace(p, steps_per_window=1.0, window_s=tuple(w / 10 for w in p.window_s))
        for p in precisions
    )
    b = with_precisions(replace(bench(), preset_spec=sizes), *one_step)
    v = judged(b, declaring(window_steps=1, batch_size=1, seq_len=PRESET_SPEC["seq_len"]))
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
