"""The training loop of :func:`~amptrain.trainer.fine_tune`, top to bottom.

:meth:`Loop.run` is the whole loop: epoch after epoch, it draws each step's micro-batches (as
many as :class:`~amptrain.config.Layout` says) and :meth:`Loop.train_step` trains on them with
the :class:`~amptrain.engine.TrainStep`, then calls the step hooks. Everything else a run does
hangs on those hooks, in this order: reading the loss back every ``log_every`` steps, the
user's callbacks, validation every ``eval_every`` steps, a checkpoint every
``checkpoint_every`` steps (and one at the end). Which of them a run has is decided once, when
the loop is built; the step itself has no branch for any of them.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from amptrain import checkpoint, sharded
from amptrain._stack import outside_stacklevel
from amptrain.adapters import (
    MicroBatch,
    batch_inputs,
    counted_tokens,
    to_device,
    vocabulary_size,
)
from amptrain.best import BUILT_IN, check_given, keep_best
from amptrain.callbacks import AgreeStop, AtEnd, Callback, Every, Hooks, TrainState
from amptrain.config import (
    Layout,
    TrainConfig,
    check_batch_ids,
    check_resume,
    resume_settings,
)
from amptrain.data import check_restorable, order_state, set_order_state
from amptrain.distributed import World
from amptrain.engine import TrainStep
from amptrain.fsdp import is_sharded
from amptrain.metrics import ProgressBar, RunLog, gpu_utilization, peak_memory_mb, reset_peak_memory
from amptrain.precision import PrecisionPlan
from amptrain.predictions import ComputeMetrics, given_keys, scores
from amptrain.results import EpochMetrics


def real_tokens(labels: torch.Tensor, mask: torch.Tensor | None) -> int:
    """The batch's tokens that are not padding, for throughput: the attention mask's ones (a
    left-padded row's first real token, which no label scores, included), else the labels
    that are not -100 (:func:`~amptrain.adapters.counted_tokens`)."""
    if mask is not None and mask.device.type == "cpu":
        return int(mask.ne(0).sum())
    return counted_tokens(labels)


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
        """The count and flags, for a checkpoint."""
        return {"in_a_row": self.in_a_row, "warned": self.warned, "calibrating": self.calibrating}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back what :meth:`state_dict` gave."""
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


@dataclass(kw_only=True)
class Loop:
    """One run's moving parts, built once by the trainer; :meth:`run` trains.

    ``writes`` says whether this process writes checkpoints (rank 0 under torchrun): the
    trainer decides it once, with the sinks and the progress bar that only that rank has."""

    cfg: TrainConfig
    step: TrainStep
    layout: Layout
    device: torch.device
    world: World
    writes: bool
    train_loader: Any
    val_loader: Any
    log: RunLog
    progress: ProgressBar
    callbacks: Sequence[Callback] = ()
    compute_metrics: ComputeMetrics | None = None
    state: TrainState = field(default_factory=TrainState)
    epochs: list[EpochMetrics] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    last_checkpoint: str | None = None

    def __post_init__(self) -> None:
        self.state.is_main = self.writes
        self.adapter = self.step.adapter
        self.module = self.adapter.module  # the caller's model: evaluated and saved
        self.sharded = is_sharded(self.module)  # FSDP: each rank holds a shard of the weights
        self.vocab = vocabulary_size(self.module)  # every batch's ids are checked against it
        self.guard = SkipGuard(self.cfg.max_consecutive_skips, calibrating=self.plan.scaler_enabled)
        self.counters = EpochCounters()
        self.hooks = Hooks(self._features(self.callbacks))
        self._pending: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        self._resume_rng: dict[str, Any] | None = None
        self._resume_order: dict[str, Any] | None = None
        self.epoch_order: dict[str, Any] = {}  # what decided this epoch's order (checkpointed)
        self._mark = time.perf_counter()

    def _features(self, callbacks: Sequence[Callback]) -> list[Callback]:
        """The run's features as callbacks around the user's, in the order they run."""
        cfg = self.cfg
        features = [Every(cfg.log_every, self.read_back), *callbacks]
        if cfg.eval_every:
            features.append(Every(cfg.eval_every, self._validate_mid_epoch))
        if cfg.checkpoint_every:  # TrainConfig has made sure of a checkpoint_dir
            features.append(Every(cfg.checkpoint_every, lambda: self._paused(self.save_checkpoint)))
        if self.world.distributed:  # once the step's own work is done: one rank's stop, all's
            features.append(AgreeStop(self.world.any, self.world.gather))
        if cfg.checkpoint_dir:
            features.append(AtEnd(self.save_checkpoint))
        # last: the final checkpoint and the callbacks have the last weights, the caller the best
        shards = self.world if self.sharded else None
        features.extend(keep_best(cfg, self.module, self.writes, self.world.barrier, shards))
        return features

    @property
    def plan(self) -> PrecisionPlan:
        """The precision the run trains in."""
        return self.step.plan

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Train from the current position to the last epoch, or until a callback stops it."""
        self.hooks("on_train_start", self.state)
        if self.state.step == 0:
            self._before_first_step()
        while self.state.epoch <= self.layout.epochs and not self.state.should_stop:
            batches = self._start_epoch()
            try:
                while not self.state.should_stop and (micro := self._draw(batches)):
                    self.train_step(micro)
                self.read_back()
            finally:
                self.progress.close()
            self._end_epoch()
            self.state.epoch += 1
            self.counters = EpochCounters(overflows_before=self.step.overflow_steps)
        self.hooks("on_train_end", self.state)

    def train_step(self, micro: list[Any]) -> None:
        """One optimizer step on ``micro`` (the loader's batches), then the step hooks."""
        lr = self.step.learning_rate  # the rate this step uses
        first = self.counters.batches + 1  # the epoch's number of micro's first batch
        out = self.step.run([self._prepare(batch, first + i) for i, batch in enumerate(micro)])
        self._pending.append((out.loss, out.grad_norm, lr))
        self.counters.batches += len(micro)
        self.counters.lr = lr
        self.state.step += 1
        self.progress.advance()
        self.hooks("on_step_end", self.state)

    # --- data --------------------------------------------------------------------------------

    def _start_epoch(self) -> Iterator[Any]:
        """The epoch's batches (from where a resumed run stopped), its bar and its clock."""
        reset_peak_memory(self.device)
        batches = self._batches()
        self.progress.open(
            f"epoch {self.state.epoch}/{self.layout.epochs}",
            total=self.layout.steps_per_epoch,
            done=self.layout.steps_after(self.counters.batches),
        )
        self._mark = time.perf_counter()
        return batches

    def _batches(self) -> Iterator[Any]:
        """This epoch's batches, past those a resumed run already trained on: the generators
        that decide the order are put back as they were when the epoch started, the batches
        trained are drawn again, then every generator is set as at the checkpoint."""
        if self._resume_order is not None:
            set_order_state(self.train_loader, self._resume_order)
            self.epoch_order, self._resume_order = self._resume_order, None
        else:
            self.epoch_order = order_state(self.train_loader)
        sampler = getattr(self.train_loader, "sampler", None)
        dataset = getattr(self.train_loader, "dataset", None)
        for source in (sampler, dataset):  # a stream (datasets' IterableDataset) shuffles too
            if hasattr(source, "set_epoch"):  # the order is a function of (seed, epoch)
                source.set_epoch(self.state.epoch)
        batches = iter(self.train_loader)
        for _ in range(self.counters.batches):
            next(batches)
        if self._resume_rng is not None:  # after the iterator drew its seeds, as the first run
            checkpoint.set_rng_state(self._resume_rng)
            self._resume_rng = None
        return batches

    def _draw(self, batches: Iterator[Any]) -> list[Any]:
        """The next step's batches: none once the epoch has all of its own, or the loader (a
        stream shorter than its stated size) has run dry."""
        want = self.layout.next_step_size(self.counters.batches)
        return [b for _, b in zip(range(want), batches, strict=False)]

    def _prepare(self, batch: Any, number: int) -> MicroBatch:
        """A loader's batch as the step takes it (its ids checked), on the device; counted for
        throughput. ``number`` is its place in the epoch, from 1."""
        micro = batch_inputs(batch)
        input_ids, labels, inputs = micro
        if input_ids.device.type == "cpu":  # on a GPU already: the first batch's check only
            check_batch_ids(input_ids, self.vocab, batch=number, epoch=self.state.epoch)
        self.counters.samples += input_ids.shape[0]
        self.counters.tokens += real_tokens(labels, inputs.get("attention_mask"))
        micro = to_device(micro, self.device)
        self.adapter.check_batch(micro[0], self.plan)
        return micro

    # --- features on the hooks ---------------------------------------------------------------

    def flush(self) -> bool:
        """Read the pending steps' loss and gradient norm in one host transfer (their mean
        over ranks) and hand them to the log and the skip guard; whether there were any."""
        if not self._pending:
            return False
        values = torch.stack(
            [torch.stack([loss.float(), norm.float()]) for loss, norm, _ in self._pending]
        )
        rows = self.world.mean(values).tolist()
        first = self.state.step - len(self._pending) + 1
        for i, ((loss, norm), (_, _, lr)) in enumerate(zip(rows, self._pending, strict=True)):
            self.log.step(loss, norm, **{"train/lr": lr})
            where = f" (epoch {self.state.epoch}, step {first + i})"
            self.guard.update(finite=math.isfinite(norm), where=where)
        self._pending.clear()
        self.state.last_step = {"train/loss": loss, "train/grad_norm": norm, "train/lr": lr}
        return True

    def read_back(self) -> None:
        """:meth:`flush`, and show the latest loss and the token rate on the progress bar."""
        if self.flush():
            seconds = self.counters.elapsed + time.perf_counter() - self._mark
            tokens_per_second = self.counters.tokens / seconds
            self.progress.show(self.state.last_step["train/loss"], tokens_per_second)

    def _validate_mid_epoch(self) -> None:
        if self.counters.batches < self.layout.batches_per_epoch:  # the epoch's end validates
            self._paused(self.validate)

    def validate(self) -> dict[str, float]:
        """One validation pass over every rank's shard; the record goes to sinks and callbacks."""
        self.flush()
        if self.val_loader is None:
            return {}
        val = scores(
            self.module, self.val_loader, self.plan, self.device, self.world, self.compute_metrics,
            lockstep=self.sharded,
        )  # fmt: skip
        record = {f"val/{k}": v for k, v in val.items()}
        self.evals.append({"epoch": self.state.epoch, "step": self.state.step, **record})
        self.log.eval(record)
        self.state.last_eval = record
        self.hooks("on_eval_end", self.state, record)
        return val

    def _before_first_step(self) -> None:
        """``eval_on_start``'s validation (a record at step 0); without it, a ``best_metric``
        that only ``compute_metrics`` can give is looked for in its keys on one batch."""
        if self.cfg.eval_on_start:
            self.validate()  # KeepBest checks the record
            return
        metric = self.cfg.best_metric
        if metric is not None and metric not in BUILT_IN and self.compute_metrics is not None:
            keys = given_keys(
                self.module, self.val_loader, self.plan, self.device, self.compute_metrics,
                lockstep=self.world if self.sharded else None,
            )  # fmt: skip
            if keys is not None:
                check_given(metric, [*BUILT_IN, *keys])

    def _paused(self, action: Callable[[], Any]) -> None:
        """Run ``action`` with the epoch's training clock stopped."""
        self._clock()
        action()
        self._mark = time.perf_counter()

    def _clock(self) -> None:
        now = time.perf_counter()
        self.counters.elapsed += now - self._mark
        self._mark = now

    # --- the epoch's end ---------------------------------------------------------------------

    def _end_epoch(self) -> None:
        self._clock()
        val = self.validate()
        counts = torch.tensor([self.counters.samples, self.counters.tokens], dtype=torch.float64)
        samples, tokens = self.world.sum(counts).tolist()
        metrics = self._epoch_metrics(val, samples, tokens)
        self.epochs.append(metrics)
        self.log.epoch(metrics.log_record(self.plan.name))
        self.hooks("on_epoch_end", self.state, metrics)

    def _epoch_metrics(self, val: dict[str, float], samples: float, tokens: float) -> EpochMetrics:
        tracker = self.log.tracker
        loss, grad = tracker.epoch_loss, tracker.epoch_grad_norm.summary()
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

    # --- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(self) -> None:
        """Every rank's generators gathered; the writing rank writes (sharded: every rank its
        shards, rank 0 the rest); all wait for the checkpoint."""
        self.flush()
        rngs = self.world.gather(checkpoint.rng_state())
        orders = self.world.gather(self.epoch_order)
        folder: str = self.cfg.checkpoint_dir  # type: ignore[assignment]  # a feature only with one
        keep, path = self.cfg.keep_checkpoints, None
        if self.sharded:
            shards = sharded.training_state(self.module, self.step.optimizer)
            state = self.state_dict(rngs, orders, weights=False)
            path = sharded.save(folder, self.state.step, shards, state, keep, self.world)
        elif self.writes:
            path = checkpoint.save(folder, self.state.step, self.state_dict(rngs, orders), keep)
        if self.writes:
            self.last_checkpoint = str(path)
        self.world.barrier()

    def state_dict(
        self, rngs: list[dict[str, Any]], orders: list[dict[str, Any]], *, weights: bool = True
    ) -> dict[str, Any]:
        """What a resumed run needs to go on as if it had never stopped; without ``weights``,
        all but the model's and the optimizer's states (a sharded checkpoint's shards hold
        those)."""
        model = {"model": self.module.state_dict()} if weights else {}
        return {
            **model,
            **self.step.state_dict(optimizer=weights),
            "rng": rngs,
            "data_order": orders,
            "world_size": self.world.size,
            "position": {"epoch": self.state.epoch, "step": self.state.step},
            "counters": dataclasses.asdict(self.counters),
            "tracker": self.log.tracker.state_dict(),
            "guard": self.guard.state_dict(),
            "epochs": [dataclasses.asdict(e) for e in self.epochs],
            "evals": self.evals,
            "callbacks": self.hooks.state_dict(),
            "config": resume_settings(self.cfg),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take a checkpoint's state; the generators are set when the epoch's batches start.
        A sharded checkpoint written by another number of ranks goes on in a new data order
        (:class:`~amptrain.config.ReshardWarning`), from as many rows into the epoch."""
        saved_world = state["world_size"]
        reshards = "shards" in state
        check_resume(self.cfg, state["config"], saved_world, self.world.size, reshards=reshards)
        check_restorable(self.train_loader)
        self._load_weights(state)
        self.step.load_state_dict(state)
        counters = EpochCounters(**state["counters"])
        if saved_world == self.world.size:
            self._resume_rng = state["rng"][self.world.rank]  # one per rank
            self._resume_order = state["data_order"][self.world.rank]
            self.epoch_order = self._resume_order  # saved again if no epoch starts before a save
        else:
            counters = self._resharded(counters, saved_world)
        self.state.epoch = int(state["position"]["epoch"])
        self.state.step = int(state["position"]["step"])
        self.counters = counters
        self.log.tracker.load_state_dict(state["tracker"])
        self.guard.load_state_dict(state["guard"])
        self.epochs = [EpochMetrics(**e) for e in state["epochs"]]
        self.evals = list(state["evals"])
        self.hooks.load_state_dict(state["callbacks"])

    def _load_weights(self, state: dict[str, Any]) -> None:
        """The model's (and a sharded checkpoint's optimizer's) state, from a checkpoint of the
        run's own kind: a file for one process or DDP, shards for FSDP."""
        if self.sharded != ("shards" in state):
            raise ValueError(_KIND_ERRORS[self.sharded])
        if self.sharded:
            sharded.load(Path(state["shards"]), self.module, self.step.optimizer)
            return
        try:
            self.module.load_state_dict(state["model"])
        except RuntimeError as exc:  # torch lists every key and shape that differs
            raise ValueError(
                f"the checkpoint holds another model's weights: {exc}. Resume with the model "
                "(the same class and sizes) the checkpoint was written from"
            ) from exc

    def _resharded(self, counters: EpochCounters, saved_world: int) -> EpochCounters:
        """The epoch's counts as this world's ranks share them: as many of the epoch's rows
        trained (each rank's share of them skipped), the same totals over the ranks."""
        scale = saved_world / self.world.size
        batches = min(int(counters.batches * scale), self.layout.batches_per_epoch)
        samples, tokens = int(counters.samples * scale), int(counters.tokens * scale)
        return dataclasses.replace(counters, batches=batches, samples=samples, tokens=tokens)


_KIND_ERRORS = {
    True: "the checkpoint holds the whole model (written by one process or by DDP), and "
    "strategy='fsdp' resumes from the sharded checkpoints it writes (folders step-N): start "
    "from its weights with model.load_state_dict(torch.load(path)['model']) before fine_tune, "
    "without resume_from",
    False: "the checkpoint is sharded (a folder written with strategy='fsdp'): resume it with "
    "strategy='fsdp' under torchrun, on any number of processes",
}
