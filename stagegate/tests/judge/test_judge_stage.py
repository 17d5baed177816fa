"""One stage judged from its record: how the command ended, unreadable or missing output, a
stage that did not run, and the GPU stage run without a GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Decision, MissingFile, StageData, StageStatus

from ..builders import REPO_POLICY, bench, case, gpu_machine, performance, record, suite

POLICY = Policy()
TAIL = "".join(f"{i % 10}" for i in range(1000))


def kinds(verdict) -> list[tuple[str, str]]:
    return [(f.severity.value, f.kind) for f in verdict.findings]


def test_a_clean_stage_passes_with_a_full_score() -> None:
    v = judge_stage("execution", StageData(record(), suite=suite(case("a"), case("b"))), POLICY)
    assert v.status is StageStatus.PASS and v.score == 100 and v.findings == ()
    assert v.blocking == () and v.required


def test_exit_code_without_an_explaining_finding_is_critical() -> None:
    v = judge_stage(
        "execution",
        StageData(record(exit_code=4, stderr_tail="usage error"), suite=suite(case("a"))),
        POLICY,
    )
    assert kinds(v) == [("CRITICAL", "stage_failed")] and "4" in v.findings[0].title
    assert v.findings[0].detail == "usage error" and v.status is StageStatus.FAIL


def test_a_failed_test_explains_the_exit_code_alone() -> None:
    data = StageData(record(exit_code=1), suite=suite(case("a", "failed")))
    assert kinds(judge_stage("execution", data, POLICY)) == [("CRITICAL", "test_failed")]


def test_a_failed_command_is_named_beside_findings_that_do_not_explain_it() -> None:
    # a benchmark that crashed, leaving the file an earlier run of another commit wrote
    data = performance(bench(gpu=False))
    crashed = replace(data.record, exit_code=1, commit="f" * 40, stderr_tail="StopIteration")
    v = judge_stage("performance", replace(data, record=crashed), REPO_POLICY)
    assert ("HIGH", "evidence_inconsistent") in kinds(v) and v.status is StageStatus.FAIL
    failed = next(f for f in v.findings if f.kind == "stage_failed")
    assert failed.severity.value == "CRITICAL" and failed.detail == "StopIteration"


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"timed_out": True, "exit_code": None, "duration_s": 61.4}, "61"),
        ({"signal": 9, "exit_code": None}, "9"),
    ],
)
def test_a_crashed_stage_is_an_error_that_keeps_the_end_of_stderr(kw: dict, said: str) -> None:
    v = judge_stage("execution", StageData(record(stderr_tail=TAIL, **kw), suite=suite()), POLICY)
    crash = v.findings[0]
    assert v.status is StageStatus.ERROR and crash.kind == "stage_failed" and said in crash.title
    assert crash.detail == TAIL[-600:]  # the last 600 characters: where a crash says why
    assert decide([v]).decision is Decision.BLOCK


def test_a_record_stagegate_run_could_not_finish_is_an_error_whatever_the_exit_code() -> None:
    data = StageData(record(runner_error="coverage.json: not readable"), suite=suite(case("a")))
    v = judge_stage("execution", data, POLICY)
    assert v.status is StageStatus.ERROR and kinds(v) == [("CRITICAL", "stage_failed")]
    assert v.findings[0].detail == "coverage.json: not readable"
    assert decide([v]).decision is Decision.BLOCK


def test_a_command_that_could_not_start_names_the_records_own_command() -> None:
    data = StageData(
        record("static", exit_code=None, error="no such file: ruff", command=["ruff", "check"])
    )
    v = judge_stage("static", data, POLICY)
    (start,) = v.findings
    assert v.status is StageStatus.ERROR and start.detail == "no such file: ruff"
    assert "ruff check" in start.fix and "nox" not in start.fix


def test_unreadable_output_is_an_error_even_with_exit_zero() -> None:
    v = judge_stage("execution", StageData(record(), input_errors=("j.xml is empty",)), POLICY)
    assert v.status is StageStatus.ERROR and kinds(v) == [("CRITICAL", "input_malformed")]
    assert "j.xml is empty" in v.findings[0].title


def test_a_missing_result_file_is_an_error_naming_what_writes_it() -> None:
    junit = MissingFile("junit", "out/j.xml", "JUnit file out/j.xml does not exist")
    v = judge_stage("execution", StageData(record(), missing_files=(junit,)), POLICY)
    assert v.status is StageStatus.ERROR and kinds(v) == [("HIGH", "output_missing")]
    (missing,) = v.findings
    assert "j.xml" in missing.title and "--junit" in missing.detail
    assert "--junitxml" in missing.detail and "pytest" in missing.detail  # what produces it


def test_a_missing_side_file_blocks_a_required_stage_and_is_a_note_elsewhere() -> None:
    optional = replace(POLICY, required=("static",))
    for kind in ("metrics", "warnings"):
        side = MissingFile(kind, "out/side.json", "does not exist")
        data = StageData(record(), suite=suite(case("a")), missing_files=(side,))
        v = judge_stage("execution", data, POLICY)
        assert v.status is StageStatus.FAIL and kinds(v) == [("HIGH", "output_missing")]
        assert "side.json" in v.findings[0].title and f"--{kind}" in v.findings[0].detail
        v = judge_stage("execution", data, optional)
        assert v.status is StageStatus.PASS and kinds(v) == [("LOW", "side_file_missing")]
        assert "side.json" in v.findings[0].title


def test_a_file_gone_since_the_stage_is_said_to_be_gone_not_unwritten() -> None:
    gone = MissingFile("junit", "out/j.xml", "does not exist", disappeared=True)
    v = judge_stage("execution", StageData(record(), missing_files=(gone,)), POLICY)
    assert v.status is StageStatus.ERROR and kinds(v) == [("HIGH", "output_missing")]
    assert "gone" in v.findings[0].title and "not produced" not in v.findings[0].title


def test_a_stage_that_did_not_run_blocks_and_the_fix_comes_from_the_policy() -> None:
    missing = judge_stage("execution", StageData(None), Policy(rerun="make check-all"))
    assert missing.status is StageStatus.MISSING and kinds(missing) == [
        ("CRITICAL", "stage_failed")
    ]
    assert "execution" in missing.findings[0].title
    assert "make check-all" in missing.findings[0].fix
    bare = judge_stage("execution", StageData(None), POLICY)
    assert "stagegate run execution" in bare.findings[0].fix and "nox" not in bare.findings[0].fix
    assert decide([missing]).decision is Decision.BLOCK


def test_a_declared_stage_that_did_not_run_is_not_verified_only_when_not_required() -> None:
    optional = replace(REPO_POLICY, required=("static",))
    skipped = judge_stage("performance", StageData(None), optional)
    assert skipped.status is StageStatus.NOT_VERIFIED and skipped.findings == ()
    assert skipped.name == "performance"
    assert not skipped.required and "performance" in skipped.note
    assert "NOT VERIFIED" in skipped.note
    missing = judge_stage("integration", StageData(None), REPO_POLICY)
    assert decide([skipped, missing]).decision is Decision.BLOCK
    ran = judge_stage("execution", StageData(record(), suite=suite(case("a"))), POLICY)
    assert decide([ran, skipped]).decision is Decision.PASS
    # judged alone (--only performance), a stage that never ran verified nothing
    alone = decide([skipped])
    assert alone.decision is Decision.BLOCK and alone.blocking_reasons == (
        "nothing was verified: no stage judged here ran",
    )


def test_a_required_skippable_stage_that_did_not_run_blocks() -> None:
    """Skippable covers a run without CUDA; the checks the stage makes on a CPU still count."""
    v = judge_stage("performance", StageData(None), REPO_POLICY.only(("static", "performance")))
    assert v.status is StageStatus.MISSING and kinds(v) == [("CRITICAL", "stage_failed")]
    assert "did not run" in v.findings[0].title and "CUDA" in v.findings[0].detail
    assert decide([v]).decision is Decision.BLOCK


def test_a_skippable_stage_whose_record_was_removed_blocks_as_removed() -> None:
    gone = StageData(None, record_gone="2026-01-01T00:00:00Z")
    for policy in (REPO_POLICY, replace(REPO_POLICY, required=("static",))):
        v = judge_stage("performance", gone, policy)
        assert v.status is StageStatus.MISSING and decide([v]).decision is Decision.BLOCK
        assert "removed" in v.findings[0].title and "2026-01-01" in v.findings[0].title
        assert "NOT VERIFIED" not in v.note


def test_a_cpu_benchmark_is_not_verified_unless_the_gpu_stage_is_required() -> None:
    data = performance(bench(gpu=False, speedup=0.7, mem=float("nan")))
    local = judge_stage("performance", data, REPO_POLICY)
    assert local.status is StageStatus.NOT_VERIFIED and "NOT VERIFIED" in local.note
    assert "cpu-smoke" in local.note and not local.blocking
    gate = judge_stage("performance", data, REPO_POLICY.require(("performance",)))
    assert gate.status is StageStatus.FAIL and ("CRITICAL", "stage_failed") in kinds(gate)
    required = next(f for f in gate.findings if f.kind == "stage_failed")
    assert "cpu-smoke" in required.detail and "cpu" in required.detail
    assert decide([gate]).decision is Decision.BLOCK


def test_going_without_cuda_on_a_machine_with_a_gpu_blocks() -> None:
    # a CPU benchmark, and CUDA tests that all skipped, on a machine stagegate run saw a GPU on
    data = performance(bench(gpu=False, speedup=0.7, mem=float("nan")))
    on_gpu = replace(data.record, environment=gpu_machine("NVIDIA H100 80GB HBM3"))
    skipped = suite(case("a", "skipped", message="needs CUDA"))
    cuda = StageData(record("cuda", environment=on_gpu.environment), suite=skipped)
    cuda_spec = replace(REPO_POLICY.stages["cuda"], skippable="no-cuda")
    policy = replace(REPO_POLICY, stages={**REPO_POLICY.stages, "cuda": cuda_spec})
    for name, stage in (("performance", replace(data, record=on_gpu)), ("cuda", cuda)):
        v = judge_stage(name, stage, policy)
        assert v.status is StageStatus.FAIL and ("CRITICAL", "machine_mismatch") in kinds(v)
        assert "H100" in next(f for f in v.findings if f.kind == "machine_mismatch").title
    assert judge_stage("performance", data, policy).status is StageStatus.NOT_VERIFIED


def test_going_without_cuda_where_the_look_for_gpus_failed_blocks() -> None:
    data = performance(bench(gpu=False, speedup=0.7, mem=float("nan")))
    failed = {"probe": "nvidia-smi", "found": True, "devices": [], "error": "exit 9"}
    env = {**data.record.environment, "accelerators": failed}
    v = judge_stage("performance", replace(data, record=replace(data.record, environment=env)),
                    REPO_POLICY)  # fmt: skip
    assert v.status is StageStatus.FAIL and ("CRITICAL", "machine_unobserved") in kinds(v)
    assert judge_stage("performance", data, REPO_POLICY).status is StageStatus.NOT_VERIFIED


def test_the_not_verified_note_names_only_what_the_preset_measured() -> None:
    data = performance(bench(gpu=False, speedup=0.7, mem=float("nan")))
    assert "host syncs" in judge_stage("performance", data, REPO_POLICY).note
    cpu = REPO_POLICY.benchmark.presets["cpu-smoke"]
    no_syncs = replace(cpu, measures=tuple(m for m in cpu.measures if m != "syncs"))
    presets = {**REPO_POLICY.benchmark.presets, "cpu-smoke": no_syncs}
    policy = replace(REPO_POLICY, benchmark=replace(REPO_POLICY.benchmark, presets=presets))
    note = judge_stage("performance", data, policy).note
    assert "NOT VERIFIED" in note and "host syncs" not in note and "finite losses" in note
