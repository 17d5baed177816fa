"""Callbacks: a small set of hooks ``fine_tune`` calls, any of which can stop the run. The
loop's own periodic work (reading the loss back, validation, checkpoints) hangs on the same
hooks, as :class:`Every` and :class:`AtEnd`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainState:
    """Where the run is; callbacks read it and may set ``should_stop``.

    ``step`` counts optimizer steps over the whole run. ``last_step`` is the latest step record
    read back from the device (every ``log_every`` steps), ``last_eval`` the latest validation
    record. A run told to stop ends after the current step, with its checkpoint written.
    """

    epoch: int = 1
    step: int = 0
    is_main: bool = True  # rank 0 (always, outside torchrun)
    last_step: dict[str, float] = field(default_factory=dict)
    last_eval: dict[str, float] = field(default_factory=dict)
    should_stop: bool = False
    stop_reason: str | None = None

    def stop(self, reason: str) -> None:
        """End the run after the current step, saying why (kept in the result)."""
        self.should_stop, self.stop_reason = True, reason


class Callback:
    """Override the hooks you need. On several ranks every rank calls them with the same
    reduced values, so a stop decision is the same everywhere.

    A callback with state to keep across a resume returns it from :meth:`state_dict`
    (plain values and tensors) and takes it back in :meth:`load_state_dict`. One that sets
    ``needs_validation`` makes a run without ``val_data`` an error before its first step.
    """

    needs_validation = False  # whether the callback watches validation metrics (val_data)

    def on_train_start(self, state: TrainState) -> None:
        """Before the first step of the run (of a resumed run too, at its position)."""

    def on_step_end(self, state: TrainState) -> None:
        """After every optimizer step."""

    def on_eval_end(self, state: TrainState, metrics: Mapping[str, float]) -> None:
        """After every validation pass (``eval_every`` steps and each epoch's end)."""

    def on_epoch_end(self, state: TrainState, metrics: Any) -> None:
        """After each epoch, with its :class:`~amptrain.results.EpochMetrics`."""

    def on_train_end(self, state: TrainState) -> None:
        """After the last epoch, or the step a callback stopped the run at."""

    def state_dict(self) -> dict[str, Any]:
        """What this callback needs back after a resume (nothing by default)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`state_dict` gave."""


def check_validation(callbacks: Iterable[Callback], has_validation: bool) -> None:
    """A ValueError naming the callbacks that watch validation metrics, in a run without
    ``val_data`` (before its first step, not after an epoch)."""
    watching = [type(cb).__name__ for cb in callbacks if cb.needs_validation]
    if watching and not has_validation:
        raise ValueError(
            f"{', '.join(watching)} watches validation metrics: pass val_data (or leave "
            f"{watching[0]} out)"
        )


def checked(callbacks: Iterable[Any]) -> list[Callback]:
    """The callbacks as a list, each a :class:`Callback`, or a TypeError naming what it is."""
    callbacks = list(callbacks)
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise TypeError(
                f"callbacks must be amptrain.Callback instances, got {type(cb).__name__}"
            )
    return callbacks


class Every(Callback):
    """Calls ``action()`` after every ``steps``-th optimizer step of the run."""

    def __init__(self, steps: int, action: Callable[[], object]) -> None:
        self.steps, self.action = steps, action

    def on_step_end(self, state: TrainState) -> None:
        if state.step % self.steps == 0:
            self.action()


class AtEnd(Callback):
    """Calls ``action()`` once the run has trained its last step."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action

    def on_train_end(self, state: TrainState) -> None:
        self.action()


class AgreeStop(Callback):
    """Under torchrun, after every step and epoch: a stop decided on one rank (a callback that
    looks at its own shard, the main rank alone) is taken by every rank, with its reason, so no
    rank waits in a collective for one that has stopped. ``any_rank(flag)`` is whether the flag
    is set on any rank; ``gather(obj)`` every rank's ``obj``."""

    def __init__(
        self, any_rank: Callable[[bool], bool], gather: Callable[[Any], list[Any]]
    ) -> None:
        self.any_rank, self.gather = any_rank, gather

    def on_step_end(self, state: TrainState) -> None:
        if self.any_rank(state.should_stop):
            reasons = self.gather(state.stop_reason if state.should_stop else None)
            if state.should_stop:
                return
            given = ((r, why) for r, why in enumerate(reasons) if why is not None)
            rank, reason = next(given, (None, None))
            if reason is None:  # the planned end (max_steps) gives no reason to pass on
                state.should_stop = True
            else:
                state.stop(f"{reason} (on rank {rank})")

    def on_epoch_end(self, state: TrainState, metrics: Any) -> None:
        self.on_step_end(state)


class Hooks:
    """Calls a hook on every callback, in order."""

    def __init__(self, callbacks: Iterable[Callback]) -> None:
        self.callbacks = checked(callbacks)

    def __call__(self, hook: str, state: TrainState, *args: Any) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(state, *args)

    def _keys(self) -> list[str]:
        """A name per callback: its class, numbered when a class comes more than once."""
        names = [type(cb).__qualname__ for cb in self.callbacks]
        return [f"{n}#{names[:i].count(n)}" for i, n in enumerate(names)]

    def state_dict(self) -> dict[str, dict[str, Any]]:
        """The callbacks that have state, by name (a resume may add or drop stateless ones)."""
        states = {k: cb.state_dict() for k, cb in zip(self._keys(), self.callbacks, strict=True)}
        return {k: v for k, v in states.items() if v}

    def load_state_dict(self, states: Mapping[str, dict[str, Any]]) -> None:
        for key, cb in zip(self._keys(), self.callbacks, strict=True):
            if key in states:
                cb.load_state_dict(states[key])


class EarlyStopping(Callback):
    """Stops when ``monitor`` (a validation key: ``val/loss``, ``val/accuracy``,
    ``val/perplexity``) has not improved by more than ``min_delta`` for ``patience``
    evaluations in a row. A NaN value never counts as an improvement."""

    needs_validation = True

    def __init__(
        self,
        monitor: str = "val/loss",
        *,
        mode: str = "min",
        patience: int = 3,
        min_delta: float = 0.0,
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"EarlyStopping mode must be 'min' or 'max', got {mode!r}")
        if patience < 1 or min_delta < 0:
            raise ValueError("EarlyStopping needs patience >= 1 and min_delta >= 0")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, min_delta
        self.best = math.inf if mode == "min" else -math.inf
        self.bad_evals = 0

    def _improved(self, value: float) -> bool:
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_eval_end(self, state: TrainState, metrics: Mapping[str, float]) -> None:
        if self.monitor not in metrics:
            raise KeyError(
                f"EarlyStopping monitors {self.monitor!r}, which the evaluation does not give "
                f"(it gives {sorted(metrics)}); pass val_data, or monitor one of those"
            )
        value = float(metrics[self.monitor])
        if math.isfinite(value) and self._improved(value):
            self.best, self.bad_evals = value, 0
            return
        self.bad_evals += 1
        if self.bad_evals >= self.patience:
            state.stop(
                f"early stopping: {self.monitor} did not improve on {self.best:.6g} "
                f"for {self.bad_evals} evaluations"
            )

    def on_epoch_end(self, state: TrainState, metrics: Any) -> None:
        if not state.last_eval:
            raise ValueError("EarlyStopping watches validation metrics: pass val_data")

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad_evals": self.bad_evals}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.bad_evals = float(state["best"]), int(state["bad_evals"])
