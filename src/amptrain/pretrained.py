"""A Hugging Face model saved in its own format during a run: :class:`SavePretrained` writes
``save_pretrained`` folders (safetensors) at the end of the run and for the best validation
so far, which ``from_pretrained`` loads back."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from amptrain.adapters import unwrap
from amptrain.callbacks import Callback, TrainState
from amptrain.checkpoint import sync_folder
from amptrain.fsdp import full_state_dict, is_sharded


class SavePretrained(Callback):
    """Saves ``model`` with ``save_pretrained`` into ``path`` when the run ends and, given
    ``monitor`` (a validation key such as ``val/loss``), into ``path/best`` whenever that
    metric improves (``mode`` "min" or "max"; NaN never does). Only the writing rank (rank 0
    under torchrun) writes; a sharded (FSDP) model's weights are gathered to it whole first."""

    def __init__(
        self, model: nn.Module, path: str | Path, *, monitor: str | None = None, mode: str = "min"
    ) -> None:
        self.model = unwrap(model)
        if not callable(getattr(self.model, "save_pretrained", None)):
            raise TypeError(
                f"SavePretrained needs a model with save_pretrained (a transformers "
                f"PreTrainedModel); {type(self.model).__name__} has none: use checkpoint_dir"
            )
        if mode not in ("min", "max"):
            raise ValueError(f"SavePretrained mode must be 'min' or 'max', got {mode!r}")
        self.path, self.monitor, self.mode = Path(path), monitor, mode
        self.best = math.inf if mode == "min" else -math.inf
        self.best_step: int | None = None

    def on_eval_end(self, state: TrainState, metrics: Mapping[str, float]) -> None:
        if self.monitor is None:
            return
        if self.monitor not in metrics:
            raise KeyError(
                f"SavePretrained monitors {self.monitor!r}, which the evaluation does not give "
                f"(it gives {sorted(metrics)})"
            )
        value = float(metrics[self.monitor])
        better = value < self.best if self.mode == "min" else value > self.best
        if math.isfinite(value) and better:
            self.best, self.best_step = value, state.step
            self._save(state, self.path / "best")

    def on_train_end(self, state: TrainState) -> None:
        self._save(state, self.path)

    def _save(self, state: TrainState, folder: Path) -> None:
        if not is_sharded(self.model):
            if state.is_main:
                self.model.save_pretrained(folder, safe_serialization=True)
            return
        weights = full_state_dict(self.model)  # every rank takes part; rank 0 gets them
        if state.is_main:
            write_pretrained(self.model, folder, weights)

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.best_step = float(state["best"]), state["best_step"]


def write_pretrained(model: nn.Module, folder: Path, weights: dict[str, torch.Tensor]) -> None:
    """``model.save_pretrained`` of ``weights`` (a sharded model's, whole) into ``folder``: the
    files are written aside, then moved in with the weights last, so a kill never leaves a torn
    weights file under its name there (at worst the configuration without the weights)."""
    staging = folder / ".export.partial"
    shutil.rmtree(staging, ignore_errors=True)  # left by a run killed while it wrote
    model.save_pretrained(staging, state_dict=weights, safe_serialization=True)
    for file in sorted(staging.iterdir(), key=_weights_last):
        os.replace(file, folder / file.name)
    staging.rmdir()
    sync_folder(folder)


def _weights_last(file: Path) -> tuple[bool, bool, str]:
    """Files in the order they are moved in: the configuration, the weights, their index."""
    return (file.suffix == ".safetensors", file.name.endswith(".index.json"), file.name)
