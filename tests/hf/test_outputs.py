"""What a run gives back with Hugging Face models and data: gradient checkpointing through the
model's own switch, tokens/s that count every real token of left-padded rows, and a streaming
dataset shuffled anew each epoch through its set_epoch."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from amptrain import Callback, TrainState, fine_tune
from amptrain.probes import saved_tensor_bytes

from .conftest import MODELS, build_tokenizer, encode

datasets = pytest.importorskip("datasets")
RUN = {"epochs": 1, "batch_size": 4, "num_workers": 0, "learning_rate": 1e-2}


class _Switched(Callback):
    """Whether the model trained with gradient checkpointing on, step by step."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.seen = model, []

    def on_step_end(self, state: TrainState) -> None:
        self.seen.append(self.model.is_activation_checkpointing)


def _saved_bytes(model: torch.nn.Module, ids: torch.Tensor) -> int:
    model.train()
    return saved_tensor_bytes(lambda: model(ids).logits.sum())


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_gradient_checkpointing_trains_the_same_weights_with_fewer_activations_kept(
    name: str, tokenizer: Any
) -> None:
    rows = encode(tokenizer, 8)
    plain, checkpointed = MODELS[name](), MODELS[name]()
    fine_tune(plain, rows, tokenizer=tokenizer, **RUN)
    switched = _Switched(checkpointed)
    fine_tune(checkpointed, rows, tokenizer=tokenizer, **RUN, gradient_checkpointing=True,
              callbacks=[switched])  # fmt: skip
    assert switched.seen == [True, True] and not checkpointed.is_activation_checkpointing
    for key, value in plain.state_dict().items():
        assert torch.equal(value, checkpointed.state_dict()[key]), (
            key
        )  # fp32 on the CPU: the recomputation is exact
    model, ids = MODELS[name](), torch.tensor([rows["input_ids"][0]])
    kept = _saved_bytes(model, ids)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert _saved_bytes(model, ids) < kept / 2


class _Tokens(Callback):
    """The run's token count, from its epoch's rate and time."""

    def on_epoch_end(self, state: TrainState, metrics: Any) -> None:
        self.tokens = round(metrics.tokens_per_second * metrics.wall_time_s)


@pytest.mark.parametrize("side", ["left", "right"])
def test_tokens_per_second_counts_every_real_token(side: str) -> None:
    tokenizer = build_tokenizer(padding_side=side)
    rows = encode(tokenizer, 8)
    real = sum(len(ids) for ids in rows["input_ids"])  # the first token of each row included
    counted = _Tokens()
    fine_tune(MODELS["gpt2"](), rows, tokenizer=tokenizer, **RUN, callbacks=[counted])
    assert counted.tokens == real


class _FirstRows(Callback):
    """The first ids of every row of each epoch's batches, as the model received them."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.epochs: dict[int, list[int]] = {}
        self.epoch = 1
        model.register_forward_pre_hook(self._seen, with_kwargs=True)

    def _seen(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        if module.training:
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.epochs.setdefault(self.epoch, []).extend(ids[:, 0].tolist())

    def on_epoch_end(self, state: TrainState, metrics: Any) -> None:
        self.epoch += 1


def test_a_streaming_dataset_is_shuffled_anew_each_epoch(tokenizer: Any) -> None:
    table = dict(encode(tokenizer, 8))
    stream = datasets.Dataset.from_dict(table).to_iterable_dataset()
    stream = stream.shuffle(seed=3, buffer_size=8)
    model = MODELS["gpt2"]()
    seen = _FirstRows(model)
    fine_tune(model, stream, tokenizer=tokenizer, **{**RUN, "epochs": 2}, callbacks=[seen],
              max_steps_per_epoch=2)  # fmt: skip
    expected = {}
    for epoch in (1, 2):  # datasets' own order for the epoch: the seed plus the epoch
        stream.set_epoch(epoch)
        expected[epoch] = [row["input_ids"][0] for row in stream]
    assert seen.epochs == expected
    assert expected[1] != expected[2]
