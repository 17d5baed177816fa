"""fine_tune: configuration, setup (devices, processes, data, optimizer) and the result."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from amptrain import checkpoint
from amptrain.callbacks import Callback, Hooks
from amptrain.data import TokenData, deterministic_kernels, make_dataloader, seed_everything
from amptrain.distributed import World, join_world, wrap_model
from amptrain.engine import LossFn, TrainStep, check_data_fits, lm_loss
from amptrain.loop import (
    Loop,
    SkipGuard,
    SkippedStepsWarning,
    TrainingDivergedError,
)
from amptrain.metrics import ConsoleSink, JsonlSink, MetricsTracker, Sink, WandbSink
from amptrain.precision import canonical_precision, resolve_precision
from amptrain.results import EpochMetrics, FineTuneResult

__all__ = [
    "EpochMetrics",
    "FineTuneResult",
    "SkipGuard",
    "SkippedStepsWarning",
    "TrainConfig",
    "TrainingDivergedError",
    "build_optimizer",
    "build_schedule",
    "fine_tune",
]

OptimizerFactory = Callable[[nn.Module], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer, int], Any]

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
    grad_accum_steps: int = 1  # micro-batches per optimizer step
    log_every: int = 10  # optimizer steps between host reads of the loss and gradient norm
    eval_every: int | None = None  # optimizer steps between validations (and each epoch's end)
    checkpoint_dir: str | None = None  # where checkpoints go (one is written at the end)
    checkpoint_every: int | None = None  # optimizer steps between checkpoints
    keep_checkpoints: int = 3  # the newest K are kept
    resume_from: str | None = None  # a checkpoint, a directory (its newest), or "latest"
    compile: bool = False  # torch.compile the model for training
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
            "grad_accum_steps": self.grad_accum_steps >= 1,
            "log_every": self.log_every >= 1,
            "eval_every": self.eval_every is None or self.eval_every >= 1,
            "checkpoint_every": self.checkpoint_every is None or self.checkpoint_every >= 1,
            "keep_checkpoints": self.keep_checkpoints >= 1,
            "num_workers": self.num_workers is None or self.num_workers >= 0,
            "wandb_mode": self.wandb_mode in ("offline", "online", "disabled"),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(
                    f"TrainConfig.{name} has an invalid value: {getattr(self, name)!r}"
                )
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ValueError("TrainConfig.checkpoint_every needs checkpoint_dir")


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
    # the whole dataset's length, alike on every rank (a rank's own shard of it may be empty)
    if val_loader is not None and _length(val_loader.dataset) == 0:
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
    callbacks: Iterable[Callback] = (),
    loss_fn: LossFn | None = None,
    optimizer_factory: OptimizerFactory | None = None,
    scheduler_factory: SchedulerFactory | None = None,
    **options: Any,
) -> FineTuneResult:
    """Fine-tune ``model`` on token ids with a next-token language-model loss.

    ``train_data`` and ``val_data`` are a ``[N, T]`` tensor of token ids, a list of 1-D
    tensors (padded; padding is ignored), or a ready DataLoader. ``options`` are
    :class:`TrainConfig` fields and override ``config``. The precision falls back (with one
    warning) where the device cannot run it; the result records the one used.

    ``loss_fn(logits, labels)`` replaces the next-token cross-entropy for training (validation
    keeps it, so perplexity means what it says); ``optimizer_factory(model)`` and
    ``scheduler_factory(optimizer, total_steps)`` replace AdamW and the warm-up/cosine
    schedule. Under torchrun (``WORLD_SIZE`` > 1) the model trains with DDP on this rank's
    shard of the data, and only rank 0 writes sinks and checkpoints.
    """
    cfg = dataclasses.replace(config or TrainConfig(), **options)
    parts = _Parts(Hooks(callbacks), loss_fn or lm_loss, optimizer_factory, scheduler_factory)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if dtype is None:
        raise ValueError("the model has no floating-point parameters: there is nothing to train")
    with deterministic_kernels(cfg.deterministic):
        try:
            return _train(model, (train_data, val_data), cfg, tracker, parts)
        finally:
            model.to(dtype=dtype)  # 16-true and bf16-true cast the caller's model to train


@dataclass(frozen=True)
class _Parts:
    """What fine_tune takes besides the configuration."""

    hooks: Hooks
    loss_fn: LossFn
    optimizer_factory: OptimizerFactory | None
    scheduler_factory: SchedulerFactory | None


def _place(cfg: TrainConfig) -> tuple[torch.device, World]:
    """The device this process trains on, and its place among torchrun's processes."""
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"TrainConfig.device is {cfg.device!r} but CUDA is not available here: "
            "leave device unset to use the CPU"
        )
    world = join_world(device.type)
    if world.distributed and device.type == "cuda":
        device = torch.device("cuda", world.local_rank)  # one GPU per process
    return device, world


def _train(
    model: nn.Module,
    data: tuple[TokenData, TokenData | None],
    cfg: TrainConfig,
    tracker: MetricsTracker | None,
    parts: _Parts,
) -> FineTuneResult:
    """The run; :func:`fine_tune` gives back the global settings and the model's dtype."""
    device, world = _place(cfg)
    seed_everything(cfg.seed)
    plan = resolve_precision(cfg.precision, device)
    model.to(device=device, dtype=plan.param_dtype)
    model.train()
    loaders = _loaders(*data, cfg, device, world)
    batches = _batches_per_epoch(loaders[0], cfg)
    _check_data(model, *loaders)
    tracker = tracker or MetricsTracker()
    if world.is_main:
        tracker.sinks.extend(_sinks(cfg, plan.name))
    else:  # one writer: rank 0
        tracker.sinks = []
    loop = Loop(
        cfg=cfg,
        module=model,
        step=_build_step(model, cfg, parts, plan, (device, world), batches),
        device=device,
        world=world,
        train_loader=loaders[0],
        val_loader=loaders[1],
        batches_per_epoch=batches,
        tracker=tracker,
        hooks=parts.hooks,
        show_progress=world.is_main
        and (sys.stderr.isatty() if cfg.progress is None else cfg.progress),
    )
    resumed = _resume(loop, cfg, device)
    start = time.perf_counter()
    try:
        loop.run()
    finally:
        tracker.close()
    return _result(loop, loaders, time.perf_counter() - start, resumed)


def _build_step(
    model: nn.Module,
    cfg: TrainConfig,
    parts: _Parts,
    plan: Any,
    place: tuple[torch.device, World],
    batches: int,
) -> TrainStep:
    """The training step: the model wrapped (DDP, compile), its optimizer and schedule."""
    device, world = place
    train_model = wrap_model(model, world, device)
    if cfg.compile:
        train_model = torch.compile(train_model)
    optimizer = (parts.optimizer_factory or (lambda m: build_optimizer(m, cfg, device)))(model)
    total_steps = cfg.epochs * -(-batches // cfg.grad_accum_steps)
    make_schedule = parts.scheduler_factory or (lambda o, n: build_schedule(o, cfg, n))
    return TrainStep(
        train_model,
        optimizer,
        plan,
        scheduler=make_schedule(optimizer, total_steps),
        max_grad_norm=cfg.max_grad_norm,
        loss_fn=parts.loss_fn,
    )


def _result(loop: Loop, loaders: tuple[Any, Any], seconds: float, resumed: Any) -> FineTuneResult:
    step, plan = loop.step, loop.plan
    return FineTuneResult(
        precision=plan.name,
        precision_requested=plan.requested,
        device=str(loop.device),
        epochs=loop.epochs,
        steps=loop.state.step,
        overflow_steps=step.overflow_steps,
        final_loss_scale=step.loss_scale,
        train_samples=_dataset_size(loaders[0]),
        val_samples=_dataset_size(loaders[1]) if loaders[1] is not None else 0,
        wall_time_s=seconds,
        evals=loop.evals,
        stop_reason=loop.state.stop_reason,
        checkpoint=loop.last_checkpoint,
        resumed_from=str(resumed) if resumed else None,
        world_size=loop.world.size,
    )


def _loaders(
    train_data: TokenData,
    val_data: TokenData | None,
    cfg: TrainConfig,
    device: torch.device,
    world: World,
) -> tuple[Any, Any]:
    args = {
        "batch_size": cfg.batch_size,
        "device": device,
        "seed": cfg.seed,
        "num_workers": cfg.num_workers,
        "pad_token_id": cfg.pad_token_id,
        "world": world,
    }
    train = make_dataloader(train_data, shuffle=True, **args)
    val = make_dataloader(val_data, shuffle=False, **args) if val_data is not None else None
    return train, val


def _batches_per_epoch(loader: Any, cfg: TrainConfig) -> int:
    """Micro-batches an epoch trains on: the loader's length, capped by max_steps_per_epoch."""
    batches = _length(loader)
    if batches is None:  # an iterable dataset has no length: the epoch needs a stated size
        if not cfg.max_steps_per_epoch:
            raise ValueError(
                "the training DataLoader has no length (an IterableDataset?): "
                "pass max_steps_per_epoch"
            )
        batches = cfg.max_steps_per_epoch * cfg.grad_accum_steps
    if cfg.max_steps_per_epoch:
        batches = min(batches, cfg.max_steps_per_epoch * cfg.grad_accum_steps)
    if batches == 0:
        raise ValueError("the training data gives no batch: is it empty?")
    return batches


def _resume(loop: Loop, cfg: TrainConfig, device: torch.device) -> os.PathLike[str] | None:
    """Load the checkpoint ``resume_from`` names, if any; the path loaded."""
    if cfg.resume_from is None:
        return None
    path = checkpoint.resolve(cfg.resume_from, cfg.checkpoint_dir)
    if path is not None:
        loop.load_state_dict(checkpoint.load(path, device))
    return path


def _dataset_size(loader: Any) -> int:
    try:
        return len(loader.dataset)
    except TypeError:  # an iterable dataset has no length
        return 0
