"""amptrain.callbacks: the hooks a run calls and when, a callback that stops the run, early
stopping, the loop's own periodic features, and callbacks' state kept by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from amptrain import Callback, EarlyStopping, TinyGPT, TrainState, fine_tune
from amptrain.callbacks import AtEnd, Every, Hooks

Tokens = Callable[..., torch.Tensor]
Names = Callable[..., bool]


class _Calls(Callback):
    """Every hook call, in order, with the step it came at."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def on_train_start(self, state: TrainState) -> None:
        self.calls.append(("train_start", state.step))

    def on_step_end(self, state: TrainState) -> None:
        self.calls.append(("step", state.step))

    def on_eval_end(self, state: TrainState, metrics: Any) -> None:
        self.calls.append(("eval", state.step))

    def on_epoch_end(self, state: TrainState, metrics: Any) -> None:
        self.calls.append(("epoch", state.step))

    def on_train_end(self, state: TrainState) -> None:
        self.calls.append(("train_end", state.step))


def test_every_hook_is_called_at_its_point_of_the_run(model: TinyGPT, tokens: Tokens) -> None:
    spy = _Calls()
    fine_tune(model, tokens(16), tokens(4, seed=1), epochs=2, batch_size=8, eval_every=1,
              num_workers=0, callbacks=[spy])  # fmt: skip
    # eval_every=1 validates after each step but an epoch's last, whose validation is the end's
    assert spy.calls == [
        ("train_start", 0),
        ("step", 1), ("eval", 1), ("step", 2), ("eval", 2), ("epoch", 2),
        ("step", 3), ("eval", 3), ("step", 4), ("eval", 4), ("epoch", 4),
        ("train_end", 4),
    ]  # fmt: skip


class _StopAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, state: TrainState) -> None:
        if state.step == self.step:
            state.stop("enough")


def test_a_callback_stops_the_run(model: TinyGPT, tokens: Tokens) -> None:
    spy = _Calls()
    result = fine_tune(model, tokens(40), epochs=3, batch_size=4, num_workers=0,
                       callbacks=[_StopAt(3), spy])  # fmt: skip
    assert result.steps == 3 and result.stop_reason == "enough" and len(result.epochs) == 1
    assert spy.calls[-2:] == [("epoch", 3), ("train_end", 3)]  # the epoch ends, then the run


def test_early_stopping_stops_when_the_validation_loss_stops_improving(
    model: TinyGPT, tokens: Tokens
) -> None:
    stop = EarlyStopping("val/loss", patience=2, min_delta=100.0)  # no gain counts
    result = fine_tune(model, tokens(40), tokens(8, seed=1), epochs=3, batch_size=4,
                       num_workers=0, eval_every=2, callbacks=[stop])  # fmt: skip
    assert result.steps == 6  # best at step 2, no gain at 4 and 6
    assert result.stop_reason and "val/loss" in result.stop_reason


def test_early_stopping_runs_on_while_the_loss_improves(model: TinyGPT, tokens: Tokens) -> None:
    stop = EarlyStopping("val/loss", patience=1)
    result = fine_tune(model, tokens(200), tokens(16, seed=1), epochs=2, batch_size=8,
                       num_workers=0, learning_rate=3e-3, callbacks=[stop])  # fmt: skip
    assert result.stop_reason is None and len(result.epochs) == 2


def test_early_stopping_without_validation_data_says_so(
    model: TinyGPT, tokens: Tokens, names: Names
) -> None:
    steps: list[int] = []

    class _Steps(Callback):
        def on_step_end(self, state: TrainState) -> None:
            steps.append(state.step)

    with pytest.raises(ValueError) as raised:
        fine_tune(model, tokens(), epochs=1, num_workers=0, callbacks=[_Steps(), EarlyStopping()])
    assert names(str(raised.value), "EarlyStopping", "validation metrics", "pass val_data")
    assert steps == []  # refused before the first step, not after an epoch


def test_early_stopping_counts_evaluations_without_gain_and_takes_back_its_state(
    names: Names,
) -> None:
    stop, state = EarlyStopping("val/accuracy", mode="max", patience=2, min_delta=0.1), TrainState()
    for value in (0.5, 0.55, 0.7, float("nan"), 0.75):  # gains of 0.05, 0.2, none, 0.05
        stop.on_eval_end(state, {"val/accuracy": value})
    assert (stop.best, stop.bad_evals, state.should_stop) == (0.7, 2, True)
    assert state.stop_reason and "val/accuracy" in state.stop_reason
    again = EarlyStopping("val/accuracy", mode="max")
    again.load_state_dict(stop.state_dict())
    assert (again.best, again.bad_evals) == (0.7, 2)
    with pytest.raises(KeyError) as missing:
        again.on_eval_end(TrainState(), {"val/loss": 1.0})
    assert names(str(missing.value), "'val/accuracy'", "['val/loss']", "pass val_data")
    for bad, named in [
        ({"mode": "up"}, ["'min'", "'max'", "'up'"]),
        ({"patience": 0}, ["patience >= 1", "min_delta >= 0"]),
        ({"min_delta": -1.0}, ["EarlyStopping", "min_delta >= 0"]),
    ]:
        with pytest.raises(ValueError) as raised:
            EarlyStopping(**bad)  # type: ignore[arg-type]
        assert names(str(raised.value), *named)


def test_callbacks_must_be_callbacks(model: TinyGPT, tokens: Tokens, names: Names) -> None:
    with pytest.raises(TypeError) as raised:
        fine_tune(model, tokens(), epochs=1, callbacks=[print])  # type: ignore[list-item]
    assert names(str(raised.value), "amptrain.Callback", "builtin_function_or_method")


def test_early_stopping_watches_the_validation_loss_by_default() -> None:
    stop = EarlyStopping()
    assert (stop.monitor, stop.mode, stop.patience, stop.min_delta) == ("val/loss", "min", 3, 0.0)
    state, counts = TrainState(), []
    for value in (float("nan"), 2.0, 2.0, 2.0):  # no gain at the first, nor at an equal value
        stop.on_eval_end(state, {"val/loss": value})
        counts.append(stop.bad_evals)
    assert counts == [1, 0, 1, 2] and stop.best == 2.0 and not state.should_stop
    stop.on_eval_end(state, {"val/loss": 2.0})
    assert state.should_stop


def test_a_gain_must_exceed_min_delta_in_either_mode() -> None:
    lower = EarlyStopping(patience=5, min_delta=0.5)
    higher = EarlyStopping("val/accuracy", mode="max", patience=5, min_delta=0.5)
    state = TrainState()
    for stop, values in ((lower, (3.0, 2.5, 1.5)), (higher, (0.0, 0.5, 1.5))):
        for value in values:  # the first sets the best; a gain of exactly min_delta is none
            stop.on_eval_end(state, {stop.monitor: value})
        assert (stop.best, stop.bad_evals) == (values[2], 0)
    assert (lower.best, higher.best) == (1.5, 1.5)
    lower.on_eval_end(state, {"val/loss": 1.0})  # exactly 0.5 lower: no gain
    higher.on_eval_end(state, {"val/accuracy": 2.0})
    assert (lower.bad_evals, higher.bad_evals) == (1, 1)


def test_every_calls_its_action_on_each_multiple_of_its_steps() -> None:
    done: list[int] = []
    state = TrainState()
    every = Every(3, lambda: done.append(state.step))
    for state.step in range(1, 10):
        every.on_step_end(state)
    assert done == [3, 6, 9]
    end: list[str] = []
    AtEnd(lambda: end.append("saved")).on_train_end(state)
    assert end == ["saved"]


class _Counter(Callback):
    def __init__(self, start: int) -> None:
        self.count = start

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: Any) -> None:
        self.count = state["count"]


def test_callbacks_state_is_kept_by_class_and_place_and_stateless_ones_are_left_out() -> None:
    saved = Hooks([_Counter(1), Callback(), _Counter(2)]).state_dict()
    assert saved == {"_Counter#0": {"count": 1}, "_Counter#1": {"count": 2}}
    # a resume with another stateless callback (the loop's own, say) takes the same states
    later = [Every(1, print), _Counter(0), _Counter(0)]
    Hooks(later).load_state_dict(saved)
    assert [cb.count for cb in later[1:]] == [1, 2]  # type: ignore[attr-defined]


def test_a_stop_on_one_rank_is_taken_with_its_reason_and_rank() -> None:
    # two ranks seen from rank 0, which did not stop; rank 1 did
    from amptrain.callbacks import AgreeStop

    asked: list[bool] = []

    def any_rank(flag: bool) -> bool:
        asked.append(flag)
        return True

    agree = AgreeStop(any_rank, lambda reason: [reason, "patience ran out"])
    state = TrainState()
    agree.on_step_end(state)
    assert asked == [False] and state.should_stop
    assert state.stop_reason == "patience ran out (on rank 1)"
    own = TrainState()
    own.stop("mine")  # a rank that stopped tells the others why, and keeps its own reason
    sent: list[Any] = []
    AgreeStop(lambda flag: flag, lambda reason: sent.append(reason) or [reason, None]).on_epoch_end(
        own, None
    )
    assert own.stop_reason == "mine" and sent == ["mine"]
    calm = TrainState()
    AgreeStop(lambda flag: False, lambda reason: [reason]).on_step_end(calm)
    assert not calm.should_stop and calm.stop_reason is None


def test_early_stopping_at_an_epoch_end_without_a_validation_names_val_data(
    names: Names,
) -> None:
    with pytest.raises(ValueError) as raised:
        EarlyStopping().on_epoch_end(TrainState(), {"train/loss": 1.0})
    assert names(str(raised.value), "val_data")


def test_a_stop_without_a_reason_on_any_rank_is_every_ranks_stop() -> None:
    # the planned end (max_steps) stops every rank at once and gives no reason: under torchrun
    # the run ended with a StopIteration at its last step
    from amptrain.callbacks import AgreeStop

    planned = TrainState()
    planned.should_stop = True
    AgreeStop(lambda flag: flag, lambda reason: [reason, None]).on_step_end(planned)
    assert planned.should_stop and planned.stop_reason is None
    other = TrainState()  # this rank did not stop; the other stopped without a reason
    AgreeStop(lambda flag: True, lambda reason: [reason, None]).on_step_end(other)
    assert other.should_stop and other.stop_reason is None


def test_early_stopping_in_a_loop_that_never_validated_says_so(names: Names) -> None:
    # another loop than fine_tune's (whose check runs before the first step) calling the hook
    with pytest.raises(ValueError) as raised:
        EarlyStopping().on_epoch_end(TrainState(step=3), None)
    assert names(str(raised.value), "EarlyStopping", "pass val_data")
