"""amptrain.loop: epochs of steps, the loss read back every ``log_every`` steps, validation
every ``eval_every``, the skip guard, the training clock, the progress bar, and a resumed run
that goes on bit for bit."""

from __future__ import annotations

import itertools
import json
import math
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from amptrain import (
    Callback,
    EarlyStopping,
    MetricsTracker,
    SkippedStepsWarning,
    TinyGPT,
    TrainConfig,
    TrainingDivergedError,
    TrainState,
    evaluate,
    fine_tune,
    lm_loss,
    make_dataloader,
    resolve_precision,
)
from amptrain.benchmark.health import count_syncs
from amptrain.config import ResumeSettingsWarning
from amptrain.data import EpochShuffle
from amptrain.loop import SkipGuard
from amptrain.precision import PrecisionPlan

Tokens = Callable[..., torch.Tensor]
Names = Callable[..., bool]
Models = Callable[..., TinyGPT]
SCALED = PrecisionPlan("16-mixed", "16-mixed", "cpu", None, None, scaler_enabled=True)
RUN = {"epochs": 2, "batch_size": 4, "num_workers": 0, "eval_every": 3, "log_every": 4}

# --- epochs and steps ------------------------------------------------------------------------


class _Stated(torch.utils.data.IterableDataset):
    """A stream whose stated length, an estimate, is not the rows it gives; counts those drawn."""

    def __init__(self, rows: torch.Tensor, stated: int) -> None:
        self.rows, self.stated, self.drawn = rows, stated, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        for row in self.rows:
            self.drawn += 1
            yield row

    def __len__(self) -> int:
        return self.stated


def test_an_epoch_draws_its_stated_batches_and_ends_early_on_a_stream_that_runs_dry(
    make_model: Models, tokens: Tokens
) -> None:
    # 5 batches stated, 2 a step: the third step trains on the fifth alone, and no sixth is drawn
    longer = _Stated(tokens(64), 20)
    result = fine_tune(make_model(), DataLoader(longer, batch_size=4), epochs=2,
                       grad_accum_steps=2)  # fmt: skip
    assert result.steps == 6 and longer.drawn == 2 * 20
    # 8 stated, 5 given: each epoch ends when the stream does, and is measured all the same
    shorter = _Stated(tokens(20), 32)
    result = fine_tune(make_model(), DataLoader(shorter, batch_size=4), epochs=2,
                       grad_accum_steps=2)  # fmt: skip
    assert result.steps == 6 and [e.epoch for e in result.epochs] == [1, 2]
    assert all(math.isfinite(e.train_loss) for e in result.epochs)


def test_each_epoch_is_trained_in_its_own_shuffled_order(model: TinyGPT, tokens: Tokens) -> None:
    ids = tokens(16)
    ids[:, 0] = torch.arange(16)  # each row names itself
    seen: list[int] = []

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        seen.extend(labels[:, 0].tolist())
        return lm_loss(logits, labels)

    fine_tune(model, ids, epochs=3, batch_size=4, seed=5, num_workers=0, loss_fn=loss_fn)
    orders = [seen[i : i + 16] for i in range(0, 48, 16)]
    expected = []
    for epoch in (1, 2, 3):
        sampler = EpochShuffle(16, seed=5)
        sampler.set_epoch(epoch)
        expected.append(list(sampler))
    assert orders == expected and len({tuple(o) for o in orders}) == 3


def test_the_logged_learning_rate_is_the_one_the_step_used(model: TinyGPT, tokens: Tokens) -> None:
    tracker = MetricsTracker(history_size=1000)
    fine_tune(
        model, tokens(64), epochs=1, batch_size=4, learning_rate=1e-3, warmup_ratio=0.25,
        tracker=tracker, num_workers=0,
    )  # fmt: skip  # 16 steps: the first 4 warm up from 0 (as transformers does)
    lrs = [r["train/lr"] for r in tracker.history]
    assert lrs[:5] == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3])


# --- reading back and validating -------------------------------------------------------------


class _Recorder(Callback):
    def __init__(self, tracker: MetricsTracker) -> None:
        self.steps: list[tuple[int, int, bool]] = []
        self.last_steps: dict[int, dict[str, float]] = {}
        self.evals: list[int] = []
        self.epochs: list[Any] = []
        self.tracker = tracker
        self.main: set[bool] = set()

    def on_step_end(self, state: TrainState) -> None:
        self.steps.append((state.step, self.tracker.step, bool(state.last_step)))
        self.main.add(state.is_main)
        self.last_steps[state.step] = dict(state.last_step)

    def on_eval_end(self, state: TrainState, metrics: Any) -> None:
        self.evals.append(state.step)

    def on_epoch_end(self, state: TrainState, metrics: Any) -> None:
        self.epochs.append(metrics)


def test_eval_every_and_log_every(tmp_path: Path, model: TinyGPT, tokens: Tokens) -> None:
    tracker = MetricsTracker()
    recorder = _Recorder(tracker)
    log = tmp_path / "log.jsonl"
    result = fine_tune(
        model, tokens(40), tokens(8, seed=1), epochs=2, batch_size=4, num_workers=0,
        eval_every=3, log_every=4, jsonl_path=str(log), callbacks=[recorder], tracker=tracker,
    )  # fmt: skip
    assert recorder.evals == [3, 6, 9, 10, 12, 15, 18, 20]  # and each epoch's end, once
    assert recorder.main == {True}  # one process: it is the main one
    assert [(e["epoch"], e["step"]) for e in result.evals] == [
        (1, 3), (1, 6), (1, 9), (1, 10), (2, 12), (2, 15), (2, 18), (2, 20),
    ]  # fmt: skip
    # a callback sees the latest record read back, and each epoch's metrics
    assert recorder.last_steps[4] == recorder.last_steps[5] == tracker.history[3]
    assert set(tracker.history[3]) == {"train/loss", "train/grad_norm", "train/lr"}
    assert recorder.epochs == result.epochs and [m.epoch for m in recorder.epochs] == [1, 2]
    # the loss is read back every 4 steps (and before an evaluation), not every step
    assert [t for _, t, _ in recorder.steps[:9]] == [0, 0, 0, 4, 4, 4, 6, 8, 8]
    assert [s for s, _, read in recorder.steps if read][:2] == [4, 5]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records if "val/loss" in r and "epoch" not in r] == [
        3, 6, 9, 10, 12, 15, 18, 20,
    ]  # fmt: skip
    assert [r["step"] for r in records if "train/loss" in r and "epoch" not in r] == list(
        range(1, 21)
    )


class _ReadSteps(Callback):
    """The steps after which the loss had just been read back from the device."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self._last: object = None

    def on_step_end(self, state: TrainState) -> None:
        if state.last_step and state.last_step is not self._last:  # {} until the first read
            self.steps.append(state.step)
            self._last = state.last_step


@pytest.mark.parametrize(("log_every", "reads"), [(5, [5, 10, 15, 20]), (1, list(range(1, 21)))])
def test_the_loss_is_read_back_every_log_every_steps_only(
    model: TinyGPT, tokens: Tokens, log_every: int, reads: list[int]
) -> None:
    # A host read is a sync on a GPU (the cuda-marked test below counts them there): here its
    # cadence shows through the record each read leaves for the callbacks.
    spy = _ReadSteps()
    fine_tune(model, tokens(80), epochs=1, batch_size=4, log_every=log_every, num_workers=0,
              callbacks=[spy])  # fmt: skip
    assert spy.steps == reads


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fine_tune_reads_the_loss_back_only_every_log_every_steps(
    make_model: Models, tokens: Tokens
) -> None:
    def syncs(steps: int, log_every: int) -> dict[str, Any]:
        data = tokens(steps * 8, vocab=64, seq=32)
        model = make_model(vocab=64, seq=32, d_model=64, n_layers=2, n_heads=4)
        run = lambda: fine_tune(  # noqa: E731
            model, data, epochs=1, batch_size=8, log_every=log_every, num_workers=0
        )
        return count_syncs(run, 1, torch.device("cuda"))

    # Everything else fine_tune reads (setup, the epoch's end) is the same for every run, so
    # the differences count the flushes: 10 more steps at log_every=10 add one read (a read in
    # every step would add ten), and log_every=1 reads 20 times where log_every=10 reads twice.
    short, long = syncs(10, 10), syncs(20, 10)
    assert long["count"] - short["count"] == 1, long["locations"]
    every_step = syncs(20, 1)
    assert every_step["count"] - long["count"] == 20 - 2, every_step["locations"]


# --- the training clock and the progress bar -------------------------------------------------


class _Sleeper(Callback):
    """Spends known time inside a step (the training clock runs) and inside each validation
    (it is stopped)."""

    STEP_S, EVAL_S = 0.02, 0.05

    def __init__(self) -> None:
        self.evals = 0

    def on_step_end(self, state: TrainState) -> None:
        time.sleep(self.STEP_S)

    def on_eval_end(self, state: TrainState, metrics: object) -> None:
        self.evals += 1
        time.sleep(self.EVAL_S)


@pytest.mark.slow
def test_the_training_clock_adds_every_step_and_leaves_validation_out(
    model: TinyGPT, tokens: Tokens
) -> None:
    sleeper = _Sleeper()
    result = fine_tune(
        model, tokens(), tokens(8, seed=1), epochs=2, batch_size=8, eval_every=1,
        num_workers=0, callbacks=[sleeper],
    )  # fmt: skip
    assert sleeper.evals == 2 * 4  # 3 in each epoch, and each epoch's end
    trained = [epoch.wall_time_s for epoch in result.epochs]
    assert all(seconds >= 4 * _Sleeper.STEP_S for seconds in trained)  # every step's, summed
    assert sum(trained) + sleeper.evals * _Sleeper.EVAL_S <= result.wall_time_s


def test_progress_bar_stays_quiet_when_asked(
    capsys: pytest.CaptureFixture[str], model: TinyGPT, tokens: Tokens
) -> None:
    fine_tune(model, tokens(), epochs=1, progress=False, num_workers=0)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_progress_bar_shows_loss_and_throughput_when_asked(
    capsys: pytest.CaptureFixture[str], model: TinyGPT, tokens: Tokens
) -> None:
    # a validation mid-epoch reads the pending steps back without the bar
    fine_tune(model, tokens(), tokens(8, seed=1), epochs=1, progress=True, num_workers=0,
              eval_every=3, log_every=4)  # fmt: skip
    err = capsys.readouterr().err
    assert "epoch 1/1" in err and "loss=" in err and "tok_s=" in err


def test_the_progress_bar_shows_the_latest_loss_and_the_token_rate(
    capsys: pytest.CaptureFixture[str], model: TinyGPT, tokens: Tokens
) -> None:
    tracker = MetricsTracker()
    result = fine_tune(
        model, tokens(40), epochs=2, batch_size=8, log_every=2, progress=True,
        num_workers=0, tracker=tracker,
    )  # fmt: skip
    err = capsys.readouterr().err
    shown = re.split(r"[\r\n]", err)
    for epoch, metrics in enumerate(result.epochs, start=1):
        bar = [ln for ln in shown if ln.startswith(f"epoch {epoch}/2:")]
        # a rate is shown: tqdm writes s/step instead of step/s when a step takes over 1 s
        assert "0/5" in bar[0] and re.search(r"step/s|s/step", bar[-1]) and "5/5" in bar[-1]
        # the last bar of the epoch: its last step's loss, and the token rate so far, which the
        # epoch's (its clock stopped a moment later) cannot exceed
        loss, rate = re.search(r"loss=([\d.]+), tok_s=(\d+)\]", bar[-1]).groups()
        assert loss == f"{tracker.history[5 * epoch - 1]['train/loss']:.4f}"
        assert int(rate) >= int(metrics.tokens_per_second) - 1
    # leave=False: each finished bar is cleared (written over with spaces)
    assert sum(1 for ln in shown if ln and not ln.strip()) == 2


# --- skipped steps ---------------------------------------------------------------------------


class _DivergesAfter(nn.Module):
    """A model whose logits become NaN after ``good`` forward passes in training."""

    def __init__(self, inner: nn.Module, good: int) -> None:
        super().__init__()
        self.inner, self.good, self.calls = inner, good, 0

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = self.inner(input_ids)
        if self.training:
            self.calls += 1
            if self.calls > self.good:
                return logits * math.nan
        return logits


def test_a_diverged_step_makes_the_epoch_loss_nan_not_the_mean_of_the_rest(
    model: TinyGPT, tokens: Tokens
) -> None:
    with pytest.warns(SkippedStepsWarning, match="skipped"):
        result = fine_tune(_DivergesAfter(model, good=1), tokens(), epochs=1, batch_size=8,
                           num_workers=0, max_consecutive_skips=100)  # fmt: skip
    assert math.isnan(result.epochs[0].train_loss) and result.overflow_steps >= 1


def test_a_run_whose_steps_keep_being_skipped_stops_with_a_clear_error(
    model: TinyGPT, tokens: Tokens
) -> None:
    with (
        pytest.warns(SkippedStepsWarning) as warned,
        pytest.raises(TrainingDivergedError, match="3 optimizer steps in a row"),
    ):
        fine_tune(_DivergesAfter(model, good=1), tokens(64), epochs=1, batch_size=4,
                  num_workers=0, max_consecutive_skips=3)  # fmt: skip
    assert len(warned) == 1  # warned once, then stopped


def test_skipped_steps_are_named_in_the_warning_and_counted_in_their_epoch(
    model: TinyGPT, tokens: Tokens
) -> None:
    calls = itertools.count(1)

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = lm_loss(logits, labels)
        return loss * math.inf if next(calls) in (2, 6) else loss  # a step in each epoch

    with pytest.warns(SkippedStepsWarning, match=r"\(epoch 1, step 2\)$"):
        result = fine_tune(model, tokens(), epochs=2, batch_size=8, log_every=4, num_workers=0,
                           loss_fn=loss_fn)  # fmt: skip
    assert [e.overflow_steps for e in result.epochs] == [1, 1] and result.overflow_steps == 2


def test_the_skip_guard_says_where_and_what_to_change(names: Callable[..., bool]) -> None:
    with pytest.warns(SkippedStepsWarning) as warned:
        SkipGuard(limit=2).update(finite=False)  # no place given: the message ends there
    assert str(warned[0].message).endswith("not finite")
    guard = SkipGuard(limit=2)
    with pytest.warns(SkippedStepsWarning) as warned:
        guard.update(finite=False, where=" (epoch 1, step 4)")
    assert str(warned[0].message).endswith("not finite (epoch 1, step 4)")
    with pytest.raises(TrainingDivergedError) as raised:
        guard.update(finite=False, where=" (epoch 1, step 5)")
    message = str(raised.value)
    assert names(message, "2 optimizer steps", "(epoch 1, step 5)", "loss or gradient")
    assert names(message, "learning rate", "max_consecutive_skips", "expected", "NaN")


def test_the_skipped_step_warning_points_at_the_callers_line(
    model: TinyGPT, tokens: Tokens
) -> None:
    with pytest.warns(SkippedStepsWarning) as warned:
        fine_tune(_DivergesAfter(model, good=1), tokens(), epochs=1, batch_size=8, num_workers=0,
                  max_consecutive_skips=100)  # fmt: skip
    assert warned[0].filename == __file__


def test_fp16_calibration_skips_do_not_count_until_a_step_succeeds() -> None:
    guard = SkipGuard(limit=2, calibrating=True)
    for _ in range(5):
        guard.update(finite=False)  # the scaler backing off from 65536: expected
    guard.update(finite=True)
    with pytest.warns(SkippedStepsWarning):
        guard.update(finite=False)
    with pytest.raises(TrainingDivergedError):
        guard.update(finite=False)


def test_skips_while_an_fp16_scaler_calibrates_neither_warn_nor_stop_the_run(
    monkeypatch: pytest.MonkeyPatch, model: TinyGPT, tokens: Tokens
) -> None:
    monkeypatch.setattr("amptrain.trainer.resolve_precision", lambda *args, **kw: SCALED)
    calls = iter(range(1, 1000))

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = lm_loss(logits, labels)  # the first three steps overflow: the scale backs off
        return loss * math.inf if next(calls) <= 3 else loss

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a SkippedStepsWarning fails the test
        result = fine_tune(model, tokens(40), epochs=1, batch_size=4, num_workers=0,
                           loss_fn=loss_fn, max_consecutive_skips=2)  # fmt: skip
    assert result.overflow_steps == 3 and result.final_loss_scale == 65536.0 / 8


@pytest.mark.parametrize(
    "saved",
    [
        {"in_a_row": 3, "warned": True, "calibrating": False},
        {"in_a_row": 0, "warned": False, "calibrating": True},
    ],
)
def test_the_skip_guard_takes_back_every_field_it_saved(saved: dict[str, object]) -> None:
    guard = SkipGuard(limit=5, calibrating=not saved["calibrating"])
    guard.load_state_dict(saved)
    assert guard.state_dict() == saved


def test_a_fresh_skip_guard_saves_plain_values() -> None:
    fresh = SkipGuard(limit=5).state_dict()  # written into every checkpoint as it is
    assert fresh == {"in_a_row": 0, "warned": False, "calibrating": False}
    assert all(type(value) in (int, bool) for value in fresh.values())


@pytest.mark.parametrize(("bad", "accum"), [(24, 1), (99, 1), (-3, 1), (24, 3)])
def test_an_id_outside_the_vocabulary_in_any_batch_names_the_batch_and_the_id(
    model: TinyGPT,
    tokens: Tokens,
    names: Callable[..., bool],
    weights: Callable[..., Any],
    bad: int,
    accum: int,
) -> None:
    rows = tokens(40)
    rows[29, 5] = bad  # in the 8th batch of 4 rows, in order (the 2nd of a step's 3)
    before = weights(model)
    with pytest.raises(ValueError) as raised:
        fine_tune(model, DataLoader(rows, batch_size=4), epochs=1, num_workers=0,
                  grad_accum_steps=accum)  # fmt: skip
    assert names(str(raised.value), "batch 8", "epoch 1", f"token id {bad}", "24")
    after = weights(model)  # seven steps trained: the error came at the eighth batch, not later
    assert not all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


# --- resumed runs ----------------------------------------------------------------------------

Pair = Callable[..., tuple[Any, Any, TinyGPT, TinyGPT]]


@pytest.mark.slow
def test_a_resumed_run_ends_bit_for_bit_where_the_uninterrupted_one_does(
    resume_pair: Pair, same_weights: Callable[..., bool]
) -> None:
    full, resumed, whole, again = resume_pair()
    assert resumed.resumed_from and resumed.resumed_from.endswith("step-00000012.pt")
    assert same_weights(whole, again)
    assert resumed.train_loss_history == full.train_loss_history
    assert resumed.val_loss_history == full.val_loss_history
    assert resumed.evals == full.evals and resumed.steps == full.steps == 20


@pytest.mark.slow
def test_a_finished_run_resumed_twice_goes_on_as_if_resumed_once(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens,
    same_weights: Callable[..., bool],
) -> None:  # fmt: skip
    # A resume that finds the run at its end trains nothing but saves its checkpoint again;
    # that checkpoint must still hold the order of the epoch, for a later resume to go on from.
    rows, run = tokens(16), {"batch_size": 4, "num_workers": 0}
    once, twice = make_model(), make_model()
    for model, folder, finished_resumes in ((once, "a", 0), (twice, "b", 1)):
        args = {**run, "checkpoint_dir": str(tmp_path / folder)}
        fine_tune(make_model(), rows, epochs=1, **args)
        for _ in range(finished_resumes):
            assert fine_tune(make_model(), rows, epochs=1, resume_from="latest", **args).steps == 4
        with pytest.warns(ResumeSettingsWarning):  # two epochs where the run had one
            fine_tune(model, rows, epochs=2, resume_from="latest", **args)
    assert same_weights(once, twice)


@pytest.mark.slow
def test_resume_is_exact_with_accumulation_and_bf16(
    resume_pair: Pair, same_weights: Callable[..., bool]
) -> None:
    full, resumed, whole, again = resume_pair(
        grad_accum_steps=2, batch_size=2, precision="bf16-mixed"
    )
    assert same_weights(whole, again)
    assert resumed.train_loss_history == full.train_loss_history


@pytest.mark.slow
def test_a_callbacks_state_is_resumed_too(
    resume_pair: Pair, same_weights: Callable[..., bool]
) -> None:
    watchers = tuple([EarlyStopping(patience=100, min_delta=0.05)] for _ in range(3))
    full, resumed, whole, again = resume_pair(callbacks=watchers)
    whole_watcher, _, resumed_watcher = (run[0] for run in watchers)
    assert whole_watcher.bad_evals > 0  # the state is not the fresh one
    assert resumed_watcher.state_dict() == whole_watcher.state_dict()
    assert resumed.evals == full.evals and same_weights(whole, again)


def _shuffled(rows: torch.Tensor) -> DataLoader:
    return DataLoader(rows, batch_size=4, shuffle=True)


def _shuffled_seeded(rows: torch.Tensor) -> DataLoader:
    return DataLoader(rows, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5))


@pytest.mark.slow
@pytest.mark.parametrize("loader", [_shuffled, _shuffled_seeded], ids=["global", "own-generator"])
def test_a_users_shuffled_loader_resumes_in_the_same_order(
    resume_pair: Pair, same_weights: Callable[..., bool], loader: Callable[..., DataLoader]
) -> None:
    """The sampler draws its order from the global generator (or its own) when an epoch starts:
    the resumed epoch (the second, from step 12) must draw the same one."""
    full, resumed, whole, again = resume_pair(train=loader)
    assert resumed.resumed_from and resumed.resumed_from.endswith("step-00000012.pt")
    assert resumed.train_loss_history == full.train_loss_history
    assert same_weights(whole, again)


def test_a_checkpoint_of_another_model_shape_is_refused_with_what_differs(
    tmp_path: Path, make_model: Models, tokens: Tokens, names: Callable[..., bool]
) -> None:
    args = {**RUN, "epochs": 1, "checkpoint_dir": str(tmp_path)}
    fine_tune(make_model(), tokens(40), **args)
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(d_model=16), tokens(40), **args, resume_from="latest")
    assert names(
        str(raised.value), "another model's weights", "size mismatch", "(the same class and sizes)"
    )


class _OwnOrder(torch.utils.data.Sampler[int]):
    """A sampler whose order is its own hidden state."""

    def __init__(self, size: int) -> None:
        self.size, self.turn = size, 0

    def __iter__(self) -> Any:
        self.turn += 1
        return iter(torch.arange(self.size).roll(self.turn).tolist())

    def __len__(self) -> int:
        return self.size


@pytest.mark.slow
def test_a_sampler_whose_state_cannot_be_saved_is_refused_on_resume(
    tmp_path: Path, make_model: Models, tokens: Tokens, names: Callable[..., bool]
) -> None:
    rows = tokens(40)
    loader = DataLoader(rows, batch_size=4, sampler=_OwnOrder(40))
    args = {**RUN, "checkpoint_dir": str(tmp_path)}
    fine_tune(make_model(), loader, **args, checkpoint_every=4)
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), loader, **args, resume_from="latest")
    assert names(str(raised.value), "_OwnOrder", "state_dict()", "load_state_dict()")


def _no_schedule(optimizer: torch.optim.Optimizer, total_steps: int) -> None:
    return None


@pytest.mark.slow
def test_a_run_without_a_scheduler_resumes_exactly(
    resume_pair: Pair, same_weights: Callable[..., bool]
) -> None:
    full, resumed, whole, again = resume_pair(scheduler_factory=_no_schedule)
    assert resumed.steps == full.steps == 20 and same_weights(whole, again)
    assert {e.learning_rate for e in resumed.epochs} == {TrainConfig().learning_rate}


def test_a_saved_schedule_is_left_alone_by_a_run_resumed_without_one(
    tmp_path: Path, make_model: Models, tokens: Tokens
) -> None:
    args = {**RUN, "epochs": 1, "checkpoint_dir": str(tmp_path), "min_lr_ratio": 0.1}
    fine_tune(make_model(), tokens(40), **args)  # its checkpoint holds the schedule's state
    with pytest.warns(ResumeSettingsWarning):  # one more epoch than the checkpoint's run
        result = fine_tune(
            make_model(), tokens(40), **{**args, "epochs": 2}, resume_from="latest",
            scheduler_factory=_no_schedule,
        )  # fmt: skip
    assert result.steps == 20
    # the rate the saved optimizer holds after the schedule's last step (its floor), kept
    assert result.epochs[1].learning_rate == pytest.approx(TrainConfig().learning_rate * 0.1)
    assert result.epochs[1].learning_rate > 0  # the floor is not the default 0


def _poisoned_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss, made infinite on the batches whose first id is a multiple of 7 (4 of the
    20 steps of a resume pair): the scaler backs off on those, as fp16 overflows do."""
    loss = lm_loss(logits, labels)
    return loss * math.inf if int(labels[0, 0]) % 7 == 0 else loss


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::amptrain.SkippedStepsWarning")
def test_the_loss_scalers_state_is_resumed(
    monkeypatch: pytest.MonkeyPatch, resume_pair: Pair, same_weights: Callable[..., bool]
) -> None:
    """fp16's scaler on CPU (its protocol with fp32 compute): resolve_precision gives fp16 a
    CPU fallback, so the run is handed the plan with an enabled scaler."""
    monkeypatch.setattr("amptrain.trainer.resolve_precision", lambda *args, **kw: SCALED)
    full, resumed, whole, again = resume_pair(loss_fn=_poisoned_loss)
    assert full.final_loss_scale < 65536.0 and full.overflow_steps > 0
    assert (resumed.final_loss_scale, resumed.overflow_steps) == (
        full.final_loss_scale,
        full.overflow_steps,
    )
    assert same_weights(whole, again)


@pytest.mark.slow
def test_a_resumed_runs_progress_bar_starts_at_the_steps_already_trained(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_model: Models,
    tokens: Tokens,
    crash_at: Callable[[int], Callback],
) -> None:
    args = {**RUN, "checkpoint_dir": str(tmp_path), "checkpoint_every": 3}
    with pytest.raises(KeyboardInterrupt):
        fine_tune(make_model(), tokens(40), callbacks=[crash_at(4)], **args)
    capsys.readouterr()
    fine_tune(make_model(), tokens(40), resume_from="latest", progress=True, **args)
    shown = re.split(r"[\r\n]", capsys.readouterr().err)
    first, second = ([ln for ln in shown if ln.startswith(f"epoch {e}/2:")] for e in (1, 2))
    # the checkpoint at step 3 of 10: the bar counts on from there, not from 0; the next
    # epoch (the saved random state used once, by the first) starts from 0
    assert re.search(r"\| ?3/10 \[", first[0]) and re.search(r"\| ?10/10 \[", first[-1])
    assert re.search(r"\| ?0/10 \[", second[0])


# --- evaluation before the first step --------------------------------------------------------


def test_eval_on_start_validates_the_untrained_model_at_step_0(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    val, log = tokens(8, seed=1), tmp_path / "log.jsonl"
    cpu = torch.device("cpu")
    loader = make_dataloader(val, batch_size=4, shuffle=False, device=cpu)
    untrained = evaluate(make_model(), loader, resolve_precision("32-true", cpu), cpu)
    result = fine_tune(make_model(), tokens(16), val, epochs=1, batch_size=4, num_workers=0,
                       eval_on_start=True, jsonl_path=str(log))  # fmt: skip
    assert [e["step"] for e in result.evals] == [0, 4]
    assert result.evals[0]["val/loss"] == untrained["loss"]
    first = json.loads(log.read_text().splitlines()[0])
    assert first["step"] == 0 and first["val/loss"] == untrained["loss"]
    plain = fine_tune(make_model(), tokens(16), val, epochs=1, batch_size=4, num_workers=0)
    assert [e["step"] for e in plain.evals] == [4]  # not asked: no record at step 0


def test_eval_on_start_without_validation_data_is_refused(
    make_model: Callable[..., TinyGPT], tokens: Tokens, names: Names
) -> None:
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(16), epochs=1, eval_on_start=True)
    assert names(str(raised.value), "eval_on_start", "val_data")
