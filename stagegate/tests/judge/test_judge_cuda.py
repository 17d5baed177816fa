"""The cuda stage: the cuda-marked tests as a stage of their own, judged from their JUnit. On
the GPU runner it is required, so a run where every test skipped blocks; a policy that lets it
skip without CUDA shows such a run as NOT VERIFIED with the skip reasons; a failure blocks."""

from __future__ import annotations

from dataclasses import replace

from stagegate.judge import decide, judge_stage
from stagegate.model import Decision, StageData, StageStatus

from ..builders import case, record, suite
from .test_judge_ab import POLICY

GPU_POLICY = POLICY.require(("cuda",))
CPU_POLICY = replace(
    POLICY, stages={**POLICY.stages, "cuda": replace(POLICY.stages["cuda"], skippable="no-cuda")}
)


def cuda_stage(*cases: object) -> StageData:
    rec = record("cuda", files={"junit": "reports/raw/junit-cuda.xml"})
    return StageData(rec, suite=suite(*cases))  # type: ignore[arg-type]


SKIPPED = cuda_stage(
    case(
        "tests/amptrain/test_engine.py::test_fp16_scaler_on_cuda", "skipped", message="needs CUDA"
    ),
    case("tests/amptrain/test_nccl.py::test_all_reduce", "skipped", message="NCCL needs 2 GPUs"),
)


def test_required_on_the_gpu_runner_a_run_of_skips_blocks() -> None:
    stage = judge_stage("cuda", SKIPPED, GPU_POLICY)
    assert stage.status is StageStatus.FAIL and stage.required
    assert any("no test ran" in f.title for f in stage.blocking)
    assert decide([stage]).decision is Decision.BLOCK


def test_where_it_may_skip_a_run_of_skips_is_not_verified_with_the_reasons() -> None:
    stage = judge_stage("cuda", SKIPPED, CPU_POLICY)
    assert stage.status is StageStatus.NOT_VERIFIED and not stage.blocking
    assert "needs CUDA" in stage.note and "NCCL needs 2 GPUs" in stage.note


def test_passing_cuda_tests_pass_and_the_nccl_skip_is_shown() -> None:
    data = cuda_stage(
        case("tests/amptrain/test_engine.py::test_fp16_scaler_on_cuda"),
        case("tests/amptrain/test_nccl.py::test_all_reduce", "skipped", message="NCCL needs 2"),
    )
    stage = judge_stage("cuda", data, GPU_POLICY)
    assert stage.status is StageStatus.PASS
    assert any(f.kind == "skipped_test" and "NCCL" in f.title for f in stage.findings)


def test_a_failing_cuda_test_blocks_even_where_the_stage_may_skip() -> None:
    data = cuda_stage(case("tests/amptrain/test_engine.py::test_sync", "failed", message="boom"))
    for policy in (GPU_POLICY, CPU_POLICY):
        stage = judge_stage("cuda", data, policy)
        assert stage.status is StageStatus.FAIL and decide([stage]).decision is Decision.BLOCK


def test_skips_without_a_reason_say_so_and_a_run_of_no_tests_says_none_collected() -> None:
    quiet = cuda_stage(case("tests/amptrain/test_engine.py::test_fp16_scaler_on_cuda", "skipped"))
    stage = judge_stage("cuda", quiet, CPU_POLICY)
    assert stage.status is StageStatus.NOT_VERIFIED and "no reason given" in stage.note
    empty = judge_stage("cuda", cuda_stage(), CPU_POLICY)
    assert empty.status is StageStatus.NOT_VERIFIED and "none collected" in empty.note
