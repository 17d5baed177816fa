"""The training step (forward under the precision's context, scaled backward, clip, step) and
evaluation.

Kept apart from the epoch loop so the benchmark times exactly the step that ``fine_tune`` runs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from amptrain.adapters import (
    LossFn,
    MicroBatch,
    ModelAdapter,
    batch_inputs,
    lm_loss,
    scored_tokens,
    token_hits,
)
from amptrain.precision import PrecisionPlan


@dataclass
class StepOutput:
    """Device tensors from one step; reading them (``.item()``) is the caller's choice."""

    loss: torch.Tensor
    grad_norm: torch.Tensor


class TrainStep:
    """One optimizer step in the order mixed precision needs.

    scaled backward (per micro-batch) -> unscale_ -> clip -> step (skipped on a non-finite
    gradient norm) -> scaler.update() -> zero_grad(set_to_none=True).
    With ``compile``, the forward and its loss are one ``torch.compile``d graph, so the head's
    logits, their fp32 cast and the softmax fuse (the model alone compiled leaves the loss eager);
    a string names the backend (True: inductor).
    With fp16 the scaler skips the step on inf/NaN gradients. Otherwise a fused optimizer
    is told through ``found_inf`` (the protocol GradScaler uses), so its kernel skips the
    update on the device; any other optimizer costs one host read of the norm per step.
    ``loss_fn(logits, labels)`` returns the mean over the counted tokens (labels not
    ``IGNORE_INDEX``); :func:`~amptrain.adapters.lm_loss` by default. Under DDP or FSDP, ``reduce``
    (a sum over the ``ranks`` processes) makes the step's loss the sum over every rank's
    tokens divided by their global count (transformers' ``average_tokens_across_devices``),
    not the mean of each rank's mean, which unequal padding would bias.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        plan: PrecisionPlan,
        *,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        max_grad_norm: float | None = 1.0,
        loss_fn: LossFn = lm_loss,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        ranks: int = 1,
        compile: bool | str = False,
    ) -> None:
        self.model = model
        self.adapter = ModelAdapter(model)
        self.optimizer = optimizer
        self.plan = plan
        self.scheduler = scheduler
        self.max_grad_norm = math.inf if max_grad_norm is None else max_grad_norm
        self.loss_fn = loss_fn
        self.reduce, self.ranks = reduce, ranks
        self.forward_loss = _compiled(self._loss, compile)
        self.scaler = plan.grad_scaler()
        self.params = [p for p in model.parameters() if p.requires_grad]
        device = self.params[0].device if self.params else torch.device("cpu")
        # steps skipped on a non-finite gradient, counted on the device (read lazily)
        self.overflows = torch.zeros((), dtype=torch.long, device=device)
        self.device_skip = bool(optimizer.defaults.get("fused")) and getattr(
            optimizer, "_step_supports_amp_scaling", False
        )

    def __call__(
        self, input_ids: torch.Tensor, labels: torch.Tensor, **inputs: torch.Tensor
    ) -> StepOutput:
        """One step; ``inputs`` (``attention_mask``) reach the model if its forward takes them."""
        return self.run([(input_ids, labels, inputs)])

    def run(self, micro_batches: Sequence[MicroBatch]) -> StepOutput:
        """One optimizer step over ``(input_ids, labels, inputs)`` micro-batches (gradient
        accumulation): each micro-batch's loss is weighted by its share of the counted tokens,
        so the step equals one over their concatenation; DDP and FSDP sync gradients on the last
        only."""
        loss = self._backward(micro_batches)
        self.scaler.unscale_(self.optimizer)
        grad_norm = global_norm(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm))
        finite = torch.isfinite(grad_norm)
        self.overflows += ~finite  # counted on the device: no host sync here
        if self.scaler.is_enabled():
            self.scaler.step(self.optimizer)  # the scaler skips the step on inf/NaN gradients
        elif self.device_skip:
            self.optimizer.found_inf = (~finite).float()  # type: ignore[attr-defined]
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf  # type: ignore[attr-defined]
        elif finite:  # host read of one bool: a sync, for optimizers without found_inf
            self.optimizer.step()
        self.scaler.update()  # every step (a no-op when the scaler is disabled)
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutput(loss=loss, grad_norm=grad_norm.detach())

    def _backward(self, micro_batches: Sequence[MicroBatch]) -> torch.Tensor:
        """Scaled backward of every micro-batch, each weighted by its share of the step's
        counted tokens (over all ranks: DDP and FSDP then average the gradients); the step's loss
        on this rank, detached (its mean over ranks is the global token mean)."""
        if not micro_batches:
            raise ValueError("a training step needs at least one micro-batch")
        if len(micro_batches) == 1 and self.reduce is None:
            input_ids, labels, inputs = micro_batches[0]
            loss = self.forward_loss(input_ids, labels, inputs)
            self.scaler.scale(loss).backward()
            return loss.detach()
        counts = [scored_tokens(labels) for _, labels, _ in micro_batches]
        total = torch.stack(counts).sum()
        if self.reduce is not None:  # every rank's tokens, per rank (the sync divides by ranks)
            total = self.reduce(total) / self.ranks
        step_loss = torch.zeros((), dtype=torch.float32, device=total.device)
        last = len(micro_batches) - 1
        for i, ((input_ids, labels, inputs), count) in enumerate(
            zip(micro_batches, counts, strict=True)
        ):
            with self.adapter.no_sync() if i < last else contextlib.nullcontext():
                loss = self.forward_loss(input_ids, labels, inputs) * (count / total)
                self.scaler.scale(loss).backward()
            step_loss += loss.detach()
        return step_loss

    def _loss(
        self, input_ids: torch.Tensor, labels: torch.Tensor, inputs: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        with self.plan.autocast():
            return self.loss_fn(self.adapter.logits(input_ids, inputs), labels)

    @property
    def learning_rate(self) -> float:
        """The rate the next step uses (the first parameter group's)."""
        return self.optimizer.param_groups[0]["lr"]  # type: ignore[no-any-return]

    @property
    def overflow_steps(self) -> int:
        """Steps skipped because the gradient norm was not finite."""
        return int(self.overflows)

    @property
    def loss_scale(self) -> float:
        """The scaler's current loss scale (1.0 when the scaler is disabled)."""
        return float(self.scaler.get_scale()) if self.scaler.is_enabled() else 1.0

    def state_dict(self, *, optimizer: bool = True) -> dict[str, Any]:
        """The optimizer's, schedule's and scaler's states and the skip count, for a checkpoint
        (without the ``optimizer``'s: a sharded checkpoint keeps it in its shards)."""
        kept = {"optimizer": self.optimizer.state_dict()} if optimizer else {}
        return {
            **kept,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict(),
            "overflows": self.overflows,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`state_dict` gave; a schedule saved by a run that had one is
        left alone by a step without one, and the optimizer by a state without its own."""
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.overflows.copy_(state["overflows"])


def _compiled(function: Callable[..., torch.Tensor], compile: bool | str) -> Any:
    """``function`` compiled with the backend ``compile`` names (True: torch's default), or
    itself."""
    if compile is False:
        return function
    return torch.compile(function, **({} if compile is True else {"backend": compile}))


def global_norm(norm: torch.Tensor) -> torch.Tensor:
    """The gradient norm as a plain tensor: sharded (FSDP's DTensor) gradients give a DTensor
    that holds the norm over every shard, replicated on each rank."""
    full = getattr(norm, "full_tensor", None)
    return full() if callable(full) else norm


@torch.no_grad()
def evaluate(
    model: nn.Module,
    batches: Any,
    plan: PrecisionPlan,
    device: torch.device,
    *,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    observe: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> dict[str, float]:
    """Validation loss (token-weighted), perplexity and token accuracy, with one host sync.

    ``reduce`` sums the totals over processes (each scored its own shard of ``batches``);
    ``observe(logits, labels)`` sees every batch (``compute_metrics`` collects them). A None
    in ``batches`` is a forward on one token that counts for nothing: a sharded model's rank
    that has run out of batches keeps its share of the others' weight gathers
    (:func:`~amptrain.distributed.in_lockstep`)."""
    adapter = ModelAdapter(model)
    was_training = model.training
    model.eval()
    total_loss = torch.zeros((), device=device, dtype=torch.float64)
    total_correct = torch.zeros((), device=device, dtype=torch.long)
    total_tokens = torch.zeros((), device=device, dtype=torch.long)
    for batch in batches:
        if batch is None:
            with plan.autocast():
                adapter.logits(torch.zeros((1, 1), dtype=torch.long, device=device), {})
            continue
        input_ids, labels, inputs = batch_inputs(batch)
        input_ids, labels = input_ids.to(device), labels.to(device)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        with plan.autocast():
            logits = adapter.logits(input_ids, inputs)
            loss = lm_loss(logits, labels)
            correct, count = token_hits(logits, labels)
        if observe is not None:
            observe(logits, labels)
        total_loss += loss.double() * count
        total_correct += correct
        total_tokens += count
    model.train(was_training)
    totals = torch.stack([total_loss, total_correct.double(), total_tokens.double()])
    loss_sum, correct, tokens = (reduce(totals) if reduce else totals).tolist()
    if tokens == 0:
        return {"loss": math.nan, "perplexity": math.nan, "accuracy": math.nan}
    loss = loss_sum / tokens
    return {
        "loss": loss,
        "perplexity": math.exp(loss) if loss < 700 else math.inf,
        "accuracy": correct / tokens,
    }
