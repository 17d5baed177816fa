"""The A/B regression check: a real cpu-smoke A/B of a commit against itself, then the same file
with the head slowed, made too noisy to decide, and corrupted one field at a time. A slowdown
beyond the limit blocks as a regression; an interval that straddles the limit is NOT VERIFIED
and blocks too; every hostile file blocks with a finding that names its field."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect import collect_stage
from stagegate.judge import decide, judge_stage
from stagegate.judge.ab import _outcome as ab_outcome
from stagegate.judge.physics import ab_declared
from stagegate.judge.policy import load_policy
from stagegate.kinds import Kind
from stagegate.model import ABOutcome, Decision, StageStatus, StageVerdict

from ..builders import FIXTURES, POLICY_FILE, record, run_that_wrote, sealed

POLICY = load_policy(POLICY_FILE)
SELF = json.loads((FIXTURES / "ab-cpu-self.json").read_text())
SHA = SELF["head"]["sha"]
OTHER = "1" * 40
ROLES = ("base", "head")
Doc = dict[str, Any]


def judged(tmp_path: Path, doc: Doc, ab_base: str | None = SHA, commit: str = SHA) -> StageVerdict:
    """``doc`` written as the regression stage's A/B file, collected and judged."""
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(doc))
    rec = record("regression", files={"ab": str(path)}, commit=commit, **run_that_wrote(doc))
    rec = sealed(rec, tmp_path)
    return judge_stage("regression", collect_stage(rec, tmp_path), POLICY, ab_base=ab_base)


def raw_only(doc: Doc) -> Doc:
    """``doc`` as the producer writes it now (format 2): the windows, no summary."""
    doc.pop("summary", None)
    doc["format_version"] = 2
    return doc


def scaled(factors: Callable[[int], float]) -> Doc:
    """The real file with head window i taken as base window i times ``factors(i)``, and a
    different base commit."""
    doc = copy.deepcopy(SELF)
    doc["base"]["sha"] = OTHER
    base = doc["base"]["window_s"]
    doc["head"]["window_s"] = [b * factors(i) for i, b in enumerate(base)]
    return raw_only(doc)


def kinds(stage: StageVerdict) -> set[str]:
    return {f.kind for f in stage.blocking}


def test_the_real_file_of_a_commit_against_itself_passes_when_asked_for(tmp_path: Path) -> None:
    stage = judged(tmp_path, SELF)
    assert stage.status is StageStatus.PASS, [f.title for f in stage.findings]
    (check,) = stage.ab
    assert check.outcome is ABOutcome.WITHIN and check.high <= check.limit
    assert decide([stage]).decision is Decision.PASS


def test_a_commit_against_itself_blocks_unless_the_judge_asked_for_it(tmp_path: Path) -> None:
    stage = judged(tmp_path, SELF, ab_base=None)
    assert "evidence_unchecked" in kinds(stage)
    assert any("base.sha" in f.title for f in stage.blocking)


def test_a_slower_head_beyond_the_limit_is_a_regression(tmp_path: Path) -> None:
    stage = judged(tmp_path, scaled(lambda i: 1.3), ab_base=OTHER)
    (check,) = stage.ab
    assert check.outcome is ABOutcome.BEYOND and check.low > check.limit
    assert kinds(stage) == {"ab_regression"} and stage.status is StageStatus.FAIL
    assert decide([stage]).decision is Decision.BLOCK


def test_a_slowdown_within_the_limit_passes(tmp_path: Path) -> None:
    stage = judged(tmp_path, scaled(lambda i: 1.05), ab_base=OTHER)
    assert stage.ab[0].outcome is ABOutcome.WITHIN and stage.status is StageStatus.PASS


def test_an_interval_across_the_limit_is_not_verified_and_never_passes(tmp_path: Path) -> None:
    stage = judged(tmp_path, scaled(lambda i: 0.9 if i % 2 else 1.3), ab_base=OTHER)
    (check,) = stage.ab
    assert check.outcome is ABOutcome.UNDECIDED and check.low <= check.limit < check.high
    assert stage.status is StageStatus.NOT_VERIFIED and "NOT VERIFIED" in stage.note
    assert kinds(stage) == {"ab_undecided"}
    assert decide([stage]).decision is Decision.BLOCK


@pytest.mark.parametrize("side", ROLES)
def test_cpu_windows_faster_than_the_cores_the_record_saw_can_compute_block(
    tmp_path: Path, side: str
) -> None:
    doc = scaled(lambda i: 1.0)
    doc[side]["window_s"] = [w / 1e6 for w in doc[side]["window_s"]]  # 20 steps in microseconds
    stage = judged(tmp_path, doc, ab_base=OTHER)
    (impossible,) = [f for f in stage.blocking if f.kind == "evidence_impossible"]
    assert f"A/B {side}.window_s" in impossible.title and "CPU cores' peak" in impossible.title
    assert decide([stage]).decision is Decision.BLOCK


@pytest.mark.parametrize(("threads", "impossible"), [(1, True), (None, False), (64, False)])
def test_a_cpu_step_on_one_thread_is_bounded_by_one_cores_peak(
    tmp_path: Path, threads: int | None, impossible: bool
) -> None:
    """20 steps of 8 x 32 tokens at 189,696 FLOPs each in 81 us: 12 TFLOP/s, within the
    16 of the two cores the record saw and above one core's 8."""
    doc = scaled(lambda i: 1.0)
    doc["threads"] = threads
    for role in ROLES:
        doc[role]["window_s"] = [8.1e-5] * doc["windows"]
    found = kinds(judged(tmp_path, doc, ab_base=OTHER))
    assert ("evidence_impossible" in found) is impossible, found


def on_gpu(head_mb: Callable[[int], float]) -> Doc:
    """The real file as the gpu preset writes it: on CUDA, with each window's peak memory
    (the base's 1000 MB, the head's ``head_mb(i)``)."""
    doc = scaled(lambda i: 1.0)
    doc["preset"], doc["device"] = "gpu", "cuda:0"
    doc["machine_info"]["gpu_name"] = "NVIDIA H100 80GB HBM3"
    for role in ROLES:  # the sizes the policy declares for the gpu preset: 128 times the
        # tokens a window, done 8 times as fast as the CPU did them (about 330 TFLOP/s in bf16)
        doc[role]["preset"].update(ab_declared(POLICY.benchmark.presets["gpu"]))
        doc[role]["window_s"] = [w * 16 for w in doc[role]["window_s"]]
    n = doc["windows"]
    doc["base"]["peak_mb"] = [1000.0] * n
    doc["head"]["peak_mb"] = [head_mb(i) for i in range(n)]
    return doc


def test_on_the_gpu_preset_peak_memory_is_a_second_check_that_passes_when_unchanged(
    tmp_path: Path,
) -> None:
    stage = judged(tmp_path, on_gpu(lambda i: 1000.0 + i % 3), ab_base=OTHER)
    assert [c.metric for c in stage.ab] == ["step_time", "peak_memory"]
    assert all(c.outcome is ABOutcome.WITHIN for c in stage.ab)
    assert stage.status is StageStatus.PASS, [f.title for f in stage.findings]


def test_more_peak_memory_beyond_the_limit_is_a_regression(tmp_path: Path) -> None:
    stage = judged(tmp_path, on_gpu(lambda i: 1200.0 + i % 3), ab_base=OTHER)
    memory = stage.ab[1]
    assert memory.outcome is ABOutcome.BEYOND and memory.low > memory.limit > 1
    assert kinds(stage) == {"ab_regression"}
    assert any("peak memory" in f.title for f in stage.blocking)
    assert decide([stage]).decision is Decision.BLOCK


def test_peak_memory_above_what_the_gpu_holds_is_impossible(tmp_path: Path) -> None:
    doc = on_gpu(lambda i: 1000.0)
    doc["base"]["peak_mb"] = [1e6] * doc["windows"]  # 1 TB a window on an 80 GB H100
    stage = judged(tmp_path, doc, ab_base=OTHER)
    impossible = [f.title for f in stage.blocking if f.kind == "evidence_impossible"]
    assert len(impossible) == 1 and "base.peak_mb" in impossible[0] and "81,559" in impossible[0]
    assert decide([stage]).decision is Decision.BLOCK


def test_memory_across_the_limit_is_not_verified(tmp_path: Path) -> None:
    stage = judged(tmp_path, on_gpu(lambda i: 1000.0 if i % 2 else 1100.0), ab_base=OTHER)
    assert stage.ab[1].outcome is ABOutcome.UNDECIDED
    assert kinds(stage) == {"ab_undecided"} and decide([stage]).decision is Decision.BLOCK


def test_both_ratios_across_the_limit_are_both_named_not_verified(tmp_path: Path) -> None:
    doc = on_gpu(lambda i: 1000.0 if i % 2 else 1100.0)
    doc["head"]["window_s"] = [
        b * (0.9 if i % 2 else 1.3) for i, b in enumerate(doc["base"]["window_s"])
    ]
    stage = judged(tmp_path, raw_only(doc), ab_base=OTHER)
    assert [c.outcome for c in stage.ab] == [ABOutcome.UNDECIDED] * 2
    assert stage.status is StageStatus.NOT_VERIFIED and "step time, peak memory" in stage.note


@pytest.mark.parametrize(
    "peaks",
    [None, [], [1000.0, None], [0.0], [-5.0]],
    ids=["absent", "empty", "a null window", "zero", "negative"],
)
def test_peak_memory_that_is_not_a_positive_figure_a_window_blocks(
    tmp_path: Path, peaks: list[float | None] | None
) -> None:
    doc = on_gpu(lambda i: 1000.0)
    n = doc["windows"]
    doc["head"]["peak_mb"] = None if peaks is None else (peaks * n)[:n] if peaks else []
    stage = judged(tmp_path, doc, ab_base=OTHER)
    assert any("head.peak_mb" in f.title for f in stage.blocking if f.kind == "evidence_missing")
    assert [c.metric for c in stage.ab] == ["step_time"]
    assert decide([stage]).decision is Decision.BLOCK


def test_a_cpu_run_is_judged_on_step_time_alone(tmp_path: Path) -> None:
    stage = judged(tmp_path, scaled(lambda i: 1.0), ab_base=OTHER)
    assert [c.metric for c in stage.ab] == ["step_time"] and stage.status is StageStatus.PASS


@pytest.mark.parametrize("field", ["head.peak_mb", "base.peak_mb"])
def test_memory_figures_on_a_preset_that_measures_none_block(tmp_path: Path, field: str) -> None:
    doc = scaled(lambda i: 1.0)
    doc[field.split(".")[0]]["peak_mb"] = [1e9] * doc["windows"]
    stage = judged(tmp_path, doc, ab_base=OTHER)
    assert any(field in t.title for t in stage.blocking if t.kind == "evidence_impossible")
    assert decide([stage]).decision is Decision.BLOCK


def _drop_window(doc: Doc) -> None:
    doc["head"]["window_s"].pop()


def _nan_window(doc: Doc) -> None:
    doc["base"]["window_s"][3] = None  # what the producer writes for a non-finite window


def _zero_window(doc: Doc) -> None:
    doc["head"]["window_s"][0] = 0.0


def _not_interleaved(doc: Doc) -> None:
    n = doc["windows"]
    doc["order"] = ["base"] * n + ["head"] * n


def _presets_differ(doc: Doc) -> None:
    doc["head"]["preset"] = {**doc["head"]["preset"], "batch_size": 1}


def _failed(doc: Doc) -> None:
    doc["status"], doc["error"] = "error", "the head worker failed"


def _few_windows(doc: Doc) -> None:
    for role in ("base", "head"):
        doc[role]["window_s"] = doc[role]["window_s"][:4]
    doc["windows"], doc["order"] = 4, doc["order"][:8]


def _wrong_device(doc: Doc) -> None:
    doc["device"] = "cuda:0"


def _short_sha(doc: Doc) -> None:
    doc["base"]["sha"] = "abc"


def _unknown_preset(doc: Doc) -> None:
    doc["preset"] = "tpu-pod"


def _gpu_unnamed(doc: Doc) -> None:
    doc["preset"], doc["device"] = "gpu", "cuda:0"


HOSTILE = {
    _drop_window: ("evidence_missing", "head.window_s"),
    _nan_window: ("evidence_missing", "base.window_s"),
    _zero_window: ("evidence_impossible", "head.window_s"),
    _not_interleaved: ("evidence_inconsistent", "order"),
    _presets_differ: ("evidence_inconsistent", "preset"),
    _failed: ("benchmark_failed", "did not finish"),
    _few_windows: ("evidence_missing", "windows"),
    _wrong_device: ("evidence_impossible", "device"),
    _short_sha: ("evidence_missing", "base.sha"),
    _unknown_preset: ("evidence_unchecked", "preset"),
    _gpu_unnamed: ("evidence_missing", "gpu_name"),
}


@pytest.mark.parametrize("corrupt", HOSTILE, ids=lambda c: c.__name__.strip("_"))
def test_a_hostile_file_blocks_naming_its_field(
    tmp_path: Path, corrupt: Callable[[Doc], None]
) -> None:
    doc = copy.deepcopy(SELF)
    corrupt(doc)
    stage = judged(tmp_path, doc)
    kind, field = HOSTILE[corrupt]
    assert kind in kinds(stage), [f.title for f in stage.findings]
    assert any(field in f.title for f in stage.blocking if f.kind == kind)
    assert decide([stage]).decision is Decision.BLOCK


def test_the_base_and_head_must_be_the_commits_asked_for(tmp_path: Path) -> None:
    wrong_base = judged(tmp_path, scaled(lambda i: 1.0), ab_base="2" * 40)
    assert any("base.sha" in f.title for f in wrong_base.blocking)
    wrong_head = judged(tmp_path, scaled(lambda i: 1.0), ab_base=OTHER, commit="3" * 40)
    assert any("head.sha" in f.title for f in wrong_head.blocking)


def test_a_regression_stage_without_an_a_b_file_blocks(tmp_path: Path) -> None:
    rec = sealed(record("regression", files={}, commit=SHA), tmp_path)
    stage = judge_stage("regression", collect_stage(rec, tmp_path), POLICY, ab_base=SHA)
    assert "evidence_missing" in kinds(stage)


@pytest.mark.parametrize(
    ("role", "dirty", "kind"),
    [
        ("head", True, "evidence_inconsistent"),
        ("base", True, "evidence_inconsistent"),
        ("head", None, "evidence_missing"),
        ("base", "yes", "evidence_missing"),
    ],
)
def test_a_side_measured_with_uncommitted_changes_or_not_saying_blocks(
    tmp_path: Path, role: str, dirty: object, kind: str
) -> None:
    doc = scaled(lambda i: 1.0)
    doc[role]["dirty"] = dirty
    stage = judged(tmp_path, doc, ab_base=OTHER)
    assert [f.kind for f in stage.blocking if f"{role}.dirty" in f.title] == [kind]
    assert decide([stage]).decision is Decision.BLOCK


def test_an_a_b_file_named_but_not_written_is_said_once_as_missing(tmp_path: Path) -> None:
    rec = sealed(record("regression", files={"ab": "ab.json"}, commit=SHA), tmp_path)
    stage = judge_stage("regression", collect_stage(rec, tmp_path), POLICY, ab_base=SHA)
    assert stage.status is StageStatus.ERROR and decide([stage]).decision is Decision.BLOCK
    assert not [f for f in stage.findings if "names no A/B file" in f.title]
    assert [f for f in stage.blocking if "ab.json" in f.title + f.detail]


@pytest.mark.parametrize(
    ("low", "high", "outcome"),
    [
        (0.95, 1.10, ABOutcome.WITHIN),  # the interval reaches the limit, no further
        (1.10, 1.20, ABOutcome.UNDECIDED),  # from the limit itself: not wholly beyond it
        (1.1001, 1.20, ABOutcome.BEYOND),
        (1.05, 1.1001, ABOutcome.UNDECIDED),
    ],
)
def test_an_interval_at_the_limit_is_within_and_only_one_wholly_beyond_it_regresses(
    low: float, high: float, outcome: ABOutcome
) -> None:
    assert ab_outcome(low, high, 1.10) is outcome


@pytest.mark.parametrize("windows", [POLICY.ab_min_windows, POLICY.benchmark.max_windows])
def test_the_fewest_and_the_most_windows_the_policy_allows_are_judged(
    tmp_path: Path, windows: int
) -> None:
    doc = copy.deepcopy(SELF)
    for role in ("base", "head"):
        side = doc[role]["window_s"]
        doc[role]["window_s"] = (side * (windows // len(side) + 1))[:windows]
    doc["windows"], doc["order"] = windows, ["base", "head"] * windows
    stage = judged(tmp_path, raw_only(doc))
    assert stage.ab and "evidence_missing" not in kinds(stage), [f.title for f in stage.findings]


def test_windows_longer_than_the_stage_ran_are_impossible(tmp_path: Path) -> None:
    doc = copy.deepcopy(SELF)
    timed = sum(doc["base"]["window_s"]) + sum(doc["head"]["window_s"])  # 6.2 s
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(doc))
    for duration, blocks in ((timed + 10, False), (1.0, True)):
        run = {**run_that_wrote(doc), "duration_s": duration}
        run["start"] = doc["datetime"]  # the file is written at the start: inside either run
        rec = sealed(record("regression", files={"ab": str(path)}, commit=SHA, **run), tmp_path)
        stage = judge_stage("regression", collect_stage(rec, tmp_path), POLICY, ab_base=SHA)
        assert ("evidence_impossible" in kinds(stage)) is blocks, [f.title for f in stage.findings]
        assert any("windows" in f.title for f in stage.blocking) is blocks


def test_gpu_windows_faster_than_the_device_computes_are_impossible(tmp_path: Path) -> None:
    doc = on_gpu(lambda i: 1000.0)
    doc["head"]["window_s"] = [1e-6] * doc["windows"]  # 5,120 tokens of a 633 MFLOP model
    stage = judged(tmp_path, doc, ab_base=OTHER)
    assert "evidence_impossible" in kinds(stage)
    assert any("head.window_s" in f.title and "TFLOP/s" in f.title for f in stage.blocking)
    assert not any("base.window_s" in f.title for f in stage.blocking)  # 1 s windows: possible


def test_a_side_that_ran_other_sizes_than_the_declared_preset_blocks(tmp_path: Path) -> None:
    doc = on_gpu(lambda i: 1000.0)
    sizes = dict(POLICY.benchmark.presets["gpu"].sizes)
    stage = judged_under(tmp_path, doc, {**sizes, "batch_size": sizes["batch_size"] * 4})
    titles = [f.title for f in stage.blocking if f.kind == "evidence_inconsistent"]
    assert any("base.preset.batch_size" in t for t in titles), titles
    assert any("head.preset.batch_size" in t for t in titles), titles


GPU_SIZES = {"batch_size": 32, "seq_len": 1024}


@pytest.mark.parametrize(
    ("sizes", "steps", "unchecked"),
    [({}, None, True), (GPU_SIZES, None, True), ({}, 20, True), (GPU_SIZES, 20, False)],
    ids=["none-declared", "its-own-steps-a-window", "steps-alone", "all-declared"],
)
def test_a_gpu_ab_run_is_bounded_by_the_declared_sizes_or_unchecked(
    tmp_path: Path, sizes: dict[str, int], steps: int | None, unchecked: bool
) -> None:
    stage = judged_under(tmp_path, on_gpu(lambda i: 1000.0), sizes, steps)
    said = [f for f in stage.blocking if "declares no" in f.title]
    assert [f.kind for f in said] == (["evidence_unchecked"] if unchecked else [])


def judged_under(
    tmp_path: Path, doc: Doc, sizes: dict[str, int], steps: int | None = 20
) -> StageVerdict:
    """``doc`` judged against base OTHER, under a policy whose gpu preset declares ``sizes``
    and ``steps`` a window of an A/B run."""
    gpu = POLICY.benchmark.presets["gpu"]
    gpu = dataclasses.replace(gpu, sizes=sizes, ab_window_steps=steps)
    policy = dataclasses.replace(
        POLICY, benchmark=dataclasses.replace(POLICY.benchmark, presets={"gpu": gpu})
    )
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(doc))
    rec = record("regression", files={"ab": str(path)}, commit=SHA, **run_that_wrote(doc))
    data = collect_stage(sealed(rec, tmp_path), tmp_path)
    return judge_stage("regression", data, policy, ab_base=OTHER)


def test_windows_of_fewer_steps_than_the_policy_declares_are_bounded_by_the_declared_steps(
    tmp_path: Path,
) -> None:
    """A file that states one step a window makes a window 20 times as fast possible: the
    tokens are counted from the declared 20, and the stated 1 is a finding of its own."""
    doc = on_gpu(lambda i: 1000.0)
    for role in ROLES:  # 20 steps of 32 x 1024 tokens at 633 MFLOPs each: about 2,070 TFLOP/s
        doc[role]["preset"]["steps_per_window"] = 1
        doc[role]["window_s"] = [0.2] * doc["windows"]
    stage = judged(tmp_path, doc, ab_base=OTHER)
    fields = [(f.kind, f.title.split(":")[0].split()[-1]) for f in stage.blocking]
    assert sorted(fields) == [
        *((Kind.EVIDENCE_IMPOSSIBLE, f"{role}.window_s") for role in ROLES),
        *((Kind.EVIDENCE_INCONSISTENT, f"{role}.preset.steps_per_window") for role in ROLES),
    ], stage.findings
    # windows of the declared 20 steps taking 4 s each are possible, and no finding
    doc = on_gpu(lambda i: 1000.0)
    for role in ROLES:
        doc[role]["window_s"] = [4.0] * doc["windows"]
    assert "evidence_impossible" not in kinds(judged(tmp_path, doc, ab_base=OTHER))


def _fast(doc: Doc) -> Doc:
    for role in ROLES:
        doc[role]["window_s"] = [1e-3] * doc["windows"]  # far above an H100's peak
    return doc


def _bf16_named_so(doc: Doc) -> None:
    doc["precision"] = "bf16"


def _no_steps(doc: Doc) -> None:
    for role in ROLES:
        doc[role]["preset"].pop("steps_per_window")


def _huge_sizes(doc: Doc) -> None:
    for role in ROLES:
        doc[role]["preset"].update(batch_size=1e300, seq_len=1e300)


def _unknown_gpu(doc: Doc) -> None:
    doc["machine_info"]["gpu_name"] = "NVIDIA L4"  # a GPU the peak table has no row for


UNBOUNDED = {
    _bf16_named_so: ("evidence_inconsistent", "precision"),
    _no_steps: ("evidence_inconsistent", "preset.steps_per_window"),
    _huge_sizes: ("evidence_inconsistent", "preset.batch_size"),
    _unknown_gpu: ("evidence_unchecked", "gpu_name"),
}


@pytest.mark.parametrize("corrupt", UNBOUNDED, ids=lambda c: c.__name__.strip("_"))
def test_gpu_windows_that_cannot_be_bounded_never_pass(
    tmp_path: Path, corrupt: Callable[[Doc], None]
) -> None:
    """Windows no GPU computes that fast, in a file whose precision, sizes or GPU leave the
    peak unknown: the unknown is a finding of its own, never a quiet pass."""
    doc = _fast(on_gpu(lambda i: 1000.0))
    assert "evidence_impossible" in kinds(judged(tmp_path, doc, ab_base=OTHER))
    corrupt(doc)
    stage = judged(tmp_path, doc, ab_base=OTHER)
    kind, field = UNBOUNDED[corrupt]
    assert any(f.kind == kind and field in f.title for f in stage.blocking), stage.findings
    assert decide([stage]).decision is Decision.BLOCK
