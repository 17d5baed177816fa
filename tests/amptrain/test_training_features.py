"""Gradient accumulation, checkpoints and resume, periodic evaluation and host reads,
callbacks and early stopping, custom loss/optimizer/scheduler, and torch.compile."""

from __future__ import annotations

import copy
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from amptrain import Callback, EarlyStopping, TinyGPT, TrainState, fine_tune, synthetic_token_data
from amptrain.adapters import lm_loss
from amptrain.checkpoint import checkpoints
from amptrain.config import TrainConfig
from amptrain.engine import TrainStep
from amptrain.optim import build_optimizer
from amptrain.precision import PrecisionPlan

VOCAB, SEQ = 24, 12
CPU = torch.device("cpu")
SCALED = PrecisionPlan("16-mixed", "16-mixed", "cpu", None, None, scaler_enabled=True)
FP32 = PrecisionPlan("32-true", "32-true", "cpu", None, None, scaler_enabled=False)


def _model(dropout: float = 0.0) -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=32, n_layers=1, n_heads=2, max_seq_len=SEQ, dropout=dropout)


def _data(n: int = 40, seed: int = 0) -> torch.Tensor:
    return synthetic_token_data(n, SEQ, VOCAB, seed=seed)


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# --- gradient accumulation -------------------------------------------------------------------


def _ragged() -> tuple[torch.Tensor, torch.Tensor]:
    """Eight rows whose halves count very different numbers of tokens (padding ignored)."""
    ids = _data(8)
    labels = ids.clone()
    labels[:4, 3:] = -100  # the first half scores 2 tokens per row, the second 11
    return ids, labels


def test_accumulated_micro_batches_equal_one_step_on_their_concatenation() -> None:
    ids, labels = _ragged()
    whole, parts = _model(), _model()
    one = TrainStep(whole, build_optimizer(whole, TrainConfig(), CPU), FP32)
    two = TrainStep(parts, build_optimizer(parts, TrainConfig(), CPU), FP32)
    out_one = one(ids, labels)
    out_two = two.run([(ids[:4], labels[:4], {}), (ids[4:], labels[4:], {})])
    # a plain mean of the two micro-batch losses would weigh 8 tokens like 44
    torch.testing.assert_close(out_two.loss, out_one.loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out_two.grad_norm, out_one.grad_norm, rtol=1e-5, atol=1e-6)
    for a, b in zip(_weights(whole), _weights(parts), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_scaler_steps_and_updates_once_per_accumulated_step() -> None:
    model = _model()
    step = TrainStep(model, build_optimizer(model, TrainConfig(), CPU), SCALED)
    ids, labels = _ragged()
    micro = [(ids[i : i + 2], labels[i : i + 2], {}) for i in range(0, 8, 2)]
    step.run(micro)
    step.run(micro)
    # growth_interval counts successful updates: two optimizer steps, not eight micro-steps
    assert step.scaler._growth_tracker.item() == 2
    assert all(p.grad is None for p in model.parameters())


def test_fine_tune_with_accumulation_matches_the_larger_batch() -> None:
    small, large = _model(), _model()
    a = fine_tune(small, _data(), epochs=1, batch_size=4, grad_accum_steps=2, num_workers=0)
    b = fine_tune(large, _data(), epochs=1, batch_size=8, num_workers=0)
    assert a.steps == b.steps == 5
    assert a.epochs[0].train_loss == pytest.approx(b.epochs[0].train_loss, rel=1e-5)
    for x, y in zip(_weights(small), _weights(large), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


# --- checkpoints and resume ------------------------------------------------------------------


class _Crash(Callback):
    """Stands in for a killed process: raises at a given step."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, state: TrainState) -> None:
        if state.step == self.at:
            raise KeyboardInterrupt(f"stopped at step {state.step}")


RUN = {"epochs": 2, "batch_size": 4, "num_workers": 0, "eval_every": 3, "log_every": 4}
RUN_LR = TrainConfig().learning_rate


def _resume_pair(
    tmp_path: Path, callbacks: tuple[list[Callback], ...] = ([], [], []), **extra: Any
) -> tuple[Any, Any, TinyGPT, TinyGPT]:
    """An uninterrupted run, and one killed at step 14 and resumed from its checkpoint;
    ``callbacks`` holds each of the three runs' own."""
    args = {**RUN, **extra, "checkpoint_every": 4, "keep_checkpoints": 2}
    val = _data(8, seed=1)
    whole = _model(dropout=0.2)  # dropout: the resumed run must also continue the random stream
    full = fine_tune(
        whole, _data(), val, checkpoint_dir=str(tmp_path / "a"), callbacks=callbacks[0], **args
    )
    broken = _model(dropout=0.2)
    with pytest.raises(KeyboardInterrupt):
        fine_tune(
            broken, _data(), val, checkpoint_dir=str(tmp_path / "b"),
            callbacks=[*callbacks[1], _Crash(14)], **args,
        )  # fmt: skip
    resumed_model = _model(dropout=0.2)
    resumed = fine_tune(
        resumed_model,
        _data(),
        val,
        checkpoint_dir=str(tmp_path / "b"),
        resume_from="latest",
        callbacks=callbacks[2],
        **args,
    )
    return full, resumed, whole, resumed_model


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b), strict=True))


def test_a_resumed_run_ends_bit_for_bit_where_the_uninterrupted_one_does(tmp_path: Path) -> None:
    full, resumed, whole, again = _resume_pair(tmp_path)
    assert resumed.resumed_from and resumed.resumed_from.endswith("step-00000012.pt")
    for a, b in zip(_weights(whole), _weights(again), strict=True):
        assert torch.equal(a, b)
    assert resumed.train_loss_history == full.train_loss_history
    assert resumed.val_loss_history == full.val_loss_history
    assert resumed.evals == full.evals and resumed.steps == full.steps == 20


def test_resume_is_exact_with_accumulation_and_bf16(tmp_path: Path) -> None:
    full, resumed, whole, again = _resume_pair(
        tmp_path, grad_accum_steps=2, batch_size=2, precision="bf16-mixed"
    )
    for a, b in zip(_weights(whole), _weights(again), strict=True):
        assert torch.equal(a, b)
    assert resumed.train_loss_history == full.train_loss_history


def test_a_callbacks_state_is_resumed_too(tmp_path: Path) -> None:
    watchers = tuple([EarlyStopping(patience=100, min_delta=0.05)] for _ in range(3))
    full, resumed, whole, again = _resume_pair(tmp_path, callbacks=watchers)
    whole_watcher, _, resumed_watcher = (run[0] for run in watchers)
    assert whole_watcher.bad_evals > 0  # the state is not the fresh one
    assert resumed_watcher.state_dict() == whole_watcher.state_dict()
    assert resumed.evals == full.evals and _same_weights(whole, again)


def _no_schedule(optimizer: torch.optim.Optimizer, total_steps: int) -> None:
    return None


def test_a_run_without_a_scheduler_resumes_exactly(tmp_path: Path) -> None:
    full, resumed, whole, again = _resume_pair(tmp_path, scheduler_factory=_no_schedule)
    assert resumed.steps == full.steps == 20 and _same_weights(whole, again)
    assert {e.learning_rate for e in resumed.epochs} == {RUN_LR}


def test_a_resumed_runs_progress_bar_starts_at_the_steps_already_trained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {**RUN, "checkpoint_dir": str(tmp_path), "checkpoint_every": 3}
    with pytest.raises(KeyboardInterrupt):
        fine_tune(_model(), _data(), callbacks=[_Crash(4)], **args)
    capsys.readouterr()
    fine_tune(_model(), _data(), resume_from="latest", progress=True, **args)
    shown = re.split(r"[\r\n]", capsys.readouterr().err)
    first, second = ([ln for ln in shown if ln.startswith(f"epoch {e}/2:")] for e in (1, 2))
    # the checkpoint at step 3 of 10: the bar counts on from there, not from 0; the next
    # epoch (the saved random state used once, by the first) starts from 0
    assert re.search(r"\| ?3/10 \[", first[0]) and re.search(r"\| ?10/10 \[", first[-1])
    assert re.search(r"\| ?0/10 \[", second[0])


def test_a_saved_schedule_is_left_alone_by_a_run_resumed_without_one(tmp_path: Path) -> None:
    args = {**RUN, "epochs": 1, "checkpoint_dir": str(tmp_path)}
    fine_tune(_model(), _data(), **args)  # its checkpoint holds the schedule's state
    result = fine_tune(
        _model(), _data(), **{**args, "epochs": 2}, resume_from="latest",
        scheduler_factory=_no_schedule,
    )  # fmt: skip
    assert result.steps == 20
    # the rate the saved optimizer holds after the schedule's last step (its floor), kept
    assert result.epochs[1].learning_rate == pytest.approx(RUN_LR * 0.1)


def _poisoned_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss, made infinite on the batches whose first id is a multiple of 7 (4 of the
    20 steps of a resume pair): the scaler backs off on those, as fp16 overflows do."""
    loss = lm_loss(logits, labels)
    return loss * math.inf if int(labels[0, 0]) % 7 == 0 else loss


@pytest.mark.filterwarnings("ignore::amptrain.SkippedStepsWarning")
def test_the_loss_scalers_state_is_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fp16's scaler on CPU (its protocol with fp32 compute): resolve_precision gives fp16 a
    CPU fallback, so the run is handed the plan with an enabled scaler."""
    monkeypatch.setattr("amptrain.trainer.resolve_precision", lambda *args: SCALED)
    full, resumed, whole, again = _resume_pair(tmp_path, loss_fn=_poisoned_loss)
    assert full.final_loss_scale < 65536.0 and full.overflow_steps > 0
    assert (resumed.final_loss_scale, resumed.overflow_steps) == (
        full.final_loss_scale,
        full.overflow_steps,
    )
    assert _same_weights(whole, again)


def test_skips_while_an_fp16_scaler_calibrates_neither_warn_nor_stop_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("amptrain.trainer.resolve_precision", lambda *args: SCALED)
    calls = iter(range(1, 1000))

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = lm_loss(logits, labels)  # the first three steps overflow: the scale backs off
        return loss * math.inf if next(calls) <= 3 else loss

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a SkippedStepsWarning fails the test
        result = fine_tune(
            _model(), _data(), epochs=1, batch_size=4, num_workers=0, loss_fn=loss_fn,
            max_consecutive_skips=2,
        )  # fmt: skip
    assert result.overflow_steps == 3 and result.final_loss_scale == 65536.0 / 8


def test_only_the_newest_checkpoints_are_kept_and_no_temporary_file_is_left(
    tmp_path: Path,
) -> None:
    result = fine_tune(
        _model(), _data(), epochs=1, batch_size=4, num_workers=0,
        checkpoint_dir=str(tmp_path), checkpoint_every=2, keep_checkpoints=2,
    )  # fmt: skip
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["step-00000008.pt", "step-00000010.pt"]
    assert result.checkpoint == str(tmp_path / "step-00000010.pt")


def test_a_checkpoint_written_on_a_gpu_resumes_on_a_cpu_only_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU run's file tags each tensor with the device it was on ("cuda:0"), and that tag is
    all that says where: written here with it, the file must still load onto this run's device."""
    import torch.serialization as serialization

    as_on_a_gpu = (0, lambda storage: "cuda:0", lambda storage, location: None)
    args = {**RUN, "epochs": 1, "checkpoint_dir": str(tmp_path)}
    with monkeypatch.context() as patch:
        patch.setattr(
            serialization, "_package_registry", [as_on_a_gpu, *serialization._package_registry]
        )
        fine_tune(_model(), _data(), **args)
    result = fine_tune(_model(), _data(), **{**args, "epochs": 2}, resume_from="latest")
    assert result.resumed_from and result.steps == 20 and result.device == "cpu"


def test_resume_refuses_other_settings_and_torn_files(tmp_path: Path) -> None:
    fine_tune(
        _model(), _data(), epochs=1, batch_size=4, num_workers=0, checkpoint_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="batch_size"):
        fine_tune(
            _model(), _data(), epochs=1, batch_size=8, num_workers=0, resume_from=str(tmp_path)
        )
    latest = checkpoints(tmp_path)[-1]
    latest.write_bytes(latest.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"cannot read checkpoint .*step-00000010\.pt"):
        fine_tune(_model(), _data(), epochs=1, batch_size=4, num_workers=0, resume_from=str(latest))
    with pytest.raises(ValueError, match=r"nothing-here does not exist"):
        fine_tune(_model(), _data(), epochs=1, resume_from=str(tmp_path / "nothing-here"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no checkpoint"):
        fine_tune(_model(), _data(), epochs=1, resume_from=str(tmp_path / "empty"))


def test_resume_names_every_setting_that_differs_and_another_world_size(tmp_path: Path) -> None:
    args = {"epochs": 1, "batch_size": 4, "num_workers": 0}
    fine_tune(_model(), _data(), checkpoint_dir=str(tmp_path), **args)
    with pytest.raises(ValueError, match=r"settings \(batch_size, seed\): the data position"):
        fine_tune(_model(), _data(), **{**args, "batch_size": 8, "seed": 3}, resume_from="latest",
                  checkpoint_dir=str(tmp_path))  # fmt: skip
    path = checkpoints(tmp_path)[-1]
    state = torch.load(path, weights_only=True)
    torch.save({**state, "world_size": 2}, path)  # as written by two torchrun processes
    message = r"\(world size \(2 processes\)\): .* resume with the settings it was written with"
    with pytest.raises(ValueError, match=message):
        fine_tune(_model(), _data(), resume_from=str(path), **args)


def test_resume_latest_starts_fresh_when_there_is_no_checkpoint_yet(tmp_path: Path) -> None:
    result = fine_tune(
        _model(), _data(), epochs=1, batch_size=4, num_workers=0,
        checkpoint_dir=str(tmp_path), resume_from="latest",
    )  # fmt: skip
    assert result.resumed_from is None and result.steps == 10


# --- periodic evaluation and host reads ------------------------------------------------------


class _Recorder(Callback):
    def __init__(self) -> None:
        self.steps: list[tuple[int, int, bool]] = []
        self.last_steps: dict[int, dict[str, float]] = {}
        self.evals: list[int] = []
        self.epochs: list[Any] = []
        self.tracker: Any = None
        self.main: set[bool] = set()

    def on_step_end(self, state: TrainState) -> None:
        self.steps.append((state.step, self.tracker.step, bool(state.last_step)))
        self.main.add(state.is_main)
        self.last_steps[state.step] = dict(state.last_step)

    def on_eval_end(self, state: TrainState, metrics: Any) -> None:
        self.evals.append(state.step)

    def on_epoch_end(self, state: TrainState, metrics: Any) -> None:
        self.epochs.append(metrics)


def test_eval_every_and_log_every(tmp_path: Path) -> None:
    from amptrain import MetricsTracker

    recorder, tracker = _Recorder(), MetricsTracker()
    recorder.tracker = tracker
    log = tmp_path / "log.jsonl"
    result = fine_tune(
        _model(), _data(), _data(8, seed=1), epochs=2, batch_size=4, num_workers=0,
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


# --- callbacks and early stopping ------------------------------------------------------------


class _StopAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, state: TrainState) -> None:
        if state.step == self.step:
            state.stop("enough")


def test_a_callback_stops_the_run() -> None:
    result = fine_tune(
        _model(), _data(), epochs=3, batch_size=4, num_workers=0, callbacks=[_StopAt(3)]
    )
    assert result.steps == 3 and result.stop_reason == "enough" and len(result.epochs) == 1


def test_early_stopping_stops_when_the_validation_loss_stops_improving() -> None:
    stop = EarlyStopping("val/loss", patience=2, min_delta=100.0)  # no gain counts
    result = fine_tune(
        _model(), _data(), _data(8, seed=1), epochs=3, batch_size=4, num_workers=0,
        eval_every=2, callbacks=[stop],
    )  # fmt: skip
    assert result.steps == 6  # best at step 2, no gain at 4 and 6
    assert result.stop_reason and "val/loss did not improve" in result.stop_reason


def test_early_stopping_runs_on_while_the_loss_improves() -> None:
    stop = EarlyStopping("val/loss", patience=1)
    result = fine_tune(
        _model(), _data(200), _data(16, seed=1), epochs=2, batch_size=8, num_workers=0,
        learning_rate=3e-3, callbacks=[stop],
    )  # fmt: skip
    assert result.stop_reason is None and len(result.epochs) == 2


def test_early_stopping_without_validation_data_says_so() -> None:
    with pytest.raises(ValueError, match="pass val_data"):
        fine_tune(_model(), _data(), epochs=1, num_workers=0, callbacks=[EarlyStopping()])


def test_callbacks_must_be_callbacks() -> None:
    with pytest.raises(TypeError, match=r"amptrain\.Callback"):
        fine_tune(_model(), _data(), epochs=1, callbacks=[print])  # type: ignore[list-item]


# --- custom loss, optimizer, scheduler; compile ----------------------------------------------


def test_custom_loss_optimizer_and_scheduler_are_used() -> None:
    seen: dict[str, Any] = {}

    def optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
        seen["model"] = model
        return torch.optim.SGD(model.parameters(), lr=0.5)

    def scheduler(opt: torch.optim.Optimizer, total: int) -> Any:
        seen["total"] = total
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.1)

    def no_signal(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return lm_loss(logits, labels) * 0.0

    model = _model()
    before = _weights(model)
    result = fine_tune(
        model, _data(), epochs=2, batch_size=4, num_workers=0,
        loss_fn=no_signal, optimizer_factory=optimizer, scheduler_factory=scheduler,
    )  # fmt: skip
    assert seen == {"model": model, "total": 20}
    assert result.epochs[-1].learning_rate == pytest.approx(0.05)
    assert result.epochs[0].train_loss == 0.0  # the custom loss is what trained
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(model), strict=True))


def test_the_schedule_is_told_the_runs_whole_steps() -> None:
    totals: list[Any] = []

    def scheduler(opt: torch.optim.Optimizer, total: int) -> None:
        totals.append(total)

    # 5 batches an epoch, 2 a step: 3 steps an epoch, the last of one batch
    result = fine_tune(_model(), _data(20), epochs=2, batch_size=4, grad_accum_steps=2,
                       num_workers=0, scheduler_factory=scheduler)  # fmt: skip
    assert totals == [6] and type(totals[0]) is int and result.steps == 6


@pytest.mark.parametrize("limit", [1e-3, None])
def test_the_gradient_is_clipped_to_max_grad_norm(limit: float | None) -> None:
    model = _model()
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    result = fine_tune(
        model, _data(8), epochs=1, batch_size=8, num_workers=0, max_grad_norm=limit,
        optimizer_factory=lambda m: torch.optim.SGD(m.parameters(), lr=1.0),
        scheduler_factory=_no_schedule,
    )  # fmt: skip
    moved = float((torch.cat([p.detach().flatten() for p in model.parameters()]) - before).norm())
    # plain SGD at rate 1: the weights move by the clipped gradient; unclipped, by all of it
    norm = result.epochs[0].grad_norm_mean  # measured before clipping
    assert norm > 0.1 and moved == pytest.approx(limit or norm, rel=1e-4)


@pytest.mark.slow
# inductor's CPU path calls torch.jit.script_method, which torch itself deprecates
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compiled_training_matches_eager() -> None:
    eager, compiled = _model(), _model()
    a = fine_tune(eager, _data(), epochs=1, batch_size=8, num_workers=0)
    b = fine_tune(compiled, _data(), epochs=1, batch_size=8, num_workers=0, compile=True)
    assert b.epochs[0].train_loss == pytest.approx(a.epochs[0].train_loss, rel=1e-4)
    for x, y in zip(_weights(eager), _weights(compiled), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-4)
    torch._dynamo.reset()


def test_bad_values_of_the_new_options_name_the_field() -> None:
    for field, value in [
        ("grad_accum_steps", 0),
        ("log_every", 0),
        ("eval_every", 0),
        ("keep_checkpoints", 0),
        ("compile", "yes"),
    ]:
        with pytest.raises(ValueError, match=f"TrainConfig.{field}"):
            TrainConfig(**{field: value})
    with pytest.raises(ValueError, match=r"^TrainConfig\.checkpoint_every needs checkpoint_dir$"):
        TrainConfig(checkpoint_every=5)


def test_copy_of_a_model_trains_the_same() -> None:  # the test helpers above rely on it
    a, b = _model(), copy.deepcopy(_model())
    assert all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b), strict=True))
    assert math.isfinite(fine_tune(a, _data(), epochs=1, num_workers=0).epochs[0].train_loss)


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
def test_the_loss_is_read_back_every_log_every_steps_only(log_every: int, reads: list) -> None:
    # A host read is a sync on a GPU (tests/amptrain/test_cuda.py counts them there): here its
    # cadence shows through the record each read leaves for the callbacks.
    spy = _ReadSteps()
    fine_tune(
        _model(), _data(80), epochs=1, batch_size=4, log_every=log_every, num_workers=0,
        callbacks=[spy],
    )  # fmt: skip
    assert spy.steps == reads
