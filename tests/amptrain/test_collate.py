"""amptrain.collate: rows of fields are padded into one batch as DataCollatorWithPadding does
(each field with its own fill, on the side asked for), a mask and left-padding positions are
made only where the rows give none, text is left out, and bad rows are refused by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from amptrain.collate import (
    IGNORE_INDEX,
    PadCollate,
    PadRows,
    SequenceDataset,
    _Columns,
    is_text,
    token_rows,
)
from amptrain.distributed import World

Names = Callable[..., bool]


def _rows(**fields: list[Any]) -> list[dict[str, Any]]:
    """Rows from columns: ``_rows(input_ids=[[1, 2], [3]])``."""
    size = len(next(iter(fields.values())))
    return [{name: column[i] for name, column in fields.items()} for i in range(size)]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("a", True),
        (["a", "b"], True),
        (["a"], True),
        (np.array(["a", "b"]), True),
        (np.array(["a"]), True),
        (np.array(["a", "b"], dtype=object), True),
        ([], False),
        ([1, 2], False),
        (np.array([], dtype=str), False),
        (np.array([], dtype=np.int64), False),
        (np.array([1, 2]), False),
        (np.array([1, 2], dtype=object), False),
        (np.array([3], dtype=np.uint8), False),
    ],
)
def test_text_is_a_string_or_a_non_empty_sequence_of_strings(value: Any, text: bool) -> None:
    assert is_text(value) is text


@pytest.mark.parametrize(("pad_token_id", "fill"), [(None, 0), (5, 5)])
def test_each_field_pads_with_its_own_value(pad_token_id: int | None, fill: int) -> None:
    rows = _rows(
        input_ids=[[1, 2, 3], [4]], labels=[[1, 2, 3], [4]], token_type_ids=[[1, 1, 1], [1]]
    )
    batch = PadRows(pad_token_id)(rows)
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, fill, fill]]
    assert batch["labels"].tolist() == [[1, 2, 3], [4, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch["token_type_ids"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["attention_mask"].dtype == torch.int64


def test_the_mask_made_here_also_masks_the_pad_id_inside_a_row() -> None:
    batch = PadRows(0)(_rows(input_ids=[[1, 0, 3], [4]]))
    assert batch["attention_mask"].tolist() == [[1, 0, 1], [1, 0, 0]]


def test_a_mask_the_rows_give_is_kept() -> None:
    batch = PadRows()(_rows(input_ids=[[1, 2, 3], [4, 5]], attention_mask=[[1, 1, 0], [0, 1]]))
    assert batch["attention_mask"].tolist() == [[1, 1, 0], [0, 1, 0]]


def test_left_padding_counts_positions_from_each_rows_first_token() -> None:
    batch = PadRows(padding_side="left")(_rows(input_ids=[[1, 2, 3], [4]]))
    assert batch["input_ids"].tolist() == [[1, 2, 3], [0, 0, 4]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0]]


def test_positions_the_rows_give_are_kept_and_right_padding_makes_none() -> None:
    rows = _rows(input_ids=[[1, 2, 3], [4]], position_ids=[[5, 6, 7], [9]])
    assert PadRows(padding_side="left")(rows)["position_ids"].tolist() == [[5, 6, 7], [0, 0, 9]]
    assert "position_ids" not in PadRows()(_rows(input_ids=[[1, 2, 3], [4]]))


def test_a_number_per_row_is_stacked_even_in_a_batch_of_one() -> None:
    assert PadRows()(_rows(input_ids=[[1, 2], [3]], label=[3, 4]))["label"].tolist() == [3, 4]
    one = PadRows()(_rows(input_ids=[[1, 2]], label=[3], labels=[[1, 2]]))
    assert one["label"].tolist() == [3] and one["labels"].tolist() == [[1, 2]]


def test_text_fields_and_empty_ones_are_left_out() -> None:
    rows = _rows(input_ids=[[1, 2], [3]], text=["a b", "c"], labels=[None, None])
    assert sorted(PadRows()(rows)) == ["attention_mask", "input_ids"]


def test_the_batch_has_the_first_rows_fields_and_one_a_later_row_lacks_is_named(
    names: Names,
) -> None:
    with pytest.raises(KeyError) as raised:
        PadRows()([{"input_ids": [1, 2], "labels": [1, 2]}, {"input_ids": [3]}])
    assert names(str(raised.value), "labels")


def test_a_first_row_without_input_ids_is_named_with_its_fields(names: Names) -> None:
    with pytest.raises(KeyError) as raised:
        PadRows()([{"text_ids": [1, 2]}, {"input_ids": [3]}])
    assert names(str(raised.value), "input_ids", "text_ids")


def test_a_field_of_rows_that_are_not_sequences_is_named(names: Names) -> None:
    with pytest.raises(ValueError) as raised:
        PadRows()(_rows(input_ids=[[1, 2], [3]], pixels=[[[1, 2]], [[3, 4]]]))
    assert names(str(raised.value), "pixels")


def test_input_ids_that_are_no_numbers_are_named(names: Names) -> None:
    with pytest.raises(ValueError) as raised:
        PadRows()([{"input_ids": None}])
    assert names(str(raised.value), "input_ids")


def test_columns_give_one_row_per_value(names: Names) -> None:
    columns = _Columns({"input_ids": [[1, 2]], "labels": [[1, 2]], "extra": None})
    assert len(columns) == 1 and columns[0] == {"input_ids": [1, 2], "labels": [1, 2]}
    with pytest.raises(ValueError) as raised:
        _Columns({"input_ids": []})
    assert names(str(raised.value), "no sequences", "empty")
    with pytest.raises(KeyError) as raised:
        _Columns({"ids": [[1, 2]], "mask": [[1, 1]]})
    assert names(str(raised.value), "input_ids", "ids", "mask")


def test_a_padding_side_other_than_right_or_left_is_refused(names: Names) -> None:
    with pytest.raises(ValueError) as raised:
        PadRows(None, "top")
    assert names(str(raised.value), "padding_side", "'top'")


def test_rows_of_fields_are_padded_on_the_side_asked_for() -> None:
    data = _rows(input_ids=[[1, 2], [3]])
    rows, collate = token_rows(data, pad_token_id=None, padding_side="left", world=World())
    assert collate([rows[0], rows[1]])["input_ids"].tolist() == [[1, 2], [0, 3]]


def test_a_numpy_array_of_ids_gives_the_rows_its_tensor_gives() -> None:
    ids = np.arange(12, dtype=np.int64).reshape(3, 4)
    rows, _ = token_rows(ids, pad_token_id=None, padding_side="right", world=World())
    assert len(rows) == 3 and all(torch.equal(rows[i], torch.from_numpy(ids[i])) for i in range(3))


# --- token tensors ---------------------------------------------------------------------------


def test_padding_is_ignored_in_labels() -> None:
    ids, labels = PadCollate()([torch.tensor([5, 6, 7]), torch.tensor([8])])  # 0 by default
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert labels.tolist() == [[5, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (torch.empty(0, 4, dtype=torch.long), "no sequences: the token data is empty"),
        ([torch.tensor([3, 4]), torch.tensor([7])], "row 1 has 1 token"),
        ([torch.tensor([], dtype=torch.long)], "row 0 has 0 tokens"),
        (torch.ones(3, 1, dtype=torch.long), "row 0 has 1 token"),
        (torch.ones(3, 4), "token ids must be integers, got a floating-point tensor"),
    ],
)
def test_data_too_small_to_train_on_is_named(
    rows: object, message: str, names: Callable[..., bool]
) -> None:
    with pytest.raises(ValueError) as raised:
        SequenceDataset(rows)  # type: ignore[arg-type]
    assert names(str(raised.value), message)
    assert names(str(raised.value), "at least 2 per row") == message.startswith("row")
