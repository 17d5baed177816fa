"""What a run is told, and every check of it: the settings (:class:`TrainConfig`), the device,
the model, the data against the model, how an epoch's batches make optimizer steps
(:class:`Layout`), and a checkpoint's settings against the run's. Each check raises a
``ValueError`` that names what is wrong; nothing else in amptrain decides whether an input is
acceptable."""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from amptrain._stack import outside_stacklevel
from amptrain.precision import canonical_precision

# transformers.get_scheduler's names that amptrain.optim builds
SCHEDULE_NAMES = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
)  # fmt: skip

# The types each annotation of TrainConfig admits (bool is not an int here).
_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
}


def check_types(cfg: Any) -> None:
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

    precision: str | int = "32-true"  # Lightning's names: 32, 16, "16-mixed", "bf16", ...; "fp8"
    # precision="fp8" (torchao): how the float8 casts are scaled ("tensorwise": a scale a
    # tensor; "rowwise": a scale a row), which of the eligible layers train in float8
    # (fp8_filter(module, name) -> bool; None: all of them), the float8 matmuls emulated in
    # fp32 (tests, CPUs: numerically fp8, never chosen for you), and, with FSDP on GPUs, the
    # weights all-gathered in float8
    fp8_recipe: str = "tensorwise"
    fp8_filter: Callable[[nn.Module, str], bool] | None = None
    fp8_emulate: bool = False
    fp8_all_gather: bool = False
    epochs: int = 3
    batch_size: int = 8
    learning_rate: float = 3e-4
    weight_decay: float = 0.01
    # the learning-rate schedule, by transformers' name: linear, cosine, cosine_with_restarts,
    # polynomial, constant, constant_with_warmup (each as transformers.get_scheduler gives it)
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.1  # share of all steps (rounded up) warming the rate up from 0
    min_lr_ratio: float = 0.0  # "cosine" ends at learning_rate * min_lr_ratio
    lr_cycles: int = 1  # "cosine_with_restarts": hard restarts
    lr_power: float = 1.0  # "polynomial": the decay's power (to transformers' lr_end, 1e-7)
    max_grad_norm: float | None = 1.0
    max_steps_per_epoch: int | None = None
    max_steps: int | None = None  # optimizer steps of the whole run: overrides epochs
    max_consecutive_skips: int = 10  # steps skipped in a row (non-finite) before the run stops
    grad_accum_steps: int = 1  # micro-batches per optimizer step
    log_every: int = 10  # optimizer steps between host reads of the loss and gradient norm
    eval_every: int | None = None  # optimizer steps between validations (and each epoch's end)
    eval_on_start: bool = False  # one validation before the first step (a record at step 0)
    # keep the weights that score best on this validation key ("val/loss", or a compute_metrics
    # key as "val/<name>") in checkpoint_dir/best; "min" or "max" is better
    best_metric: str | None = None
    best_mode: str = "min"
    load_best_at_end: bool = False  # the model ends with the best_metric's best weights
    checkpoint_dir: str | None = None  # where checkpoints go (one is written at the end)
    checkpoint_every: int | None = None  # optimizer steps between checkpoints
    keep_checkpoints: int = 3  # the newest K are kept
    resume_from: str | None = None  # a checkpoint, a directory (its newest), or "latest"
    # torch.compile the forward and its loss, as one graph, for training (a str: the backend)
    compile: bool | str = False
    device: str | None = None  # None: CUDA when available, else CPU
    seed: int = 0
    deterministic: bool = False
    num_workers: int | None = None
    collective_timeout: float | None = None  # seconds a rank waits in a collective (None: torch's)
    # under torchrun: "ddp" (every rank holds the whole model; the default) or "fsdp" (FSDP2:
    # each rank holds 1/N of the weights, gradients and optimizer state)
    strategy: str | None = None
    # FSDP: the classes (or class names) of the blocks sharded one by one (None: the model's
    # _no_split_modules, as a transformers model or TinyGPT gives them)
    auto_wrap: Sequence[type | str] | None = None
    cpu_offload: bool = False  # FSDP: the shards and the optimizer's step stay in CPU memory
    reshard_after_forward: bool = True  # FSDP: free a block's gathered weights after its forward
    gradient_checkpointing: bool = False  # recompute activations in backward (less memory)
    pad_token_id: int | None = None  # given: the positions holding it are padding (not scored)
    padding_side: str = "right"  # where ragged rows are padded ("left" for some decoders)
    progress: bool | None = None  # None: a progress bar only when stderr is a terminal
    console: bool = False
    jsonl_path: str | None = None
    csv_path: str | None = None  # every record as rows of step,key,value (long format)
    tensorboard_dir: str | None = None  # every record as TensorBoard scalars (needs tensorboard)
    wandb: bool = False
    wandb_project: str = "amptrain"
    wandb_mode: str = field(default_factory=lambda: os.environ.get("WANDB_MODE", "offline"))
    wandb_dir: str | None = None

    def __post_init__(self) -> None:
        check_types(self)
        canonical_precision(self.precision)
        object.__setattr__(self, "precision", str(self.precision))  # Lightning's 16 is "16"
        if self.wandb_mode == "dryrun":  # W&B's older name for offline (WANDB_MODE=dryrun)
            object.__setattr__(self, "wandb_mode", "offline")
        checks = {
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 1,
            "learning_rate": self.learning_rate > 0 and math.isfinite(self.learning_rate),
            "weight_decay": self.weight_decay >= 0,
            "warmup_ratio": 0 <= self.warmup_ratio < 1,
            "min_lr_ratio": 0 <= self.min_lr_ratio <= 1,
            "lr_scheduler_type": self.lr_scheduler_type in SCHEDULE_NAMES,
            "lr_cycles": self.lr_cycles >= 1,
            "lr_power": self.lr_power > 0 and math.isfinite(self.lr_power),
            "max_grad_norm": self.max_grad_norm is None or self.max_grad_norm > 0,
            "max_steps_per_epoch": self.max_steps_per_epoch is None
            or self.max_steps_per_epoch >= 1,
            "max_steps": self.max_steps is None or self.max_steps >= 1,
            "max_consecutive_skips": self.max_consecutive_skips >= 1,
            "grad_accum_steps": self.grad_accum_steps >= 1,
            "log_every": self.log_every >= 1,
            "eval_every": self.eval_every is None or self.eval_every >= 1,
            "checkpoint_every": self.checkpoint_every is None or self.checkpoint_every >= 1,
            "keep_checkpoints": self.keep_checkpoints >= 1,
            "num_workers": self.num_workers is None or self.num_workers >= 0,
            "collective_timeout": self.collective_timeout is None
            or (self.collective_timeout > 0 and math.isfinite(self.collective_timeout)),
            "pad_token_id": self.pad_token_id is None or self.pad_token_id >= 0,
            "padding_side": self.padding_side in ("right", "left"),
            "best_metric": self.best_metric is None or bool(self.best_metric.strip("/")),
            "best_mode": self.best_mode in ("min", "max"),
            "wandb_mode": self.wandb_mode in ("offline", "online", "disabled"),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(
                    f"TrainConfig.{name} has an invalid value: {getattr(self, name)!r}"
                )
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ValueError("TrainConfig.checkpoint_every needs checkpoint_dir")
        if isinstance(self.compile, str):
            check_backend(self.compile)
        self._check_best()
        self._check_strategy()
        self._check_fp8()

    def _check_fp8(self) -> None:
        """A known recipe and a callable filter; fp8's options only with fp8, the float8
        all-gather only with FSDP and tensorwise scaling (torchao's only one for it)."""
        if self.fp8_recipe not in ("tensorwise", "rowwise"):
            raise ValueError(
                f"TrainConfig.fp8_recipe must be 'tensorwise' or 'rowwise', got {self.fp8_recipe!r}"
            )
        if self.fp8_filter is not None and not callable(self.fp8_filter):
            raise ValueError(
                "TrainConfig.fp8_filter must be a function (module, name) -> bool, got "
                f"{type(self.fp8_filter).__name__}"
            )
        asked = {
            "fp8_recipe": self.fp8_recipe != "tensorwise",
            "fp8_filter": self.fp8_filter is not None,
            "fp8_emulate": self.fp8_emulate,
            "fp8_all_gather": self.fp8_all_gather,
        }
        for name, given in asked.items():
            if given and canonical_precision(self.precision) != "fp8":
                raise ValueError(f"TrainConfig.{name} is an fp8 option: it needs precision='fp8'")
        if self.fp8_all_gather and (self.strategy != "fsdp" or self.fp8_recipe != "tensorwise"):
            raise ValueError(
                "TrainConfig.fp8_all_gather all-gathers FSDP's weights in float8: it needs "
                "strategy='fsdp' and fp8_recipe='tensorwise'"
            )

    def _check_strategy(self) -> None:
        """A known strategy, and FSDP's options only with FSDP."""
        if self.strategy not in (None, "ddp", "fsdp"):
            raise ValueError(
                f"TrainConfig.strategy must be 'ddp' or 'fsdp' (None: DDP under torchrun), got "
                f"{self.strategy!r}"
            )
        if self.auto_wrap is not None:
            wrap = tuple(self.auto_wrap) if not isinstance(self.auto_wrap, str) else ()
            if not wrap or not all(isinstance(c, str | type) for c in wrap):
                raise ValueError(
                    f"TrainConfig.auto_wrap must list module classes or class names, got "
                    f"{self.auto_wrap!r}"
                )
            object.__setattr__(self, "auto_wrap", wrap)
        asked = {
            "auto_wrap": self.auto_wrap is not None,
            "cpu_offload": self.cpu_offload,
            "reshard_after_forward": not self.reshard_after_forward,
        }
        for name, given in asked.items():
            if given and self.strategy != "fsdp":
                raise ValueError(f"TrainConfig.{name} is an FSDP option: it needs strategy='fsdp'")

    def _check_best(self) -> None:
        """``best_metric`` as a validation key (``"loss"`` is ``"val/loss"``), kept where
        checkpoints go; ``load_best_at_end`` only with a metric to choose by."""
        if self.load_best_at_end and self.best_metric is None:
            raise ValueError("TrainConfig.load_best_at_end needs best_metric (e.g. 'val/loss')")
        if self.best_metric is None:
            return
        if not self.best_metric.startswith("val/"):
            object.__setattr__(self, "best_metric", f"val/{self.best_metric}")
        if not self.checkpoint_dir:
            raise ValueError(
                "TrainConfig.best_metric needs checkpoint_dir: the best weights are kept in "
                "checkpoint_dir/best"
            )


def check_backend(name: str) -> None:
    """``name`` is a backend ``torch.compile`` knows, or a ValueError listing them."""
    known = torch.compiler.list_backends(exclude_tags=())
    if name not in known:
        raise ValueError(
            f"TrainConfig.compile={name!r} is not a torch.compile backend: pass True (inductor), "
            f"False, or one of {', '.join(known)}"
        )


@dataclass(frozen=True)
class Layout:
    """How the run's micro-batches make optimizer steps, worked out once: every count of steps
    (the schedule's length, the progress bar's, a resumed epoch's) is read from here."""

    epochs: int
    batches_per_epoch: int  # micro-batches an epoch trains on
    grad_accum_steps: int  # micro-batches per optimizer step (the epoch's last step may have fewer)
    max_steps: int | None = None  # the run ends at this step, inside its last epoch

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps in an epoch: the last one takes what is left."""
        return self.steps_after(self.batches_per_epoch)

    @property
    def total_steps(self) -> int:
        """Optimizer steps in the whole run."""
        steps = self.epochs * self.steps_per_epoch
        return steps if self.max_steps is None else min(steps, self.max_steps)

    def steps_after(self, batches: int) -> int:
        """Optimizer steps taken once ``batches`` micro-batches of an epoch are trained."""
        return -(-batches // self.grad_accum_steps)

    def next_step_size(self, batches: int) -> int:
        """Micro-batches the next step draws, ``batches`` of the epoch already trained."""
        return min(self.grad_accum_steps, self.batches_per_epoch - batches)


def layout(cfg: TrainConfig, batches: int | None) -> Layout:
    """The run's :class:`Layout`, from the training loader's length (``None``: it has none).
    ``max_steps`` sets the epochs (as many as its steps need; a stream's epoch is the run)."""
    accum = cfg.grad_accum_steps
    cap = cfg.max_steps_per_epoch * accum if cfg.max_steps_per_epoch else None
    if batches is None:  # an iterable dataset has no length: the epoch needs a stated size
        if cap is None and cfg.max_steps is None:
            raise ValueError(
                "the training DataLoader has no length (an IterableDataset?): "
                "pass max_steps_per_epoch or max_steps"
            )
        batches = cap if cap is not None else cfg.max_steps * accum  # type: ignore[operator]
    if cap is not None:
        batches = min(batches, cap)
    if batches == 0:
        raise ValueError("the training data gives no batch: is it empty?")
    epochs = cfg.epochs
    if cfg.max_steps is not None:
        epochs = -(-cfg.max_steps // -(-batches // accum))
    return Layout(epochs, batches, accum, cfg.max_steps)


def check_device(cfg: TrainConfig) -> torch.device:
    """The device ``cfg`` asks for (CUDA when available, else CPU), if this machine has it."""
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"TrainConfig.device is {cfg.device!r} but CUDA is not available here: "
            "leave device unset to use the CPU"
        )
    return device


def check_model(model: nn.Module) -> torch.dtype:
    """The dtype of the model's floating-point weights (the first's), which training needs."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if dtype is None:
        raise ValueError("the model has no floating-point parameters: there is nothing to train")
    return dtype


def check_ids(
    max_id: int, min_id: int, length: int, *, vocab: int | None, positions: int | None
) -> None:
    """Token ids inside the vocabulary and sequences inside the positions (``None``: the model
    does not say), or a ValueError that says which (torch's own message is an IndexError deep
    in an embedding)."""
    if vocab is not None and (max_id >= vocab or min_id < 0):
        bad = max_id if max_id >= vocab else min_id
        raise ValueError(
            f"token id {bad} is outside the model's vocabulary of {vocab} (ids 0 to {vocab - 1})"
        )
    if positions is not None and length > positions:
        raise ValueError(
            f"sequences of {length} tokens are longer than the model's {positions} positions: "
            "cut them, or use a model with more positions"
        )


def check_batch_ids(input_ids: torch.Tensor, vocab: int | None, *, batch: int, epoch: int) -> None:
    """A batch's ids inside the vocabulary (``None``: the model does not say), read where they
    are (on the CPU: no device sync), or a ValueError naming the batch, the epoch and the id."""
    if vocab is None or input_ids.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(input_ids))
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise ValueError(
            f"batch {batch} of epoch {epoch} holds token id {bad}, outside the model's "
            f"vocabulary of {vocab} (ids 0 to {vocab - 1}): check the tokenizer and the data "
            "against the model"
        )


def check_logits_width(width: int, vocab: int) -> None:
    """The model's output is logits over its vocabulary, not hidden states."""
    if width != vocab:
        raise ValueError(
            f"the model output's last dimension is {width}, not the vocabulary ({vocab}): "
            "return logits (with the language-model head), not hidden states"
        )


def check_validation_rows(rows: int | None) -> None:
    """Validation data that gives no row is an error (``None``: a stream, of unknown length)."""
    if rows == 0:
        raise ValueError("val_data gives no batch: pass validation rows, or no val_data")


# What must match between a checkpoint and the run resuming it: the data position depends on it.
RESUME_KEYS = ("batch_size", "grad_accum_steps", "max_steps_per_epoch", "seed")
# What the saved optimizer, schedule and scaler were built with: a resumed run takes their saved
# state, so another value here would be ignored; it is refused instead.
TRAINING_KEYS = (
    "learning_rate", "weight_decay", "warmup_ratio", "min_lr_ratio", "precision",
    "lr_scheduler_type", "lr_cycles", "lr_power", "max_steps",
)  # fmt: skip


class ResumeSettingsWarning(UserWarning):
    """A resumed run applies a setting that differs from its checkpoint's (``epochs``)."""


def resume_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The settings a checkpoint keeps, for :func:`check_resume` to compare."""
    keys = (*RESUME_KEYS, *TRAINING_KEYS, "epochs")
    return {key: getattr(cfg, key) for key in keys}


def _differ(cfg: TrainConfig, saved: Mapping[str, Any], key: str) -> bool:
    """Whether ``key`` differs from what the checkpoint recorded (one that does not record it
    cannot differ: :func:`_unrecorded` says so)."""
    if key not in saved:
        return False
    mine, theirs = getattr(cfg, key), saved[key]
    if key == "precision" and theirs is not None:
        return canonical_precision(mine) != canonical_precision(theirs)
    return mine != theirs


def _unrecorded(cfg: TrainConfig, saved: Mapping[str, Any]) -> None:
    """A checkpoint written before amptrain recorded some settings cannot show they are the
    same: say which are taken from this run unchecked (never assume the checkpoint had the
    default: the setting may have existed, set otherwise, and not been recorded)."""
    missing = [k for k in (*RESUME_KEYS, *TRAINING_KEYS) if k not in saved]
    if missing:
        warnings.warn(
            f"the checkpoint does not record {', '.join(missing)} (an older amptrain wrote it): "
            f"this run's {', '.join(f'{k}={getattr(cfg, k)!r}' for k in missing)} are used "
            "unchecked; make sure they are the ones the checkpoint was trained with",
            ResumeSettingsWarning,
            stacklevel=outside_stacklevel(),
        )


class ReshardWarning(UserWarning):
    """A sharded checkpoint is resumed on another number of processes than wrote it."""


def check_resume(
    cfg: TrainConfig,
    saved: Mapping[str, Any],
    saved_world_size: int,
    world_size: int,
    *,
    reshards: bool = False,
) -> None:
    """A checkpoint resumes only under the settings and world size it was written with; a
    different ``epochs`` is applied (the schedule stretched to the new length), with a
    :class:`ResumeSettingsWarning`, as are settings the checkpoint does not record. A sharded
    checkpoint (``reshards``) loads on another world size, with a :class:`ReshardWarning`."""
    _unrecorded(cfg, saved)
    differ = [k for k in RESUME_KEYS if _differ(cfg, saved, k)]
    if saved_world_size != world_size and reshards:
        warnings.warn(
            f"the sharded checkpoint was written by {saved_world_size} processes and this run "
            f"has {world_size}: the weights and optimizer state are resharded, but each rank's "
            "share of the data and its random state differ from the run that wrote it, so the "
            "run goes on in another data order (not bit for bit as it would have gone on)",
            ReshardWarning,
            stacklevel=outside_stacklevel(),
        )
    elif saved_world_size != world_size:
        differ.append(f"world size ({saved_world_size} processes)")
    if differ:
        raise ValueError(
            f"the checkpoint was written with other settings ({', '.join(differ)}): the data "
            "position would not be the same; resume with the settings it was written with"
        )
    changed = [f"{k}={saved[k]!r}" for k in TRAINING_KEYS if _differ(cfg, saved, k)]
    if changed:
        raise ValueError(
            f"the checkpoint was written with {', '.join(changed)}, and its optimizer, schedule "
            "and scaler keep those values: resume with them, or start a new run (without "
            "resume_from) to train with other ones"
        )
    if "epochs" in saved and saved["epochs"] != cfg.epochs:
        warnings.warn(
            f"resuming with epochs={cfg.epochs}, where the checkpoint's run had "
            f"epochs={saved['epochs']}: the learning-rate schedule is stretched to the new "
            "length from this step on",
            ResumeSettingsWarning,
            stacklevel=outside_stacklevel(),
        )
