"""amptrain: mixed-precision (AMP) fine-tuning for PyTorch."""

from __future__ import annotations

from typing import Any

from amptrain.adapters import extract_logits, lm_loss, token_hits
from amptrain.callbacks import Callback, EarlyStopping, TrainState
from amptrain.config import TrainConfig
from amptrain.data import make_dataloader, seed_everything, synthetic_token_data
from amptrain.engine import TrainStep, evaluate
from amptrain.legacy import detect_vocab_size, test_fine_tuning
from amptrain.loop import SkippedStepsWarning, TrainingDivergedError
from amptrain.metrics import ConsoleSink, JsonlSink, MetricsTracker, RunningStats, WandbSink
from amptrain.model import TinyGPT
from amptrain.precision import (
    PRECISIONS,
    PrecisionFallbackWarning,
    PrecisionPlan,
    canonical_precision,
    compute_effective_precision,
    resolve_precision,
)
from amptrain.results import EpochMetrics, FineTuneResult
from amptrain.trainer import fine_tune

__version__ = "0.1.0"

__all__ = [
    "PRECISIONS",
    "AmpWandbCallback",
    "Callback",
    "ConsoleSink",
    "EarlyStopping",
    "EpochMetrics",
    "FineTuneResult",
    "JsonlSink",
    "MetricsTracker",
    "PrecisionFallbackWarning",
    "PrecisionPlan",
    "RunningStats",
    "SkippedStepsWarning",
    "TinyGPT",
    "TrainConfig",
    "TrainState",
    "TrainStep",
    "TrainingDivergedError",
    "WandbSink",
    "canonical_precision",
    "compute_effective_precision",
    "detect_vocab_size",
    "evaluate",
    "extract_logits",
    "fine_tune",
    "lm_loss",
    "make_dataloader",
    "resolve_precision",
    "seed_everything",
    "synthetic_token_data",
    "test_fine_tuning",
    "token_hits",
]


def __getattr__(name: str) -> Any:
    # Lightning is an optional extra: import it only when the callback is asked for.
    if name == "AmpWandbCallback":
        from amptrain.lightning import AmpWandbCallback

        return AmpWandbCallback
    raise AttributeError(f"module 'amptrain' has no attribute {name!r}")
