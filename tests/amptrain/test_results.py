"""amptrain.results: what a run returns, every figure of it measured and serialisable."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import pytest
import torch

from amptrain import FineTuneResult, TinyGPT, fine_tune
from amptrain.results import EpochMetrics


def test_result_holds_every_measurement_and_serialises(
    model: TinyGPT, tokens: Callable[..., torch.Tensor]
) -> None:
    result = fine_tune(model, tokens(), tokens(8, seed=1), epochs=2, batch_size=8, num_workers=0)
    assert isinstance(result, FineTuneResult)
    assert result.precision == "32-true" and result.device == "cpu" and result.world_size == 1
    assert result.steps == 2 * 4 and result.train_samples == 32 and result.val_samples == 8
    epoch = result.epochs[-1]
    for name in (
        "train_loss",
        "val_loss",
        "val_perplexity",
        "val_accuracy",
        "grad_norm_mean",
        "grad_norm_std",
        "grad_norm_min",
        "grad_norm_max",
        "learning_rate",
        "samples_per_second",
        "tokens_per_second",
    ):
        assert math.isfinite(getattr(epoch, name)), name
    assert epoch.val_perplexity == pytest.approx(math.exp(epoch.val_loss))
    assert epoch.peak_memory_mb is None  # CPU: no CUDA allocator figure
    for epoch in result.epochs:  # the rates are over the epoch's own training time
        assert epoch.samples_per_second * epoch.wall_time_s == pytest.approx(32)
        assert epoch.tokens_per_second * epoch.wall_time_s == pytest.approx(32 * 12)
    assert json.loads(json.dumps(result.to_dict()))["epochs"][1]["epoch"] == 2
    assert result.train_loss_history == [e.train_loss for e in result.epochs]
    assert result.val_loss_history == [e.val_loss for e in result.epochs]
    assert result.val_accuracy_history == [e.val_accuracy for e in result.epochs]


def test_an_epochs_record_names_its_figures_by_kind() -> None:
    epoch = EpochMetrics(
        epoch=2, train_loss=1.5, val_loss=None, val_perplexity=None, val_accuracy=None,
        grad_norm_mean=0.5, grad_norm_std=0.1, grad_norm_min=0.2, grad_norm_max=0.9,
        learning_rate=1e-3, overflow_steps=1, loss_scale=1024.0, samples_per_second=10.0,
        tokens_per_second=120.0, peak_memory_mb=None, gpu_utilization=None, wall_time_s=3.0,
    )  # fmt: skip
    record = epoch.log_record("bf16-mixed")
    assert (record["epoch"], record["train/loss"], record["amp/overflow_steps"]) == (2, 1.5, 1)
    assert (record["amp/precision"], record["amp/enabled"]) == ("bf16-mixed", 1)
    assert epoch.log_record("32-true")["amp/enabled"] == 0
    assert record["val/loss"] is None and record["system/peak_memory_mb"] is None
    assert {k.split("/")[0] for k in record if "/" in k} == {"train", "val", "amp", "system"}
