"""The optimizer and the learning-rate schedule :func:`~amptrain.trainer.fine_tune` builds
unless it is given its own."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from amptrain.config import TrainConfig

OptimizerFactory = Callable[[nn.Module], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer, int], Any]


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """Fused AdamW (CUDA and CPU) with weight decay on matrices only."""
    # Weight decay on matrices only; biases and norms are left alone (as in GPT-2 training).
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = device.type in ("cuda", "cpu") and all(p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, fused=fused)


Factor = Callable[[int], float]


def _warm(warmup: int, then: Factor) -> Factor:
    """A linear ramp from 0 over ``warmup`` steps (step 0 trains at rate 0, as in
    transformers), then ``then``."""
    return lambda step: step / max(1, warmup) if step < warmup else then(step)


def _progress(step: int, warmup: int, total: int) -> float:
    return (step - warmup) / max(1, total - warmup)


def _linear(warmup: int, total: int, cfg: TrainConfig) -> Factor:
    return _warm(warmup, lambda s: max(0.0, (total - s) / max(1, total - warmup)))


def _cosine(warmup: int, total: int, cfg: TrainConfig) -> Factor:
    def factor(step: int) -> float:
        cosine = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * _progress(step, warmup, total)))
        return max(0.0, cosine * (1 - cfg.min_lr_ratio) + cfg.min_lr_ratio)

    return _warm(warmup, factor)


def _cosine_with_restarts(warmup: int, total: int, cfg: TrainConfig) -> Factor:
    def factor(step: int) -> float:
        progress = _progress(step, warmup, total)
        if progress >= 1.0:
            return 0.0
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((cfg.lr_cycles * progress) % 1.0))))

    return _warm(warmup, factor)


def _polynomial(warmup: int, total: int, cfg: TrainConfig) -> Factor:
    lr, end = cfg.learning_rate, _POLYNOMIAL_END

    def factor(step: int) -> float:
        if step > total:
            return end / lr
        remaining = 1 - (step - warmup) / max(1, total - warmup)
        return ((lr - end) * remaining**cfg.lr_power + end) / lr

    return _warm(warmup, factor)


def _constant(warmup: int, total: int, cfg: TrainConfig) -> Factor:
    return lambda step: 1.0  # no warm-up, as transformers' "constant"


def _constant_with_warmup(warmup: int, total: int, cfg: TrainConfig) -> Factor:
    return _warm(warmup, lambda step: 1.0)


_POLYNOMIAL_END = 1e-7  # transformers' lr_end: the rate a polynomial decay ends at
# transformers.get_scheduler's names; each gives its rate factor at every step
SCHEDULES: dict[str, Callable[[int, int, TrainConfig], Factor]] = {
    "linear": _linear,
    "cosine": _cosine,
    "cosine_with_restarts": _cosine_with_restarts,
    "polynomial": _polynomial,
    "constant": _constant,
    "constant_with_warmup": _constant_with_warmup,
}


def warmup_steps(cfg: TrainConfig, total_steps: int) -> int:
    """Warm-up steps: ``warmup_ratio`` of the run, rounded up as transformers rounds it."""
    return math.ceil(total_steps * cfg.warmup_ratio)


def build_schedule(optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int) -> Any:
    """The named schedule ``cfg.lr_scheduler_type``: its rate at every step equals
    ``transformers.get_scheduler``'s with the same name, warm-up and steps ("cosine" with
    ``min_lr_ratio`` > 0 is transformers' "cosine_with_min_lr")."""
    make = SCHEDULES[cfg.lr_scheduler_type]
    lr = optimizer.defaults.get("lr", cfg.learning_rate)  # polynomial decays from the optimizer's
    factor = make(warmup_steps(cfg, total_steps), total_steps, replace(cfg, learning_rate=lr))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
