"""The epoch loop of :func:`~amptrain.trainer.fine_tune`: micro-batches into optimizer steps,
host reads every ``log_every`` steps, evaluation, callbacks and checkpoints."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from amptrain import checkpoint
from amptrain._stack import outside_stacklevel
from amptrain.callbacks import Hooks, TrainState
from amptrain.data import IGNORE_INDEX, batch_inputs
from amptrain.distributed import World
from amptrain.engine import MicroBatch, TrainStep, check_data_fits, check_outputs_logits, evaluate
from amptrain.metrics import MetricsTracker, gpu_utilization, peak_memory_mb, reset_peak_memory
from amptrain.results import EpochMetrics


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
                stacklevel=outside_stacklevel(),
            )
        if self.in_a_row >= self.limit:
            raise TrainingDivergedError(
                f"{self.in_a_row} optimizer steps in a row were skipped{where}: the loss or "
                "gradient is NaN or infinite. Lower the learning rate, check the data, or raise "
                "max_consecutive_skips if this is expected"
            )

    def state_dict(self) -> dict[str, Any]:
        return {"in_a_row": self.in_a_row, "warned": self.warned, "calibrating": self.calibrating}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.in_a_row, self.warned = int(state["in_a_row"]), bool(state["warned"])
        self.calibrating = bool(state["calibrating"])


@dataclass
class EpochCounters:
    """The epoch in progress (kept in a checkpoint, so a resumed epoch adds up)."""

    batches: int = 0  # micro-batches consumed
    samples: int = 0
    tokens: int = 0
    elapsed: float = 0.0  # training time, validation and checkpoints left out
    overflows_before: int = 0
    lr: float = math.nan  # the rate of the latest step


# What must match between a checkpoint and the run resuming it: the data position depends on it.
RESUME_KEYS = ("batch_size", "grad_accum_steps", "max_steps_per_epoch", "seed")


@dataclass
class Loop:
    """One run's moving parts; :meth:`run` trains and returns what the result needs."""

    cfg: Any  # TrainConfig
    module: nn.Module  # the caller's model (no DDP or compile wrapper): checks, eval, state
    step: TrainStep
    device: torch.device
    world: World
    train_loader: Any
    val_loader: Any
    batches_per_epoch: int
    tracker: MetricsTracker
    hooks: Hooks
    show_progress: bool
    state: TrainState = field(default_factory=TrainState)
    epochs: list[EpochMetrics] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    last_checkpoint: str | None = None

    def __post_init__(self) -> None:
        self.state.is_main = self.world.is_main
        self.guard = SkipGuard(self.cfg.max_consecutive_skips, calibrating=self.plan.scaler_enabled)
        self.counters = EpochCounters()
        self._pending: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        self._resume_rng: dict[str, Any] | None = None
        self._checked = False
        self._mark = time.perf_counter()

    @property
    def plan(self) -> Any:
        return self.step.plan

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.batches_per_epoch // self.cfg.grad_accum_steps)

    def run(self) -> None:
        """Train from the current position to the last epoch, or until a callback stops it."""
        while self.state.epoch <= self.cfg.epochs and not self.state.should_stop:
            self._run_epoch()
            self.state.epoch += 1
            self.counters = EpochCounters(overflows_before=self.step.overflow_steps)
        if self.cfg.checkpoint_dir:
            self.save_checkpoint()

    def _run_epoch(self) -> None:
        reset_peak_memory(self.device)
        sampler = getattr(self.train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):  # the order is a function of (seed, epoch)
            sampler.set_epoch(self.state.epoch)
        batches = self._batches()
        bar = tqdm(
            total=self.steps_per_epoch,
            initial=-(-self.counters.batches // self.cfg.grad_accum_steps),
            desc=f"epoch {self.state.epoch}/{self.cfg.epochs}",
            leave=False,
            disable=not self.show_progress,
            unit="step",
        )
        self._mark = time.perf_counter()
        try:
            while self.counters.batches < self.batches_per_epoch and not self.state.should_stop:
                want = min(
                    self.cfg.grad_accum_steps, self.batches_per_epoch - self.counters.batches
                )
                micro = [b for _, b in zip(range(want), batches, strict=False)]
                if not micro:  # a loader shorter than its stated size: the epoch ends here
                    break
                self._train_step(micro, bar)
            self.flush(bar)
        finally:
            bar.close()
        self._end_epoch()

    def _batches(self) -> Iterator[Any]:
        """This epoch's batches, past those a resumed run already trained on."""
        batches = iter(self.train_loader)
        for _ in range(self.counters.batches):
            next(batches)
        if self._resume_rng is not None:  # after the iterator drew its seeds, as the first run
            checkpoint.set_rng_state(self._resume_rng)
            self._resume_rng = None
        return batches

    def _to_device(self, batch: Any) -> MicroBatch:
        input_ids, labels, inputs = batch_inputs(batch)
        if not self._checked:  # once: ids inside the model, the output logits over its vocabulary
            ids = input_ids.to(self.device)
            check_data_fits(self.module, int(ids.max()), int(ids.min()), ids.shape[1])
            check_outputs_logits(self.module, ids, self.plan)
            self._checked = True
        self.counters.samples += input_ids.shape[0]
        self.counters.tokens += (
            int(labels.ne(IGNORE_INDEX).sum()) if labels.device.type == "cpu" else labels.numel()
        )
        move = {"device": self.device, "non_blocking": True}
        return (
            input_ids.to(**move),
            labels.to(**move),
            {k: v.to(**move) for k, v in inputs.items()},
        )

    def _train_step(self, micro: list[Any], bar: Any) -> None:
        lr = self.step.optimizer.param_groups[0]["lr"]  # the rate this step uses
        out = self.step.run([self._to_device(b) for b in micro])
        self._pending.append((out.loss, out.grad_norm, lr))
        self.counters.batches += len(micro)
        self.counters.lr = lr
        self.state.step += 1
        bar.update()
        cfg, step = self.cfg, self.state.step
        if step % cfg.log_every == 0:
            self.flush(bar)
        self.hooks("on_step_end", self.state)
        epoch_goes_on = self.counters.batches < self.batches_per_epoch
        if cfg.eval_every and step % cfg.eval_every == 0 and epoch_goes_on:
            self._paused(self.validate)
        if cfg.checkpoint_dir and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            self._paused(self.save_checkpoint)

    def _paused(self, action: Callable[[], Any]) -> None:
        """Run ``action`` with the epoch's training clock stopped."""
        self._clock()
        action()
        self._mark = time.perf_counter()

    def _clock(self) -> None:
        now = time.perf_counter()
        self.counters.elapsed += now - self._mark
        self._mark = now

    def flush(self, bar: Any = None) -> None:
        """Read the pending steps' loss and gradient norm in one host transfer (their mean
        over ranks) and hand them to the tracker and the skip guard."""
        if not self._pending:
            return
        values = torch.stack(
            [torch.stack([loss.float(), norm.float()]) for loss, norm, _ in self._pending]
        )
        rows = self.world.mean(values).tolist()
        first = self.state.step - len(self._pending) + 1
        for i, ((loss, norm), (_, _, lr)) in enumerate(zip(rows, self._pending, strict=True)):
            self.tracker.log_step(loss, norm, **{"train/lr": lr})
            where = f" (epoch {self.state.epoch}, step {first + i})"
            self.guard.update(finite=math.isfinite(norm), where=where)
        self._pending.clear()
        self.state.last_step = {"train/loss": loss, "train/grad_norm": norm, "train/lr": lr}
        if bar is not None and self.show_progress:
            seconds = self.counters.elapsed + time.perf_counter() - self._mark
            bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{self.counters.tokens / seconds:.0f}")

    def validate(self) -> dict[str, float]:
        """One validation pass over every rank's shard; the record goes to sinks and callbacks."""
        self.flush()
        if self.val_loader is None:
            return {}
        val = evaluate(self.module, self.val_loader, self.plan, self.device, reduce=self.world.sum)
        record = {f"val/{k}": v for k, v in val.items()}
        self.evals.append({"epoch": self.state.epoch, "step": self.state.step, **record})
        self.tracker.log(record)
        self.state.last_eval = record
        self.hooks("on_eval_end", self.state, record)
        return val

    def _end_epoch(self) -> None:
        self._clock()
        val = self.validate()
        counts = torch.tensor([self.counters.samples, self.counters.tokens], dtype=torch.float64)
        samples, tokens = self.world.sum(counts).tolist()
        metrics = self._epoch_metrics(val, samples, tokens)
        self.epochs.append(metrics)
        self.tracker.end_epoch(metrics.log_record(self.plan.name))
        self.hooks("on_epoch_end", self.state, metrics)

    def _epoch_metrics(self, val: dict[str, float], samples: float, tokens: float) -> EpochMetrics:
        loss, grad = self.tracker.epoch_loss, self.tracker.epoch_grad_norm.summary()
        elapsed = self.counters.elapsed or math.nan
        return EpochMetrics(
            epoch=self.state.epoch,
            # A non-finite step makes the epoch's loss NaN, not the mean of the others.
            train_loss=loss.mean if loss.count and not loss.nonfinite else math.nan,
            val_loss=val.get("loss"),
            val_perplexity=val.get("perplexity"),
            val_accuracy=val.get("accuracy"),
            grad_norm_mean=grad["mean"],
            grad_norm_std=grad["std"],
            grad_norm_min=grad["min"],
            grad_norm_max=grad["max"],
            learning_rate=self.counters.lr,  # the rate of the epoch's last step
            overflow_steps=self.step.overflow_steps - self.counters.overflows_before,
            loss_scale=self.step.loss_scale,
            samples_per_second=samples / elapsed,
            tokens_per_second=tokens / elapsed,
            peak_memory_mb=peak_memory_mb(self.device),
            gpu_utilization=gpu_utilization(self.device),
            wall_time_s=self.counters.elapsed,
        )

    def save_checkpoint(self) -> None:
        """Every rank's generators gathered; rank 0 writes; all wait for the file."""
        self.flush()
        rngs = self.world.gather(checkpoint.rng_state())
        if self.world.is_main:
            path = checkpoint.save(
                self.cfg.checkpoint_dir,
                self.state.step,
                self.state_dict(rngs),
                self.cfg.keep_checkpoints,
            )
            self.last_checkpoint = str(path)
        self.world.barrier()

    def state_dict(self, rngs: list[dict[str, Any]]) -> dict[str, Any]:
        """What a resumed run needs to go on as if it had never stopped."""
        step = self.step
        return {
            "model": self.module.state_dict(),
            "optimizer": step.optimizer.state_dict(),
            "scheduler": step.scheduler.state_dict() if step.scheduler is not None else None,
            "scaler": step.scaler.state_dict(),
            "overflows": step._overflows,
            "rng": rngs,
            "world_size": self.world.size,
            "position": {"epoch": self.state.epoch, "step": self.state.step},
            "counters": dataclasses.asdict(self.counters),
            "tracker": self.tracker.state_dict(),
            "guard": self.guard.state_dict(),
            "epochs": [dataclasses.asdict(e) for e in self.epochs],
            "evals": self.evals,
            "callbacks": self.hooks.state_dict(),
            "config": {key: getattr(self.cfg, key) for key in RESUME_KEYS},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take a checkpoint's state; the generators are set when the epoch's batches start."""
        self._check_compatible(state)
        step = self.step
        self.module.load_state_dict(state["model"])
        step.optimizer.load_state_dict(state["optimizer"])
        if step.scheduler is not None and state["scheduler"] is not None:
            step.scheduler.load_state_dict(state["scheduler"])
        step.scaler.load_state_dict(state["scaler"])
        step._overflows.copy_(state["overflows"])
        self._resume_rng = state["rng"][self.world.rank]  # one per rank: the same world size
        self.state.epoch = int(state["position"]["epoch"])
        self.state.step = int(state["position"]["step"])
        self.counters = EpochCounters(**state["counters"])
        self.tracker.load_state_dict(state["tracker"])
        self.guard.load_state_dict(state["guard"])
        self.epochs = [EpochMetrics(**e) for e in state["epochs"]]
        self.evals = list(state["evals"])
        self.hooks.load_state_dict(state["callbacks"])

    def _check_compatible(self, state: dict[str, Any]) -> None:
        saved = state["config"]
        differ = [k for k in RESUME_KEYS if saved.get(k) != getattr(self.cfg, k)]
        if state["world_size"] != self.world.size:
            differ.append(f"world size ({state['world_size']} processes)")
        if differ:
            raise ValueError(
                f"the checkpoint was written with other settings ({', '.join(differ)}): the data "
                "position would not be the same; resume with the settings it was written with"
            )
