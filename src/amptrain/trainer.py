"""fine_tune: the epoch loop around :class:`~amptrain.engine.TrainStep`, with a typed result."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from amptrain.data import (
    IGNORE_INDEX,
    TokenData,
    batch_inputs,
    deterministic_kernels,
    make_dataloader,
    seed_everything,
)
from amptrain.engine import TrainStep, check_data_fits, check_outputs_logits, evaluate
from amptrain.metrics import (
    ConsoleSink,
    JsonlSink,
    MetricsTracker,
    Sink,
    WandbSink,
    gpu_utilization,
    peak_memory_mb,
    reset_peak_memory,
)
from amptrain.precision import canonical_precision, resolve_precision


class SkippedStepsWarning(UserWarning):
    """Optimizer steps are being skipped because the gradient is not finite."""


class TrainingDivergedError(RuntimeError):
    """Too many optimizer steps in a row were skipped: the run no longer trains."""


class SkipGuard:
    """Counts optimizer steps skipped in a row (a non-finite gradient): warns at the first,
    raises at ``limit``. While an fp16 scaler calibrates (no step has succeeded yet), its
    skips are expected and not counted."""

    def __init__(self, limit: int, *, calibrating: bool = False) -> None:
        self.limit, self.calibrating = limit, calibrating
        self.in_a_row = 0
        self.warned = False

    def update(self, *, finite: bool, where: str = "") -> None:
        """Record one step: ``finite`` is whether its gradient norm was finite."""
        if finite:
            self.in_a_row, self.calibrating = 0, False
            return
        if self.calibrating:
            return
        self.in_a_row += 1
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"an optimizer step was skipped: the gradient is not finite{where}",
                SkippedStepsWarning,
                stacklevel=4,
            )
        if self.in_a_row >= self.limit:
            raise TrainingDivergedError(
                f"{self.in_a_row} optimizer steps in a row were skipped{where}: the loss or "
                "gradient is NaN or infinite. Lower the learning rate, check the data, or raise "
                "max_consecutive_skips if this is expected"
            )


# The types each annotation of TrainConfig admits (bool is not an int here).
_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
}


def _check_types(cfg: Any) -> None:
    """A wrong type is a ValueError naming the field, before any value check."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        names = [n.strip() for n in str(f.type).split("|")]
        if value is None and "None" in names:
            continue
        allowed = tuple(t for n in names for t in _TYPES.get(n, ()))
        if not allowed:
            continue
        wrong_bool = isinstance(value, bool) and bool not in allowed
        if wrong_bool or not isinstance(value, allowed):
            raise ValueError(
                f"TrainConfig.{f.name} must be {' or '.join(names)}, "
                f"got {type(value).__name__} {value!r}"
            )


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Every option of :func:`fine_tune`; invalid values raise ``ValueError`` naming the field."""

    precision: str = "32-true"
    epochs: int = 3
    batch_size: int = 8
    learning_rate: float = 3e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1  # share of all steps spent warming the learning rate up
    min_lr_ratio: float = 0.1  # the cosine decay ends at learning_rate * min_lr_ratio
    max_grad_norm: float | None = 1.0
    max_steps_per_epoch: int | None = None
    max_consecutive_skips: int = 10  # steps skipped in a row (non-finite) before the run stops
    device: str | None = None  # None: CUDA when available, else CPU
    seed: int = 0
    deterministic: bool = False
    num_workers: int | None = None
    pad_token_id: int = 0
    progress: bool | None = None  # None: a progress bar only when stderr is a terminal
    console: bool = False
    jsonl_path: str | None = None
    wandb: bool = False
    wandb_project: str = "amptrain"
    wandb_mode: str = field(default_factory=lambda: os.environ.get("WANDB_MODE", "offline"))
    wandb_dir: str | None = None

    def __post_init__(self) -> None:
        _check_types(self)
        canonical_precision(self.precision)
        if self.wandb_mode == "dryrun":  # W&B's older name for offline (WANDB_MODE=dryrun)
            object.__setattr__(self, "wandb_mode", "offline")
        checks = {
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 1,
            "learning_rate": self.learning_rate > 0 and math.isfinite(self.learning_rate),
            "weight_decay": self.weight_decay >= 0,
            "warmup_ratio": 0 <= self.warmup_ratio < 1,
            "min_lr_ratio": 0 <= self.min_lr_ratio <= 1,
            "max_grad_norm": self.max_grad_norm is None or self.max_grad_norm > 0,
            "max_steps_per_epoch": self.max_steps_per_epoch is None
            or self.max_steps_per_epoch >= 1,
            "max_consecutive_skips": self.max_consecutive_skips >= 1,
            "num_workers": self.num_workers is None or self.num_workers >= 0,
            "wandb_mode": self.wandb_mode in ("offline", "online", "disabled"),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(
                    f"TrainConfig.{name} has an invalid value: {getattr(self, name)!r}"
                )


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
            "amp/enabled": int(precision in ("16-mixed", "bf16-mixed")),
            "amp/precision": precision,
            "system/peak_memory_mb": self.peak_memory_mb,
            "system/gpu_utilization": self.gpu_utilization,
        }


@dataclass(frozen=True)
class FineTuneResult:
    """The outcome of :func:`fine_tune`."""

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


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """Fused AdamW (CUDA and CPU) with weight decay on matrices only."""
    # Weight decay on matrices only; biases and norms are left alone (as in GPT-2 training).
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = device.type in ("cuda", "cpu") and all(p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, fused=fused)


def build_schedule(optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int) -> Any:
    """Linear warm-up over ``warmup_ratio`` of the steps, then cosine decay to ``min_lr_ratio``."""
    warmup = int(cfg.warmup_ratio * total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _sinks(cfg: TrainConfig, plan_name: str) -> list[Sink]:
    sinks: list[Sink] = []
    if cfg.console:
        sinks.append(ConsoleSink())
    if cfg.jsonl_path:
        sinks.append(JsonlSink(cfg.jsonl_path))
    if cfg.wandb:
        config = {**dataclasses.asdict(cfg), "precision_used": plan_name}
        sinks.append(
            WandbSink(cfg.wandb_project, config=config, mode=cfg.wandb_mode, dir=cfg.wandb_dir)
        )
    return sinks


def _check_data(model: nn.Module, train_loader: Any, val_loader: Any) -> None:
    if val_loader is not None and _length(val_loader) == 0:
        raise ValueError("val_data gives no batch: pass validation rows, or no val_data")
    for loader in (train_loader, val_loader):
        dataset = getattr(loader, "dataset", None)
        if hasattr(dataset, "id_range_and_length"):  # token ids given as tensors: all checked
            check_data_fits(model, *dataset.id_range_and_length())


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an iterable dataset has no length
        return None


def fine_tune(
    model: nn.Module,
    train_data: TokenData,
    val_data: TokenData | None = None,
    *,
    config: TrainConfig | None = None,
    tracker: MetricsTracker | None = None,
    **options: Any,
) -> FineTuneResult:
    """Fine-tune ``model`` on token ids with a next-token language-model loss.

    ``train_data`` and ``val_data`` are a ``[N, T]`` tensor of token ids, a list of 1-D
    tensors (padded; padding is ignored), or a ready DataLoader. ``options`` are
    :class:`TrainConfig` fields and override ``config``. The precision falls back (with one
    warning) where the device cannot run it; the result records the one used.
    """
    cfg = dataclasses.replace(config or TrainConfig(), **options)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    with deterministic_kernels(cfg.deterministic):
        try:
            return _fine_tune(model, train_data, val_data, cfg, tracker)
        finally:
            if dtype is not None:
                model.to(dtype=dtype)  # 16-true and bf16-true cast the caller's model to train


def _fine_tune(
    model: nn.Module,
    train_data: TokenData,
    val_data: TokenData | None,
    cfg: TrainConfig,
    tracker: MetricsTracker | None,
) -> FineTuneResult:
    """The run itself; :func:`fine_tune` gives back the global settings and the model's dtype."""
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"TrainConfig.device is {cfg.device!r} but CUDA is not available here: "
            "leave device unset to use the CPU"
        )
    seed_everything(cfg.seed)
    plan = resolve_precision(cfg.precision, device)
    model.to(device=device, dtype=plan.param_dtype)
    model.train()

    loader_args = {
        "batch_size": cfg.batch_size,
        "device": device,
        "seed": cfg.seed,
        "num_workers": cfg.num_workers,
        "pad_token_id": cfg.pad_token_id,
    }
    train_loader = make_dataloader(train_data, shuffle=True, **loader_args)
    val_loader = (
        make_dataloader(val_data, shuffle=False, **loader_args) if val_data is not None else None
    )
    try:
        steps_per_epoch = len(train_loader)
    except TypeError:  # an iterable dataset has no length: the epoch needs a stated size
        if not cfg.max_steps_per_epoch:
            raise ValueError(
                "the training DataLoader has no length (an IterableDataset?): "
                "pass max_steps_per_epoch"
            ) from None
        steps_per_epoch = cfg.max_steps_per_epoch
    if cfg.max_steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, cfg.max_steps_per_epoch)
    if steps_per_epoch == 0:
        raise ValueError("the training data gives no batch: is it empty?")
    _check_data(model, train_loader, val_loader)

    optimizer = build_optimizer(model, cfg, device)
    step = TrainStep(
        model,
        optimizer,
        plan,
        scheduler=build_schedule(optimizer, cfg, cfg.epochs * steps_per_epoch),
        max_grad_norm=cfg.max_grad_norm,
    )
    tracker = tracker or MetricsTracker()
    tracker.sinks.extend(_sinks(cfg, plan.name))
    show_progress = sys.stderr.isatty() if cfg.progress is None else cfg.progress
    guard = SkipGuard(cfg.max_consecutive_skips, calibrating=plan.scaler_enabled)

    epochs: list[EpochMetrics] = []
    run_start = time.perf_counter()
    try:
        for epoch in range(1, cfg.epochs + 1):
            reset_peak_memory(device)
            samples = tokens = 0
            overflows_before = step.overflow_steps
            bar = tqdm(
                total=steps_per_epoch,
                desc=f"epoch {epoch}/{cfg.epochs}",
                leave=False,
                disable=not show_progress,
                unit="step",
            )
            sampler = getattr(train_loader, "sampler", None)
            if hasattr(sampler, "set_epoch"):  # the order is a function of (seed, epoch)
                sampler.set_epoch(epoch)
            start = time.perf_counter()
            for i, batch in enumerate(train_loader):
                if i == steps_per_epoch:
                    break
                input_ids, labels, inputs = batch_inputs(batch)
                if epoch == 1 and i == 0:  # once: the output must be logits over the vocabulary
                    ids = input_ids.to(device)
                    check_data_fits(model, int(ids.max()), int(ids.min()), ids.shape[1])
                    check_outputs_logits(model, ids, plan)
                samples += input_ids.shape[0]
                tokens += (
                    int(labels.ne(IGNORE_INDEX).sum())
                    if labels.device.type == "cpu"
                    else labels.numel()
                )
                lr = optimizer.param_groups[0]["lr"]  # the rate this step uses (before it moves)
                out = step(
                    input_ids.to(device, non_blocking=True),
                    labels.to(device, non_blocking=True),
                    **{k: v.to(device, non_blocking=True) for k, v in inputs.items()},
                )
                # One host read per step, for the metrics and the progress bar.
                loss, grad_norm = torch.stack([out.loss.float(), out.grad_norm.float()]).tolist()
                tracker.log_step(loss, grad_norm, **{"train/lr": lr})
                guard.update(finite=math.isfinite(grad_norm), where=f" (epoch {epoch}, step {i})")
                bar.update()
                if show_progress and (i % 10 == 0 or i + 1 == steps_per_epoch):
                    bar.set_postfix(
                        loss=f"{loss:.4f}", tok_s=f"{tokens / (time.perf_counter() - start):.0f}"
                    )
            elapsed = time.perf_counter() - start
            bar.close()
            val = evaluate(model, val_loader, plan, device) if val_loader is not None else {}
            grad = tracker.epoch_grad_norm.summary()
            metrics = EpochMetrics(
                epoch=epoch,
                # A non-finite step makes the epoch's loss NaN, not the mean of the others.
                train_loss=tracker.epoch_loss.mean
                if tracker.epoch_loss.count and not tracker.epoch_loss.nonfinite
                else math.nan,
                val_loss=val.get("loss"),
                val_perplexity=val.get("perplexity"),
                val_accuracy=val.get("accuracy"),
                grad_norm_mean=grad["mean"],
                grad_norm_std=grad["std"],
                grad_norm_min=grad["min"],
                grad_norm_max=grad["max"],
                learning_rate=lr,  # the rate of the epoch's last step
                overflow_steps=step.overflow_steps - overflows_before,
                loss_scale=step.loss_scale,
                samples_per_second=samples / elapsed,
                tokens_per_second=tokens / elapsed,
                peak_memory_mb=peak_memory_mb(device),
                gpu_utilization=gpu_utilization(device),
                wall_time_s=elapsed,
            )
            epochs.append(metrics)
            tracker.end_epoch(metrics.log_record(plan.name))
    finally:
        tracker.close()

    return FineTuneResult(
        precision=plan.name,
        precision_requested=plan.requested,
        device=str(device),
        epochs=epochs,
        steps=tracker.step,
        overflow_steps=step.overflow_steps,
        final_loss_scale=step.loss_scale,
        train_samples=_dataset_size(train_loader),
        val_samples=_dataset_size(val_loader) if val_loader is not None else 0,
        wall_time_s=time.perf_counter() - run_start,
    )


def _dataset_size(loader: Any) -> int:
    try:
        return len(loader.dataset)
    except TypeError:  # an iterable dataset has no length
        return 0
