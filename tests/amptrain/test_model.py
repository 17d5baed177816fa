"""amptrain.model: TinyGPT's shapes, its tied head, its causal attention, its limits and its
FLOP count."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from amptrain import TinyGPT


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
