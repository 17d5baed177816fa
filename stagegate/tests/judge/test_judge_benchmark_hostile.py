"""Hostile benchmark files: the real H100 result (judged as the GPU run it is, rewritten as the
raw-only format 2 that the benchmark writes now) and the real cpu-smoke result, corrupted one
field at a time (deleted, NaN, infinite, zero, negative, impossible, out of step with the
preset, on the wrong device, incomplete). Each gives BLOCK
with a blocking finding that names the field, or an input error that names it; never PASS,
never a traceback. Unmodified, both real files pass."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect import collect_stage
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy, load_policy
from stagegate.model import CheckOutcome, Decision, StageStatus, StageVerdict

from ..builders import (
    FIXTURES,
    POLICY_FILE,
    copy_scenario,
    record,
    report_cli,
    run_that_wrote,
    sealed,
)

POLICY = load_policy(POLICY_FILE)  # this repository's policy
H100 = json.loads((FIXTURES / "benchmark-h100-80gb-hbm3.json").read_text())
# Format 2: the raw figures alone (format 1 also held summaries, which no reader reads)
H100["format_version"] = 2
for _summary in ("comparisons", "baseline"):
    H100.pop(_summary)
for _result in H100["precisions"].values():
    for _summary in ("stats", "step_time_ms", "tokens_per_second", "samples_per_second", "mfu"):
        _result.pop(_summary)
    _result.pop("peak_tflops")
    _result["memory"].pop("activation_mb")
    _health = _result["health"]
    for _summary in ("memory_growth_mb_per_window", "data_wait_share"):  # no data-wait samples
        _health.pop(_summary)
    _health["live_tensors"].pop("growth_pct_per_window")
    _health["syncs_in_step"].pop("per_step")
    _health["syncs_in_step"]["steps"] = 3  # what format 1 counted them over
    for _summary in ("p50", "p95"):
        _health["inference_latency_ms"].pop(_summary)
# Measured before the benchmark wrote each precision's float32 matmul precision: its commit
# (8ec0703) set "high" (TF32) for 32-tf32 and "highest" for the others, as now.
for _name, _result in H100["precisions"].items():
    _result["float32_matmul_precision"] = "high" if _name == "32-tf32" else "highest"
CPU = json.loads((FIXTURES / "pass-cpu" / "benchmark.json").read_text())
GPU_TARGETS = ("speedup", "peak_memory_reduction_pct", "activation_memory_reduction_pct")
Doc = dict[str, Any]


def _as_written(value: Any) -> Any:
    """NaN and infinity as the producer writes them: null (a literal NaN is not JSON, and the
    reader refuses the whole file: tests/test_collect_benchmark.py)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _as_written(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_written(v) for v in value]
    return value


def judged(tmp_path: Path, doc: Doc, policy: Policy = POLICY) -> StageVerdict:
    """``doc`` written as a file (non-finite figures as null), collected and judged as the
    performance stage is."""
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps(_as_written(doc)))
    rec = record("performance", files={"benchmark": str(path)}, **run_of(doc))
    rec = sealed(rec, tmp_path)
    data = collect_stage(rec, tmp_path)
    return judge_stage("performance", data, policy)


def run_of(doc: Doc) -> dict[str, Any]:
    """The record of the stage run that wrote ``doc``: its commit, five minutes either side of
    its datetime, and the machine it names as stagegate run would have observed it (a file
    altered in any of these keeps the values of the file it came from)."""
    info = doc.get("commit_info")
    commit = info.get("id") if isinstance(info, dict) else None
    source = H100 if doc.get("preset", {}).get("name") == "gpu" else CPU
    run = run_that_wrote(doc if isinstance(doc.get("datetime"), str) else source)
    if not isinstance(doc.get("machine_info"), dict):
        run["environment"] = run_that_wrote(source)["environment"]
    return {"commit": commit if isinstance(commit, str) else "0" * 40, **run}


def assert_blocked(stage: StageVerdict, *words: str) -> None:
    """BLOCK, with one blocking finding whose title names every one of ``words``; and nothing
    the judge could not check is shown as anything but NOT VERIFIED beside that finding."""
    assert decide([stage]).decision is Decision.BLOCK
    titles = [f.title for f in stage.blocking]
    assert any(all(w in t for w in words) for t in titles), titles
    for check in stage.checks:
        if check.outcome is CheckOutcome.NOT_VERIFIED:
            assert check.why and stage.blocking  # never a quiet gap
        if check.outcome is CheckOutcome.MISSED:
            assert any(f.kind == "threshold_missed" for f in stage.blocking)


def prec(doc: Doc, name: str) -> Doc:
    return doc["precisions"][name]


def altered(doc: Doc, change: Callable[[Doc], object]) -> Doc:
    doc = copy.deepcopy(doc)
    change(doc)
    return doc


# --- the real files, as they are --------------------------------------------------------------


def test_the_real_h100_result_passes_as_a_gpu_run(tmp_path: Path) -> None:
    stage = judged(tmp_path, H100)
    assert stage.status is StageStatus.PASS and stage.findings == (), stage.findings
    judged_rows = [c for c in stage.checks if c.comparison.baseline == "32-true"]
    amp = [c for c in judged_rows if c.comparison.precision in ("16-mixed", "bf16-mixed")]
    assert len(amp) == 8 and {c.outcome for c in amp} == {CheckOutcome.MET}
    bf16 = next(c for c in amp if c.metric == "speedup" and "bf16" in c.comparison.precision)
    low, high = bf16.comparison.speedup_ci95
    assert low < bf16.value < high and bf16.value == pytest.approx(6.96, abs=0.01)


def test_the_real_cpu_result_passes_as_cpu_smoke(tmp_path: Path) -> None:
    stage = judged(tmp_path, CPU)
    assert stage.status is StageStatus.NOT_VERIFIED and stage.findings == (), stage.findings
    assert decide([stage]).decision is Decision.PASS
    fp8_targets = {("bf16-mixed", "speedup"), ("bf16-mixed", "accuracy_diff")}
    for check in stage.checks:
        c = check.comparison
        if c.precision == "fp8" and (c.baseline, check.metric) not in fp8_targets:
            assert check.outcome is CheckOutcome.REPORTED  # fp8's own targets are against bf16
        elif check.metric in GPU_TARGETS:
            assert check.outcome is CheckOutcome.NOT_VERIFIED and "no GPU" in check.why
        else:
            assert check.outcome is CheckOutcome.MET
    assert {(c.comparison.baseline, c.metric) for c in stage.checks
            if c.comparison.precision == "fp8"} >= fp8_targets  # fmt: skip


# --- one field at a time: deleted, NaN, infinite, zero, negative --------------------------------

DELETE = object()
BAD: dict[str, object] = {
    "deleted": DELETE,
    "NaN": math.nan,
    "inf": math.inf,
    "zero": 0,
    "negative": -1.0,
    "huge": 1e308,  # more than any machine holds or does
}
ALL = tuple(BAD)
NOT_ZERO = ("deleted", "NaN", "inf", "negative")  # zero is this field's true value
FINITE = ("deleted", "NaN", "inf", "zero", "negative")  # huge windows: too long for their stage


def _bf16(d: Doc) -> Doc:
    return prec(d, "bf16-mixed")


def _fp32(d: Doc) -> Doc:
    return prec(d, "32-true")


# (container, key, the words a finding must name, the corruptions no run can produce)
FIELDS: list[tuple[Callable[[Doc], Any], str | int, tuple[str, ...], tuple[str, ...]]] = [
    (lambda d: _bf16(d)["window_s"], 3, ("bf16-mixed", "window_s"), FINITE),
    (lambda d: _fp32(d)["window_s"], 0, ("32-true", "window_s"), FINITE),
    (_bf16, "window_s", ("bf16-mixed", "window_s"), ("deleted", "NaN", "zero", "negative")),
    (_bf16, "steps_per_window", ("bf16-mixed", "steps_per_window"), ALL),
    (lambda d: _bf16(d)["memory"], "peak_allocated_mb", ("bf16-mixed", "peak_allocated"), ALL),
    (lambda d: _bf16(d)["memory"], "static_mb", ("bf16-mixed", "static_mb"), ALL),
    (lambda d: _fp32(d)["memory"], "peak_allocated_mb", ("32-true", "peak_allocated"), ALL),
    (lambda d: _bf16(d)["memory"], "measured", ("bf16-mixed", "measured"), ALL),
    (_bf16, "val_accuracy", ("bf16-mixed", "accuracy"), ALL),
    # a cross-entropy below zero is impossible; zero is a perfect fit, improbable, not impossible
    (_bf16, "val_loss", ("bf16-mixed", "val_loss"), NOT_ZERO),
    (_bf16, "overflow_steps", ("bf16-mixed", "overflow_steps"), ("negative",)),
    (lambda d: _bf16(d)["loss_curve"], 5, ("bf16-mixed", "loss_curve"), ("NaN", "inf")),
    (_bf16, "loss_curve", ("bf16-mixed", "loss_curve"), ("NaN", "zero")),
    (lambda d: _bf16(d)["health"]["syncs_in_step"], "count", ("bf16-mixed", "sync"), NOT_ZERO),
    (lambda d: _bf16(d)["health"]["syncs_in_step"], "steps", ("bf16-mixed", "sync"), FINITE),
    (lambda d: _bf16(d)["health"]["syncs_in_step"], "measured", ("bf16-mixed", "sync"), ALL),
    (_bf16, "health", ("bf16-mixed", "health"), ("deleted", "NaN", "zero")),
    (
        lambda d: _bf16(d)["health"],
        "memory_change_mb",
        ("bf16-mixed", "memory_change_mb"),
        ("deleted", "NaN", "zero"),
    ),
    (
        lambda d: _bf16(d)["health"]["memory_change_mb"],
        2,
        ("bf16-mixed", "memory_change_mb[2]"),
        ("NaN", "inf", "huge"),
    ),
    (
        lambda d: _bf16(d)["health"]["live_tensors"],
        "bytes_change",
        ("bf16-mixed", "bytes_change"),
        ("deleted", "NaN", "zero"),
    ),
    (
        lambda d: _bf16(d)["health"]["live_tensors"]["bytes_change"],
        4,
        ("bf16-mixed", "bytes_change[4]"),
        ("NaN", "inf", "huge"),
    ),
    (
        lambda d: _bf16(d)["health"]["live_tensors"],
        "start_bytes",
        ("bf16-mixed", "start_bytes"),
        ALL,
    ),
    (
        lambda d: _bf16(d)["health"]["live_tensors"],
        "graph_attached_added_max",
        ("bf16-mixed", "graph"),
        NOT_ZERO,
    ),
    (lambda d: d["preset"], "batch_size", ("preset",), ALL),
    (lambda d: d["preset"], "windows", ("preset", "windows"), ALL),
    (lambda d: d["machine_info"], "gpu_name", ("gpu_name",), ALL),
    (lambda d: d, "device", ("device",), ALL),
    (lambda d: d, "precisions", ("precision",), ALL),
]
CASES = [
    pytest.param(get, key, words, bad, id=f"{'.'.join(words)}[{key}]={bad}")
    for get, key, words, corruptions in FIELDS
    for bad in corruptions
]


def _corrupt(get: Callable[[Doc], Any], key: str | int, bad: str) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        container = get(doc)
        if BAD[bad] is DELETE:
            container.pop(key)
        else:
            container[key] = BAD[bad]

    return change


@pytest.mark.parametrize(("get", "key", "words", "bad"), CASES)
def test_a_corrupted_field_of_the_h100_result_blocks_and_is_named(
    tmp_path: Path, get: Callable[[Doc], Any], key: str | int, words: tuple[str, ...], bad: str
) -> None:
    stage = judged(tmp_path, altered(H100, _corrupt(get, key, bad)))
    assert_blocked(stage, *words)


# --- figures no run can produce -----------------------------------------------------------------


def _scale_windows(doc: Doc, name: str, factor: float) -> None:
    prec(doc, name)["window_s"] = [w * factor for w in prec(doc, name)["window_s"]]


def _all_scaled(doc: Doc, factor: float) -> Doc:
    """Every precision's windows scaled alike: the speedups unchanged, the arithmetic not."""
    for name in doc["precisions"]:
        _scale_windows(doc, name, factor)
    return doc


IMPOSSIBLE: list[tuple[str, Callable[[Doc], object], tuple[str, ...]]] = [
    # bf16 three times faster than measured: 20.9x against fp32, beyond the H100's bf16/fp32
    # peak ratio (989.5 / 67 = 14.8x)
    (
        "speedup beyond the peak ratio",
        lambda d: _scale_windows(d, "bf16-mixed", 1 / 3),
        ("bf16-mixed vs 32-true", "peak ratio"),
    ),
    (
        "the same on an A100 (bf16/fp32 16x)",
        lambda d: (
            _scale_windows(d, "bf16-mixed", 1 / 3)
            or d["machine_info"].update(gpu_name="NVIDIA A100-SXM4-80GB")
        ),
        ("bf16-mixed vs 32-true", "peak ratio"),
    ),
    (
        "TF32 beyond its peak ratio against fp32 (7.4x)",
        lambda d: _scale_windows(d, "32-tf32", 1 / 3),
        ("32-tf32 vs 32-true", "peak ratio"),
    ),
    (
        "every precision 100x faster",
        lambda d: _all_scaled(d, 1 / 100),
        ("window_s", "TFLOP/s", "peak"),
    ),
    (
        "FLOPs per token stated below the preset's, to pass the peak",
        lambda d: _all_scaled(d, 1 / 100).update(model={"flops_per_token": 1000}),
        ("model.flops_per_token", "633,019,392"),
    ),
    (
        "a GPU the policy has no peak figures for",
        lambda d: d["machine_info"].update(gpu_name="NVIDIA GeForce RTX 4090"),
        ("gpu_name", "RTX 4090"),
    ),
    (
        "a GPU name that fits two rows of the peak table whose figures differ",
        lambda d: d["machine_info"].update(gpu_name="NVIDIA H100 PCIe NVL"),
        ("gpu_name", "H100 PCIe", "H100 NVL"),
    ),
    (
        "NaN losses beside status ok",
        lambda d: _bf16(d)["loss_curve"].__setitem__(slice(10, 20), [math.nan] * 10),
        ("bf16-mixed", "loss_curve", "non-finite"),
    ),
    (
        "status converged beside NaN losses",
        lambda d: _bf16(d).update(status="converged", loss_curve=[math.nan] * 5),
        ("bf16-mixed", "converged"),
    ),
    (
        "a CPU device under the gpu preset",
        lambda d: d.update(device="cpu"),
        ("device", "cpu"),
    ),
    (
        "a GPU run that says it verified nothing (its targets would read NOT VERIFIED)",
        lambda d: d.update(gpu_verified=False),
        ("gpu_verified",),
    ),
    (
        "static memory above the peak",
        lambda d: _bf16(d)["memory"].update(static_mb=1e6),
        ("bf16-mixed", "static_mb"),
    ),
    (
        "an accuracy above 1",
        lambda d: _bf16(d).update(val_accuracy=1.5),
        ("bf16-mixed", "val_accuracy"),
    ),
    (
        "a loss of 1e308 beside the accuracy of a trained model",
        lambda d: _bf16(d).update(val_loss=1e308),
        ("bf16-mixed", "val_loss", "float32"),
    ),
    (
        "a loss lower than its wrong tokens alone cost (accuracy 0.5 at loss 0.1)",
        lambda d: _bf16(d).update(val_accuracy=0.5, val_loss=0.1),
        ("bf16-mixed", "val_loss", "ln 2"),
    ),
    (
        "host syncs counted over a billion steps, which thin any count out to nothing",
        lambda d: _bf16(d)["health"]["syncs_in_step"].update(count=1, steps=10**9),
        ("the benchmark file", "windows and steps", "a stage that ran"),
    ),
    (
        "a negative training loss",
        lambda d: _bf16(d)["loss_curve"].__setitem__(3, -0.5),
        ("bf16-mixed", "loss_curve[3]", "negative"),
    ),
    (
        "bf16-mixed's windows alone implying an MFU above 100%",
        lambda d: _scale_windows(d, "bf16-mixed", 1 / 4),
        ("bf16-mixed", "window_s", "TFLOP/s", "peak"),
    ),
    (
        "two windows of one nanosecond among real ones (the median barely moves)",
        lambda d: _bf16(d)["window_s"].__setitem__(slice(0, 2), [1e-9, 1e-9]),
        ("bf16-mixed", "window_s", "TFLOP/s", "peak"),
    ),
    (
        "fp32's peak memory above the 81,559 MB the record saw the H100 hold",
        lambda d: _fp32(d)["memory"].update(peak_allocated_mb=1e6),
        ("32-true", "peak_allocated_mb", "81,559 MB"),
    ),
    (
        "a window of one nanosecond among seconds (a negative window's cousin)",
        lambda d: _bf16(d)["window_s"].__setitem__(0, -0.6),
        ("bf16-mixed", "window_s[0]"),
    ),
]


def test_a_precision_with_no_known_compute_dtype_is_never_judged_as_met(tmp_path: Path) -> None:
    """A precision the judge has no compute dtype for (its matmuls' dtype and its speedup's
    ceiling are unknown) is unchecked evidence, for the precision and for its comparison."""

    def fp8(d: Doc) -> None:
        d["precisions"]["fp8-mixed"] = copy.deepcopy(prec(d, "bf16-mixed"))

    stage = judged(tmp_path, altered(H100, fp8))
    unchecked = [f.title for f in stage.blocking if f.kind == "evidence_unchecked"]
    assert any("precisions.fp8-mixed" in t for t in unchecked), unchecked
    assert any("fp8-mixed vs 32-true" in t for t in unchecked), unchecked
    assert decide([stage]).decision is Decision.BLOCK


@pytest.mark.parametrize(("change", "words"), [pytest.param(c, w, id=i) for i, c, w in IMPOSSIBLE])
def test_an_impossible_figure_blocks(
    tmp_path: Path, change: Callable[[Doc], object], words: tuple[str, ...]
) -> None:
    assert_blocked(judged(tmp_path, altered(H100, change)), *words)


def test_a_speedup_beyond_the_peak_is_not_verified_never_met(tmp_path: Path) -> None:
    doc = altered(H100, lambda d: _scale_windows(d, "bf16-mixed", 1 / 3))
    stage = judged(tmp_path, doc)
    (row,) = [
        c
        for c in stage.checks
        if (c.comparison.precision, c.comparison.baseline, c.metric)
        == ("bf16-mixed", "32-true", "speedup")
    ]
    assert row.outcome is CheckOutcome.NOT_VERIFIED and "peak ratio" in row.why
    assert row.value == pytest.approx(3 * 6.96, rel=0.01)  # the figure is shown, not hidden
    assert [f.kind for f in stage.blocking] == ["evidence_impossible"]  # nothing else is wrong


# --- raw figures out of step with the preset, or with the targets --------------------------------

INCONSISTENT: list[tuple[str, Callable[[Doc], object], tuple[str, ...]]] = [
    (
        "an accuracy gap: bf16 accuracy lowered",
        lambda d: _bf16(d).update(val_accuracy=_bf16(d)["val_accuracy"] - 0.05),
        ("accuracy_diff", "bf16-mixed vs 32-true"),
    ),
    (
        "nine windows where the preset times ten",
        lambda d: _bf16(d)["window_s"].pop(),
        ("bf16-mixed", "window_s", "not 10"),
    ),
    (
        "windows slowed to miss the target",
        lambda d: _scale_windows(d, "bf16-mixed", 6),
        ("bf16-mixed vs 32-true", "speedup"),
    ),
]


@pytest.mark.parametrize(
    ("change", "words"), [pytest.param(c, w, id=i) for i, c, w in INCONSISTENT]
)
def test_raw_figures_out_of_step_with_the_preset_or_the_targets_block(
    tmp_path: Path, change: Callable[[Doc], object], words: tuple[str, ...]
) -> None:
    assert_blocked(judged(tmp_path, altered(H100, change)), *words)


def test_the_targets_are_judged_on_the_windows_not_on_the_claims(tmp_path: Path) -> None:
    stage = judged(tmp_path, altered(H100, lambda d: _scale_windows(d, "bf16-mixed", 6)))
    row = next(
        c
        for c in stage.checks
        if (c.comparison.precision, c.comparison.baseline, c.metric)
        == ("bf16-mixed", "32-true", "speedup")
    )
    assert row.outcome is CheckOutcome.MISSED and row.value == pytest.approx(6.96 / 6, rel=0.01)


# --- evidence that is not all there -------------------------------------------------------------


def _only(*names: str) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        doc["precisions"] = {n: r for n, r in doc["precisions"].items() if n in names}

    return change


INCOMPLETE: list[tuple[str, Callable[[Doc], object], tuple[str, ...]]] = [
    ("only fp32", _only("32-true"), ("precisions.bf16-mixed", "absent")),
    (
        "no TF32 where the preset measures it",
        _only("32-true", "16-mixed", "bf16-mixed"),
        ("32-tf32",),
    ),
    ("no fp16", _only("32-true", "32-tf32", "bf16-mixed"), ("16-mixed",)),
    ("no fp32 baseline", _only("32-tf32", "16-mixed", "bf16-mixed"), ("precisions.32-true",)),
    (
        "sync counts missing",
        lambda d: _bf16(d)["health"].pop("syncs_in_step"),
        ("bf16-mixed", "syncs_in_step"),
    ),
    (
        "sync counts missing from every precision",
        lambda d: [r["health"].pop("syncs_in_step") for r in d["precisions"].values()],
        ("32-true", "syncs_in_step"),
    ),
    ("memory not measured", lambda d: _bf16(d).update(memory={"measured": False}), ("memory",)),
    (
        "a comparison of a precision that failed",
        lambda d: _bf16(d).update(status="oom", error="CUDA out of memory"),
        ("bf16-mixed", "oom"),
    ),
    (
        "a preset the policy does not declare",
        lambda d: d["preset"].update(name="gpu-fast"),
        ("gpu-fast",),
    ),
    ("no preset name", lambda d: d["preset"].pop("name"), ("preset",)),
    (
        "four windows",
        lambda d: _bf16(d).update(window_s=_bf16(d)["window_s"][:4]),
        ("window_s", "4"),
    ),
    ("an empty loss curve", lambda d: _bf16(d).update(loss_curve=[]), ("loss_curve", "empty")),
]


@pytest.mark.parametrize(("change", "words"), [pytest.param(c, w, id=i) for i, c, w in INCOMPLETE])
def test_incomplete_evidence_blocks(
    tmp_path: Path, change: Callable[[Doc], object], words: tuple[str, ...]
) -> None:
    assert_blocked(judged(tmp_path, altered(H100, change)), *words)


def test_a_summary_a_format_2_file_still_carries_is_ignored(tmp_path: Path) -> None:
    """The judge reads raw figures only: a summary beside them, however wrong, changes no
    figure and no finding (and the schema refuses it in a file of format 2)."""
    claims = {"speedup": 99.0, "speedup_ci95": [98.0, 100.0], "accuracy_diff": 0.5}

    def summaries(d: Doc) -> None:
        d["comparisons"] = [{"precision": "bf16-mixed", "baseline": "32-true", **claims}]
        _bf16(d).update(step_time_ms=1.0, tokens_per_second=1.0, mfu=0.99, stats={"median": 1})
        _bf16(d)["memory"]["activation_mb"] = 1.0
        health = _bf16(d)["health"]
        health.update(memory_growth_mb_per_window=99.0, data_wait_share=2.0)
        health["syncs_in_step"]["per_step"] = 7.0
        health["live_tensors"]["growth_pct_per_window"] = 50.0
        health["inference_latency_ms"].update(p50=-1.0, p95=-2.0)

    plain = judged(tmp_path, H100)
    carried = judged(tmp_path, altered(H100, summaries))
    assert carried.status is StageStatus.PASS and carried.findings == ()
    assert carried.checks == plain.checks
    assert carried.data.benchmark == plain.data.benchmark


# --- the cpu-smoke result -----------------------------------------------------------------------


def _cpu_bf16(d: Doc) -> Doc:
    return prec(d, "bf16-mixed")


CPU_ATTACKS: list[tuple[str, Callable[[Doc], object], tuple[str, ...]]] = [
    ("a cuda device under cpu-smoke", lambda d: d.update(device="cuda:0"), ("device", "cuda")),
    (
        "a cpu run that says the GPU was verified",
        lambda d: d.update(gpu_verified=True),
        ("gpu_verified",),
    ),
    (
        "cpu-smoke relabelled as the gpu preset",
        lambda d: d["preset"].update(name="gpu"),
        ("device", "gpu"),
    ),
    ("a NaN window", lambda d: _cpu_bf16(d)["window_s"].__setitem__(2, math.nan), ("window_s[2]",)),
    ("a zero window", lambda d: _cpu_bf16(d)["window_s"].__setitem__(2, 0), ("window_s[2]",)),
    (
        "a negative window",
        lambda d: _cpu_bf16(d)["window_s"].__setitem__(2, -0.03),
        ("window_s[2]",),
    ),
    (
        "an accuracy gap hidden",
        lambda d: _cpu_bf16(d).update(val_accuracy=0.5),
        ("accuracy_diff",),
    ),
    (
        "NaN losses beside status ok",
        lambda d: _cpu_bf16(d)["loss_curve"].__setitem__(0, math.nan),
        ("loss_curve",),
    ),
    (
        "sync counts missing",
        lambda d: _cpu_bf16(d)["health"]["syncs_in_step"].update(measured=False),
        ("syncs",),
    ),
    ("only fp32", _only("32-true"), ("bf16-mixed", "absent")),
    (
        "CUDA memory on a CPU",
        lambda d: _cpu_bf16(d).update(
            memory={"measured": True, "peak_allocated_mb": 5000.0, "static_mb": 100.0}
        ),
        ("bf16-mixed.memory", "CUDA memory"),
    ),
]


@pytest.mark.parametrize(("change", "words"), [pytest.param(c, w, id=i) for i, c, w in CPU_ATTACKS])
def test_an_attack_on_the_cpu_result_blocks(
    tmp_path: Path, change: Callable[[Doc], object], words: tuple[str, ...]
) -> None:
    assert_blocked(judged(tmp_path, altered(CPU, change)), *words)


@pytest.mark.parametrize(
    ("change", "words"), [pytest.param(c, w, id=i) for i, c, w in CPU_ATTACKS[:8]]
)
def test_the_report_command_blocks_an_attack_without_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[Doc], object],
    words: tuple[str, ...],
) -> None:
    root = copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    (root / "reports" / "raw" / "benchmark.json").write_text(json.dumps(altered(CPU, change)))
    assert report_cli(root) in (1, 2)  # BLOCK, or input it refuses
    assert "Traceback" not in capsys.readouterr().err
    shown = (root / "reports" / "performance.md").read_text()
    assert "| MISS |" not in shown or "BLOCK" in shown


# --- health planted in the samples of the real format 2 cpu-smoke result --------------------------


def _leak(mb_per_window: float) -> Callable[[Doc], object]:
    def change(d: Doc) -> None:
        changes = _cpu_bf16(d)["health"]["memory_change_mb"]
        _cpu_bf16(d)["health"]["memory_change_mb"] = [
            v + mb_per_window * (i + 1) for i, v in enumerate(changes)
        ]

    return change


def _syncs(count: int) -> Callable[[Doc], object]:
    def change(d: Doc) -> None:
        place = {"location": "src/amptrain/engine.py:118", "count": count, "message": "item"}
        _cpu_bf16(d)["health"]["syncs_in_step"].update(count=count, locations=[place])

    return change


HEALTH_PLANTS = {
    "memory grows 5 MB a window": (_leak(5.0), "memory_growth", "memory grows"),
    "one host read over the 3 steps": (_syncs(1), "host_sync", "0.333"),
    "no memory samples": (
        lambda d: _cpu_bf16(d)["health"].pop("memory_change_mb"),
        "evidence_missing",
        "memory_change_mb",
    ),
    "a memory sample short": (
        lambda d: _cpu_bf16(d)["health"]["memory_change_mb"].pop(),
        "evidence_inconsistent",
        "memory_change_mb",
    ),
}


@pytest.mark.parametrize("plant", sorted(HEALTH_PLANTS))
def test_health_planted_in_the_samples_blocks_with_its_finding(tmp_path: Path, plant: str) -> None:
    """The judge derives the slope and the rate from the samples, whatever the file says: a
    leak, a host read in the step and memory samples that are not there, or one short, each
    block."""
    change, kind, words = HEALTH_PLANTS[plant]
    assert judged(tmp_path, CPU).findings == ()  # the samples as measured: clean
    stage = judged(tmp_path, altered(CPU, change))
    assert decide([stage]).decision is Decision.BLOCK
    found = [(f.kind, f.title) for f in stage.blocking if "bf16-mixed" in f.title]
    assert [k for k, t in found if words in t] == [kind], found


# --- the preset's sizes, where the policy declares them ---------------------------------------

SIZES = {k: H100["preset"][k] for k in ("windows", "window_steps", "batch_size", "seq_len")}
SIZED = dataclasses.replace(
    POLICY,
    benchmark=dataclasses.replace(
        POLICY.benchmark,
        presets={
            **POLICY.benchmark.presets,
            "gpu": dataclasses.replace(POLICY.benchmark.presets["gpu"], sizes=SIZES),
        },
    ),
)


UNSIZED = dataclasses.replace(
    POLICY,
    benchmark=dataclasses.replace(
        POLICY.benchmark,
        presets={
            **POLICY.benchmark.presets,
            "gpu": dataclasses.replace(POLICY.benchmark.presets["gpu"], sizes={}),
        },
    ),
)


def _stretched(doc: Doc) -> None:
    """Every window 1.5 times as long, said to hold 15 steps: a 50% slower step, disguised."""
    doc["preset"]["window_steps"] = 15
    for result in doc["precisions"].values():
        result["window_s"] = [w * 1.5 for w in result["window_s"]]
        result["steps_per_window"] = 15


def _small_batch(doc: Doc) -> None:
    """Windows ten times too fast for the H100, said to be of batches of one row."""
    doc["preset"]["batch_size"] = 1
    for result in doc["precisions"].values():
        result["window_s"] = [w * 0.1 for w in result["window_s"]]


def test_the_real_h100_result_passes_the_sizes_the_policy_declares(tmp_path: Path) -> None:
    stage = judged(tmp_path, H100, SIZED)
    assert stage.status is StageStatus.PASS and stage.findings == (), stage.findings


@pytest.mark.parametrize(
    ("change", "kinds"),
    [
        (_stretched, {"evidence_inconsistent"}),
        (_small_batch, {"evidence_inconsistent", "evidence_impossible"}),
    ],
)
def test_sizes_the_file_states_against_the_declared_ones_block(
    tmp_path: Path, change: Callable[[Doc], object], kinds: set[str]
) -> None:
    stage = judged(tmp_path, altered(H100, change), SIZED)
    assert_blocked(stage, "preset.")
    assert kinds <= {f.kind for f in stage.blocking}, [f.title for f in stage.blocking]
    # the figures shown are derived from the declared sizes, never the file's
    assert stage.data.benchmark is not None
    bf16 = next(p for p in stage.data.benchmark.precisions if p.name == "bf16-mixed")
    windows = H100["precisions"]["bf16-mixed"]["window_s"]
    factor = 1.5 if change is _stretched else 0.1
    step_ms = statistics.median(windows) * factor / SIZES["window_steps"] * 1e3
    assert bf16.step_time_ms == pytest.approx(step_ms)


def test_a_gpu_preset_without_declared_sizes_is_never_bounded_by_the_files_own(
    tmp_path: Path,
) -> None:
    """Windows ten times too fast, of batches the file says held one row: where the policy
    declares no sizes, the bound is unknown (a finding), never met by the file's word."""
    for doc in (altered(H100, _small_batch), H100):
        stage = judged(tmp_path, doc, UNSIZED)
        (unchecked,) = [f for f in stage.blocking if "declares no" in f.title]
        assert unchecked.kind == "evidence_unchecked" and "batch_size" in unchecked.title
        assert decide([stage]).decision is Decision.BLOCK


@pytest.mark.parametrize("size", [10**20, 1e300])
def test_a_size_too_large_to_run_blocks_and_derives_nothing(tmp_path: Path, size: float) -> None:
    """No policy size declared: the file's own, past any preset, would overflow the figures."""
    stage = judged(tmp_path, altered(H100, lambda d: d["preset"].update(batch_size=size)), UNSIZED)
    assert_blocked(stage, "preset.batch_size")
    assert stage.data.benchmark is not None
    assert all(p.tokens_per_second is None for p in stage.data.benchmark.precisions)


@pytest.mark.parametrize("shape", ["rises", "stays", "noise"])
def test_a_loss_that_does_not_fall_blocks_each_precision_though_they_agree(
    tmp_path: Path, shape: str
) -> None:
    """Every precision alike (a broken optimizer step): each comparison between them passes,
    so each precision's own curve must show that the model learned."""

    def untrained(d: Doc) -> None:
        for p in d["precisions"].values():
            step = 0.01 if shape == "rises" else 0.0
            # noise: a curve whose last quarter's median is a little lower, within its spread
            wobble = [0.0, 0.05, -0.05, 0.02, -0.03] if shape == "noise" else [0.0]
            p["loss_curve"] = [
                2.0 + step * i + wobble[i % len(wobble)] - 0.0001 * i * (shape == "noise")
                for i in range(len(p["loss_curve"]))
            ]

    stage = judged(tmp_path, altered(H100, untrained))
    assert decide([stage]).decision is Decision.BLOCK
    assert {f.kind for f in stage.blocking} == {"not_learning"}
    named = sorted(f.title.partition(":")[0] for f in stage.blocking)
    assert named == sorted(H100["precisions"])
