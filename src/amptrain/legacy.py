"""test_fine_tuning: the entry point the seed reports were written against, kept for its users."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from amptrain.adapters import vocabulary_size
from amptrain.data import TokenData, synthetic_token_data
from amptrain.precision import PrecisionFallbackWarning, compute_effective_precision
from amptrain.trainer import fine_tune

# What test_fine_tuning returns, key by key. Validation figures are None without val_data
# (test_fine_tuning makes validation data itself only when it makes the training data too).
RESULT_KEYS = {
    "final_train_loss": "mean training loss of the last epoch, per token",
    "final_val_loss": "validation loss after the last epoch, per token (None: no val_data)",
    "final_val_accuracy": "next-token accuracy on the validation data (None: no val_data)",
    "train_loss_history": "training loss of every epoch",
    "val_loss_history": "validation loss after every epoch",
    "val_accuracy_history": "validation accuracy after every epoch",
    "amp_enabled": "True when the run used mixed precision",
    "precision": "the precision used (after any fallback)",
    "final_loss_scale": "fp16's loss scale at the end (1.0 without a scaler)",
    "train_samples": "training rows",
    "val_samples": "validation rows (0: no val_data)",
    "overflow_steps": "optimizer steps skipped on a non-finite gradient",
    "samples_per_second": "training throughput of the last epoch",
    "tokens_per_second": "training throughput of the last epoch, in counted tokens",
    "wall_time_s": "seconds the whole run took",
    "vocab_size": "the vocabulary the synthetic data and the checks used",
}
SYNTHETIC_TRAIN_SAMPLES = 64
SYNTHETIC_VAL_SAMPLES = 16
SYNTHETIC_SEQ_LEN = 32


def _config_value(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def detect_vocab_size(model: nn.Module, config: Any = None) -> int:
    """The vocabulary size from ``config.vocab_size`` (or ``config["vocab_size"]``), else from
    the model's input embedding."""
    value = _config_value(config, "vocab_size")
    if isinstance(value, int) and value > 0:
        return value
    size = vocabulary_size(model)
    if size is None:
        raise ValueError(
            "cannot tell the vocabulary size: give config.vocab_size or a model with an "
            "nn.Embedding"
        )
    return size


def test_fine_tuning(
    model: nn.Module,
    config: Any,
    train_data: TokenData | None = None,
    val_data: TokenData | None = None,
    n_epochs: int = 3,
    learning_rate: float = 5e-5,
    batch_size: int = 4,
    use_wandb: bool = False,
    use_amp: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``model`` and return a flat dict of the run's results (``RESULT_KEYS``).

    Without data, learnable synthetic sequences are generated from the detected vocabulary.
    ``use_amp=True`` trains in fp16 mixed precision on CUDA (bf16 where supported); without
    CUDA it falls back to fp32 with a warning.
    """
    vocab_size = detect_vocab_size(model, config)
    cuda = torch.cuda.is_available()
    precision = compute_effective_precision("32", use_amp, cuda_available=cuda, use_gpu=True)
    if use_amp and not cuda:
        warnings.warn(
            "use_amp=True but CUDA is not available; training in fp32",
            PrecisionFallbackWarning,
            stacklevel=2,
        )
    if train_data is None:
        seq_len = min(SYNTHETIC_SEQ_LEN, _config_value(config, "max_seq_len") or SYNTHETIC_SEQ_LEN)
        train_data = synthetic_token_data(SYNTHETIC_TRAIN_SAMPLES, seq_len, vocab_size, seed=0)
        if val_data is None:
            val_data = synthetic_token_data(SYNTHETIC_VAL_SAMPLES, seq_len, vocab_size, seed=1)
    result = fine_tune(
        model,
        train_data,
        val_data,
        precision=precision,
        epochs=n_epochs,
        learning_rate=learning_rate,
        batch_size=batch_size,
        wandb=use_wandb,
    )
    last = result.epochs[-1]
    return {
        "final_train_loss": last.train_loss,
        "final_val_loss": last.val_loss,
        "final_val_accuracy": last.val_accuracy,
        "train_loss_history": result.train_loss_history,
        "val_loss_history": result.val_loss_history,
        "val_accuracy_history": result.val_accuracy_history,
        "amp_enabled": result.precision in ("16-mixed", "bf16-mixed", "fp8"),
        "precision": result.precision,
        "final_loss_scale": result.final_loss_scale,
        "train_samples": result.train_samples,
        "val_samples": result.val_samples,
        "overflow_steps": result.overflow_steps,
        "samples_per_second": last.samples_per_second,
        "tokens_per_second": last.tokens_per_second,
        "wall_time_s": result.wall_time_s,
        "vocab_size": vocab_size,
    }


test_fine_tuning.__test__ = False  # a library entry point, not a pytest test
