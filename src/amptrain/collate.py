"""Training data in the shapes the Hugging Face ecosystem hands it over: a tokenizer's
``BatchEncoding`` (columns), a list of row mappings, NumPy arrays, and a ``datasets``
``Dataset`` or streaming ``IterableDataset``; each read as rows, and rows collated into padded
batches as ``transformers.DataCollatorWithPadding`` does (``attention_mask`` 0 on padding,
labels ``IGNORE_INDEX`` there). Token tensors keep the path of :mod:`amptrain.data`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

from amptrain.data import IGNORE_INDEX, PadCollate, _SequenceDataset
from amptrain.distributed import World

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
    tokens = _SequenceDataset(data)
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
