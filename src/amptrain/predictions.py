"""``compute_metrics`` on validation, as the Hugging Face Trainer calls it: once per validation
pass, on the whole validation set's logits and labels (gathered from every rank under
torchrun, in the data's order), returning a dict of floats that joins the validation record."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

import numpy as np
import torch
from torch import nn

from amptrain.collate import IGNORE_INDEX
from amptrain.distributed import World, in_lockstep
from amptrain.engine import evaluate
from amptrain.precision import PrecisionPlan


@dataclass(frozen=True)
class EvalPrediction:
    """What ``compute_metrics`` gets, as ``transformers.EvalPrediction``: ``predictions`` the
    logits ``[N, T, vocab]`` (float32), ``label_ids`` ``[N, T]`` (-100 where not scored);
    rows shorter than the longest are padded with -100 in both. Position t's logits predict
    label t + 1. It unpacks as ``logits, labels = prediction``."""

    predictions: np.ndarray
    label_ids: np.ndarray

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.predictions, self.label_ids))


ComputeMetrics = Callable[[EvalPrediction], Mapping[str, Any]]


class Collected:
    """A validation pass's rows (logits and labels, on the CPU), one batch at a time."""

    def __init__(self) -> None:
        self.rows: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        host_logits = logits.detach().float().cpu().numpy()
        host_labels = labels.detach().cpu().numpy()
        self.rows.extend(zip(host_logits, host_labels, strict=True))

    def prediction(self, gather: Callable[[Any], list[Any]]) -> EvalPrediction:
        """Every rank's rows (``gather``: each rank's object, by rank), interleaved back into
        the data's order (rank r scored rows r, r + ranks, ...), padded to one length."""
        shards = gather(self.rows)
        ordered = [row for group in zip_longest(*shards) for row in group if row is not None]
        if not ordered:
            raise ValueError("compute_metrics: the validation pass gave no row")
        length = max(labels.shape[0] for _, labels in ordered)
        vocab = ordered[0][0].shape[-1]
        logits = np.full((len(ordered), length, vocab), IGNORE_INDEX, dtype=np.float32)
        labels = np.full((len(ordered), length), IGNORE_INDEX, dtype=np.int64)
        for i, (row_logits, row_labels) in enumerate(ordered):
            logits[i, : row_logits.shape[0]] = row_logits
            labels[i, : row_labels.shape[0]] = row_labels
        return EvalPrediction(predictions=logits, label_ids=labels)


def checked_metrics(result: Any, taken: tuple[str, ...]) -> dict[str, float]:
    """``compute_metrics``' result as floats, or a ValueError naming the key that is not a
    real number (or that a built-in validation key already has). NaN and infinities are kept,
    as a NaN validation loss is: a metric can be undefined at one validation (an F1 with no
    positives) without ending a run that has trained for hours; such a value never counts
    as the best."""
    if not isinstance(result, Mapping):
        raise ValueError(
            f"compute_metrics must return a dict of floats, got {type(result).__name__}"
        )
    metrics: dict[str, float] = {}
    for key, value in result.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"compute_metrics returned the key {key!r}: keys must be names")
        if key in taken:
            raise ValueError(
                f"compute_metrics returned {key!r}, which validation already gives: rename it"
            )
        real = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not real:
            raise ValueError(
                f"compute_metrics returned {key}={value!r} ({type(value).__name__}): each value "
                "must be a float"
            )
        metrics[key] = float(value)
    return metrics


def scores(
    model: nn.Module,
    loader: Any,
    plan: PrecisionPlan,
    device: torch.device,
    world: World,
    compute_metrics: ComputeMetrics | None,
    *,
    lockstep: bool = False,
) -> dict[str, float]:
    """A validation pass: loss, perplexity, accuracy (every rank's totals summed), and what
    ``compute_metrics`` makes of every rank's logits and labels (each rank computes it on the
    whole set: the same everywhere). ``lockstep``: the ranks' forwards are taken together (a
    sharded model's, :func:`~amptrain.distributed.in_lockstep`)."""
    collected = Collected() if compute_metrics is not None else None
    batches = in_lockstep(loader, world) if lockstep else loader
    val = evaluate(model, batches, plan, device, reduce=world.sum, observe=collected)
    if compute_metrics is not None and collected is not None:
        result = compute_metrics(collected.prediction(world.gather))
        val.update(checked_metrics(result, taken=tuple(val)))
    return val


def given_keys(
    model: nn.Module,
    loader: Any,
    plan: PrecisionPlan,
    device: torch.device,
    compute_metrics: ComputeMetrics,
    *,
    lockstep: World | None = None,
) -> list[str] | None:
    """The validation keys ``compute_metrics`` gives (``val/<key>``), from this process's first
    validation batch alone: a ``best_metric`` it does not give is found before the first step.
    Its values are not judged (one batch may not define them); ``None`` when this process has
    no validation row. ``lockstep``: the world whose ranks take their forwards together."""
    collected = Collected()
    first: Any = itertools.islice(loader, 1)
    batches = in_lockstep(first, lockstep) if lockstep is not None else first
    evaluate(model, batches, plan, device, observe=collected)
    if not collected.rows:
        return None
    result = compute_metrics(collected.prediction(lambda rows: [rows]))
    if not isinstance(result, Mapping):
        raise ValueError(
            f"compute_metrics must return a dict of floats, got {type(result).__name__}"
        )
    return [f"val/{key}" for key in result]
