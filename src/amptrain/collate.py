"""Training data in the shapes the Hugging Face ecosystem hands it over: a tokenizer's
``BatchEncoding`` (columns), a list of row mappings, NumPy arrays, and a ``datasets``
``Dataset`` or streaming ``IterableDataset``; each read as rows, and rows collated into padded
batches as ``transformers.DataCollatorWithPadding`` does (``attention_mask`` 0 on padding,
labels ``IGNORE_INDEX`` there). Token tensors (``[N, T]`` or a list of 1-D tensors) are rows
of a :class:`SequenceDataset`, batched by :class:`PadCollate`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

from amptrain.distributed import World

IGNORE_INDEX = -100  # label value that the loss and the accuracy skip

Collate = Callable[[list[Any]], Any]
PADDING_SIDES = ("right", "left")
# what each field pads with; a field not named here pads with 0 (token_type_ids, position_ids)
_PAD_VALUES = {"labels": IGNORE_INDEX, "attention_mask": 0}


def field_tensor(value: Any, name: str) -> torch.Tensor:
    """``value`` (a tensor, a NumPy array, a number or a list of numbers) as a tensor; integer
    ids as int64, the dtype embeddings and the loss take. A ValueError names ``name``."""
    if isinstance(value, torch.Tensor):
        tensor = value
    else:
        try:
            tensor = torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(
                f"batch field {name!r} is not numbers of one shape ({type(value).__name__}): "
                "pad its rows to one length, or leave the field out of the data"
            ) from exc
    if tensor.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8):
        tensor = tensor.long()
    return tensor


def is_text(value: Any) -> bool:
    """A string or a sequence of strings: a text column (``text``), never a model input."""
    if isinstance(value, str | bytes):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "USO" and value.size > 0 and isinstance(value.flat[0], str)
    return isinstance(value, Sequence) and len(value) > 0 and isinstance(value[0], str)


class SequenceDataset(Dataset):
    """Rows of token ids, from a 2-D tensor or a list of 1-D tensors of any length."""

    def __init__(self, rows: torch.Tensor | Sequence[torch.Tensor]) -> None:
        if isinstance(rows, torch.Tensor):
            if rows.dim() != 2:
                raise ValueError(
                    f"token ids must be a 2-D tensor [N, T] or a list of 1-D tensors; got shape "
                    f"{tuple(rows.shape)}"
                )
        else:
            rows = list(rows)
            for i, row in enumerate(rows):
                if not isinstance(row, torch.Tensor) or row.dim() != 1:
                    raise ValueError(f"item {i} of the token list is not a 1-D tensor")
        if len(rows) == 0:
            raise ValueError("no sequences: the token data is empty")
        lengths = [rows.shape[1]] if isinstance(rows, torch.Tensor) else [r.numel() for r in rows]
        short = next((i for i, n in enumerate(lengths) if n < 2), None)
        if short is not None:
            n = lengths[short]
            raise ValueError(
                f"row {short} has {n} token{'s' if n != 1 else ''}: next-token training needs "
                "at least 2 per row"
            )
        tensors = [rows] if isinstance(rows, torch.Tensor) else rows
        if any(t.is_floating_point() for t in tensors):
            raise ValueError("token ids must be integers, got a floating-point tensor")
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def id_range_and_length(self) -> tuple[int, int, int]:
        """(largest id, smallest id, longest row) over every row."""
        tensors = [self.rows] if isinstance(self.rows, torch.Tensor) else self.rows
        top = max(int(t.max()) for t in tensors)
        low = min(int(t.min()) for t in tensors)
        length = (
            self.rows.shape[1]
            if isinstance(self.rows, torch.Tensor)
            else max(t.numel() for t in tensors)
        )
        return top, low, length

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.rows[index]


class PadCollate:
    """Stack rows into ``(input_ids, labels)``, padding ragged rows; the loss skips padding."""

    def __init__(self, pad_token_id: int = 0) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        length = max(row.numel() for row in rows)
        input_ids = torch.full((len(rows), length), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), length), IGNORE_INDEX, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : row.numel()] = row
            labels[i, : row.numel()] = row
        return input_ids, labels


class PadRows:
    """Collate rows (mappings of fields, or 1-D token tensors) into one padded batch.

    Every sequence field is padded to the batch's longest row on ``padding_side``:
    ``input_ids`` with ``pad_token_id``, ``labels`` with ``IGNORE_INDEX``, the rest with 0.
    A row without ``attention_mask`` gets one: 0 at the padding added here and, when
    ``pad_token_id`` is given, wherever the row holds that id. Left-padded rows without
    ``position_ids`` get them, counted from each row's first real token (GPT-2 and Llama
    would otherwise place the tokens after the padding). Text fields are left out.
    """

    def __init__(self, pad_token_id: int | None = None, padding_side: str = "right") -> None:
        if padding_side not in PADDING_SIDES:
            raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
        self.pad_token_id, self.padding_side = pad_token_id, padding_side

    def __call__(self, rows: list[Any]) -> dict[str, torch.Tensor]:
        rows = [r if isinstance(r, Mapping) else {"input_ids": r} for r in rows]
        if "input_ids" not in rows[0]:
            raise KeyError(f"a data row has no 'input_ids' (fields: {sorted(rows[0])})")
        names = [k for k, v in rows[0].items() if v is not None and not is_text(v)]
        batch = {name: self._field(rows, name) for name in names}
        if "attention_mask" not in batch:
            batch["attention_mask"] = self._mask(rows, batch)
        if self.padding_side == "left" and "position_ids" not in batch:
            # left padding shifts every token's position: count them from the first real one
            # (models without position_ids in their forward never see this field)
            batch["position_ids"] = (batch["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
        return batch

    def _field(self, rows: list[Mapping[str, Any]], name: str) -> torch.Tensor:
        try:
            values = [field_tensor(row[name], name) for row in rows]
        except KeyError:
            raise KeyError(f"batch field {name!r} is missing from some rows") from None
        if values[0].dim() == 0:
            return torch.stack(values)
        fill = _PAD_VALUES.get(name, 0)
        if name == "input_ids":
            fill = self.pad_token_id or 0
        return self._pad(values, fill, name)

    def _pad(self, values: list[torch.Tensor], fill: int, name: str) -> torch.Tensor:
        if any(v.dim() != 1 for v in values):
            raise ValueError(f"batch field {name!r} has rows that are not 1-D sequences")
        length = max(v.numel() for v in values)
        out = torch.full((len(values), length), fill, dtype=values[0].dtype)
        for i, v in enumerate(values):
            if self.padding_side == "right":
                out[i, : v.numel()] = v
            else:
                out[i, length - v.numel() :] = v
        return out

    def _mask(self, rows: list[Mapping[str, Any]], batch: Mapping[str, Any]) -> torch.Tensor:
        lengths = [field_tensor(row["input_ids"], "input_ids").numel() for row in rows]
        mask = self._pad([torch.ones(n, dtype=torch.long) for n in lengths], 0, "attention_mask")
        if self.pad_token_id is not None:
            mask = mask.masked_fill(batch["input_ids"] == self.pad_token_id, 0)
        return mask


class _Columns(Dataset):
    """Rows of a mapping of equally long columns (a tokenizer's ``BatchEncoding``)."""

    def __init__(self, columns: Mapping[str, Any]) -> None:
        if "input_ids" not in columns:
            raise KeyError(f"the data has no 'input_ids' column (columns: {sorted(columns)})")
        self.columns = {k: v for k, v in columns.items() if v is not None}
        size = len(self.columns["input_ids"])
        for name, column in self.columns.items():
            if len(column) != size:
                raise ValueError(
                    f"column {name!r} has {len(column)} rows but 'input_ids' has {size}: "
                    "every column needs a value per row"
                )
        if size == 0:
            raise ValueError("no sequences: the token data is empty")
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {name: column[index] for name, column in self.columns.items()}


def _hf_dataset(data: Any) -> str | None:
    """``"map"`` or ``"stream"`` for a ``datasets`` object (only imported if the caller has)."""
    module = sys.modules.get("datasets")
    if module is None:
        return None
    if isinstance(data, module.IterableDataset):
        return "stream"
    return "map" if isinstance(data, module.Dataset) else None


def _stream(data: Any, world: World) -> Any:
    """A streaming dataset's share for this rank (``datasets``' own split by node)."""
    if not world.distributed:
        return data
    from datasets.distributed import split_dataset_by_node

    return split_dataset_by_node(data, rank=world.rank, world_size=world.size)


def token_rows(
    data: Any, *, pad_token_id: int | None, padding_side: str, world: World
) -> tuple[Dataset, Collate]:
    """The rows of ``data`` and the collate that batches them. Token tensors (``[N, T]``, a
    list of 1-D tensors, or NumPy arrays of ids) are padded with 0 and masked by length, or,
    given ``pad_token_id``, masked wherever they hold it."""
    rows = PadRows(pad_token_id, padding_side)
    kind = _hf_dataset(data)
    if kind == "stream":
        return _stream(data, world), rows
    if kind == "map" or isinstance(data, Dataset | IterableDataset):
        return data, rows
    if isinstance(data, Mapping):
        return _Columns(data), rows
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    elif isinstance(data, Sequence) and len(data) and isinstance(data[0], Mapping):
        return list(data), rows
    elif isinstance(data, Sequence) and len(data) and isinstance(data[0], np.ndarray):
        data = [torch.from_numpy(row) for row in data]
    tokens = SequenceDataset(data)
    return tokens, rows if pad_token_id is not None or padding_side != "right" else PadCollate()


def padding_of(tokenizer: Any) -> dict[str, Any]:
    """A Hugging Face tokenizer's ``pad_token_id`` and ``padding_side`` as :class:`TrainConfig`
    fields (none for ``None``; a tokenizer without a pad token pads with 0, masked by length)."""
    if tokenizer is None:
        return {}
    return {
        "pad_token_id": getattr(tokenizer, "pad_token_id", None),
        "padding_side": getattr(tokenizer, "padding_side", "right"),
    }
