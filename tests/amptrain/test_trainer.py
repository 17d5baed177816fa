from __future__ import annotations

import io
import itertools
import json
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from amptrain import (
    Callback,
    FineTuneResult,
    PrecisionFallbackWarning,
    SkippedStepsWarning,
    TinyGPT,
    TrainConfig,
    TrainingDivergedError,
    TrainState,
    fine_tune,
    lm_loss,
    synthetic_token_data,
)

VOCAB, SEQ = 24, 12


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=32, n_layers=1, n_heads=2, max_seq_len=SEQ)


def _data(n: int = 32, seed: int = 0) -> torch.Tensor:
    return synthetic_token_data(n, SEQ, VOCAB, seed=seed)


class _Wrapped(nn.Module):
    """Returns logits in another shape, as Hugging Face models and others do."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.inner, self.kind = _model(), kind

    def forward(self, input_ids: torch.Tensor) -> object:
        logits = self.inner(input_ids)
        return {
            "tuple": (logits,),
            "dict": {"logits": logits},
            "object": SimpleNamespace(logits=logits),
        }[self.kind]


@pytest.mark.parametrize("kind", ["tuple", "dict", "object"])
def test_any_output_shape_trains(kind: str) -> None:
    result = fine_tune(_Wrapped(kind), _data(), epochs=1, num_workers=0)
    assert math.isfinite(result.epochs[0].train_loss)


def test_result_holds_every_measurement_and_serialises() -> None:
    result = fine_tune(_model(), _data(), _data(8, seed=1), epochs=2, batch_size=8, num_workers=0)
    assert isinstance(result, FineTuneResult)
    assert result.precision == "32-true" and result.device == "cpu" and result.world_size == 1
    assert result.steps == 2 * 4 and result.train_samples == 32 and result.val_samples == 8
    epoch = result.epochs[-1]
    for name in (
        "train_loss",
        "val_loss",
        "val_perplexity",
        "val_accuracy",
        "grad_norm_mean",
        "grad_norm_std",
        "grad_norm_min",
        "grad_norm_max",
        "learning_rate",
        "samples_per_second",
        "tokens_per_second",
    ):
        assert math.isfinite(getattr(epoch, name)), name
    assert epoch.val_perplexity == pytest.approx(math.exp(epoch.val_loss))
    assert epoch.peak_memory_mb is None  # CPU: no CUDA allocator figure
    for epoch in result.epochs:  # the rates are over the epoch's own training time
        assert epoch.samples_per_second * epoch.wall_time_s == pytest.approx(32)
        assert epoch.tokens_per_second * epoch.wall_time_s == pytest.approx(32 * SEQ)
    assert json.loads(json.dumps(result.to_dict()))["epochs"][1]["epoch"] == 2


def test_ragged_list_data_is_padded_and_trains() -> None:
    rows = [row[: 4 + i % 8] for i, row in enumerate(_data())]
    result = fine_tune(_model(), rows, rows[:8], epochs=1, batch_size=4, num_workers=0)
    epoch = result.epochs[0]
    assert math.isfinite(epoch.val_loss)
    # the token rate counts the rows' own tokens, not the padding that fills each batch out
    assert epoch.tokens_per_second * epoch.wall_time_s == pytest.approx(sum(map(len, rows)))


def test_validation_reads_each_row_once_in_the_order_given() -> None:
    model, seen = _model(), []
    model.register_forward_pre_hook(
        lambda module, args: None if module.training else seen.append(args[0])
    )
    val = _data(20, seed=1)
    fine_tune(model, _data(), val, epochs=2, batch_size=8, num_workers=0)
    check, *batches = seen  # the data check's one row, then each epoch's validation
    assert check.shape[0] == 1 and torch.equal(torch.cat(batches), torch.cat([val, val]))


def test_the_data_checks_run_a_forward_once_a_run_not_before_every_batch() -> None:
    model, calls = _model(), []
    model.register_forward_pre_hook(lambda module, args: calls.append(module.training))
    fine_tune(model, _data(40), epochs=2, batch_size=8, num_workers=0)
    # one check on one row, in eval mode, then the 2 x 5 training steps
    assert calls == [False] + [True] * 10


def test_a_ready_dataloader_of_dicts_trains() -> None:
    data = _data()
    loader = torch.utils.data.DataLoader(
        [{"input_ids": row} for row in data],
        batch_size=8,
        collate_fn=lambda rows: {"input_ids": torch.stack([r["input_ids"] for r in rows])},
    )
    result = fine_tune(_model(), loader, epochs=1)
    assert result.steps == 4


def test_same_seed_gives_the_same_run() -> None:
    def losses() -> list[float]:
        return fine_tune(
            _model(), _data(), epochs=2, batch_size=8, seed=7, deterministic=True, num_workers=1
        ).train_loss_history

    assert losses() == losses()


def test_learning_rate_warms_up_then_decays() -> None:
    from amptrain.metrics import MetricsTracker

    tracker = MetricsTracker(history_size=1000)
    fine_tune(
        _model(),
        _data(64),
        epochs=2,
        batch_size=4,
        learning_rate=1e-3,
        warmup_ratio=0.25,
        min_lr_ratio=0.1,
        tracker=tracker,
        num_workers=0,
    )
    lrs = [r["train/lr"] for r in tracker.history]
    peak = lrs.index(max(lrs))
    assert 0 < peak < len(lrs) - 1 and max(lrs) == pytest.approx(1e-3)
    assert lrs[-1] < lrs[peak] and lrs[-1] >= 1e-4 - 1e-12


def _schedule(total_steps: int, **config: float) -> list[float]:
    """The rate factor at steps 0 to total_steps + 2 (past the end too)."""
    from amptrain.trainer import build_schedule

    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    (factor,) = build_schedule(optimizer, TrainConfig(**config), total_steps).lr_lambdas
    return [factor(step) for step in range(total_steps + 3)]


def test_the_schedule_warms_up_linearly_then_follows_a_cosine_down_to_its_floor() -> None:
    cosine = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(9)]
    expected = [0.5, 1.0, *cosine, 0.1, 0.1]  # 2 warm-up steps of 10, then 8 of decay
    assert _schedule(10, warmup_ratio=0.2, min_lr_ratio=0.1) == pytest.approx(expected)
    assert expected[6] == pytest.approx(0.55)  # half-way down: half-way between peak and floor


def test_a_one_step_schedule_decays_in_that_step() -> None:
    assert _schedule(1, warmup_ratio=0.0, min_lr_ratio=0.2) == pytest.approx([1, 0.2, 0.2, 0.2])


def test_fp16_request_on_cpu_records_the_precision_used() -> None:
    with pytest.warns(PrecisionFallbackWarning):
        result = fine_tune(_model(), _data(), epochs=1, precision="16-mixed", num_workers=0)
    assert (result.precision_requested, result.precision) == ("16-mixed", "32-true")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epochs", 0),
        ("batch_size", 0),
        ("learning_rate", -1.0),
        ("learning_rate", math.nan),
        ("warmup_ratio", 1.0),
        ("max_grad_norm", 0.0),
        ("wandb_mode", "sometimes"),
    ],
)
def test_bad_config_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"TrainConfig.{field}"):
        TrainConfig(**{field: value})


# each setting's last valid value beside its first invalid one
_EDGES = [
    ("epochs", 1, 0),
    ("batch_size", 1, 0),
    ("learning_rate", 1e-12, 0.0),
    ("learning_rate", 1.0, math.inf),
    ("weight_decay", 0.0, -1e-9),
    ("warmup_ratio", 0.0, -0.01),
    ("warmup_ratio", 0.99, 1.0),
    ("min_lr_ratio", 0.0, -0.01),
    ("min_lr_ratio", 1.0, 1.01),
    ("max_grad_norm", 1e-9, 0.0),
    ("max_steps_per_epoch", 1, 0),
    ("max_consecutive_skips", 1, 0),
    ("grad_accum_steps", 1, 0),
    ("log_every", 1, 0),
    ("eval_every", 1, 0),
    ("checkpoint_every", 1, 0),
    ("keep_checkpoints", 1, 0),
    ("num_workers", 0, -1),
]


@pytest.mark.parametrize(("field", "good", "bad"), _EDGES)
def test_each_settings_bounds(field: str, good: object, bad: object) -> None:
    extra = {"checkpoint_dir": "checkpoints"} if field == "checkpoint_every" else {}
    assert getattr(TrainConfig(**{field: good}, **extra), field) == good
    with pytest.raises(ValueError) as raised:
        TrainConfig(**{field: bad}, **extra)
    assert str(raised.value) == f"TrainConfig.{field} has an invalid value: {bad!r}"


@pytest.mark.parametrize("mode", ["offline", "online", "disabled"])
def test_each_wandb_mode_is_taken(mode: str) -> None:
    assert TrainConfig(wandb_mode=mode).wandb_mode == mode


def test_a_wrong_type_is_named_with_every_type_the_setting_takes() -> None:
    with pytest.raises(ValueError) as raised:
        TrainConfig(max_steps_per_epoch="3")
    assert str(raised.value) == "TrainConfig.max_steps_per_epoch must be int or None, got str '3'"


def test_types_the_check_does_not_know_are_left_to_the_caller_and_the_rest_checked() -> None:
    import dataclasses

    from amptrain.config import check_types as _check_types

    @dataclasses.dataclass
    class _Settings:
        where: os.PathLike[str] | None  # not a type the check knows
        steps: int = 1

    _check_types(_Settings(where=Path(".")))
    with pytest.raises(ValueError, match=r"^TrainConfig\.steps must be int, got str 'x'$"):
        _check_types(_Settings(where=Path("."), steps="x"))


def test_weight_decay_is_on_matrices_only_and_adamw_is_fused_on_cpu_and_cuda() -> None:
    from amptrain.trainer import build_optimizer

    model = _model()
    cfg = TrainConfig(weight_decay=0.5, learning_rate=0.02)
    optimizer = build_optimizer(model, cfg, torch.device("cpu"))
    decay, no_decay = optimizer.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.5, 0.0)
    assert all(p.dim() >= 2 for p in decay["params"]) and all(
        p.dim() < 2 for p in no_decay["params"]
    )
    assert optimizer.defaults["fused"] and optimizer.defaults["lr"] == 0.02
    # devices here only named (the weights stay on the CPU, which fused AdamW also takes):
    # CUDA's fused kernel, Apple's plain loop
    assert build_optimizer(model, cfg, torch.device("cuda")).defaults["fused"]
    assert not build_optimizer(model, cfg, torch.device("mps")).defaults["fused"]


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(TypeError, match="n_epochs"):
        fine_tune(_model(), _data(), n_epochs=2)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_by_default_the_progress_bar_is_drawn_on_a_terminal_only(
    tty: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = _Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    fine_tune(_model(), _data(), epochs=1, num_workers=0)  # progress=None
    assert ("epoch 1/1" in stderr.getvalue()) == tty


def test_the_runs_wall_time_holds_its_epochs_and_no_more() -> None:
    begin = time.perf_counter()
    result = fine_tune(_model(), _data(), _data(8, seed=1), epochs=2, num_workers=0)
    outside = time.perf_counter() - begin
    assert sum(e.wall_time_s for e in result.epochs) <= result.wall_time_s <= outside


def test_a_model_without_weights_is_a_clear_error() -> None:
    class _NoWeights(nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return torch.zeros(*ids.shape, VOCAB)

    with pytest.raises(
        ValueError, match=r"^the model has no floating-point parameters: there is nothing to train$"
    ):
        fine_tune(_NoWeights(), _data(), epochs=1)


def test_progress_bar_stays_quiet_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    fine_tune(_model(), _data(), epochs=1, progress=False, num_workers=0)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_progress_bar_shows_loss_and_throughput_when_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a validation mid-epoch reads the pending steps back without the bar
    fine_tune(_model(), _data(), _data(8, seed=1), epochs=1, progress=True, num_workers=0,
              eval_every=3, log_every=4)  # fmt: skip
    err = capsys.readouterr().err
    assert "epoch 1/1" in err and "loss=" in err and "tok_s=" in err


def test_the_progress_bar_shows_the_latest_loss_and_the_token_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from amptrain import MetricsTracker

    tracker = MetricsTracker()
    result = fine_tune(
        _model(), _data(40), epochs=2, batch_size=8, log_every=2, progress=True,
        num_workers=0, tracker=tracker,
    )  # fmt: skip
    err = capsys.readouterr().err
    shown = re.split(r"[\r\n]", err)
    for epoch, metrics in enumerate(result.epochs, start=1):
        bar = [ln for ln in shown if ln.startswith(f"epoch {epoch}/2:")]
        assert "0/5" in bar[0] and "step/s" in bar[-1] and "5/5" in bar[-1]
        # the last bar of the epoch: its last step's loss, and the token rate so far, which the
        # epoch's (its clock stopped a moment later) cannot exceed
        loss, rate = re.search(r"loss=([\d.]+), tok_s=(\d+)\]", bar[-1]).groups()
        assert loss == f"{tracker.history[5 * epoch - 1]['train/loss']:.4f}"
        assert int(rate) >= int(metrics.tokens_per_second) - 1
    # leave=False: each finished bar is cleared (written over with spaces)
    assert sum(1 for ln in shown if ln and not ln.strip()) == 2


def test_no_warning_on_a_plain_fp32_run() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fine_tune(_model(), _data(), epochs=1, num_workers=0)


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):  # type: ignore[override]
        return iter(_data(64))


def test_an_iterable_dataset_needs_a_stated_epoch_size() -> None:
    loader = torch.utils.data.DataLoader(_Stream(), batch_size=8)
    message = (
        "^the training DataLoader has no length \\(an IterableDataset\\?\\): "
        "pass max_steps_per_epoch$"
    )
    with pytest.raises(ValueError, match=message):
        fine_tune(_model(), loader, epochs=1)
    result = fine_tune(_model(), loader, epochs=2, max_steps_per_epoch=3)
    assert result.steps == 6 and result.train_samples == 0
    # a step of 2 micro-batches: the epoch is 3 steps of 2, from the stream or a sized loader
    approx = pytest.approx
    for data in (loader, _data(64)):
        result = fine_tune(_model(), data, epochs=1, max_steps_per_epoch=3, grad_accum_steps=2)
        epoch = result.epochs[0]
        assert result.steps == 3 and epoch.samples_per_second * epoch.wall_time_s == approx(48)


class _Stated(torch.utils.data.IterableDataset):
    """A stream whose stated length, an estimate, is not the rows it gives; counts those drawn."""

    def __init__(self, rows: int, stated: int) -> None:
        self.rows, self.stated, self.drawn = rows, stated, 0

    def __iter__(self):  # type: ignore[override]
        for row in _data(self.rows):
            self.drawn += 1
            yield row

    def __len__(self) -> int:
        return self.stated


def test_an_epoch_draws_its_stated_batches_and_ends_early_on_a_stream_that_runs_dry() -> None:
    # 5 batches stated, 2 a step: the third step trains on the fifth alone, and no sixth is drawn
    longer = _Stated(64, 20)
    result = fine_tune(_model(), DataLoader(longer, batch_size=4), epochs=2, grad_accum_steps=2)
    assert result.steps == 6 and longer.drawn == 2 * 20
    # 8 stated, 5 given: each epoch ends when the stream does, and is measured all the same
    shorter = _Stated(20, 32)
    result = fine_tune(_model(), DataLoader(shorter, batch_size=4), epochs=2, grad_accum_steps=2)
    assert result.steps == 6 and [e.epoch for e in result.epochs] == [1, 2]
    assert all(math.isfinite(e.train_loss) for e in result.epochs)


def test_the_logged_learning_rate_is_the_one_the_step_used() -> None:
    from amptrain.metrics import MetricsTracker

    tracker = MetricsTracker(history_size=1000)
    fine_tune(
        _model(),
        _data(64),
        epochs=1,
        batch_size=4,
        learning_rate=1e-3,
        warmup_ratio=0.25,
        tracker=tracker,
        num_workers=0,
    )  # 16 steps: the first 4 warm up, the first at 1/4 of the rate
    lrs = [r["train/lr"] for r in tracker.history]
    assert lrs[:4] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])


def test_wandb_dryrun_mode_is_offline_and_breaks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "dryrun")  # valid for wandb: its old name for offline
    assert TrainConfig().wandb_mode == "offline"
    result = fine_tune(_model(), _data(), epochs=1, num_workers=0)
    assert result.steps > 0


class _Settings(Callback):
    """Records the global kernel setting and the weights' dtype that each step ran with."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.seen = model, set()

    def on_step_end(self, state: TrainState) -> None:
        dtype = next(self.model.parameters()).dtype
        self.seen.add((torch.are_deterministic_algorithms_enabled(), dtype))


def test_deterministic_settings_are_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
    model = _model()
    during = _Settings(model)
    fine_tune(model, _data(), epochs=1, deterministic=True, num_workers=0, callbacks=[during])
    assert during.seen == {(True, torch.float32)}  # on while the run trains
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark) == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_bf16_true_gives_the_callers_model_back_in_its_dtype() -> None:
    model = _model()
    before = model.head.weight.detach().clone()
    during = _Settings(model)
    result = fine_tune(model, _data(), epochs=1, precision="bf16-true", callbacks=[during])
    assert result.precision == "bf16-true" and model.head.weight.dtype == torch.float32
    assert during.seen == {(False, torch.bfloat16)}  # trained in bf16
    assert not torch.equal(model.head.weight, before)  # trained, then cast back


class _DivergesAfter(nn.Module):
    """A model whose logits become NaN after ``good`` forward passes in training."""

    def __init__(self, good: int) -> None:
        super().__init__()
        self.inner, self.good, self.calls = _model(), good, 0

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = self.inner(input_ids)
        if self.training:
            self.calls += 1
            if self.calls > self.good:
                return logits * math.nan
        return logits


def test_a_diverged_step_makes_the_epoch_loss_nan_not_the_mean_of_the_rest() -> None:
    with pytest.warns(SkippedStepsWarning, match="skipped"):
        result = fine_tune(
            _DivergesAfter(good=1),
            _data(),
            epochs=1,
            batch_size=8,
            num_workers=0,
            max_consecutive_skips=100,
        )
    assert math.isnan(result.epochs[0].train_loss) and result.overflow_steps >= 1


def test_a_run_whose_steps_keep_being_skipped_stops_with_a_clear_error() -> None:
    with (
        pytest.warns(SkippedStepsWarning) as warned,
        pytest.raises(TrainingDivergedError, match="3 optimizer steps in a row were skipped"),
    ):
        fine_tune(
            _DivergesAfter(good=1),
            _data(64),
            epochs=1,
            batch_size=4,
            num_workers=0,
            max_consecutive_skips=3,
        )
    assert len(warned) == 1  # warned once, then stopped


def test_skipped_steps_are_named_in_the_warning_and_counted_in_their_epoch() -> None:
    calls = itertools.count(1)

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = lm_loss(logits, labels)
        return loss * math.inf if next(calls) in (2, 6) else loss  # a step in each epoch

    with pytest.warns(SkippedStepsWarning, match=r"not finite \(epoch 1, step 2\)$"):
        result = fine_tune(
            _model(), _data(), epochs=2, batch_size=8, log_every=4, num_workers=0, loss_fn=loss_fn
        )
    assert [e.overflow_steps for e in result.epochs] == [1, 1] and result.overflow_steps == 2


def test_the_skip_guards_messages_say_what_happened_and_what_to_do() -> None:
    from amptrain.trainer import SkipGuard

    with pytest.warns(SkippedStepsWarning) as warned:
        SkipGuard(limit=2).update(finite=False)  # no place given: the message ends there
    assert str(warned[0].message).endswith("the gradient is not finite")
    guard = SkipGuard(limit=2)
    with pytest.warns(SkippedStepsWarning) as warned:
        guard.update(finite=False, where=" (epoch 1, step 4)")
    assert str(warned[0].message) == (
        "an optimizer step was skipped: the gradient is not finite (epoch 1, step 4)"
    )
    with pytest.raises(TrainingDivergedError) as raised:
        guard.update(finite=False, where=" (epoch 1, step 5)")
    assert str(raised.value) == (
        "2 optimizer steps in a row were skipped (epoch 1, step 5): the loss or gradient is "
        "NaN or infinite. Lower the learning rate, check the data, or raise "
        "max_consecutive_skips if this is expected"
    )


def test_the_skipped_step_warning_points_at_the_callers_line() -> None:
    with pytest.warns(SkippedStepsWarning) as warned:
        fine_tune(_DivergesAfter(good=1), _data(), epochs=1, batch_size=8, num_workers=0,
                  max_consecutive_skips=100)  # fmt: skip
    assert warned[0].filename == __file__


def test_fp16_calibration_skips_do_not_count_until_a_step_succeeds() -> None:
    from amptrain.trainer import SkipGuard

    guard = SkipGuard(limit=2, calibrating=True)
    for _ in range(5):
        guard.update(finite=False)  # the scaler backing off from 65536: expected
    guard.update(finite=True)
    with pytest.warns(SkippedStepsWarning):
        guard.update(finite=False)
    with pytest.raises(TrainingDivergedError):
        guard.update(finite=False)


@pytest.mark.parametrize(
    "saved",
    [
        {"in_a_row": 3, "warned": True, "calibrating": False},
        {"in_a_row": 0, "warned": False, "calibrating": True},
    ],
)
def test_the_skip_guard_takes_back_every_field_it_saved(saved: dict[str, object]) -> None:
    from amptrain.trainer import SkipGuard

    guard = SkipGuard(limit=5, calibrating=not saved["calibrating"])
    guard.load_state_dict(saved)
    assert guard.state_dict() == saved


def test_a_fresh_skip_guard_saves_plain_values() -> None:
    from amptrain.trainer import SkipGuard

    fresh = SkipGuard(limit=5).state_dict()  # written into every checkpoint as it is
    assert fresh == {"in_a_row": 0, "warned": False, "calibrating": False}
    assert all(type(value) in (int, bool) for value in fresh.values())


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


def test_the_training_clock_adds_every_step_and_leaves_validation_out() -> None:
    sleeper = _Sleeper()
    result = fine_tune(
        _model(), _data(), _data(8, seed=1), epochs=2, batch_size=8, eval_every=1,
        num_workers=0, callbacks=[sleeper],
    )  # fmt: skip
    assert sleeper.evals == 2 * 4  # 3 in each epoch, and each epoch's end
    trained = [epoch.wall_time_s for epoch in result.epochs]
    assert all(seconds >= 4 * _Sleeper.STEP_S for seconds in trained)  # every step's, summed
    assert sum(trained) + sleeper.evals * _Sleeper.EVAL_S <= result.wall_time_s


@pytest.mark.parametrize(
    ("field", "value"),
    [("learning_rate", "3e-4"), ("epochs", 2.5), ("batch_size", True), ("deterministic", "yes")],
)
def test_wrong_types_are_reported_by_field_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"TrainConfig.{field} must be"):
        TrainConfig(**{field: value})


def test_token_ids_outside_the_vocabulary_are_a_clear_error() -> None:
    data = _data()
    data[0, 3] = VOCAB + 5
    with pytest.raises(ValueError, match=f"token id {VOCAB + 5} .* vocabulary of {VOCAB}"):
        fine_tune(_model(), data, epochs=1, num_workers=0)


def test_sequences_longer_than_the_models_positions_are_a_clear_error() -> None:
    long = synthetic_token_data(16, SEQ * 2, VOCAB)
    with pytest.raises(ValueError, match=f"{SEQ * 2} tokens .* {SEQ} positions"):
        fine_tune(_model(), long, epochs=1, num_workers=0)


class _HiddenStates(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(input_ids))  # [B, T, 16]: not logits over the vocabulary


def test_a_model_that_returns_hidden_states_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="last dimension is 16, not the vocabulary"):
        fine_tune(_HiddenStates(), _data(), epochs=1, num_workers=0)


def test_rows_too_short_to_train_on_are_a_clear_error() -> None:
    rows = [torch.tensor([3, 4, 5]), torch.tensor([7])]
    with pytest.raises(ValueError, match="row 1 has 1 token"):
        fine_tune(_model(), rows, epochs=1, num_workers=0)


def test_an_empty_training_loader_is_a_clear_error() -> None:
    empty = DataLoader(torch.empty(0, SEQ, dtype=torch.long), batch_size=4)
    with pytest.raises(ValueError, match=r"^the training data gives no batch: is it empty\?$"):
        fine_tune(_model(), empty, epochs=1)


def test_an_empty_validation_loader_is_a_clear_error() -> None:
    from torch.utils.data import DataLoader

    empty = DataLoader(torch.empty(0, SEQ, dtype=torch.long), batch_size=4)
    with pytest.raises(
        ValueError, match=r"^val_data gives no batch: pass validation rows, or no val_data$"
    ):
        fine_tune(_model(), _data(), empty, epochs=1, num_workers=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present")
def test_asking_for_cuda_without_it_is_a_clear_error() -> None:
    message = "TrainConfig.device is 'cuda' but CUDA is not available here: leave device unset"
    with pytest.raises(ValueError, match=f"^{re.escape(message)} to use the CPU$"):
        fine_tune(_model(), _data(), epochs=1, device="cuda", num_workers=0)


class _MaskAware(nn.Module):
    """A model whose forward takes attention_mask (as Hugging Face models do), and records it."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _model()
        self.masks: list[torch.Tensor | None] = []

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.masks.append(attention_mask)
        return self.inner(input_ids)


def _left_padded() -> list[dict[str, torch.Tensor]]:
    ids = synthetic_token_data(8, SEQ, VOCAB)
    mask = torch.ones_like(ids)
    mask[:, :4] = 0  # left padding: the first four positions are not text
    ids = ids.masked_fill(mask == 0, 0)
    return [{"input_ids": ids[i : i + 4], "attention_mask": mask[i : i + 4]} for i in (0, 4)]


def test_attention_mask_reaches_the_model_and_padding_is_not_scored() -> None:
    from amptrain.adapters import lm_loss
    from amptrain.metrics import MetricsTracker

    model, tracker = _MaskAware(), MetricsTracker()
    batches = _left_padded()
    expected = lm_loss(
        _model()(batches[0]["input_ids"]),
        batches[0]["input_ids"].masked_fill(batches[0]["attention_mask"] == 0, -100),
    ).item()
    loader = DataLoader(batches, batch_size=None)  # ready batches, as a tokenizer pipeline gives
    fine_tune(model, loader, epochs=1, tracker=tracker, max_grad_norm=None, learning_rate=1e-9)
    assert any(m is not None and torch.equal(m, batches[0]["attention_mask"]) for m in model.masks)
    assert tracker.history[0]["train/loss"] == pytest.approx(expected, rel=1e-5)


def test_labels_in_a_batch_are_honoured() -> None:
    from amptrain.metrics import MetricsTracker

    ids = synthetic_token_data(4, SEQ, VOCAB)
    labels = torch.full_like(ids, -100)
    labels[:, 5] = ids[:, 5]  # only one target per row counts
    tracker = MetricsTracker()
    loader = DataLoader([{"input_ids": ids, "labels": labels}], batch_size=None)
    fine_tune(_model(), loader, epochs=1, tracker=tracker, learning_rate=1e-9)
    from amptrain.adapters import lm_loss

    assert tracker.history[0]["train/loss"] == pytest.approx(
        lm_loss(_model()(ids), labels).item(), rel=1e-5
    )


def test_the_shuffle_order_depends_on_seed_and_epoch_not_on_the_worker_count() -> None:
    def losses(workers: int) -> list[float]:
        return fine_tune(
            _model(), _data(64), epochs=3, batch_size=8, seed=3, num_workers=workers
        ).train_loss_history

    assert losses(0) == losses(1)


def test_each_epoch_is_trained_in_its_own_shuffled_order() -> None:
    from amptrain.data import EpochShuffle

    ids = _data(16)
    ids[:, 0] = torch.arange(16)  # each row names itself
    seen: list[int] = []

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        seen.extend(labels[:, 0].tolist())
        return lm_loss(logits, labels)

    fine_tune(_model(), ids, epochs=3, batch_size=4, seed=5, num_workers=0, loss_fn=loss_fn)
    orders = [seen[i : i + 16] for i in range(0, 48, 16)]
    expected = []
    for epoch in (1, 2, 3):
        sampler = EpochShuffle(16, seed=5)
        sampler.set_epoch(epoch)
        expected.append(list(sampler))
    assert orders == expected and len({tuple(o) for o in orders}) == 3
