"""The best weights of a run by one validation metric (``TrainConfig.best_metric``): written to
``checkpoint_dir/best`` whenever the metric improves, and loaded back into the model when the
run ends if ``load_best_at_end`` asks (the Trainer's ``load_best_model_at_end``, Lightning's
``ModelCheckpoint(monitor=...)``, Keras' ``restore_best_weights``)."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from amptrain import checkpoint, sharded
from amptrain.callbacks import Callback, TrainState
from amptrain.checkpoint import PREVIOUS, sibling, swap_in
from amptrain.distributed import World
from amptrain.pretrained import write_pretrained

BUILT_IN = ("val/loss", "val/perplexity", "val/accuracy")  # what every validation gives
WEIGHTS = "weights.pt"  # in the best folder: the state_dict the model is restored from
STAGING = ".partial"  # the suffix of the folder's sibling written before it is swapped in


def check_metric(metric: str | None, extra: bool, has_validation: bool) -> None:
    """Before the first step: a ``best_metric`` needs validation data, and names a key that
    validation gives (``extra``: a ``compute_metrics`` adds keys, checked at its first pass)."""
    if metric is None:
        return
    if not has_validation:
        raise ValueError(f"best_metric={metric!r} needs val_data: pass validation rows")
    if metric not in BUILT_IN and not extra:
        raise ValueError(
            f"best_metric={metric!r} is not a key validation gives ({', '.join(BUILT_IN)}); "
            "pass compute_metrics for other keys (val/<its key>)"
        )


def check_given(metric: str, keys: list[str]) -> None:
    """``metric`` is one of the validation record's ``keys``, or a ValueError naming both."""
    if metric not in keys:
        raise ValueError(
            f"best_metric={metric!r} is not in the validation record (it has "
            f"{', '.join(sorted(keys))}): name one of those"
        )


class KeepBest(Callback):
    """Keeps the weights of the best ``metric`` so far (``mode`` "min" or "max"; NaN never
    improves) in ``folder``: ``weights.pt`` (written whole or not at all), and for a model with
    ``save_pretrained`` its own format (safetensors) beside it. Only ``writes`` (rank 0)
    writes. With ``restore``, the model takes those weights back when the run ends, on every
    rank, once ``barrier`` has let the writer finish; a run that never improved keeps its
    last weights."""

    needs_validation = True

    def __init__(
        self,
        model: nn.Module,
        folder: Path,
        metric: str,
        *,
        mode: str = "min",
        restore: bool = False,
        writes: bool = True,
        barrier: Callable[[], None] = lambda: None,
    ) -> None:
        self.model, self.folder, self.metric, self.mode = model, folder, metric, mode
        self.restore, self.writes, self.barrier = restore, writes, barrier
        self.best = math.inf if mode == "min" else -math.inf
        self.best_step: int | None = None  # None: no weights kept yet

    def _better(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        return value < self.best if self.mode == "min" else value > self.best

    def on_eval_end(self, state: TrainState, metrics: Mapping[str, float]) -> None:
        check_given(self.metric, list(metrics))
        value = float(metrics[self.metric])
        if self._better(value):
            self.best, self.best_step = value, state.step
            if self.writes:
                self._write(state.step)

    def _write(self, step: int) -> None:
        weights = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        record = {"metric": self.metric, "value": self.best, "step": step, "model": weights}
        staging = sibling(self.folder, STAGING)
        shutil.rmtree(staging, ignore_errors=True)  # left by a run killed while it wrote
        checkpoint.write(staging / WEIGHTS, record)
        if callable(getattr(self.model, "save_pretrained", None)):
            self.model.save_pretrained(staging, safe_serialization=True)
        swap_in(staging, self.folder)

    def on_train_end(self, state: TrainState) -> None:
        if not self.restore or self.best_step is None:
            return
        self.barrier()  # the writing rank has written the file every rank reads
        device = next(iter(self.model.parameters())).device
        saved = load_best(self.folder, device)
        self.model.load_state_dict(saved["model"])

    def state_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "mode": self.mode,
            "best": self.best,
            "best_step": self.best_step,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if (state["metric"], state["mode"]) != (self.metric, self.mode):
            raise ValueError(
                f"the checkpoint kept the best by {state['metric']!r} ({state['mode']}), not "
                f"{self.metric!r} ({self.mode}): resume with the best_metric and best_mode it "
                "was written with"
            )
        self.best, self.best_step = self._kept()

    def _kept(self) -> tuple[float, int | None]:
        """The best so far is the one whose weights ``folder`` holds, not the checkpoint's
        figure: a resume from an older checkpoint (the folder is newer) must not let a worse
        value replace it, and one into another ``checkpoint_dir`` (no weights there yet)
        starts its best anew rather than promise weights it cannot give back."""
        previous = sibling(self.folder, PREVIOUS)
        if not (self.folder / WEIGHTS).exists() and not (previous / WEIGHTS).exists():
            return (math.inf if self.mode == "min" else -math.inf), None
        kept = load_best(self.folder, torch.device("cpu"))
        if kept.get("metric") != self.metric:
            return (math.inf if self.mode == "min" else -math.inf), None
        return float(kept["value"]), kept["step"]


class KeepShardedBest(KeepBest):
    """:class:`KeepBest` for a sharded (FSDP) model: at each improvement every rank writes its
    shard of the weights into ``folder`` (a sharded checkpoint, the record in ``weights.pt``).
    When the run ends rank 0 writes them whole, once, read from the shards (``weights.pt`` with
    the model, and for a model with ``save_pretrained`` its own format); with ``restore`` every
    rank takes its shard of them back."""

    def __init__(
        self, model: nn.Module, folder: Path, metric: str, world: World, **options: Any
    ) -> None:
        super().__init__(model, folder, metric, writes=True, barrier=world.barrier, **options)
        self.world = world

    def _write(self, step: int) -> None:
        record = {"metric": self.metric, "value": self.best, "step": step}
        shards = {"model": sharded.model_state(self.model)}
        sharded.write(self.folder, shards, {WEIGHTS: record}, self.world)

    def on_train_end(self, state: TrainState) -> None:
        if self.best_step is None:
            return
        folder = whole(self.folder)
        if self.world.is_main:
            export(self.model, folder)
        self.barrier()
        if self.restore:
            sharded.load(folder, self.model)


def export(model: nn.Module, folder: Path) -> None:
    """The sharded best weights in ``folder`` written whole beside the shards: into
    ``weights.pt``, and for a model with ``save_pretrained`` in its own format."""
    weights = sharded.read_whole(folder)
    checkpoint.write(folder / WEIGHTS, {**load_best(folder, torch.device("cpu")), "model": weights})
    if callable(getattr(model, "save_pretrained", None)):
        write_pretrained(model, folder, weights)


def whole(folder: Path) -> Path:
    """Where the best weights of ``folder`` are whole: itself, or the ``.previous`` sibling a
    kill left it renamed to."""
    previous = sibling(folder, PREVIOUS)
    return folder if folder.exists() or not previous.exists() else previous


def load_best(folder: Path, device: torch.device) -> dict[str, Any]:
    """The best weights' record in ``folder`` (``metric``, ``value``, ``step``, and ``model``
    but in a sharded folder before its run's end), or a ValueError naming the file. A
    ``folder`` that a kill left renamed aside is read there."""
    path = whole(folder) / WEIGHTS
    try:
        saved = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # gone, torn or foreign: the run cannot give the best back
        raise ValueError(f"cannot read the best weights {path}: {exc}") from exc
    if not isinstance(saved, dict) or not ("model" in saved or checkpoint.is_sharded(path.parent)):
        raise ValueError(f"{path} does not hold amptrain's best weights")
    return saved


def keep_best(
    cfg: Any,
    model: nn.Module,
    writes: bool,
    barrier: Callable[[], None],
    shards: World | None = None,
) -> Iterable[Callback]:
    """The run's :class:`KeepBest` (:class:`KeepShardedBest` for a model sharded over the
    ``shards`` world), when ``cfg.best_metric`` asks for one."""
    if cfg.best_metric is None:
        return []
    folder = Path(cfg.checkpoint_dir) / "best"
    options = {"mode": cfg.best_mode, "restore": cfg.load_best_at_end}
    if shards is not None:
        return [KeepShardedBest(model, folder, cfg.best_metric, shards, **options)]
    return [KeepBest(model, folder, cfg.best_metric, writes=writes, barrier=barrier, **options)]
