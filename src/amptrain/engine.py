"""The training step: forward under the precision's context, scaled backward, clip, step.

Kept apart from the epoch loop so the benchmark times exactly the step that ``fine_tune`` runs.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amptrain.data import IGNORE_INDEX, batch_inputs
from amptrain.precision import PrecisionPlan


def extract_logits(output: Any) -> torch.Tensor:
    """Logits from a model output: a tensor, the first item of a tuple, or ``logits``."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        if "logits" not in output:
            raise KeyError(f"model returned a mapping without 'logits' (keys: {sorted(output)})")
        return output["logits"]
    if isinstance(output, tuple | list) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise TypeError(
        f"cannot find logits in a model output of type {type(output).__name__}; return a tensor, "
        "a tuple whose first item is the logits, or an object with a 'logits' field"
    )


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, averaged over counted tokens.

    Position t predicts label t+1; labels equal to ``IGNORE_INDEX`` (padding) are skipped.
    """
    logits = logits[:, :-1].float()  # fp32 softmax: fp16 logits lose the small probabilities
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
    )


def token_hits(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Correctly predicted next tokens and counted tokens (padding skipped), as device tensors."""
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    correct = (logits[:, :-1].argmax(dim=-1) == targets) & mask
    return correct.sum(), mask.sum()


LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MicroBatch = tuple[torch.Tensor, torch.Tensor, Mapping[str, torch.Tensor]]


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside ``DistributedDataParallel`` and ``torch.compile`` wrappers."""
    while True:
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def _no_sync(model: nn.Module) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """DDP's ``no_sync`` (found through a compile wrapper), or a context that does nothing."""
    while isinstance(model, nn.Module):
        if callable(getattr(type(model), "no_sync", None)):
            return model.no_sync  # type: ignore[no-any-return]
        model = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
    return contextlib.nullcontext


def forward_inputs(model: nn.Module) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A filter keeping the inputs (``attention_mask``, ...) the model's forward accepts."""
    try:
        params = inspect.signature(unwrap(model).forward).parameters
    except (TypeError, ValueError):
        return lambda inputs: {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict
    return lambda inputs: {k: v for k, v in inputs.items() if k in params}


def vocabulary_size(model: nn.Module) -> int | None:
    """Rows of the model's input embedding, if it has one."""
    get_embeddings = getattr(model, "get_input_embeddings", None)
    embedding = get_embeddings() if callable(get_embeddings) else None
    if not isinstance(embedding, nn.Embedding):
        embedding = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    return embedding.num_embeddings if embedding is not None else None


def position_count(model: nn.Module) -> int | None:
    """How many positions the model has (``max_seq_len``, or a Hugging Face config's)."""
    for owner in (model, getattr(model, "config", None)):
        for name in ("max_seq_len", "max_position_embeddings", "n_positions"):
            value = getattr(owner, name, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def check_data_fits(model: nn.Module, max_id: int, min_id: int, length: int) -> None:
    """Token ids inside the vocabulary and sequences inside the positions, or a ValueError
    that says which (torch's own message is an IndexError deep in an embedding)."""
    vocab = vocabulary_size(model)
    if vocab is not None and (max_id >= vocab or min_id < 0):
        bad = max_id if max_id >= vocab else min_id
        raise ValueError(
            f"token id {bad} is outside the model's vocabulary of {vocab} (ids 0 to {vocab - 1})"
        )
    positions = position_count(model)
    if positions is not None and length > positions:
        raise ValueError(
            f"sequences of {length} tokens are longer than the model's {positions} positions: "
            "cut them, or use a model with more positions"
        )


@torch.no_grad()
def check_outputs_logits(model: nn.Module, input_ids: torch.Tensor, plan: PrecisionPlan) -> None:
    """The model returns logits over its vocabulary, not hidden states (checked on one row)."""
    vocab = vocabulary_size(model)
    if vocab is None:
        return
    was_training = model.training
    model.eval()  # no dropout: the check draws nothing from the random stream
    try:
        with plan.autocast():
            width = extract_logits(model(input_ids[:1])).shape[-1]
    finally:
        model.train(was_training)
    if width != vocab:
        raise ValueError(
            f"the model output's last dimension is {width}, not the vocabulary ({vocab}): "
            "return logits (with the language-model head), not hidden states"
        )


@dataclass
class StepOutput:
    """Device tensors from one step; reading them (``.item()``) is the caller's choice."""

    loss: torch.Tensor
    grad_norm: torch.Tensor


class TrainStep:
    """One optimizer step in the order mixed precision needs.

    scaled backward (per micro-batch) -> unscale_ -> clip -> step (skipped on a non-finite
    gradient norm) -> scaler.update() -> zero_grad(set_to_none=True).
    With fp16 the scaler skips the step on inf/NaN gradients. Otherwise a fused optimizer
    is told through ``found_inf`` (the protocol GradScaler uses), so its kernel skips the
    update on the device; any other optimizer costs one host read of the norm per step.
    ``loss_fn(logits, labels)`` returns the mean over the counted tokens (labels not
    ``IGNORE_INDEX``); :func:`lm_loss` by default.
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
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.plan = plan
        self.scheduler = scheduler
        self.max_grad_norm = math.inf if max_grad_norm is None else max_grad_norm
        self.loss_fn = loss_fn
        self.scaler = plan.grad_scaler()
        self.params = [p for p in model.parameters() if p.requires_grad]
        device = self.params[0].device if self.params else torch.device("cpu")
        self._overflows = torch.zeros((), dtype=torch.long, device=device)  # read lazily
        self._inputs = forward_inputs(model)
        self._no_sync = _no_sync(model)
        self._device_skip = bool(optimizer.defaults.get("fused")) and getattr(
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
        so the step equals one over their concatenation; DDP syncs gradients on the last only."""
        loss = self._backward(micro_batches)
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        finite = torch.isfinite(grad_norm)
        self._overflows += ~finite  # counted on the device: no host sync here
        if self.scaler.is_enabled():
            self.scaler.step(self.optimizer)  # the scaler skips the step on inf/NaN gradients
        elif self._device_skip:
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
        """Scaled backward of every micro-batch; the step's loss, detached."""
        if not micro_batches:
            raise ValueError("a training step needs at least one micro-batch")
        if len(micro_batches) == 1:
            input_ids, labels, inputs = micro_batches[0]
            loss = self._loss(input_ids, labels, inputs)
            self.scaler.scale(loss).backward()
            return loss.detach()
        counts = [labels[:, 1:].ne(IGNORE_INDEX).sum() for _, labels, _ in micro_batches]
        total = torch.stack(counts).sum()
        step_loss = torch.zeros((), dtype=torch.float32, device=total.device)
        last = len(micro_batches) - 1
        for i, ((input_ids, labels, inputs), count) in enumerate(
            zip(micro_batches, counts, strict=True)
        ):
            with self._no_sync() if i < last else contextlib.nullcontext():
                loss = self._loss(input_ids, labels, inputs) * (count / total)
                self.scaler.scale(loss).backward()
            step_loss += loss.detach()
        return step_loss

    def _loss(
        self, input_ids: torch.Tensor, labels: torch.Tensor, inputs: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        with self.plan.autocast():
            logits = extract_logits(self.model(input_ids, **self._inputs(inputs)))
            return self.loss_fn(logits, labels)

    @property
    def overflow_steps(self) -> int:
        """Steps skipped because the gradient norm was not finite."""
        return int(self._overflows)

    @property
    def loss_scale(self) -> float:
        """The scaler's current loss scale (1.0 when the scaler is disabled)."""
        return float(self.scaler.get_scale()) if self.scaler.is_enabled() else 1.0


@torch.no_grad()
def evaluate(
    model: nn.Module,
    batches: Any,
    plan: PrecisionPlan,
    device: torch.device,
    *,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Validation loss (token-weighted), perplexity and token accuracy, with one host sync.

    ``reduce`` sums the totals over processes (each scored its own shard of ``batches``)."""
    was_training = model.training
    model.eval()
    total_loss = torch.zeros((), device=device, dtype=torch.float64)
    total_correct = torch.zeros((), device=device, dtype=torch.long)
    total_tokens = torch.zeros((), device=device, dtype=torch.long)
    accepted = forward_inputs(model)
    for batch in batches:
        input_ids, labels, inputs = batch_inputs(batch)
        input_ids, labels = input_ids.to(device), labels.to(device)
        inputs = {k: v.to(device) for k, v in accepted(inputs).items()}
        with plan.autocast():
            logits = extract_logits(model(input_ids, **inputs))
            loss = lm_loss(logits, labels)
            correct, count = token_hits(logits, labels)
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
