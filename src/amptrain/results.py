"""What a run of :func:`~amptrain.trainer.fine_tune` returns: per-epoch metrics and the result."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EpochMetrics:
    """What one epoch measured. Losses are per token; throughput excludes validation."""

    epoch: int
    train_loss: float
    val_loss: float | None
    val_perplexity: float | None
    val_accuracy: float | None
    grad_norm_mean: float
    grad_norm_std: float
    grad_norm_min: float
    grad_norm_max: float
    learning_rate: float
    overflow_steps: int
    loss_scale: float
    samples_per_second: float
    tokens_per_second: float
    peak_memory_mb: float | None  # CUDA tensors only; None on CPU
    gpu_utilization: float | None
    wall_time_s: float

    def log_record(self, precision: str) -> dict[str, Any]:
        """The namespaced keys sent to the metric sinks."""
        return {
            "epoch": self.epoch,
            "train/loss": self.train_loss,
            "train/grad_norm_mean": self.grad_norm_mean,
            "train/grad_norm_max": self.grad_norm_max,
            "train/lr": self.learning_rate,
            "train/samples_per_second": self.samples_per_second,
            "train/tokens_per_second": self.tokens_per_second,
            "val/loss": self.val_loss,
            "val/perplexity": self.val_perplexity,
            "val/accuracy": self.val_accuracy,
            "amp/loss_scale": self.loss_scale,
            "amp/overflow_steps": self.overflow_steps,
            "amp/enabled": int(precision in ("16-mixed", "bf16-mixed", "fp8")),
            "amp/precision": precision,
            "system/peak_memory_mb": self.peak_memory_mb,
            "system/gpu_utilization": self.gpu_utilization,
        }


@dataclass(frozen=True)
class FineTuneResult:
    """The outcome of :func:`~amptrain.trainer.fine_tune`; under torchrun every rank gets the
    same metrics (reduced over ranks)."""

    precision: str
    precision_requested: str
    device: str
    epochs: list[EpochMetrics]
    steps: int
    overflow_steps: int
    final_loss_scale: float
    train_samples: int
    val_samples: int
    wall_time_s: float
    # Every validation pass (eval_every steps and each epoch's end): epoch, step, val/* keys.
    evals: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None  # why a callback stopped the run early
    checkpoint: str | None = None  # the last checkpoint written (rank 0)
    resumed_from: str | None = None
    world_size: int = 1  # processes that trained (torchrun)
    strategy: str | None = None  # how they trained: "ddp" or "fsdp" (None: one process)
    fp8_layers: int = 0  # layers that trained in float8 (precision "fp8")

    @property
    def train_loss_history(self) -> list[float]:
        return [e.train_loss for e in self.epochs]

    @property
    def val_loss_history(self) -> list[float | None]:
        return [e.val_loss for e in self.epochs]

    @property
    def val_accuracy_history(self) -> list[float | None]:
        return [e.val_accuracy for e in self.epochs]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (nested epoch records included)."""
        return dataclasses.asdict(self)
