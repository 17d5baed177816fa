"""Stage 3: test_fine_tuning and fine_tune end to end on CPU, with the real model and data path.

Seed report 003 found test_fine_tuning crashing with a KeyError that no test ran; this runs
that exact entry point, with and without the AMP fallback.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch

from amptrain import (
    PrecisionFallbackWarning,
    TinyGPT,
    fine_tune,
    synthetic_token_data,
    test_fine_tuning,
)

pytestmark = pytest.mark.integration

VOCAB = 64
REQUIRED_KEYS = {
    "final_train_loss",
    "final_val_loss",
    "final_val_accuracy",
    "train_loss_history",
    "val_loss_history",
    "val_accuracy_history",
    "amp_enabled",
    "precision",
    "final_loss_scale",
    "train_samples",
    "val_samples",
    "overflow_steps",
    "samples_per_second",
    "wall_time_s",
}
CHANCE = 1 / VOCAB


class _Config:
    vocab_size = VOCAB
    max_seq_len = 32


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=64, n_layers=2, n_heads=4, max_seq_len=32)


def _check_learning(result: dict) -> None:
    assert result.keys() >= REQUIRED_KEYS
    losses = result["train_loss_history"] + result["val_loss_history"]
    assert all(math.isfinite(v) for v in losses), losses
    assert result["val_loss_history"][-1] < result["val_loss_history"][0]
    assert result["final_val_accuracy"] > 10 * CHANCE
    assert result["overflow_steps"] == 0
    assert result["train_samples"] > 0 and result["val_samples"] > 0


def test_fine_tuning_fp32(record_curve, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a plain fp32 run warns about nothing
        result = test_fine_tuning(_model(), _Config(), n_epochs=3, learning_rate=3e-3)
    assert not (tmp_path / "wandb").exists()  # W&B is off unless asked for (WANDB_DIR is here)
    record_curve("test_fine_tuning fp32: val loss per epoch", result["val_loss_history"])
    _check_learning(result)
    assert result["precision"] == "32-true" and result["amp_enabled"] is False
    assert result["final_loss_scale"] == 1.0


def test_fine_tuning_use_amp_without_cuda_falls_back_to_fp32(record_curve) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA present: use_amp=True trains in mixed precision, not the fallback")
    with pytest.warns(PrecisionFallbackWarning, match="CUDA is not available") as caught:
        result = test_fine_tuning(
            _model(), {"vocab_size": VOCAB}, n_epochs=3, learning_rate=3e-3, use_amp=True
        )
    # one fallback warning; the others a GPU machine's Python may add (fork) are not ours
    (ours,) = [w for w in caught if issubclass(w.category, PrecisionFallbackWarning)]
    assert str(ours.message).startswith("use_amp=True") and str(ours.message).endswith("fp32")
    record_curve(
        "test_fine_tuning use_amp fallback: val loss per epoch", result["val_loss_history"]
    )
    _check_learning(result)
    assert result["precision"] == "32-true" and result["amp_enabled"] is False


def test_fine_tune_bf16_autocast_on_cpu(record_curve) -> None:
    train = synthetic_token_data(64, 32, VOCAB, seed=0)
    val = synthetic_token_data(16, 32, VOCAB, seed=1)
    result = fine_tune(
        _model(),
        train,
        val,
        precision="bf16-mixed",
        epochs=3,
        batch_size=4,
        learning_rate=3e-3,
        device="cpu",
    )
    assert result.precision == "bf16-mixed"
    val_losses = result.val_loss_history
    record_curve("fine_tune bf16-mixed: val loss per epoch", val_losses)
    assert all(math.isfinite(v) for v in val_losses) and val_losses[-1] < val_losses[0]
    assert result.val_accuracy_history[-1] > 10 * CHANCE
