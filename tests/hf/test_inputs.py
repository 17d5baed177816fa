"""Every shape of training data the Hugging Face ecosystem hands over trains alike, and every
batch field the model's forward takes reaches it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from amptrain import fine_tune
from amptrain.collate import token_rows
from amptrain.distributed import World

from .conftest import encode, gpt2

datasets = pytest.importorskip("datasets")

RUN = {"epochs": 2, "batch_size": 4, "learning_rate": 1e-3, "log_every": 1}


def _rows(tokenizer: Any) -> list[list[int]]:
    return encode(tokenizer, 12)["input_ids"]


def _weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _train(data: Any, **options: Any) -> tuple[list[float], torch.Tensor]:
    model = gpt2()
    result = fine_tune(model, data, **{**RUN, **options})
    return result.train_loss_history, _weights(model)


def _forms(tokenizer: Any) -> dict[str, Any]:
    ids = _rows(tokenizer)
    encoding = encode(tokenizer, 12)  # a BatchEncoding of ragged columns
    table = {"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids]}
    return {
        "BatchEncoding": encoding,
        "list of dicts": [{"input_ids": r, "text": "a text column, left out"} for r in ids],
        "numpy rows": [np.asarray(r, dtype=np.int32) for r in ids],
        "datasets.Dataset": datasets.Dataset.from_dict(table),
    }


@pytest.mark.slow
def test_every_shape_of_data_trains_as_token_tensors(tokenizer: Any) -> None:
    # the reference: a list of 1-D token tensors, padded and masked by length
    reference = _train([torch.tensor(r) for r in _rows(tokenizer)])
    for name, data in _forms(tokenizer).items():
        losses, weights = _train(data, tokenizer=tokenizer)
        assert losses == pytest.approx(reference[0], abs=1e-6), name
        assert torch.allclose(weights, reference[1], atol=1e-6), name


@pytest.mark.slow
def test_a_streaming_dataset_trains_as_its_rows(tokenizer: Any) -> None:
    table = {"input_ids": _rows(tokenizer)}
    one_batch = {"batch_size": 12, "max_steps_per_epoch": 1}  # order inside a batch: no matter
    stream = datasets.Dataset.from_dict(table).to_iterable_dataset()
    streamed = _train(stream, tokenizer=tokenizer, **one_batch)
    in_memory = _train(datasets.Dataset.from_dict(table), tokenizer=tokenizer, **one_batch)
    assert streamed[0] == pytest.approx(in_memory[0], abs=1e-6)
    # the rows come in another order (the stream's own, not the shuffle's): the sums round
    # differently, by 5e-7 in the loss, and Adam's normalised step carries that into weights
    assert torch.allclose(streamed[1], in_memory[1], atol=1e-4)


class _Recorder(nn.Module):
    """A model that records the keyword inputs its forward receives."""

    def __init__(self, forward_kwargs: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 50)
        self.seen: set[str] = set()
        self.dtypes: set[torch.dtype] = set()
        self.forward = self._any if forward_kwargs else self._named  # type: ignore[method-assign]

    def _named(self, input_ids: torch.Tensor, attention_mask: Any = None,
               position_ids: Any = None, token_type_ids: Any = None) -> torch.Tensor:  # fmt: skip
        named = {"attention_mask": attention_mask, "position_ids": position_ids,
                 "token_type_ids": token_type_ids}  # fmt: skip
        return self._any(input_ids, **{k: v for k, v in named.items() if v is not None})

    def _any(self, input_ids: torch.Tensor, **inputs: Any) -> torch.Tensor:
        self.seen |= set(inputs)
        self.dtypes.add(input_ids.dtype)
        return self.embed(input_ids)


def _fielded_rows() -> list[dict[str, Any]]:
    return [
        {"input_ids": [3, 4, 5, 6], "position_ids": [0, 1, 2, 3], "token_type_ids": [0, 0, 1, 1],
         "special": [1, 0, 0, 1]},
        {"input_ids": [7, 8, 9], "position_ids": [0, 1, 2], "token_type_ids": [0, 1, 1],
         "special": [1, 0, 1]},
    ]  # fmt: skip


@pytest.mark.parametrize("forward_kwargs", [False, True])
def test_every_field_the_forward_takes_reaches_it(forward_kwargs: bool) -> None:
    model = _Recorder(forward_kwargs)
    fine_tune(model, _fielded_rows(), epochs=1, batch_size=2)
    named = {"attention_mask", "position_ids", "token_type_ids"}
    # by its signature; a forward with **kwargs gets every field
    assert model.seen == (named | {"special"} if forward_kwargs else named)


def test_int32_ids_from_a_dataloader_train_as_int64() -> None:
    ids = torch.randint(1, 50, (8, 6), dtype=torch.int32)
    model = _Recorder(forward_kwargs=False)
    result = fine_tune(model, DataLoader(ids, batch_size=4), epochs=1)
    assert result.steps == 2 and model.dtypes == {torch.int64}


@pytest.mark.parametrize(
    ("rows", "field"),
    [
        ([{"input_ids": [3, 4], "extra": [[1, 2], [3]]}] * 2, "extra"),
        ([{"input_ids": [0.5, 1.5]}] * 2, "input_ids"),
        ([{"input_ids": [3, 4], "labels": [1.0, 2.0]}] * 2, "labels"),
    ],
)
def test_a_field_that_cannot_be_a_tensor_is_named(rows: list[Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        fine_tune(_Recorder(forward_kwargs=True), rows, epochs=1, batch_size=2)


def test_columns_of_unequal_length_are_named(tokenizer: Any) -> None:
    encoding = dict(encode(tokenizer, 4))
    encoding["attention_mask"] = encoding["attention_mask"][:3]
    with pytest.raises(ValueError, match=r"\battention_mask\b"):
        fine_tune(gpt2(), encoding, epochs=1)


@pytest.mark.parametrize(
    ("rank", "size", "share"), [(0, 1, [0, 1, 2, 3, 4, 5]), (1, 2, [1, 3, 5]), (0, 3, [0, 3])]
)
def test_each_rank_streams_its_own_share_of_a_streaming_dataset(
    rank: int, size: int, share: list[int]
) -> None:
    stream = datasets.Dataset.from_dict({"input_ids": [[i] for i in range(6)]})
    data, _ = token_rows(stream.to_iterable_dataset(), pad_token_id=None, padding_side="right",
                         world=World(rank=rank, size=size))  # fmt: skip
    assert [row["input_ids"][0] for row in data] == share
