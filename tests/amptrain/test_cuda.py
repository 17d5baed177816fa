"""The paths only a GPU takes: fused AdamW told of inf/NaN through ``found_inf``, fp16's scaler
skipping a step, zero host syncs in a training step, fine_tune validating on the GPU and reading
the loss back every ``log_every`` steps only, and the benchmark's CUDA timing, memory split and
MFU.

Marked ``cuda``: the default run leaves them out; ``pytest -m cuda`` runs them on a GPU.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from amptrain import TinyGPT, fine_tune, synthetic_token_data
from amptrain.adapters import lm_loss
from amptrain.benchmark.health import count_syncs
from amptrain.benchmark.presets import PRESETS
from amptrain.benchmark.run import run_benchmark
from amptrain.config import TrainConfig
from amptrain.engine import TrainStep
from amptrain.metrics import gpu_utilization
from amptrain.optim import build_optimizer
from amptrain.precision import resolve_precision

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

VOCAB, SEQ, BATCH = 64, 32, 8
CUDA = torch.device("cuda")


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=64, n_layers=2, n_heads=4, max_seq_len=SEQ)


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    ids = synthetic_token_data(BATCH, SEQ, VOCAB, seed=seed).to(CUDA)
    return ids, ids.clone()


def _step(precision: str, loss_fn=lm_loss) -> TrainStep:  # type: ignore[no-untyped-def]
    plan = resolve_precision(precision, CUDA)
    model = _model().to(device=CUDA, dtype=plan.param_dtype)
    optimizer = build_optimizer(model, TrainConfig(precision=plan.name), CUDA)
    return TrainStep(model, optimizer, plan, loss_fn=loss_fn)


def _poisoned(flag: list[bool]):  # type: ignore[no-untyped-def]
    """lm_loss, times infinity while ``flag[0]`` is set: every gradient becomes inf/NaN."""

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = lm_loss(logits, labels)
        return loss * math.inf if flag[0] else loss

    return loss_fn


def _params(step: TrainStep) -> list[torch.Tensor]:
    return [p.detach().clone() for p in step.params]


def test_fused_adamw_is_used_and_skips_a_non_finite_step_on_the_device() -> None:
    flag = [False]
    step = _step("bf16-mixed", _poisoned(flag))
    assert step.optimizer.defaults["fused"] and step.device_skip
    assert not step.scaler.is_enabled()
    step(*_batch(0))
    before = _params(step)
    flag[0] = True
    out = step(*_batch(1))
    assert not torch.isfinite(out.grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(before, _params(step), strict=True))
    flag[0] = False
    step(*_batch(2))
    assert step.overflow_steps == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(step), strict=True))


def test_fp16_scaler_skips_the_step_and_halves_the_scale() -> None:
    flag = [False]
    step = _step("16-mixed", _poisoned(flag))
    assert step.scaler.is_enabled()
    step(*_batch(0))
    scale, before = step.loss_scale, _params(step)
    flag[0] = True
    step(*_batch(1))
    assert step.loss_scale == scale / 2
    assert all(torch.equal(a, b) for a, b in zip(before, _params(step), strict=True))
    assert step.overflow_steps == 1


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_a_training_step_never_syncs_with_the_host(precision: str) -> None:
    step = _step(precision)
    batches = [_batch(i) for i in range(4)]
    step(*batches[3])  # the first step creates the optimizer state
    result = count_syncs(lambda: step(*batches.pop()), 3, CUDA)
    assert result["count"] == 0, result["locations"]


def _fine_tune_syncs(steps: int, log_every: int) -> dict:  # type: ignore[type-arg]
    data = synthetic_token_data(steps * BATCH, SEQ, VOCAB, seed=0)
    run = lambda: fine_tune(  # noqa: E731
        _model(), data, epochs=1, batch_size=BATCH, log_every=log_every, num_workers=0
    )
    return count_syncs(run, 1, CUDA)


def test_fine_tune_reads_the_loss_back_only_every_log_every_steps() -> None:
    # Everything else fine_tune reads (setup, the epoch's end) is the same for every run, so
    # the differences count the flushes: 10 more steps at log_every=10 add one read (a read in
    # every step would add ten), and log_every=1 reads 20 times where log_every=10 reads twice.
    short, long = _fine_tune_syncs(10, 10), _fine_tune_syncs(20, 10)
    assert long["count"] - short["count"] == 1, long["locations"]
    every_step = _fine_tune_syncs(20, 1)
    assert every_step["count"] - long["count"] == 20 - 2, every_step["locations"]


def test_the_benchmark_measures_the_gpu_paths_on_a_small_model() -> None:
    preset = dataclasses.replace(
        PRESETS["cpu-smoke"],
        precisions=("32-true", "32-tf32", "16-mixed", "bf16-mixed"),
        needs_cuda=True,
        num_workers=0,
    )
    doc = run_benchmark(preset, list(preset.precisions), CUDA)
    assert doc["gpu_verified"] and doc["settings"]["timer"] == "cuda events"
    assert doc["machine_info"]["gpu_name"] and doc["machine_info"]["driver"]
    for name, r in doc["precisions"].items():
        assert r["status"] == "ok", (name, r["error"])
        assert len(r["window_s"]) == preset.windows and min(r["window_s"]) > 0
        memory = r["memory"]
        assert memory["measured"] and 0 < memory["static_mb"] < memory["peak_allocated_mb"]
        assert memory["activation_mb"] > 0
        health = r["health"]
        assert health["syncs_in_step"]["measured"] and health["syncs_in_step"]["count"] == 0
        assert health["matmul_dtypes"]["expected"] in health["matmul_dtypes"]["observed"]
        assert health["memory_source"] == "cuda_allocated"
        assert 0 < health["inference_latency_ms"]["p50"] <= health["inference_latency_ms"]["p95"]
        if "H100" in doc["machine_info"]["gpu_name"] or "H200" in doc["machine_info"]["gpu_name"]:
            assert r["peak_tflops"] and 0 < r["mfu"] < 1
    speedups = {(c["precision"], c["baseline"]) for c in doc["comparisons"]}
    assert ("bf16-mixed", "32-true") in speedups and ("bf16-mixed", "32-tf32") in speedups


def test_fine_tune_validates_and_measures_memory_on_the_gpu() -> None:
    train = synthetic_token_data(4 * BATCH, SEQ, VOCAB, seed=0)
    val = synthetic_token_data(BATCH, SEQ, VOCAB, seed=1)
    result = fine_tune(
        _model(), train, val, epochs=1, batch_size=BATCH, precision="bf16-mixed", num_workers=0
    )
    (epoch,) = result.epochs
    assert result.device.startswith("cuda") and result.precision == "bf16-mixed"
    assert math.isfinite(epoch.val_loss) and 0 <= epoch.val_accuracy <= 1
    assert epoch.val_perplexity == pytest.approx(math.exp(epoch.val_loss))
    assert epoch.peak_memory_mb is not None and epoch.peak_memory_mb > 0
    # NVML may be missing from the machine; the epoch reports it when torch can read it
    assert (epoch.gpu_utilization is None) == (gpu_utilization(CUDA) is None)
