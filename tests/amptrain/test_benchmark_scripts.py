"""The measurement scripts in benchmarks/ that the GPU figures come from: they still run, and
their arithmetic is right (the GPU runs themselves are in reports/baseline/)."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fine_tune_throughput
import fsdp_vs_ddp
import peer_speed
import step_profile


@pytest.mark.slow
def test_fine_tune_throughput_runs_every_arm_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "ft.json"
    argv = ["--preset", "cpu-smoke", "--steps", "3", "--rounds", "1", "--log-every", "1,5"]
    assert fine_tune_throughput.main([*argv, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert list(doc["arms"]) == ["train_step", "fine_tune log_every=1", "fine_tune log_every=5"]
    assert doc["arms"]["train_step"]["ratio_to_train_step"] == 1.0
    for arm in doc["arms"].values():
        assert len(arm["seconds"]) == 1 and arm["tokens_per_second"] > 0
    # the default log_every (10) was not among the arms: the target cannot be claimed
    assert doc["target"]["arm"] == "fine_tune log_every=10" and doc["target"]["met"] is False


def test_throughput_ratios_are_per_round_medians() -> None:
    times = {"train_step": [1.0, 2.0, 1.0], "fine_tune log_every=10": [2.0, 2.0, 1.25]}
    arms = fine_tune_throughput.summarize(times, tokens=100, reference="train_step")
    assert arms["fine_tune log_every=10"]["ratio_to_train_step"] == 0.8  # of 0.5, 1.0, 0.8
    assert arms["fine_tune log_every=10"]["tokens_per_second"] == 50.0  # 100 / median 2.0


@pytest.mark.parametrize("bad", [["--steps", "0"], ["--log-every", "0,10"]])
def test_throughput_rejects_counts_below_one(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        fine_tune_throughput.parse_args(bad)


@pytest.mark.parametrize(
    ("kernel", "kind"),
    [
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32", "matmul"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", "attention"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>", "attention"),
        ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
        ("void at::native::vectorized_elementwise_kernel<8, bf16_copy>", "elementwise/other"),
    ],
)  # fmt: skip
def test_step_profile_sorts_kernels_by_kind(kernel: str, kind: str) -> None:
    assert step_profile.kind_of(kernel) == kind


def test_step_profile_shares_and_idle_time() -> None:
    kernels = Counter({"nvjet_gemm": 0.5, "flash_fwd": 0.2, "layer_norm": 0.2})
    result = step_profile.shares(kernels, seconds=1.0, top=2)
    assert result["by_kind"] == pytest.approx(
        {"matmul": 0.5, "attention": 0.2, "elementwise/other": 0.2, "gpu idle": 0.1}
    )
    assert [k["kernel"] for k in result["top_kernels"]] == ["nvjet_gemm", "flash_fwd"]


TINY = [
    "--rounds", "2", "--steps", "2", "--warmup", "1", "--batch", "2", "--seq", "8", "--embd", "16",
    "--layers", "1", "--heads", "2", "--threads", "1", "--vocab", "256",
    "--one-process",
]  # fmt: skip


@pytest.mark.slow
def test_peer_speed_runs_the_three_frameworks_and_prints_the_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("lightning")
    # an unreachable bound: the run ends non-zero and says why, after printing every figure
    assert peer_speed.main([*TINY, "--bound", "1e-9"]) == 1
    out, err = capsys.readouterr()
    for name in ("amptrain", "transformers", "lightning", "torch"):
        assert f"{name} " in out.splitlines()[0]  # the versions come first
    for name in ("amptrain", "hf", "lightning"):
        assert re.search(rf"^  {name} +median +[\d.]+ ms/step +95% CI \[", out, re.M), name
    for name in ("amptrain/hf", "amptrain/lightning", r"amptrain/faster \((hf|lightning)\)"):
        assert re.search(rf"ratio {name} +[\d.]+ +95% CI \[[\d.]+, [\d.]+\]", out), name
    assert "MISSED" in out and "1e-09" in err


def test_peer_speed_rotates_the_order_so_each_follows_each_other_alike() -> None:
    rounds = [peer_speed.order(i) for i in range(3)]
    assert all(sorted(r) == sorted(peer_speed.FRAMEWORKS) for r in rounds)
    assert [r[0] for r in rounds] == list(peer_speed.FRAMEWORKS)  # each goes first once
    pairs = Counter((r[i], r[i + 1]) for r in rounds for i in range(2))
    assert len(pairs) == 3 and set(pairs.values()) == {2}


def test_peer_speed_times_steps_after_the_warm_up_and_refuses_a_short_run() -> None:
    assert peer_speed.step_times([1.0, 3.0, 4.0, 4.5], 2, 2, "x") == [1.0, 0.5]
    with pytest.raises(RuntimeError, match="3 optimizer steps"):
        peer_speed.step_times([1.0, 2.0, 3.0], 2, 2, "x")


def test_peer_speed_ratios_and_their_bootstrap_interval() -> None:
    medians = {"amptrain": [1.0, 2.0, 3.0], "hf": [2.0, 2.0, 2.0], "lightning": [1.0, 4.0, 2.0]}
    per_round = peer_speed.ratios(medians)
    assert per_round["amptrain/hf"] == [0.5, 1.0, 1.5]
    assert per_round["amptrain/lightning"] == [1.0, 0.5, 1.5]
    # the faster peer overall (ratio medians 1.0 and 1.0: either), not each round's faster
    medians["lightning"] = [0.5, 4.0, 2.0]  # amptrain/lightning: 2.0, 0.5, 1.5 (median 1.5)
    per_round = peer_speed.ratios(medians)
    assert list(per_round)[-1] == "amptrain/faster (lightning)"
    assert per_round["amptrain/faster (lightning)"] == [2.0, 0.5, 1.5]
    low, high = peer_speed.bootstrap(per_round["amptrain/hf"])
    assert low == 0.5 and high == 1.5  # a median resampled from 0.5, 1.0, 1.5 stays within them


@pytest.mark.parametrize(
    ("ratio", "print_only", "status"),
    [(1.02, False, 0), (1.03, False, 1), (float("nan"), False, 1), (1.03, True, 0)],
)
def test_peer_speed_exit_status(ratio: float, print_only: bool, status: int) -> None:
    assert peer_speed.decide(ratio, 1.02, print_only=print_only) == status


@pytest.mark.slow
def test_peer_speed_runs_one_framework_in_a_fresh_process() -> None:
    args = peer_speed.parse_args(TINY)
    assert len(peer_speed.fresh_run("amptrain", args)) == args.warmup + args.steps
    args.vocab = 3  # the process refuses it: the failure is an error, not an empty run
    with pytest.raises(RuntimeError, match="own process failed"):
        peer_speed.fresh_run("amptrain", args)


def test_fsdp_vs_ddp_prints_each_window_the_median_ratio_and_each_ranks_bytes() -> None:
    held = {"ddp": {"params": 400, "grads": 400, "optimizer": 800}}
    held["fsdp"] = {"params": 100, "grads": 100, "optimizer": 200}
    doc = {
        "world_size": 4, "device": "cpu", "held_bytes_by_rank": [held] * 4,
        "seconds_per_step": {"ddp": [1.0, 2.0, 1.0], "fsdp": [1.5, 2.0, 3.0]},
    }  # fmt: skip
    lines = fsdp_vs_ddp.summary(doc)
    assert lines[1:4] == ["  ddp 1.0000  fsdp 1.5000", "  ddp 2.0000  fsdp 2.0000",
                          "  ddp 1.0000  fsdp 3.0000"]  # fmt: skip
    assert lines[4] == "FSDP/DDP step time: 1.500 (median of 3 windows)"  # of 1.5, 1, 3
    assert lines[-1] == "  rank 3 fsdp: params 100, grads 100, optimizer 200; total 400"


@pytest.mark.slow
def test_fsdp_vs_ddp_in_one_process_shards_a_presets_model_over_a_group_of_one(
    tmp_path: Path,
) -> None:
    argv = ["--preset", "cpu-smoke", "--layers", "9", "--precision", "bf16-mixed"]
    assert fsdp_vs_ddp.main([*argv, "--windows", "2", "--steps", "1", "--out", str(tmp_path)]) == 0
    assert not torch.distributed.is_initialized()  # its group of one is ended
    doc = json.loads((tmp_path / "fsdp_vs_ddp.json").read_text())
    assert doc["settings"]["layers"] == 2 and doc["settings"]["vocab"] == 64  # the preset's
    assert doc["world_size"] == 1 and list(doc["seconds_per_step"]) == ["unsharded", "fsdp"]
    [held] = doc["held_bytes_by_rank"]  # one rank holds everything either way
    assert held["unsharded"] == held["fsdp"] and held["fsdp"]["params"] == doc["param_bytes_whole"]
    assert doc["machine"]["torch"] == torch.__version__  # the machine it ran on


@pytest.mark.parametrize("bad", [["--steps", "0"], ["--windows", "0"], ["--warmup", "-1"]])
def test_fsdp_vs_ddp_rejects_counts_below_one(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        fsdp_vs_ddp.parse_args(bad)
