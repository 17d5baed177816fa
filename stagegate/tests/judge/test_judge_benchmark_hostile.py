"""Hostile benchmark files: the real H100 result (judged as the GPU run it is) and the real
cpu-smoke result, corrupted one field at a time (deleted, NaN, infinite, zero, negative,
impossible, out of step with the raw windows, on the wrong device, incomplete). Each gives BLOCK
with a blocking finding that names the field, or an input error that names it; never PASS,
never a traceback. Unmodified, both real files pass."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect import collect_stage
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import load_policy
from stagegate.judge.stats import RatioDistribution, median, quartiles, ratio_of_medians
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


def judged(tmp_path: Path, doc: Doc) -> StageVerdict:
    """``doc`` written as a file (non-finite figures as null), collected and judged as the
    performance stage is."""
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps(_as_written(doc)))
    rec = record("performance", files={"benchmark": str(path)}, **run_of(doc))
    rec = sealed(rec, tmp_path)
    data = collect_stage(rec, tmp_path)
    return judge_stage("performance", data, POLICY)


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


def comp(doc: Doc, name: str, baseline: str = "32-true") -> Doc:
    return next(
        c for c in doc["comparisons"] if (c["precision"], c["baseline"]) == (name, baseline)
    )


def forge(doc: Doc) -> Doc:
    """Every summary made to agree with the raw figures, as a careful forger would."""
    p = doc["preset"]
    tokens = p["window_steps"] * p["batch_size"] * p["seq_len"]
    for r in doc["precisions"].values():
        w = r["window_s"]
        q1, q3 = quartiles(w)
        r["stats"].update(n=len(w), median=median(w), q1=q1, q3=q3, iqr=q3 - q1)
        r["step_time_ms"] = median(w) / r["steps_per_window"] * 1e3
        r["tokens_per_second"] = tokens / median(w)
    for c in doc["comparisons"]:
        arm, base = prec(doc, c["precision"]), prec(doc, c["baseline"])
        c["speedup"] = ratio_of_medians(base["window_s"], arm["window_s"])
        c["speedup_ci95"] = list(RatioDistribution(base["window_s"], arm["window_s"]).interval())
        c["accuracy_diff"] = abs(arm["val_accuracy"] - base["val_accuracy"])
        if arm["memory"]["measured"]:
            for key in ("peak_allocated_mb", "activation_mb"):
                reduction = (1 - arm["memory"][key] / base["memory"][key]) * 100
                name = "peak" if key == "peak_allocated_mb" else "activation"
                c[f"{name}_memory_reduction_pct"] = reduction
    return doc


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


def test_a_faithful_forgery_of_the_summaries_changes_nothing(tmp_path: Path) -> None:
    """The forger below writes the summaries the raw figures give: what it passes is sound."""
    assert judged(tmp_path, forge(copy.deepcopy(H100))).status is StageStatus.PASS


# --- one field at a time: deleted, NaN, infinite, zero, negative --------------------------------

DELETE = object()
BAD: dict[str, object] = {
    "deleted": DELETE,
    "NaN": math.nan,
    "inf": math.inf,
    "zero": 0,
    "negative": -1.0,
}
ALL = tuple(BAD)
NOT_ZERO = ("deleted", "NaN", "inf", "negative")  # zero is this field's true value


def _bf16(d: Doc) -> Doc:
    return prec(d, "bf16-mixed")


def _fp32(d: Doc) -> Doc:
    return prec(d, "32-true")


def _cmp(d: Doc) -> Doc:
    return comp(d, "bf16-mixed")


# (container, key, the words a finding must name, the corruptions no run can produce)
FIELDS: list[tuple[Callable[[Doc], Any], str | int, tuple[str, ...], tuple[str, ...]]] = [
    (lambda d: _bf16(d)["window_s"], 3, ("bf16-mixed", "window_s"), ALL),
    (lambda d: _fp32(d)["window_s"], 0, ("32-true", "window_s"), ALL),
    (_bf16, "window_s", ("bf16-mixed", "window_s"), ("deleted", "NaN", "zero", "negative")),
    (lambda d: _bf16(d)["stats"], "median", ("bf16-mixed", "median"), ALL),
    (lambda d: _bf16(d)["stats"], "iqr", ("bf16-mixed", "iqr"), ALL),
    (lambda d: _bf16(d)["stats"], "n", ("bf16-mixed", "stats.n"), ALL),
    (_bf16, "stats", ("bf16-mixed", "stats"), ("deleted", "NaN", "zero")),
    (_bf16, "steps_per_window", ("bf16-mixed", "steps_per_window"), ALL),
    (_bf16, "step_time_ms", ("bf16-mixed", "step_time_ms"), ALL),
    (_bf16, "tokens_per_second", ("bf16-mixed", "tokens_per_second"), ALL),
    (_bf16, "mfu", ("bf16-mixed", "mfu"), ("zero", "negative")),  # shown, never judged
    (lambda d: _bf16(d)["memory"], "peak_allocated_mb", ("bf16-mixed", "peak_allocated"), ALL),
    (lambda d: _bf16(d)["memory"], "static_mb", ("bf16-mixed", "static_mb"), ALL),
    (lambda d: _bf16(d)["memory"], "activation_mb", ("bf16-mixed", "activation_mb"), ALL),
    (lambda d: _fp32(d)["memory"], "peak_allocated_mb", ("32-true", "peak_allocated"), ALL),
    (lambda d: _bf16(d)["memory"], "measured", ("bf16-mixed", "measured"), ALL),
    (_bf16, "val_accuracy", ("bf16-mixed", "accuracy"), ALL),
    (_bf16, "val_loss", ("bf16-mixed", "val_loss"), ALL),
    (_bf16, "overflow_steps", ("bf16-mixed", "overflow_steps"), ("negative",)),
    (lambda d: _bf16(d)["loss_curve"], 5, ("bf16-mixed", "loss_curve"), ("NaN", "inf")),
    (_bf16, "loss_curve", ("bf16-mixed", "loss_curve"), ("NaN", "zero")),
    (lambda d: _bf16(d)["health"]["syncs_in_step"], "per_step", ("bf16-mixed", "sync"), NOT_ZERO),
    (lambda d: _bf16(d)["health"]["syncs_in_step"], "measured", ("bf16-mixed", "sync"), ALL),
    (_bf16, "health", ("bf16-mixed", "health"), ("deleted", "NaN", "zero")),
    (
        lambda d: _bf16(d)["health"],
        "memory_growth_mb_per_window",
        ("bf16-mixed", "memory grows"),
        ("deleted", "NaN", "inf"),
    ),
    (
        lambda d: _bf16(d)["health"]["live_tensors"],
        "growth_pct_per_window",
        ("bf16-mixed", "tensors"),
        ("deleted", "NaN", "inf"),
    ),
    (
        lambda d: _bf16(d)["health"]["live_tensors"],
        "graph_attached_added_max",
        ("bf16-mixed", "graph"),
        NOT_ZERO,
    ),
    (_cmp, "speedup", ("comparisons[", "speedup"), ALL),
    (lambda d: _cmp(d)["speedup_ci95"], 0, ("comparisons[", "speedup_ci95"), ALL),
    (lambda d: _cmp(d)["speedup_ci95"], 1, ("comparisons[", "speedup_ci95"), ALL),
    (_cmp, "speedup_ci95", ("comparisons[", "speedup_ci95"), ALL),
    (_cmp, "peak_memory_reduction_pct", ("comparisons[", "peak_memory"), ALL),
    (_cmp, "activation_memory_reduction_pct", ("comparisons[", "activation_memory"), ALL),
    (_cmp, "accuracy_diff", ("comparisons[", "accuracy_diff"), NOT_ZERO),
    (_cmp, "val_loss_diff", ("comparisons[", "val_loss_diff"), ALL),
    (_cmp, "precision", ("comparisons[", "precision"), ALL),
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
    """Every precision's windows scaled alike (speedups unchanged), and each MFU the file states
    scaled with them: consistent with itself, impossible for the GPU."""
    for name, result in doc["precisions"].items():
        _scale_windows(doc, name, factor)
        if result.get("mfu") is not None:
            result["mfu"] /= factor
    return doc


IMPOSSIBLE: list[tuple[str, Callable[[Doc], object], tuple[str, ...]]] = [
    # bf16 three times faster than measured, every summary made to agree: 20.9x against fp32,
    # beyond the H100's bf16/fp32 peak ratio (989.5 / 67 = 14.8x)
    (
        "speedup beyond the peak ratio, summaries forged to agree",
        lambda d: forge(_scale_windows(d, "bf16-mixed", 1 / 3) or d),
        ("bf16-mixed vs 32-true", "peak ratio"),
    ),
    (
        "the same on an A100 (bf16/fp32 16x)",
        lambda d: forge(_scale_windows(d, "bf16-mixed", 1 / 3) or d)["machine_info"].update(
            gpu_name="NVIDIA A100-SXM4-80GB"
        ),
        ("bf16-mixed vs 32-true", "peak ratio"),
    ),
    (
        "TF32 beyond its peak ratio against fp32 (7.4x)",
        lambda d: forge(_scale_windows(d, "32-tf32", 1 / 3) or d),
        ("32-tf32 vs 32-true", "peak ratio"),
    ),
    (
        "every precision 100x faster, summaries and MFU forged to agree",
        lambda d: forge(_all_scaled(d, 1 / 100)),
        ("window_s", "TFLOP/s", "peak"),
    ),
    (
        "FLOPs per token stated below the preset's, to pass the peak",
        lambda d: forge(_all_scaled(d, 1 / 100)).update(model={"flops_per_token": 1000}),
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
        "an activation-memory reduction over 100%",
        lambda d: _cmp(d).update(activation_memory_reduction_pct=140.0),
        ("activation_memory_reduction_pct", "bf16-mixed"),
    ),
    (
        "a peak-memory reduction of exactly 100%",
        lambda d: _cmp(d).update(peak_memory_reduction_pct=100.0),
        ("peak_memory_reduction_pct", "bf16-mixed"),
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
        "an MFU above 100%",
        lambda d: _bf16(d).update(mfu=1.7),
        ("bf16-mixed", "mfu"),
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
        d["comparisons"].append({**copy.deepcopy(comp(d, "bf16-mixed")), "precision": "fp8-mixed"})

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
    doc = forge(altered(H100, lambda d: _scale_windows(d, "bf16-mixed", 1 / 3)))
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


# --- summaries out of step with the raw figures ---------------------------------------------------

INCONSISTENT: list[tuple[str, Callable[[Doc], object], tuple[str, ...]]] = [
    (
        "a speedup claimed 30% higher than the windows give, under the peak",
        lambda d: _cmp(d).update(speedup=_cmp(d)["speedup"] * 1.3),
        ("bf16-mixed vs 32-true", "speedup", "raw figures"),
    ),
    (
        "an interval narrowed to a point",
        lambda d: _cmp(d).update(speedup_ci95=[_cmp(d)["speedup"]] * 2),
        ("speedup_ci95",),
    ),
    (
        "an interval shifted by its own width",
        lambda d: _cmp(d).update(speedup_ci95=[x + 0.05 for x in _cmp(d)["speedup_ci95"]]),
        ("speedup_ci95",),
    ),
    (
        "a median 5% faster than the windows",
        lambda d: _bf16(d)["stats"].update(median=_bf16(d)["stats"]["median"] * 0.95),
        ("bf16-mixed", "stats.median"),
    ),
    (
        "a step time 5% faster than the windows (the baseline comparison reads it)",
        lambda d: _bf16(d).update(step_time_ms=_bf16(d)["step_time_ms"] * 0.95),
        ("bf16-mixed", "step_time_ms"),
    ),
    (
        "a throughput 5% higher than the windows",
        lambda d: _bf16(d).update(tokens_per_second=_bf16(d)["tokens_per_second"] * 1.05),
        ("bf16-mixed", "tokens_per_second"),
    ),
    (
        "a reduction two points better than the memory figures",
        lambda d: _cmp(d).update(
            activation_memory_reduction_pct=_cmp(d)["activation_memory_reduction_pct"] + 2
        ),
        ("activation_memory_reduction_pct", "raw figures"),
    ),
    (
        "activation memory that is not peak minus static",
        lambda d: _bf16(d)["memory"].update(activation_mb=_bf16(d)["memory"]["activation_mb"] / 2),
        ("bf16-mixed", "activation_mb"),
    ),
    (
        "an accuracy gap hidden: bf16 accuracy lowered, accuracy_diff left at 0",
        lambda d: _bf16(d).update(val_accuracy=_bf16(d)["val_accuracy"] - 0.05),
        ("accuracy_diff", "bf16-mixed vs 32-true"),
    ),
    (
        "nine windows where the preset times ten",
        lambda d: _bf16(d)["window_s"].pop(),
        ("bf16-mixed", "window_s", "not 10"),
    ),
    (
        "windows slowed to miss the target, summaries left claiming it",
        lambda d: _scale_windows(d, "bf16-mixed", 6),
        ("bf16-mixed", "stats.median"),
    ),
]


@pytest.mark.parametrize(
    ("change", "words"), [pytest.param(c, w, id=i) for i, c, w in INCONSISTENT]
)
def test_a_summary_out_of_step_with_the_raw_figures_blocks(
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
        doc["comparisons"] = [
            c for c in doc["comparisons"] if {c["precision"], c["baseline"]} <= set(names)
        ]

    return change


INCOMPLETE: list[tuple[str, Callable[[Doc], object], tuple[str, ...]]] = [
    ("no comparisons at all", lambda d: d.update(comparisons=[]), ("comparisons", "bf16-mixed")),
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
        "a comparison repeated",
        lambda d: d["comparisons"].append(copy.deepcopy(_cmp(d))),
        ("repeats", "bf16-mixed vs 32-true"),
    ),
    (
        "a comparison of a precision the file does not hold",
        lambda d: _cmp(d).update(precision="bf16-true"),
        ("bf16-true", "not among the precisions"),
    ),
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


def test_an_absent_comparison_is_a_row_that_says_so(tmp_path: Path) -> None:
    stage = judged(tmp_path, altered(H100, lambda d: d.update(comparisons=[])))
    absent = [c for c in stage.checks if c.comparison.precision == "bf16-mixed"]
    assert [c.metric for c in absent] == [*GPU_TARGETS, "accuracy_diff"]
    assert {c.outcome for c in absent} == {CheckOutcome.NOT_VERIFIED}
    assert all("absent" in c.why for c in absent)


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
        "a reduction claimed where no memory was measured",
        lambda d: d["comparisons"][0].update(activation_memory_reduction_pct=150.0),
        ("activation_memory_reduction_pct",),
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
    ("no comparisons", lambda d: d.update(comparisons=[]), ("comparisons",)),
    ("only fp32", _only("32-true"), ("bf16-mixed", "absent")),
    (
        "a speedup claimed that the windows do not give",
        lambda d: d["comparisons"][0].update(speedup=2.0),
        ("speedup",),
    ),
    ("stats.n deleted", lambda d: _cpu_bf16(d)["stats"].pop("n"), ("stats.n",)),
    (
        "a comparison naming no precision",
        lambda d: d["comparisons"][0].pop("precision"),
        ("precision",),
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
