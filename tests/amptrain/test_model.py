"""amptrain.model: TinyGPT's shapes, its tied head, its causal attention, its limits, its
FLOP count, and the gradient checkpointing switch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from amptrain import Callback, TinyGPT, TrainState, fine_tune
from amptrain.probes import saved_tensor_bytes


def test_logits_cover_every_position_and_the_vocabulary(model: TinyGPT) -> None:
    ids = torch.randint(0, model.vocab_size, (3, model.max_seq_len))
    assert model(ids).shape == (3, model.max_seq_len, model.vocab_size)
    assert model.head.weight is model.tok_emb.weight  # the head shares the embedding


def test_a_position_sees_only_the_tokens_before_it(model: TinyGPT) -> None:
    ids = torch.randint(0, model.vocab_size, (1, 8))
    changed = ids.clone()
    changed[0, 5] = (ids[0, 5] + 1) % model.vocab_size
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :5], b[:, :5])  # causal: the earlier positions are the same
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_sizes_it_cannot_take_are_clear_errors(make_model: Callable[..., TinyGPT]) -> None:
    with pytest.raises(ValueError, match="divisible"):
        TinyGPT(16, d_model=30, n_heads=4)
    model = make_model(seq=8)
    with pytest.raises(ValueError, match="max_seq_len 8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_the_flop_count_is_six_per_weight_plus_attention(
    make_model: Callable[..., TinyGPT],
) -> None:
    model = make_model(vocab=32, seq=16, d_model=16)
    weights = sum(p.numel() for p in model.parameters()) - model.pos_emb.weight.numel()
    assert model.flops_per_token() == 6 * weights + 12 * 1 * 16 * 16
    assert model.flops_per_token(4) == 6 * weights + 12 * 1 * 4 * 16


# --- gradient checkpointing ------------------------------------------------------------------


def saved_activation_bytes(model: nn.Module, input_ids: torch.Tensor) -> int:
    """Bytes autograd keeps for backward through one training forward of ``model``."""
    model.train()
    return saved_tensor_bytes(lambda: model(input_ids))


class _Switched(Callback):
    """Whether the model trained with gradient checkpointing on, step by step."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.seen = model, []

    def on_step_end(self, state: TrainState) -> None:
        self.seen.append(self.model.is_gradient_checkpointing)


def test_gradient_checkpointing_trains_the_same_weights_with_fewer_activations_kept(
    make_model: Callable[..., TinyGPT], tokens: Callable[..., torch.Tensor], same_weights: Any
) -> None:
    plain, checkpointed = make_model(n_layers=3), make_model(n_layers=3)
    args = {"epochs": 1, "batch_size": 4, "num_workers": 0, "learning_rate": 1e-2}
    fine_tune(plain, tokens(16), **args)
    switched = _Switched(checkpointed)
    fine_tune(checkpointed, tokens(16), **args, gradient_checkpointing=True, callbacks=[switched])
    assert switched.seen == [True] * 4 and not checkpointed.is_gradient_checkpointing
    assert same_weights(plain, checkpointed)  # fp32 on the CPU: the recomputation is exact
    model, ids = make_model(n_layers=3), tokens(4)
    kept = saved_activation_bytes(model, ids)
    model.gradient_checkpointing_enable()
    assert saved_activation_bytes(model, ids) < kept / 2  # each block keeps its input only


def test_a_model_without_the_switch_is_refused_before_training(
    tokens: Callable[..., torch.Tensor], names: Callable[..., bool]
) -> None:
    model = nn.Sequential(nn.Embedding(24, 8), nn.Linear(8, 24))
    with pytest.raises(ValueError) as raised:
        fine_tune(model, tokens(8), epochs=1, num_workers=0, gradient_checkpointing=True)
    assert names(str(raised.value), "Sequential", "gradient_checkpointing_enable")
