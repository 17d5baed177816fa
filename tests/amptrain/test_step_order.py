"""The step order mixed precision needs, each property pinned by a test that fails when the
order changes; with an enabled CPU GradScaler wherever the scaler matters."""

from __future__ import annotations

import copy

import pytest
import torch

from amptrain import TinyGPT, probes
from amptrain.adapters import lm_loss
from amptrain.config import TrainConfig
from amptrain.engine import TrainStep
from amptrain.optim import build_optimizer
from amptrain.precision import PrecisionPlan

CPU = torch.device("cpu")
SCALED = PrecisionPlan(  # fp16's protocol on CPU: fp32 compute, an enabled loss scaler
    requested="16-mixed",
    name="16-mixed",
    device_type="cpu",
    autocast_dtype=None,
    param_dtype=None,
    scaler_enabled=True,
)


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(32, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)


def _step(model: TinyGPT, max_grad_norm: float = 1.0) -> TrainStep:
    optimizer = build_optimizer(model, TrainConfig(), CPU)
    return TrainStep(model, optimizer, SCALED, max_grad_norm=max_grad_norm)


BATCH = torch.randint(0, 32, (4, 8), generator=torch.Generator().manual_seed(1))


def test_clipping_sees_unscaled_gradients() -> None:
    model = _model()
    reference = copy.deepcopy(model)
    lm_loss(reference(BATCH), BATCH).backward()
    true_norm = torch.nn.utils.get_total_norm([p.grad for p in reference.parameters()])
    step = _step(model, max_grad_norm=1e-3)
    assert step.loss_scale == 65536.0  # the scaler really scales
    out = step(BATCH, BATCH)
    assert out.grad_norm.item() == pytest.approx(true_norm.item(), rel=1e-4)


def test_a_non_finite_gradient_skips_the_step_counts_it_and_backs_off_the_scale() -> None:
    model = _model()
    step = _step(model)
    before = copy.deepcopy(model.state_dict())
    handle = model.head.weight.register_hook(lambda g: torch.full_like(g, float("nan")))
    step(BATCH, BATCH)
    handle.remove()
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert step.overflow_steps == 1 and step.loss_scale == 32768.0
    step(BATCH, BATCH)  # the next finite step trains again
    assert not torch.equal(model.head.weight, before["head.weight"])


def test_the_scaler_is_updated_after_every_step() -> None:
    step = _step(_model())
    for expected in (1, 2, 3):
        step(BATCH, BATCH)
        assert step.scaler._get_growth_tracker() == expected


def test_gradients_are_cleared_after_every_step() -> None:
    model = _model()
    step = _step(model)
    for _ in range(2):
        step(BATCH, BATCH)
        assert all(p.grad is None for p in model.parameters())


def test_no_graph_or_tensor_outlives_a_step() -> None:
    step = _step(_model())
    step(BATCH, BATCH)
    before = probes.live_tensors()
    outputs = [step(BATCH, BATCH) for _ in range(4)]
    after = probes.live_tensors()
    assert all(o.loss.grad_fn is None and o.grad_norm.grad_fn is None for o in outputs)
    assert after["graph_attached"] == before["graph_attached"]
    assert after["count"] <= before["count"] + 2 * len(outputs)  # the outputs themselves
