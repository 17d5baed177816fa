"""fine_tune: the run's parts built once (device, processes, data, step, log) and its result."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from amptrain import adapters, checkpoint, fp8
from amptrain.adapters import LossFn, lm_loss
from amptrain.best import check_metric
from amptrain.callbacks import Callback, TrainState, check_validation, checked
from amptrain.collate import padding_of
from amptrain.config import (
    Layout,
    TrainConfig,
    check_device,
    check_model,
    check_validation_rows,
    layout,
)
from amptrain.data import TokenData, deterministic_kernels, make_dataloader, seed_everything
from amptrain.distributed import World, join_world, mark_failed, wrap_model
from amptrain.engine import TrainStep
from amptrain.fsdp import check_strategy, shard
from amptrain.loop import Loop, SkipGuard, SkippedStepsWarning, TrainingDivergedError
from amptrain.metrics import (
    ConsoleSink,
    CsvSink,
    JsonlSink,
    MetricsTracker,
    ProgressBar,
    RunLog,
    Sink,
    TensorBoardSink,
    WandbSink,
)
from amptrain.model import gradient_checkpointing
from amptrain.optim import OptimizerFactory, SchedulerFactory, build_optimizer, build_schedule
from amptrain.precision import PrecisionPlan, resolve_precision
from amptrain.predictions import ComputeMetrics
from amptrain.results import EpochMetrics, FineTuneResult

__all__ = [  # what this module gave before the settings and the loop's parts had modules
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
    compute_metrics: ComputeMetrics | None = None,
    tokenizer: Any = None,
    **options: Any,
) -> FineTuneResult:
    """Fine-tune ``model`` on token ids with a next-token language-model loss.

    ``train_data`` and ``val_data`` are a ``[N, T]`` tensor of token ids, a list of 1-D
    tensors (padded; padding is ignored), a ready DataLoader, or rows as Hugging Face hands
    them over (a ``BatchEncoding``, a list of mappings, NumPy arrays, a ``datasets``
    ``Dataset`` or ``IterableDataset``: see :mod:`amptrain.collate`). ``options`` are
    :class:`TrainConfig` fields and override ``config``; a ``tokenizer`` gives its
    ``pad_token_id`` and ``padding_side`` unless ``options`` set them. The precision falls
    back (with one warning) where the device cannot run it; the result records the one used.
    ``precision="fp8"`` trains the linear layers of the model's blocks in float8 (torchao:
    :mod:`amptrain.fp8`) and gives them back as the model's own layers at the end.

    ``loss_fn(logits, labels)`` replaces the next-token cross-entropy for training (validation
    keeps it, so perplexity means what it says); ``optimizer_factory(model)`` and
    ``scheduler_factory(optimizer, total_steps)`` replace AdamW and the warm-up/cosine
    schedule. ``compute_metrics(prediction)`` (an :class:`~amptrain.predictions.EvalPrediction`
    of the whole validation set) returns a dict of floats that joins every validation record
    as ``val/<key>``. Under torchrun (``WORLD_SIZE`` > 1) the model trains with DDP on this rank's
    shard of the data, and only rank 0 writes sinks and checkpoints. With ``strategy="fsdp"``
    it is sharded instead (FSDP2: each rank holds 1/N of the weights, gradients and optimizer
    state) and stays sharded after the run: :func:`~amptrain.fsdp.full_state_dict` gathers its
    weights to rank 0; checkpoints are sharded, each rank writing its own shards. ``tracker``
    counts the run's records; its sinks are written by rank 0 only, and are closed at the end.
    """
    cfg = dataclasses.replace(config or TrainConfig(), **{**padding_of(tokenizer), **options})
    parts = _Parts(
        checked(callbacks), loss_fn or lm_loss, optimizer_factory, scheduler_factory,
        compute_metrics,
    )  # fmt: skip
    _check_validation(cfg, parts, val_data is not None)
    dtype = check_model(model)
    with (
        deterministic_kernels(cfg.deterministic),
        gradient_checkpointing(model, cfg.gradient_checkpointing),
    ):
        try:
            return _train(model, (train_data, val_data), cfg, tracker, parts)
        finally:
            fp8.restore(model)  # its own layers back, holding the weights fp8 trained
            model.to(dtype=dtype)  # 16-true and bf16-true cast the caller's model to train


@dataclass(frozen=True)
class _Parts:
    """What fine_tune takes besides the configuration."""

    callbacks: list[Callback]
    loss_fn: LossFn
    optimizer_factory: OptimizerFactory | None
    scheduler_factory: SchedulerFactory | None
    compute_metrics: ComputeMetrics | None


def _check_validation(cfg: TrainConfig, parts: _Parts, has_validation: bool) -> None:
    """What needs validation data has it, and the best metric is one it gives (before the
    first step)."""
    check_validation(parts.callbacks, has_validation)
    asked = {"eval_on_start": cfg.eval_on_start, "compute_metrics": parts.compute_metrics}
    for name, value in asked.items():
        if value and not has_validation:
            raise ValueError(f"{name} needs val_data: pass validation rows, or leave it out")
    check_metric(cfg.best_metric, parts.compute_metrics is not None, has_validation)


def _place(cfg: TrainConfig) -> tuple[torch.device, World, str | None]:
    """The device this process trains on, its place among torchrun's processes, and the
    strategy they train with (None in one process)."""
    device = check_device(cfg)
    world = join_world(device.type, cfg.collective_timeout)
    strategy = check_strategy(cfg.strategy, world)
    if world.distributed and device.type == "cuda":
        device = torch.device("cuda", world.local_rank)  # one GPU per process
    return device, world, strategy


def _train(
    model: nn.Module,
    data: tuple[TokenData, TokenData | None],
    cfg: TrainConfig,
    tracker: MetricsTracker | None,
    parts: _Parts,
) -> FineTuneResult:
    """The run; :func:`fine_tune` gives back the global settings and the model's dtype."""
    device, world, strategy = _place(cfg)
    writes = world.is_main  # the one place a rank is asked: rank 0 writes, shows and saves
    seed_everything(cfg.seed)
    plan = resolve_precision(cfg.precision, device, fp8_emulate=cfg.fp8_emulate)
    # FSDP moves each block's shards to the device as it shards them: never the whole model
    model.to(device=None if strategy == "fsdp" else device, dtype=plan.param_dtype)
    model.train()
    _to_fp8(model, cfg, plan, device)
    loaders = _loaders(*data, cfg, device, world)
    shape = layout(cfg, _length(loaders[0]))
    _check_data(model, *loaders)
    tracker = tracker or MetricsTracker()
    log = RunLog(tracker, [*tracker.sinks, *_sinks(cfg, plan.name)] if writes else [])
    try:
        loop = Loop(
            cfg=cfg,
            step=_build_step(model, cfg, parts, plan, (device, world, strategy), shape),
            layout=shape,
            device=device,
            world=world,
            writes=writes,
            train_loader=loaders[0],
            val_loader=loaders[1],
            log=log,
            progress=ProgressBar(writes and _on_terminal(cfg)),
            callbacks=[*parts.callbacks, *_stop_at(shape)],
            compute_metrics=parts.compute_metrics,
        )
        resumed = _resume(loop, cfg, device)
        start = time.perf_counter()
        loop.run()
    except BaseException:
        if world.distributed:  # even if the caller catches it: no waiting for the others at exit
            mark_failed()
        raise
    finally:
        log.close()
        _end_workers(loaders, data)
    return _result(loop, loaders, time.perf_counter() - start, resumed, strategy)


def _end_workers(loaders: tuple[Any, Any], given: tuple[TokenData, TokenData | None]) -> None:
    """The worker processes of the loaders this run built (persistent: they outlive an epoch)
    end with the run; a caller's own DataLoader is left as it is. Left to the garbage collector
    (the loop and its callbacks hold the loaders in a reference cycle), they were ended in
    whatever code ran next, after their queue's feeder thread had stopped: the stop signal
    never reached them, and each waited out DataLoader's 5 s join timeout and was killed."""
    for loader, data in zip(loaders, given, strict=True):
        iterator = getattr(loader, "_iterator", None)
        if loader is not data and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
            loader._iterator = None


def _to_fp8(model: nn.Module, cfg: TrainConfig, plan: PrecisionPlan, device: torch.device) -> None:
    """With fp8, the model's eligible layers made float8 ones, before any wrapping."""
    if plan.name != "fp8":
        return
    fp8.check_all_gather(cfg.fp8_all_gather, device)
    fp8.advise(plan, cfg.compile)
    options = fp8.Fp8Options(cfg.fp8_recipe, cfg.fp8_filter, cfg.fp8_all_gather)
    fp8.convert(model, plan, options)


class _StopAt(Callback):
    """Ends the run once it has taken ``steps`` optimizer steps (``max_steps``)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_step_end(self, state: TrainState) -> None:
        if state.step >= self.steps:
            state.should_stop = True  # the planned end: no stop reason


def _stop_at(shape: Layout) -> list[Callback]:
    return [] if shape.max_steps is None else [_StopAt(shape.max_steps)]


def _on_terminal(cfg: TrainConfig) -> bool:
    """Whether the progress bar is wanted: as told, else when stderr is a terminal."""
    return sys.stderr.isatty() if cfg.progress is None else cfg.progress


def _sinks(cfg: TrainConfig, plan_name: str) -> list[Sink]:
    sinks: list[Sink] = []
    if cfg.console:
        sinks.append(ConsoleSink())
    if cfg.jsonl_path:
        sinks.append(JsonlSink(cfg.jsonl_path))
    if cfg.csv_path:
        sinks.append(CsvSink(cfg.csv_path))
    if cfg.tensorboard_dir:
        sinks.append(TensorBoardSink(cfg.tensorboard_dir))
    if cfg.wandb:
        wrap = [c if isinstance(c, str) else c.__name__ for c in cfg.auto_wrap or ()]
        keep = getattr(cfg.fp8_filter, "__name__", None) if cfg.fp8_filter else None
        config = {**dataclasses.asdict(cfg), "auto_wrap": wrap, "fp8_filter": keep}
        config["precision_used"] = plan_name
        sinks.append(
            WandbSink(cfg.wandb_project, config=config, mode=cfg.wandb_mode, dir=cfg.wandb_dir)
        )
    return sinks


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
        "padding_side": cfg.padding_side,
        "world": world,
    }
    train = make_dataloader(train_data, shuffle=True, **args)
    val = make_dataloader(val_data, shuffle=False, **args) if val_data is not None else None
    return train, val


def _check_data(model: nn.Module, train_loader: Any, val_loader: Any) -> None:
    """Validation rows, and the ids of token tensors (all of them, before the first step)."""
    # the whole dataset's length, alike on every rank (a rank's own shard of it may be empty)
    if val_loader is not None:
        check_validation_rows(_length(val_loader.dataset))
    for loader in (train_loader, val_loader):
        dataset = getattr(loader, "dataset", None)
        if hasattr(dataset, "id_range_and_length"):  # token ids given as tensors: all checked
            adapters.check_ids(model, *dataset.id_range_and_length())


def _length(sized: Any) -> int | None:
    try:
        return len(sized)
    except TypeError:  # an iterable dataset has no length
        return None


def _build_step(
    model: nn.Module,
    cfg: TrainConfig,
    parts: _Parts,
    plan: PrecisionPlan,
    place: tuple[torch.device, World, str | None],
    shape: Layout,
) -> TrainStep:
    """The training step: the model wrapped (DDP) or sharded (FSDP), its optimizer (over the
    shards) and schedule."""
    device, world, strategy = place
    if strategy == "fsdp":
        train_model = shard(
            model, plan, device, world, auto_wrap=cfg.auto_wrap, cpu_offload=cfg.cpu_offload,
            reshard_after_forward=cfg.reshard_after_forward,
        )  # fmt: skip
    else:
        train_model = wrap_model(model, world, device)
    optimizer = (parts.optimizer_factory or (lambda m: build_optimizer(m, cfg, device)))(model)
    make_schedule = parts.scheduler_factory or (lambda o, n: build_schedule(o, cfg, n))
    return TrainStep(
        train_model,
        optimizer,
        plan,
        scheduler=make_schedule(optimizer, shape.total_steps),
        max_grad_norm=cfg.max_grad_norm,
        loss_fn=parts.loss_fn,
        reduce=world.sum if world.distributed else None,
        ranks=world.size,
        compile=cfg.compile,
    )


def _resume(loop: Loop, cfg: TrainConfig, device: torch.device) -> os.PathLike[str] | None:
    """Load the checkpoint ``resume_from`` names, if any; the path loaded."""
    if cfg.resume_from is None:
        return None
    found = checkpoint.find(cfg.resume_from, cfg.checkpoint_dir, device)
    if found is None:
        return None
    path, state = found
    loop.load_state_dict(state)
    return path


def _result(
    loop: Loop, loaders: tuple[Any, Any], seconds: float, resumed: Any, strategy: str | None
) -> FineTuneResult:
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
        strategy=strategy,
        fp8_layers=fp8.count(step.model),
    )


def _dataset_size(loader: Any) -> int:
    try:
        return len(loader.dataset)
    except TypeError:  # an iterable dataset has no length
        return 0
