"""AmpWandbCallback: a Lightning trainer's precision and fp16 loss scale, to its loggers and W&B."""

from __future__ import annotations

import sys
from typing import Any

try:
    from lightning.pytorch import Callback, LightningModule, Trainer
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "AmpWandbCallback needs Lightning: pip install 'amptrain[lightning]'"
    ) from exc

from amptrain.precision import canonical_precision


def trainer_precision(trainer: Trainer) -> str:
    """The canonical precision the trainer's precision plugin actually runs."""
    return canonical_precision(trainer.precision_plugin.precision)


def trainer_loss_scale(trainer: Trainer) -> float | None:
    """The fp16 gradient scaler's current loss scale, or None when no scaler is in use."""
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    if scaler is None or not scaler.is_enabled():
        return None
    return float(scaler.get_scale())


class AmpWandbCallback(Callback):
    """Logs ``amp/precision``, ``amp/enabled`` and, under fp16 mixed precision, ``amp/loss_scale``.

    Metrics go to every logger of the trainer; when a W&B run is active and no logger writes
    to it, they go to that run too. W&B is never imported here unless the user already did.
    """

    def __init__(self, log_every_n_steps: int = 50) -> None:
        if log_every_n_steps < 1:
            raise ValueError(f"log_every_n_steps must be >= 1, got {log_every_n_steps}")
        self.log_every_n_steps = log_every_n_steps

    def _metrics(self, trainer: Trainer) -> dict[str, float]:
        precision = trainer_precision(trainer)
        metrics = {"amp/enabled": float(precision in ("16-mixed", "bf16-mixed"))}
        scale = trainer_loss_scale(trainer)
        if scale is not None:
            metrics["amp/loss_scale"] = scale
        return metrics

    def _emit(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
        run = _active_wandb_run()
        if run is not None and not any(
            type(lg).__name__ == "WandbLogger" for lg in trainer.loggers
        ):
            run.log(metrics, step=trainer.global_step)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        precision = trainer_precision(trainer)
        for logger in trainer.loggers:
            logger.log_hyperparams({"amp/precision": precision})
        run = _active_wandb_run()
        if run is not None:
            run.summary["amp/precision"] = precision

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step % self.log_every_n_steps == 0:
            self._emit(trainer, self._metrics(trainer))

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._emit(trainer, self._metrics(trainer))


def _active_wandb_run() -> Any:
    wandb = sys.modules.get("wandb")
    return getattr(wandb, "run", None) if wandb is not None else None
