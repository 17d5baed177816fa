"""The optimizer and the learning-rate schedule :func:`~amptrain.trainer.fine_tune` builds
unless it is given its own."""

from __future__ import annotations

import math
from collections.abc import Callable
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


def build_schedule(optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int) -> Any:
    """Linear warm-up over ``warmup_ratio`` of the steps, then cosine decay to ``min_lr_ratio``."""
    warmup = int(cfg.warmup_ratio * total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
