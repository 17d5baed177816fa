"""Metrics in bounded memory, device memory through torch, sinks (console, JSON lines, CSV,
TensorBoard, W&B), one run's log over them, and its progress bar."""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, TextIO

import torch
from tqdm.auto import tqdm

Scalar = float | int | str | bool
WANDB_MODES = ("offline", "online", "disabled")


class RunningStats:
    """Count, mean, standard deviation, min and max of a stream, in O(1) memory (Welford)."""

    __slots__ = ("_m2", "count", "max", "mean", "min", "nonfinite")

    def __init__(self) -> None:
        self.count = 0
        self.nonfinite = 0  # NaN and infinite values seen (not in the statistics)
        self.mean = 0.0
        self._m2 = 0.0
        self.min = math.inf
        self.max = -math.inf

    def update(self, value: float) -> None:
        """Add one value; non-finite values are counted apart, not in the statistics."""
        if not math.isfinite(value):
            self.nonfinite += 1
            return
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self._m2 += delta * (value - self.mean)
        self.min = min(self.min, value)
        self.max = max(self.max, value)

    @property
    def std(self) -> float:
        """Population standard deviation (0 for fewer than two values)."""
        return math.sqrt(self._m2 / self.count) if self.count > 1 else 0.0

    def state_dict(self) -> dict[str, float]:
        """Everything needed to go on counting (a checkpoint keeps it)."""
        return {name: getattr(self, name) for name in self.__slots__}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        for name in self.__slots__:
            setattr(self, name, type(getattr(self, name))(state[name]))

    def summary(self) -> dict[str, float]:
        """``mean``, ``std``, ``min``, ``max`` (NaN when nothing was counted)."""
        if not self.count:
            return {"mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan}
        return {"mean": self.mean, "std": self.std, "min": self.min, "max": self.max}


def peak_memory_mb(device: torch.device) -> float | None:
    """Peak memory allocated by tensors on a CUDA device since the last reset, in MiB."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window on a CUDA device (no-op elsewhere)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def gpu_utilization(device: torch.device) -> float | None:
    """GPU utilization in percent from torch's NVML binding, or None where it is unavailable."""
    if device.type != "cuda":
        return None
    try:
        return float(torch.cuda.utilization(device))
    except Exception:  # pynvml missing or NVML refused: utilization is optional
        return None


class Sink(Protocol):
    """Where metric records go."""

    def log(self, record: Mapping[str, Scalar], step: int) -> None: ...

    def close(self) -> None: ...


class ConsoleSink:
    """Prints one line per epoch; per-step records are left to the progress bar."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def log(self, record: Mapping[str, Scalar], step: int) -> None:
        if "epoch" not in record:
            return
        parts = [f"epoch {record['epoch']}"]
        for key in ("train/loss", "val/loss", "val/accuracy", "train/tokens_per_second"):
            value = record.get(key)
            if isinstance(value, float) and math.isfinite(value):
                parts.append(f"{key} {value:.4g}")
        print("  ".join(parts), file=self.stream, flush=True)

    def close(self) -> None:
        pass


class JsonlSink:
    """Appends every record, with its run id and step, as one JSON object per line, handed to
    the operating system as it is logged (a process killed after it keeps the line).

    Runs appended to one file are told apart by ``run`` (each run's steps count from 1).
    """

    def __init__(self, path: str | os.PathLike[str], run_id: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, record: Mapping[str, Scalar], step: int) -> None:
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()
        }
        self._file.write(json.dumps({"run": self.run_id, "step": step, **clean}) + "\n")
        self._file.flush()  # each line reaches the OS at once: a killed run keeps all it logged

    def close(self) -> None:
        self._file.close()


class CsvSink:
    """Appends every record as rows of ``run,step,key,value`` (long format: a key that first
    appears later, a validation key, is just more rows, so the file never needs rewriting),
    handed to the operating system as it is logged. A new or empty file gets the header."""

    HEADER = ("run", "step", "key", "value")

    def __init__(self, path: str | os.PathLike[str], run_id: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._file = self.path.open("a", encoding="utf-8", newline="")
        self._rows = csv.writer(self._file)
        if self._file.tell() == 0:
            self._rows.writerow(self.HEADER)
            self._file.flush()

    def log(self, record: Mapping[str, Scalar], step: int) -> None:
        self._rows.writerows((self.run_id, step, k, v) for k, v in record.items())
        self._file.flush()  # each row reaches the OS at once: a killed run keeps all it logged

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """Writes every number of every record as a TensorBoard scalar (strings as text) through
    ``torch.utils.tensorboard.SummaryWriter``, flushed as it is logged."""

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "TensorBoard logging needs tensorboard: pip install 'amptrain[tensorboard]'"
            ) from exc
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, record: Mapping[str, Scalar], step: int) -> None:
        for key, value in record.items():
            if isinstance(value, str):
                self.writer.add_text(key, value, step)
            else:
                self.writer.add_scalar(key, float(value), step)
        self.writer.flush()  # written out at once: a killed run keeps all it logged

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Logs to Weights & Biases; offline by default, so nothing waits on the network."""

    def __init__(
        self,
        project: str = "amptrain",
        *,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        mode: str = "offline",
        dir: str | os.PathLike[str] | None = None,
    ) -> None:
        try:
            import wandb
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("W&B logging needs wandb: pip install 'amptrain[wandb]'") from exc
        if mode not in WANDB_MODES:
            raise ValueError(f"wandb mode must be one of {WANDB_MODES}; got {mode!r}")
        self.run = wandb.init(
            project=project,
            name=name,
            config=dict(config or {}),
            mode=mode,
            dir=str(dir) if dir is not None else None,
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )

    def log(self, record: Mapping[str, Scalar], step: int) -> None:
        numeric = {k: v for k, v in record.items() if not isinstance(v, str)}
        text = {k: v for k, v in record.items() if isinstance(v, str)}
        if numeric:
            self.run.log(numeric, step=step)
        for key, value in text.items():  # strings (e.g. amp/precision) belong in the summary
            self.run.summary[key] = value

    def close(self) -> None:
        self.run.finish()


def present(record: Mapping[str, Scalar | None]) -> dict[str, Scalar]:
    """The record without its ``None`` values (figures this run does not have)."""
    return {k: v for k, v in record.items() if v is not None}


class MetricsTracker:
    """Per-step and per-epoch metrics in bounded memory, fanned out to sinks.

    Step values feed running aggregates for the current epoch (``epoch_loss``,
    ``epoch_grad_norm``); only the last ``history_size`` step records are kept, so a run of
    any length has a fixed footprint. Epoch records (one per epoch) are kept whole.
    """

    def __init__(self, sinks: Iterable[Sink] = (), *, history_size: int = 1024) -> None:
        self.sinks = list(sinks)
        self.history: deque[dict[str, Scalar]] = deque(maxlen=history_size)
        self.epochs: list[dict[str, Scalar]] = []
        self.step = 0
        self.epoch_loss = RunningStats()
        self.epoch_grad_norm = RunningStats()

    def record_step(self, loss: float, grad_norm: float, **extra: Scalar) -> dict[str, Scalar]:
        """Count one optimizer step (skipped steps included: their norm is not finite) into the
        epoch's aggregates and the history; the record, for the sinks."""
        self.step += 1
        self.epoch_loss.update(loss)
        self.epoch_grad_norm.update(grad_norm)
        record: dict[str, Scalar] = {"train/loss": loss, "train/grad_norm": grad_norm, **extra}
        self.history.append(record)
        return record

    def log_step(self, loss: float, grad_norm: float, **extra: Scalar) -> None:
        """Record one optimizer step and send it to the sinks."""
        self.write(self.record_step(loss, grad_norm, **extra))

    def log(self, record: Mapping[str, Scalar | None]) -> None:
        """Send a record (a validation pass's) to the sinks at the current step."""
        self.write(present(record))

    def write(self, record: Mapping[str, Scalar]) -> None:
        """Send a record to every sink, at the current step."""
        for sink in self.sinks:
            sink.log(record, self.step)

    def state_dict(self) -> dict[str, Any]:
        """The step count, this epoch's aggregates and the epoch records (for a checkpoint)."""
        return {
            "step": self.step,
            "epoch_loss": self.epoch_loss.state_dict(),
            "epoch_grad_norm": self.epoch_grad_norm.state_dict(),
            "epochs": list(self.epochs),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.epoch_loss.load_state_dict(state["epoch_loss"])
        self.epoch_grad_norm.load_state_dict(state["epoch_grad_norm"])
        self.epochs = list(state["epochs"])

    def record_epoch(self, record: Mapping[str, Scalar | None]) -> dict[str, Scalar]:
        """Keep an epoch record (``None`` values dropped) and reset the aggregates; the record
        kept, for the sinks."""
        clean = present(record)
        self.epochs.append(clean)
        self.epoch_loss = RunningStats()
        self.epoch_grad_norm = RunningStats()
        return clean

    def end_epoch(self, record: Mapping[str, Scalar | None]) -> dict[str, Scalar]:
        """Keep an epoch record (``None`` values dropped), send it to the sinks and reset the
        aggregates."""
        clean = self.record_epoch(record)
        self.write(clean)
        return clean

    def close(self) -> None:
        """Flush and close every sink."""
        for sink in self.sinks:
            sink.close()


class RunLog:
    """Where one run's records go. The caller's tracker counts every one, on every process
    (the epoch's aggregates come from it); ``writers`` get them: on the process that writes,
    the tracker's sinks and the run's own; on the others, none. The tracker's own list of
    sinks is left as the caller made it."""

    def __init__(self, tracker: MetricsTracker, writers: Iterable[Sink]) -> None:
        self.tracker = tracker
        self.writers = list(writers)

    def step(self, loss: float, grad_norm: float, **extra: Scalar) -> None:
        """One optimizer step's record."""
        self._write(self.tracker.record_step(loss, grad_norm, **extra))

    def eval(self, record: Mapping[str, Scalar | None]) -> None:
        """A validation pass's record, at the current step."""
        self._write(present(record))

    def epoch(self, record: Mapping[str, Scalar | None]) -> None:
        """An epoch's record; the tracker starts the next epoch's aggregates."""
        self._write(self.tracker.record_epoch(record))

    def _write(self, record: Mapping[str, Scalar]) -> None:
        for sink in self.writers:
            sink.log(record, self.tracker.step)

    def close(self) -> None:
        """Flush and close every writer."""
        for sink in self.writers:
            sink.close()


class ProgressBar:
    """An epoch's progress bar on stderr, drawn only where ``shown`` (decided once for the run:
    the process that writes, on a terminal unless told otherwise)."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown
        self.bar: Any = None

    def open(self, description: str, total: int, done: int) -> None:
        """A new bar of ``total`` steps, ``done`` of them already (a resumed epoch's)."""
        self.bar = tqdm(
            total=total,
            initial=done,
            desc=description,
            leave=False,
            disable=not self.shown,
            unit="step",
        )

    def advance(self) -> None:
        """One more step done."""
        self.bar.update()

    def show(self, loss: float, tokens_per_second: float) -> None:
        """The latest loss and the token rate so far, beside the bar."""
        if self.shown:
            self.bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_second:.0f}")

    def close(self) -> None:
        """Clear the bar (the epoch's figures go to the sinks)."""
        self.bar.close()
