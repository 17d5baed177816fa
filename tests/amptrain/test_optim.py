"""amptrain.optim: AdamW with weight decay on matrices only, and the warm-up then cosine
schedule."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

from amptrain import MetricsTracker, TinyGPT, TrainConfig, fine_tune
from amptrain.optim import build_optimizer, build_schedule


def test_weight_decay_is_on_matrices_only_and_adamw_is_fused_on_cpu_and_cuda(
    model: TinyGPT,
) -> None:
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


def test_frozen_weights_are_left_out_of_the_optimizer(model: TinyGPT) -> None:
    model.pos_emb.requires_grad_(False)
    optimizer = build_optimizer(model, TrainConfig(), torch.device("cpu"))
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert id(model.pos_emb.weight) not in optimized
    assert optimized == {id(p) for p in model.parameters() if p.requires_grad}


def _schedule(total_steps: int, **config: float) -> list[float]:
    """The rate factor at steps 0 to total_steps + 2 (past the end too)."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    (factor,) = build_schedule(optimizer, TrainConfig(**config), total_steps).lr_lambdas
    return [factor(step) for step in range(total_steps + 3)]


def test_the_schedule_warms_up_linearly_then_follows_a_cosine_down_to_its_floor() -> None:
    cosine = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(9)]
    expected = [0.0, 0.5, *cosine]  # 2 warm-up steps of 10 from 0, then 8 of decay
    # (past the end, as in transformers, the cosine goes on: a run never steps there)
    assert _schedule(10, warmup_ratio=0.2, min_lr_ratio=0.1)[:11] == pytest.approx(expected)
    assert expected[6] == pytest.approx(0.55)  # half-way down: half-way between peak and floor


def test_a_one_step_schedule_decays_in_that_step() -> None:
    assert _schedule(1, warmup_ratio=0.0, min_lr_ratio=0.2)[:2] == pytest.approx([1, 0.2])


def test_learning_rate_warms_up_then_decays(
    model: TinyGPT, tokens: Callable[..., torch.Tensor]
) -> None:
    tracker = MetricsTracker(history_size=1000)
    fine_tune(model, tokens(64), epochs=2, batch_size=4, learning_rate=1e-3, warmup_ratio=0.25,
              min_lr_ratio=0.1, tracker=tracker, num_workers=0)  # fmt: skip
    lrs = [r["train/lr"] for r in tracker.history]
    peak = lrs.index(max(lrs))
    assert 0 < peak < len(lrs) - 1 and max(lrs) == pytest.approx(1e-3)
    assert lrs[-1] < lrs[peak] and lrs[-1] >= 1e-4 - 1e-12


class _NoDefaultRate(torch.optim.Optimizer):
    """An optimizer of one's own whose groups carry their rate, with no default one."""

    def __init__(self, params: list[dict[str, object]]) -> None:
        super().__init__(params, defaults={})

    def step(self, closure: object = None) -> None:
        return None


def test_a_polynomial_decay_without_an_optimizer_default_rate_decays_from_the_configs() -> None:
    optimizer = _NoDefaultRate([{"params": [nn.Parameter(torch.zeros(1))], "lr": 0.1}])
    cfg = TrainConfig(lr_scheduler_type="polynomial", learning_rate=0.1, warmup_ratio=0.0)
    schedule = build_schedule(optimizer, cfg, 4)
    for _ in range(4):
        optimizer.step()
        schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-7)  # transformers' lr_end
