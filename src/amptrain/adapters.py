"""What a model and a batch look like to the training loop: a batch's token ids, labels and
other inputs; which of them the model's forward takes; where the logits are in its output; the
next-token loss; and the model inside its DDP and compile wrappers. New model or batch shapes
are taught here, not in the loop."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from amptrain import config
from amptrain.collate import IGNORE_INDEX, field_tensor, is_text
from amptrain.precision import PrecisionPlan

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MicroBatch = tuple[torch.Tensor, torch.Tensor, Mapping[str, torch.Tensor]]
_TARGETS = ("input_ids", "labels")  # read by unpack_batch; every other field is an input


def unpack_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, labels)`` from a tensor, a NumPy array, a tuple/list, or a mapping with
    ``input_ids`` (a ``BatchEncoding`` too); integer ids as int64 (embeddings and the loss
    take no other).

    Without labels, the labels are the input ids (next-token prediction is shifted later).
    """
    labels = None
    if isinstance(batch, torch.Tensor | np.ndarray):
        input_ids = batch
    elif isinstance(batch, Mapping):
        if "input_ids" not in batch:
            raise KeyError(f"batch mapping has no 'input_ids' (keys: {sorted(batch)})")
        input_ids, labels = batch["input_ids"], batch.get("labels")
    elif isinstance(batch, list | tuple) and batch:
        input_ids = batch[0]
        labels = batch[1] if len(batch) > 1 else None
    else:
        raise TypeError(f"cannot read token ids from a batch of type {type(batch).__name__}")
    input_ids = _ids(input_ids, "input_ids")
    return input_ids, input_ids if labels is None else _ids(labels, "labels")


def _ids(value: Any, name: str) -> torch.Tensor:
    tensor = field_tensor(value, name)
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise ValueError(f"batch field {name!r} must hold integer token ids, got {tensor.dtype}")
    return tensor


def batch_inputs(batch: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """``(input_ids, labels, inputs)``: the ids, the labels, and every other field of a
    mapping batch (``attention_mask``, ``position_ids``, ``token_type_ids``, ...) as a tensor,
    for the model to take those its forward accepts. Text fields are left out.

    Without ``labels``, the positions ``attention_mask`` masks (padding, left or right) are
    not scored (:func:`scored_positions`).
    """
    input_ids, labels = unpack_batch(batch)
    inputs: dict[str, torch.Tensor] = {}
    if isinstance(batch, Mapping):
        inputs = {
            name: field_tensor(value, name)
            for name, value in batch.items()
            if name not in _TARGETS and value is not None and not is_text(value)
        }
    mask = inputs.get("attention_mask")
    if mask is not None and batch.get("labels") is None:  # a mask comes only in a mapping
        labels = input_ids.masked_fill(~scored_positions(mask), IGNORE_INDEX)
    return input_ids, labels, inputs


def scored_positions(mask: torch.Tensor) -> torch.Tensor:
    """Where a label is scored: a real token whose predecessor is real too. Position t is
    predicted from t - 1, so after left padding the first real token, which only padding
    precedes, is not scored: left-padded rows score what right-padded ones do."""
    keep = mask != 0
    keep[:, 1:] &= keep[:, :-1].clone()
    return keep


def to_device(micro: MicroBatch, device: torch.device) -> MicroBatch:
    """A micro-batch on ``device``; from pinned memory the copy overlaps the host's work."""
    input_ids, labels, inputs = micro
    move = {"device": device, "non_blocking": True}
    return (
        input_ids.to(**move),
        labels.to(**move),
        {k: v.to(**move) for k, v in inputs.items()},
    )


def counted_tokens(labels: torch.Tensor) -> int:
    """Tokens a batch trains on (padding left out), for throughput: counted exactly on the CPU,
    where it costs no device sync; labels already on a GPU count every position."""
    return int(labels.ne(IGNORE_INDEX).sum()) if labels.device.type == "cpu" else labels.numel()


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
    The labels shift, not the logits (the last position gets ``IGNORE_INDEX``): a slice of the
    logits would be copied forward and backward, a cost that grows with the vocabulary.
    """
    targets = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
    # fp32 softmax: fp16 logits lose the small probabilities
    return F.cross_entropy(
        logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX
    )


def token_hits(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Correctly predicted next tokens and counted tokens (padding skipped), as device tensors."""
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    correct = (logits[:, :-1].argmax(dim=-1) == targets) & mask
    return correct.sum(), mask.sum()


def scored_tokens(labels: torch.Tensor) -> torch.Tensor:
    """The next-token targets :func:`lm_loss` scores in ``labels``, as a device tensor."""
    return labels[:, 1:].ne(IGNORE_INDEX).sum()


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside ``DistributedDataParallel`` and ``torch.compile`` wrappers."""
    while True:
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def no_sync_of(model: nn.Module) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """DDP's ``no_sync`` (found through a compile wrapper), FSDP's gradient sync switched off
    for the block, or a context that does nothing."""
    while isinstance(model, nn.Module):
        if callable(getattr(type(model), "no_sync", None)):
            return model.no_sync  # type: ignore[no-any-return]
        if callable(getattr(type(model), "set_requires_gradient_sync", None)):
            return functools.partial(_without_gradient_sync, model)
        model = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
    return contextlib.nullcontext


@contextlib.contextmanager
def _without_gradient_sync(model: Any) -> Iterator[None]:
    """An FSDP model's backward keeps its gradients unreduced (accumulated on each rank) in
    the block; the sync is back on after it."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


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


def check_ids(model: nn.Module, max_id: int, min_id: int, length: int) -> None:
    """Token ids and a sequence length that ``model`` can take (:func:`config.check_ids`)."""
    config.check_ids(
        max_id, min_id, length, vocab=vocabulary_size(model), positions=position_count(model)
    )


class ModelAdapter:
    """A model as the loop uses it: ``model`` is what trains (perhaps DDP- or compile-wrapped),
    ``module`` the user's own inside it (checked, evaluated, saved)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.module = unwrap(model)
        self.accepts = forward_inputs(model)
        self.no_sync = no_sync_of(model)
        self.checked = False  # whether a batch has been checked against the model

    def logits(self, input_ids: torch.Tensor, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The model's logits for a batch: it gets the inputs its forward takes."""
        return extract_logits(self.model(input_ids, **self.accepts(inputs)))

    @torch.no_grad()
    def check_batch(self, input_ids: torch.Tensor, plan: PrecisionPlan) -> None:
        """The run's first batch: its ids fit the model, and the model returns logits over its
        vocabulary (one row's forward, without dropout: the check draws nothing from the random
        stream). Later batches pass unchecked: each check costs a host read and a forward."""
        if self.checked:
            return
        self.checked = True
        check_ids(self.module, int(input_ids.max()), int(input_ids.min()), input_ids.shape[1])
        vocab = vocabulary_size(self.module)
        if vocab is None:
            return
        was_training = self.module.training
        self.module.eval()
        try:
            with plan.autocast():
                width = extract_logits(self.module(input_ids[:1])).shape[-1]
        finally:
            self.module.train(was_training)
        config.check_logits_width(width, vocab)
