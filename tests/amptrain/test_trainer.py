"""amptrain.trainer: fine_tune builds the run once (device, precision, data, step, sinks; the
rank asked once) and leaves the caller's objects and torch's settings as they were."""

from __future__ import annotations

import contextlib
import gc
import io
import math
import multiprocessing
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from amptrain import (
    Callback,
    MetricsTracker,
    PrecisionFallbackWarning,
    TinyGPT,
    TrainState,
    fine_tune,
    lm_loss,
)
from amptrain.distributed import World
from amptrain.metrics import gpu_utilization

Tokens = Callable[..., torch.Tensor]
Models = Callable[..., TinyGPT]
Weights = Callable[[nn.Module], list[torch.Tensor]]


@pytest.mark.slow
def test_same_seed_gives_the_same_run(make_model: Models, tokens: Tokens) -> None:
    def losses() -> list[float]:
        return fine_tune(make_model(), tokens(), epochs=2, batch_size=8, seed=7,
                         deterministic=True, num_workers=1).train_loss_history  # fmt: skip

    assert losses() == losses()


def test_fp16_request_on_cpu_records_the_precision_used(model: TinyGPT, tokens: Tokens) -> None:
    with pytest.warns(PrecisionFallbackWarning):
        result = fine_tune(model, tokens(), epochs=1, precision="16-mixed", num_workers=0)
    assert (result.precision_requested, result.precision) == ("16-mixed", "32-true")


def test_no_warning_on_a_plain_fp32_run(model: TinyGPT, tokens: Tokens) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fine_tune(model, tokens(), epochs=1, num_workers=0)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_by_default_the_progress_bar_is_drawn_on_a_terminal_only(
    tty: bool, monkeypatch: pytest.MonkeyPatch, model: TinyGPT, tokens: Tokens
) -> None:
    stderr = _Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    fine_tune(model, tokens(), epochs=1, num_workers=0)  # progress=None
    assert ("epoch 1/1" in stderr.getvalue()) == tty


def test_the_runs_wall_time_holds_its_epochs_and_no_more(model: TinyGPT, tokens: Tokens) -> None:
    begin = time.perf_counter()
    result = fine_tune(model, tokens(), tokens(8, seed=1), epochs=2, num_workers=0)
    outside = time.perf_counter() - begin
    assert sum(e.wall_time_s for e in result.epochs) <= result.wall_time_s <= outside


# --- the caller's objects and torch's settings -----------------------------------------------


class _Settings(Callback):
    """Records the global kernel setting and the weights' dtype that each step ran with."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.seen = model, set()

    def on_step_end(self, state: TrainState) -> None:
        dtype = next(self.model.parameters()).dtype
        self.seen.add((torch.are_deterministic_algorithms_enabled(), dtype))


def test_deterministic_settings_are_given_back(
    monkeypatch: pytest.MonkeyPatch, model: TinyGPT, tokens: Tokens
) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
    during = _Settings(model)
    fine_tune(model, tokens(), epochs=1, deterministic=True, num_workers=0, callbacks=[during])
    assert during.seen == {(True, torch.float32)}  # on while the run trains
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark) == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


class _Raises(Callback):
    def on_step_end(self, state: TrainState) -> None:
        raise RuntimeError("planted")


@pytest.mark.parametrize("ends", ["returns", "raises"])
def test_the_data_workers_of_a_run_end_with_it(model: TinyGPT, tokens: Tokens, ends: str) -> None:
    """With the garbage collector off, nothing but the run itself can end its loaders' worker
    processes (persistent ones outlive an epoch): none is left once fine_tune returns or raises."""
    callbacks = [_Raises()] if ends == "raises" else []
    before = set(multiprocessing.active_children())
    gc.disable()
    try:
        with contextlib.suppress(RuntimeError):
            fine_tune(model, tokens(), epochs=1, num_workers=1, callbacks=callbacks)
        left = set(multiprocessing.active_children()) - before
    finally:
        gc.enable()
    assert not left, left


def test_bf16_true_gives_the_callers_model_back_in_its_dtype(
    model: TinyGPT, tokens: Tokens
) -> None:
    before = model.head.weight.detach().clone()
    during = _Settings(model)
    result = fine_tune(model, tokens(), epochs=1, precision="bf16-true", callbacks=[during])
    assert result.precision == "bf16-true" and model.head.weight.dtype == torch.float32
    assert during.seen == {(False, torch.bfloat16)}  # trained in bf16
    assert not torch.equal(model.head.weight, before)  # trained, then cast back


class _Sink:
    """A sink that keeps what it was sent and whether it was closed."""

    def __init__(self) -> None:
        self.records: list[tuple[int, dict[str, Any]]] = []
        self.closed = False

    def log(self, record: Any, step: int) -> None:
        self.records.append((step, dict(record)))

    def close(self) -> None:
        self.closed = True


def test_the_callers_tracker_keeps_its_sinks_which_get_every_record_and_are_closed(
    tmp_path: Path, model: TinyGPT, tokens: Tokens
) -> None:
    sink = _Sink()
    tracker = MetricsTracker([sink])
    sinks = tracker.sinks
    fine_tune(model, tokens(16), tokens(4, seed=1), epochs=2, batch_size=8, num_workers=0,
              tracker=tracker, jsonl_path=str(tmp_path / "log.jsonl"))  # fmt: skip
    assert tracker.sinks is sinks and tracker.sinks == [sink]  # the run's own JSONL not added
    assert [step for step, _ in sink.records] == [1, 2, 2, 2, 3, 4, 4, 4]  # steps, val, epoch
    assert sink.closed and tracker.step == 4 and len(tracker.epochs) == 2
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == len(sink.records)


def test_a_rank_other_than_0_writes_nothing_and_leaves_the_callers_sinks_alone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model: TinyGPT,
    tokens: Tokens,
) -> None:
    # rank 1 of a world of one: every collective is a no-op, every rank decision is rank 1's
    monkeypatch.setattr("amptrain.trainer.join_world", lambda *args: World(rank=1))
    sink = _Sink()
    tracker = MetricsTracker([sink])
    seen: list[bool] = []

    class _Main(Callback):
        def on_step_end(self, state: TrainState) -> None:
            seen.append(state.is_main)

    result = fine_tune(
        model, tokens(16), tokens(4, seed=1), epochs=1, batch_size=8, num_workers=0,
        tracker=tracker, callbacks=[_Main()], progress=True,
        jsonl_path=str(tmp_path / "log.jsonl"), checkpoint_dir=str(tmp_path / "ckpt"),
        best_metric="val/loss",  # no best weights either
    )  # fmt: skip
    assert tracker.sinks == [sink] and sink.records == [] and not sink.closed
    assert tracker.step == 2 and len(tracker.epochs) == 1  # counted all the same
    assert not (tmp_path / "log.jsonl").exists() and not (tmp_path / "ckpt").exists()
    assert result.checkpoint is None and seen == [False, False]
    assert capsys.readouterr().err == ""  # no progress bar, though one was asked for


# --- the run's parts -------------------------------------------------------------------------


def test_fine_tune_with_accumulation_matches_the_larger_batch(
    make_model: Models, tokens: Tokens, weights: Weights
) -> None:
    small, large = make_model(), make_model()
    a = fine_tune(small, tokens(40), epochs=1, batch_size=4, grad_accum_steps=2, num_workers=0)
    b = fine_tune(large, tokens(40), epochs=1, batch_size=8, num_workers=0)
    assert a.steps == b.steps == 5
    assert a.epochs[0].train_loss == pytest.approx(b.epochs[0].train_loss, rel=1e-5)
    for x, y in zip(weights(small), weights(large), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_custom_loss_optimizer_and_scheduler_are_used(
    model: TinyGPT, tokens: Tokens, weights: Weights
) -> None:
    seen: dict[str, Any] = {}

    def optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
        seen["model"] = model
        return torch.optim.SGD(model.parameters(), lr=0.5)

    def scheduler(opt: torch.optim.Optimizer, total: int) -> Any:
        seen["total"] = total
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.1)

    def no_signal(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return lm_loss(logits, labels) * 0.0

    before = weights(model)
    result = fine_tune(
        model, tokens(40), epochs=2, batch_size=4, num_workers=0,
        loss_fn=no_signal, optimizer_factory=optimizer, scheduler_factory=scheduler,
    )  # fmt: skip
    assert seen == {"model": model, "total": 20}
    assert result.epochs[-1].learning_rate == pytest.approx(0.05)
    assert result.epochs[0].train_loss == 0.0  # the custom loss is what trained
    assert all(torch.equal(a, b) for a, b in zip(before, weights(model), strict=True))


def test_the_schedule_is_told_the_runs_whole_steps(model: TinyGPT, tokens: Tokens) -> None:
    totals: list[Any] = []

    def scheduler(opt: torch.optim.Optimizer, total: int) -> None:
        totals.append(total)

    # 5 batches an epoch, 2 a step: 3 steps an epoch, the last of one batch
    result = fine_tune(model, tokens(20), epochs=2, batch_size=4, grad_accum_steps=2,
                       num_workers=0, scheduler_factory=scheduler)  # fmt: skip
    assert totals == [6] and type(totals[0]) is int and result.steps == 6


def _no_schedule(optimizer: torch.optim.Optimizer, total_steps: int) -> None:
    return None


@pytest.mark.parametrize("limit", [1e-3, None])
def test_the_gradient_is_clipped_to_max_grad_norm(
    limit: float | None, model: TinyGPT, tokens: Tokens
) -> None:
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    result = fine_tune(
        model, tokens(8), epochs=1, batch_size=8, num_workers=0, max_grad_norm=limit,
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
def test_compiled_training_matches_eager(
    make_model: Models, tokens: Tokens, weights: Weights
) -> None:
    eager, compiled = make_model(), make_model()
    a = fine_tune(eager, tokens(40), epochs=1, batch_size=8, num_workers=0)
    b = fine_tune(compiled, tokens(40), epochs=1, batch_size=8, num_workers=0, compile=True)
    assert b.epochs[0].train_loss == pytest.approx(a.epochs[0].train_loss, rel=1e-4)
    for x, y in zip(weights(eager), weights(compiled), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-4)
    torch._dynamo.reset()


def test_the_model_fixture_is_the_same_model_every_time(
    make_model: Models, tokens: Tokens, same_weights: Callable[..., bool]
) -> None:  # the tests that compare runs rely on it
    a, b = make_model(), make_model()
    assert same_weights(a, b)
    assert math.isfinite(fine_tune(a, tokens(), epochs=1, num_workers=0).epochs[0].train_loss)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fine_tune_validates_and_measures_memory_on_the_gpu(
    make_model: Models, tokens: Tokens
) -> None:
    model = make_model(vocab=64, seq=32, d_model=64, n_layers=2, n_heads=4)
    train, val = tokens(32, vocab=64, seq=32), tokens(8, seed=1, vocab=64, seq=32)
    seen: list[dict[str, float]] = []

    class _Val(Callback):
        def on_eval_end(self, state: TrainState, metrics: Any) -> None:
            seen.append(dict(metrics))

    # compute_metrics: its first pass, before the first step, and each validation's, on the GPU
    result = fine_tune(model, train, val, epochs=1, batch_size=8, precision="bf16-mixed",
                       num_workers=0, compute_metrics=lambda p: {"rows": len(p.label_ids)},
                       callbacks=[_Val()])  # fmt: skip
    assert seen and seen[-1]["val/rows"] == 8
    (epoch,) = result.epochs
    assert result.device.startswith("cuda") and result.precision == "bf16-mixed"
    assert math.isfinite(epoch.val_loss) and 0 <= epoch.val_accuracy <= 1
    assert epoch.val_perplexity == pytest.approx(math.exp(epoch.val_loss))
    assert epoch.peak_memory_mb is not None and epoch.peak_memory_mb > 0
    # NVML may be missing from the machine; the epoch reports it when torch can read it
    assert (epoch.gpu_utilization is None) == (gpu_utilization(torch.device("cuda")) is None)


@pytest.mark.parametrize("where", ["train", "val"])
def test_an_id_outside_the_vocabulary_in_any_row_of_a_tensor_stops_the_run_before_a_step(
    model: TinyGPT, tokens: Tokens, where: str
) -> None:
    # Tensors are checked whole up front; the per-batch check would only meet a late row (or
    # the validation rows) after steps that trained already.
    train, val = tokens(32), tokens(8, seed=1)
    (train if where == "train" else val)[-1, -1] = model.vocab_size
    steps: list[int] = []
    model.register_forward_pre_hook(
        lambda module, args: steps.append(1) if module.training else None
    )
    with pytest.raises(ValueError, match=f"token id {model.vocab_size}"):
        fine_tune(model, train, val, epochs=1, batch_size=8, num_workers=0)
    assert steps == []
