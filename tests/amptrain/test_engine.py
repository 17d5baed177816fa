"""amptrain.engine: the training step in the order mixed precision needs (each property pinned
by a test that fails when the order changes, with an enabled CPU GradScaler wherever the scaler
matters), accumulation, skipped steps, its saved state, and evaluation. The tests marked
``cuda`` run the paths only a GPU takes (``pytest -m cuda``)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from amptrain import (
    TinyGPT,
    TrainStep,
    evaluate,
    fine_tune,
    lm_loss,
    probes,
    resolve_precision,
)
from amptrain.benchmark.health import count_syncs
from amptrain.config import TrainConfig
from amptrain.optim import build_optimizer
from amptrain.precision import PrecisionPlan

Tokens = Callable[..., torch.Tensor]
CPU = torch.device("cpu")
SCALED = PrecisionPlan(  # fp16's protocol on CPU: fp32 compute, an enabled loss scaler
    requested="16-mixed",
    name="16-mixed",
    device_type="cpu",
    autocast_dtype=None,
    param_dtype=None,
    scaler_enabled=True,
)
FP32 = resolve_precision("32-true", "cpu")
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture
def small(make_model: Callable[..., TinyGPT]) -> TinyGPT:
    """A smaller model than the shared one: 32 ids, 8 positions, width 16."""
    return make_model(vocab=32, seq=8, d_model=16)


BATCH = torch.randint(0, 32, (4, 8), generator=torch.Generator().manual_seed(1))


def _scaled_step(model: nn.Module, max_grad_norm: float = 1.0) -> TrainStep:
    optimizer = build_optimizer(model, TrainConfig(), CPU)
    return TrainStep(model, optimizer, SCALED, max_grad_norm=max_grad_norm)


# --- the step order --------------------------------------------------------------------------


def test_clipping_sees_unscaled_gradients(small: TinyGPT) -> None:
    reference = copy.deepcopy(small)
    lm_loss(reference(BATCH), BATCH).backward()
    true_norm = torch.nn.utils.get_total_norm([p.grad for p in reference.parameters()])
    step = _scaled_step(small, max_grad_norm=1e-3)
    assert step.loss_scale == 65536.0  # the scaler really scales
    out = step(BATCH, BATCH)
    assert out.grad_norm.item() == pytest.approx(true_norm.item(), rel=1e-4)


def test_a_non_finite_gradient_skips_the_step_counts_it_and_backs_off_the_scale(
    small: TinyGPT,
) -> None:
    step = _scaled_step(small)
    before = copy.deepcopy(small.state_dict())
    handle = small.head.weight.register_hook(lambda g: torch.full_like(g, float("nan")))
    step(BATCH, BATCH)
    handle.remove()
    for name, value in small.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert step.overflow_steps == 1 and step.loss_scale == 32768.0
    step(BATCH, BATCH)  # the next finite step trains again
    assert not torch.equal(small.head.weight, before["head.weight"])


def test_the_scaler_is_updated_after_every_step(small: TinyGPT) -> None:
    step = _scaled_step(small)
    for expected in (1, 2, 3):
        step(BATCH, BATCH)
        assert step.scaler._get_growth_tracker() == expected


def test_gradients_are_cleared_after_every_step(small: TinyGPT) -> None:
    step = _scaled_step(small)
    for _ in range(2):
        step(BATCH, BATCH)
        assert all(p.grad is None for p in small.parameters())


@pytest.mark.slow
def test_no_graph_or_tensor_outlives_a_step(small: TinyGPT) -> None:
    step = _scaled_step(small)
    step(BATCH, BATCH)
    before = probes.live_tensors()
    outputs = [step(BATCH, BATCH) for _ in range(4)]
    after = probes.live_tensors()
    assert all(o.loss.grad_fn is None and o.grad_norm.grad_fn is None for o in outputs)
    assert after["graph_attached"] == before["graph_attached"]
    assert after["count"] <= before["count"] + 2 * len(outputs)  # the outputs themselves


def test_a_step_of_no_micro_batches_is_a_clear_error(small: TinyGPT) -> None:
    step = TrainStep(small, torch.optim.SGD(small.parameters(), lr=0.1), FP32)
    with pytest.raises(ValueError, match="micro-batch"):
        step.run([])


# --- skipped steps ---------------------------------------------------------------------------


def _adamw_step(
    make_model: Callable[..., TinyGPT], precision: str = "32-true", fused: bool = False
) -> tuple[TinyGPT, TrainStep]:
    model = make_model(vocab=16, seq=8, d_model=16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused)
    return model, TrainStep(model, opt, resolve_precision(precision, "cpu"), max_grad_norm=1.0)


def test_step_updates_weights_and_clears_gradients(make_model: Callable[..., TinyGPT]) -> None:
    model, step = _adamw_step(make_model)
    before = model.head.weight.detach().clone()
    ids = torch.randint(1, 16, (4, 8))
    out = step(ids, ids)
    assert math.isfinite(float(out.loss)) and float(out.grad_norm) > 0
    assert not torch.equal(before, model.head.weight)
    assert all(p.grad is None for p in model.parameters())
    assert step.overflow_steps == 0 and step.loss_scale == 1.0


class _PoisonGrad:
    """Makes the next backward pass produce an infinite gradient on one parameter."""

    def __init__(self, param: nn.Parameter) -> None:
        self.armed = False
        param.register_hook(lambda g: torch.full_like(g, math.inf) if self.armed else g)


@pytest.mark.parametrize("fused", [True, False], ids=["fused-device-skip", "host-check"])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_non_finite_gradients_skip_the_step_count_an_overflow_and_training_goes_on(
    make_model: Callable[..., TinyGPT], precision: str, fused: bool
) -> None:
    model, step = _adamw_step(make_model, precision, fused)
    assert step.device_skip == fused
    poison = _PoisonGrad(model.blocks[0].qkv.weight)
    ids = torch.randint(1, 16, (4, 8))
    step(ids, ids)
    poison.armed = True
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = step(ids, ids)
    assert not math.isfinite(float(out.grad_norm))
    assert step.overflow_steps == 1
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters()), "step not skipped"
    poison.armed = False
    out = step(ids, ids)
    assert math.isfinite(float(out.grad_norm)) and step.overflow_steps == 1
    assert not torch.equal(before["tok_emb.weight"], model.tok_emb.weight)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_fp16_scaler_skips_overflow_and_backs_off_the_scale(
    make_model: Callable[..., TinyGPT],
) -> None:
    # A real GradScaler on CPU: the same object that runs under 16-mixed on CUDA.
    model, step = _adamw_step(make_model)
    step.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    poison = _PoisonGrad(model.head.weight)
    ids = torch.randint(1, 16, (4, 8))
    step(ids, ids)
    poison.armed = True
    before = model.head.weight.detach().clone()
    step(ids, ids)
    assert step.overflow_steps == 1
    assert torch.equal(before, model.head.weight)
    assert step.loss_scale == 2.0**9  # scaler.update() ran and halved the scale


class _FusedByName(torch.optim.Optimizer):
    """Says fused, like some third-party optimizers, but does not read ``found_inf``."""

    def __init__(self, params: object) -> None:
        super().__init__(params, {"lr": 0.1, "fused": True})

    @torch.no_grad()
    def step(self, closure: object = None) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def test_an_optimizer_fused_by_name_only_still_skips_non_finite_steps(
    make_model: Callable[..., TinyGPT],
) -> None:
    model = make_model(vocab=16, seq=8, d_model=16)
    step = TrainStep(model, _FusedByName(model.parameters()), FP32)
    poison = _PoisonGrad(model.head.weight)
    poison.armed = True
    ids = torch.randint(1, 16, (4, 8))
    before = model.head.weight.detach().clone()
    step(ids, ids)
    assert step.overflow_steps == 1 and torch.equal(before, model.head.weight)


def test_gradients_are_clipped_to_norm_one_unless_told_otherwise() -> None:
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert TrainStep(model, opt, FP32).max_grad_norm == 1.0
    assert TrainStep(model, opt, FP32, max_grad_norm=0.25).max_grad_norm == 0.25
    assert TrainStep(model, opt, FP32, max_grad_norm=None).max_grad_norm == math.inf


def test_models_of_one_weight_or_none_trainable_take_a_step() -> None:
    lookup = nn.Sequential(nn.Embedding(16, 16))  # one weight: its logits are its rows
    step = TrainStep(lookup, torch.optim.SGD(lookup.parameters(), lr=0.1), FP32)
    ids = torch.randint(0, 16, (2, 8))
    assert math.isfinite(float(step(ids, ids).loss)) and step.overflow_steps == 0
    frozen = nn.Sequential(nn.Embedding(16, 16)).requires_grad_(False)
    assert TrainStep(frozen, torch.optim.SGD(frozen.parameters(), lr=0.1), FP32).overflow_steps == 0


# --- accumulation ----------------------------------------------------------------------------


def _ragged(tokens: Tokens) -> tuple[torch.Tensor, torch.Tensor]:
    """Eight rows whose halves count very different numbers of tokens (padding ignored)."""
    ids = tokens(8)
    labels = ids.clone()
    labels[:4, 3:] = -100  # the first half scores 2 tokens per row, the second 11
    return ids, labels


def test_accumulated_micro_batches_equal_one_step_on_their_concatenation(
    make_model: Callable[..., TinyGPT], tokens: Tokens, weights: Callable[..., list]
) -> None:
    ids, labels = _ragged(tokens)
    whole, parts = make_model(), make_model()
    one = TrainStep(whole, build_optimizer(whole, TrainConfig(), CPU), FP32)
    two = TrainStep(parts, build_optimizer(parts, TrainConfig(), CPU), FP32)
    out_one = one(ids, labels)
    out_two = two.run([(ids[:4], labels[:4], {}), (ids[4:], labels[4:], {})])
    # a plain mean of the two micro-batch losses would weigh 8 tokens like 44
    torch.testing.assert_close(out_two.loss, out_one.loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out_two.grad_norm, out_one.grad_norm, rtol=1e-5, atol=1e-6)
    for a, b in zip(weights(whole), weights(parts), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ranks", [1, 2])
def test_totals_summed_over_ranks_that_count_alike_train_as_one_process(
    make_model: Callable[..., TinyGPT], tokens: Tokens, ranks: int
) -> None:
    # `ranks` ranks counting the same tokens: the sum over them, per rank, is this rank's count
    ids, labels = _ragged(tokens)
    alone, spread = make_model(), make_model()
    one = TrainStep(alone, build_optimizer(alone, TrainConfig(), CPU), FP32)
    kwargs = {"ranks": ranks} if ranks > 1 else {}  # one rank: the default
    summed = TrainStep(spread, build_optimizer(spread, TrainConfig(), CPU), FP32,
                       reduce=lambda total: total * ranks, **kwargs)  # fmt: skip
    micro = [(ids[:4], labels[:4], {}), (ids[4:], labels[4:], {})]
    out_one, out_summed = one.run(micro), summed.run(micro)
    torch.testing.assert_close(out_summed.loss, out_one.loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out_summed.grad_norm, out_one.grad_norm, rtol=1e-5, atol=1e-6)


def test_a_step_without_micro_batches_is_refused(
    model: TinyGPT, names: Callable[..., bool]
) -> None:
    step = TrainStep(model, build_optimizer(model, TrainConfig(), CPU), FP32)
    with pytest.raises(ValueError) as raised:
        step.run([])
    assert names(str(raised.value), "at least one micro-batch")


def test_the_scaler_steps_and_updates_once_per_accumulated_step(
    model: TinyGPT, tokens: Tokens
) -> None:
    step = TrainStep(model, build_optimizer(model, TrainConfig(), CPU), SCALED)
    ids, labels = _ragged(tokens)
    micro = [(ids[i : i + 2], labels[i : i + 2], {}) for i in range(0, 8, 2)]
    step.run(micro)
    step.run(micro)
    # growth_interval counts successful updates: two optimizer steps, not eight micro-steps
    assert step.scaler._growth_tracker.item() == 2
    assert all(p.grad is None for p in model.parameters())


def test_accumulated_micro_batches_all_reduce_gradients_once_per_step(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the torchrun test's own count, here in one process, where mutation runs can see it
    monkeypatch.syspath_prepend(Path(__file__).parents[1] / "integration")
    import ddp_worker

    calls = ddp_worker.no_sync_calls((1, 2, 3, 4))
    # the same all-reduce as an unaccumulated step: only the last micro-batch syncs
    assert calls["2"] == calls["3"] == calls["4"] == calls["1"] >= 1


# --- its state -------------------------------------------------------------------------------


def test_a_steps_saved_state_continues_it_exactly(make_model: Callable[..., TinyGPT]) -> None:
    def build() -> tuple[TinyGPT, TrainStep]:
        model = make_model(vocab=32, seq=8, d_model=16)
        optimizer = build_optimizer(model, TrainConfig(), CPU)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return model, TrainStep(model, optimizer, SCALED, scheduler=schedule)

    model, step = build()
    poison = _PoisonGrad(model.head.weight)
    step(BATCH, BATCH)
    poison.armed = True
    step(BATCH, BATCH)  # skipped: the scale backs off and the count goes up
    poison.armed = False
    copy_model, copy_step = build()
    copy_model.load_state_dict(model.state_dict())
    copy_step.load_state_dict(copy.deepcopy(step.state_dict()))
    assert (copy_step.overflow_steps, copy_step.loss_scale) == (1, 32768.0)
    assert copy_step.learning_rate == step.learning_rate == 3e-4 * 0.25
    step(BATCH, BATCH)
    copy_step(BATCH, BATCH)
    pairs = zip(model.parameters(), copy_model.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


# --- evaluation ------------------------------------------------------------------------------


def test_validation_reads_each_row_once_in_the_order_given(model: TinyGPT, tokens: Tokens) -> None:
    seen: list[torch.Tensor] = []
    model.register_forward_pre_hook(
        lambda module, args: None if module.training else seen.append(args[0])
    )
    val = tokens(20, seed=1)
    fine_tune(model, tokens(), val, epochs=2, batch_size=8, num_workers=0)
    check, *batches = seen  # the data check's one row, then each epoch's validation
    assert check.shape[0] == 1 and torch.equal(torch.cat(batches), torch.cat([val, val]))


def test_a_placeholder_batch_runs_a_forward_and_counts_for_nothing(
    model: TinyGPT, tokens: Tokens
) -> None:
    calls: list[int] = []
    model.register_forward_pre_hook(lambda module, args: calls.append(args[0].numel()))
    plan, cpu = resolve_precision("32-true", "cpu"), torch.device("cpu")
    rows = tokens(4, seed=1)
    alone = evaluate(model, [rows], plan, cpu)
    assert evaluate(model, [None, rows, None], plan, cpu) == alone
    assert calls == [rows.numel(), 1, rows.numel(), 1]  # the placeholders: one token each


# --- the paths only a GPU takes --------------------------------------------------------------

CUDA = torch.device("cuda")


def _cuda_step(
    make_model: Callable[..., TinyGPT], precision: str, loss_fn: Callable = lm_loss
) -> TrainStep:
    plan = resolve_precision(precision, CUDA)
    model = make_model(vocab=64, seq=32, d_model=64, n_layers=2, n_heads=4)
    model = model.to(device=CUDA, dtype=plan.param_dtype)
    optimizer = build_optimizer(model, TrainConfig(precision=plan.name), CUDA)
    return TrainStep(model, optimizer, plan, loss_fn=loss_fn)


def _cuda_batch(tokens: Tokens, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    ids = tokens(8, seed, vocab=64, seq=32).to(CUDA)
    return ids, ids.clone()


def _poisoned(flag: list[bool]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """lm_loss, times infinity while ``flag[0]`` is set: every gradient becomes inf/NaN."""

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = lm_loss(logits, labels)
        return loss * math.inf if flag[0] else loss

    return loss_fn


def _params(step: TrainStep) -> list[torch.Tensor]:
    return [p.detach().clone() for p in step.params]


@pytest.mark.cuda
@cuda_only
def test_fused_adamw_is_used_and_skips_a_non_finite_step_on_the_device(
    make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    flag = [False]
    step = _cuda_step(make_model, "bf16-mixed", _poisoned(flag))
    assert step.optimizer.defaults["fused"] and step.device_skip
    assert not step.scaler.is_enabled()
    step(*_cuda_batch(tokens, 0))
    before = _params(step)
    flag[0] = True
    out = step(*_cuda_batch(tokens, 1))
    assert not torch.isfinite(out.grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(before, _params(step), strict=True))
    flag[0] = False
    step(*_cuda_batch(tokens, 2))
    assert step.overflow_steps == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(step), strict=True))


@pytest.mark.cuda
@cuda_only
def test_fp16_scaler_skips_the_step_and_halves_the_scale_on_a_gpu(
    make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    flag = [False]
    step = _cuda_step(make_model, "16-mixed", _poisoned(flag))
    assert step.scaler.is_enabled()
    step(*_cuda_batch(tokens, 0))
    scale, before = step.loss_scale, _params(step)
    flag[0] = True
    step(*_cuda_batch(tokens, 1))
    assert step.loss_scale == scale / 2
    assert all(torch.equal(a, b) for a, b in zip(before, _params(step), strict=True))
    assert step.overflow_steps == 1


@pytest.mark.cuda
@cuda_only
@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_a_training_step_never_syncs_with_the_host(
    make_model: Callable[..., TinyGPT], tokens: Tokens, precision: str
) -> None:
    step = _cuda_step(make_model, precision)
    batches = [_cuda_batch(tokens, i) for i in range(4)]
    step(*batches[3])  # the first step creates the optimizer state
    result = count_syncs(lambda: step(*batches.pop()), 3, CUDA)
    assert result["count"] == 0, result["locations"]
