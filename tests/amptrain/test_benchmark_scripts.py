"""The measurement scripts in benchmarks/ that the GPU figures come from: they still run, and
their arithmetic is right (the GPU runs themselves are in reports/baseline/)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fine_tune_throughput
import step_profile


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
