"""Padding never trains: a pad id marks it in token tensors, a mask in rows, left padding
keeps every token's position, and the token rate counts real tokens only."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from amptrain import TinyGPT, fine_tune
from amptrain.collate import padding_of

from .conftest import MODELS, build_tokenizer, encode

PAD = 0
RUN = {"epochs": 2, "batch_size": 4, "learning_rate": 1e-3, "log_every": 1}


def _weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _tiny() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(20, d_model=16, n_layers=1, n_heads=2, max_seq_len=12)


def test_a_padded_tensor_with_its_pad_id_trains_as_the_unpadded_rows() -> None:
    rows = torch.randint(1, 20, (8, 7), generator=torch.Generator().manual_seed(0))
    padded = torch.cat([rows, torch.full((8, 5), PAD)], dim=1)  # 5 pad columns on the right
    plain, reference = _tiny(), _tiny()
    unpadded = fine_tune(reference, rows, **RUN)
    result = fine_tune(plain, padded, pad_token_id=PAD, **RUN)
    assert result.train_loss_history == pytest.approx(unpadded.train_loss_history, abs=1e-6)
    assert torch.allclose(_weights(plain), _weights(reference), atol=1e-6)
    # the token rate counts the 56 real tokens an epoch, not the 96 positions
    for epoch in result.epochs:
        assert epoch.tokens_per_second * epoch.wall_time_s == pytest.approx(56)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_left_padded_rows_train_as_right_padded_ones(name: str, tokenizer: Any) -> None:
    rows = encode(tokenizer, 8)  # rows of unequal length
    runs = {}
    for side in ("right", "left"):
        model = MODELS[name]()
        result = fine_tune(model, rows, rows, tokenizer=tokenizer, padding_side=side, **RUN)
        runs[side] = (result, _weights(model))
    (right, right_weights), (left, left_weights) = runs["right"], runs["left"]
    assert left.train_loss_history == pytest.approx(right.train_loss_history, abs=1e-5)
    assert left.val_loss_history == pytest.approx(right.val_loss_history, abs=1e-5)
    assert torch.allclose(left_weights, right_weights, atol=1e-5)


def test_a_tokenizer_gives_its_pad_id_and_side(tokenizer: Any) -> None:
    pad = tokenizer.pad_token_id
    vocab = max(20, pad + 1)

    def tiny() -> TinyGPT:
        torch.manual_seed(0)
        return TinyGPT(vocab, d_model=16, n_layers=1, n_heads=2, max_seq_len=12)

    rows = torch.randint(0, vocab - 1, (8, 7), generator=torch.Generator().manual_seed(0))
    rows[rows >= pad] += 1  # every id but the pad id
    padded = torch.cat([rows, torch.full((8, 5), pad)], dim=1)
    taken, given = tiny(), tiny()
    result = fine_tune(taken, padded, tokenizer=tokenizer, **RUN)
    stated = fine_tune(given, padded, pad_token_id=pad, **RUN)
    assert result.train_loss_history == stated.train_loss_history  # its pad columns unscored
    assert torch.equal(_weights(taken), _weights(given))


def test_a_tokenizers_padding_is_read_from_it_and_defaults_where_it_has_none() -> None:
    left = build_tokenizer(padding_side="left")
    assert padding_of(left) == {"pad_token_id": left.pad_token_id, "padding_side": "left"}
    # the raw `tokenizers` object under it names neither: no pad id, right padding
    assert padding_of(left.backend_tokenizer) == {"pad_token_id": None, "padding_side": "right"}
    assert padding_of(None) == {}  # no tokenizer: TrainConfig's own fields stand


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_tokenizer_pads_its_rows_on_its_own_side(side: str) -> None:
    # The side comes from the tokenizer alone (no padding_side= given): each batch the model
    # trains on has its pad ids on that side and a real token at the other end of every row.
    tokenizer = build_tokenizer(padding_side=side)
    pad = tokenizer.pad_token_id
    batches: list[torch.Tensor] = []

    def seen(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        if module.training:
            batches.append(kwargs.get("input_ids", args[0] if args else None).clone())

    model = MODELS["gpt2"]()
    model.register_forward_pre_hook(seen, with_kwargs=True)
    fine_tune(model, encode(tokenizer, 8), tokenizer=tokenizer, **RUN)
    padded_end, real_end = (0, -1) if side == "left" else (-1, 0)
    assert batches and all((ids[:, real_end] != pad).all() for ids in batches)
    assert any((ids[:, padded_end] == pad).any() for ids in batches)  # rows were padded
