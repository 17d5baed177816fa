"""A Hugging Face model saved in its own format during a run: :class:`SavePretrained` writes
``save_pretrained`` folders (safetensors) at the end of the run and for the best validation
so far, which ``from_pretrained`` loads back."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from amptrain.adapters import unwrap
from amptrain.callbacks import Callback, TrainState


class SavePretrained(Callback):
    """Saves ``model`` with ``save_pretrained`` into ``path`` when the run ends and, given
    ``monitor`` (a validation key such as ``val/loss``), into ``path/best`` whenever that
    metric improves (``mode`` "min" or "max"; NaN never does). Only the writing rank (rank 0
    under torchrun) writes."""

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
        if state.is_main:
            self.model.save_pretrained(folder, safe_serialization=True)

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.best_step = float(state["best"]), state["best_step"]
