"""amptrain.adapters: batches of every shape read into ids, labels and inputs; the inputs a
model's forward takes; logits from any output; the next-token loss; the model inside its
wrappers; the first batch's checks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader

from amptrain import MetricsTracker, TinyGPT, extract_logits, fine_tune, lm_loss, token_hits
from amptrain.adapters import (
    ModelAdapter,
    batch_inputs,
    check_ids,
    counted_tokens,
    forward_inputs,
    no_sync_of,
    position_count,
    scored_tokens,
    to_device,
    unpack_batch,
    unwrap,
    vocabulary_size,
)
from amptrain.collate import IGNORE_INDEX
from amptrain.precision import resolve_precision

Tokens = Callable[..., torch.Tensor]

# --- batches ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch",
    [
        torch.ones(2, 3, dtype=torch.long),
        (torch.ones(2, 3, dtype=torch.long),),
        [torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)],
        {"input_ids": torch.ones(2, 3, dtype=torch.long)},
    ],
)
def test_unpack_batch_shapes(batch: object) -> None:
    ids, labels = unpack_batch(batch)
    assert ids.shape == labels.shape == (2, 3)


def test_a_batchs_own_labels_are_kept() -> None:
    ids, own = torch.ones(2, 3, dtype=torch.long), torch.full((2, 3), 2)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert unpack_batch((ids, own))[1] is own and unpack_batch([ids])[1] is ids
    # labels given beside an attention mask are the caller's: the mask does not rewrite them
    _, labels, inputs = batch_inputs({"input_ids": ids, "attention_mask": mask, "labels": own})
    assert labels is own and inputs["attention_mask"] is mask


def test_without_labels_the_masked_positions_are_not_scored() -> None:
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 4]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])  # left padding on the first row
    _, labels, inputs = batch_inputs({"input_ids": ids, "attention_mask": mask})
    # 5 would be predicted from padding alone: not scored, as no row's first token is
    assert labels.tolist() == [[IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 6], [7, 8, 9, 4]]
    assert set(inputs) == {"attention_mask"}
    assert batch_inputs(ids)[2] == {}  # a bare tensor has nothing else


@pytest.mark.parametrize(("batch", "kind"), [((), "tuple"), ([], "list"), (5, "int")])
def test_a_batch_without_token_ids_names_its_type(batch: object, kind: str) -> None:
    with pytest.raises(TypeError) as raised:
        unpack_batch(batch)
    assert f"of type {kind}" in str(raised.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.bool])
@pytest.mark.parametrize("field", ["input_ids", "labels"])
def test_ids_that_are_not_integers_are_refused_naming_the_field(
    dtype: torch.dtype, field: str, names: Callable[..., bool]
) -> None:
    good = torch.ones(2, 3, dtype=torch.long)
    batch = {"input_ids": good, "labels": good, field: torch.ones(2, 3, dtype=dtype)}
    with pytest.raises(ValueError) as raised:
        unpack_batch(batch)
    assert names(str(raised.value), repr(field), str(dtype))
    ids, labels = unpack_batch({"input_ids": good.int(), "labels": good.short()})
    assert ids.dtype == labels.dtype == torch.int64  # other integers are taken, as int64


def test_a_field_that_is_not_numbers_is_named_and_text_is_left_out(
    names: Callable[..., bool],
) -> None:
    ids = torch.ones(2, 3, dtype=torch.long)
    for batch, field in [
        ({"input_ids": [["a", "b"]]}, "input_ids"),
        ({"input_ids": ids, "labels": [[1], [2, 3]]}, "labels"),
        ({"input_ids": ids, "pixels": [[1.0], [2.0, 3.0]]}, "pixels"),
    ]:
        with pytest.raises(ValueError) as raised:
            batch_inputs(batch)
        assert names(str(raised.value), repr(field)), field
    _, _, inputs = batch_inputs({"input_ids": ids, "text": ["a b", "c"], "mask": ids})
    assert set(inputs) == {"mask"}


def test_unpack_batch_rejects_a_mapping_without_input_ids() -> None:
    with pytest.raises(KeyError) as raised:
        unpack_batch({"tokens": torch.ones(1, 2)})
    assert "input_ids" in str(raised.value) and "tokens" in str(raised.value)


def test_a_micro_batch_moves_whole_to_the_device() -> None:
    micro = (torch.ones(2, 3, dtype=torch.long), torch.zeros(2, 3), {"mask": torch.ones(2, 3)})
    moved = to_device(micro, torch.device("meta"))
    assert moved[0].device.type == moved[1].device.type == "meta"
    assert moved[2]["mask"].device.type == "meta" and moved[0].dtype == torch.long


def test_tokens_are_counted_without_padding_and_scored_one_position_on() -> None:
    labels = torch.tensor([[3, 4, IGNORE_INDEX], [IGNORE_INDEX, 5, 6]])
    assert counted_tokens(labels) == 4  # throughput: every non-padding label
    assert int(scored_tokens(labels)) == 3  # the loss: targets from position 1 on
    assert counted_tokens(labels.to("meta")) == 6  # on a GPU: every position, no host read


# --- logits and the loss ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrap",
    [
        lambda t: t,
        lambda t: (t, "hidden"),
        lambda t: {"logits": t, "loss": None},
        lambda t: SimpleNamespace(logits=t),
    ],
)
def test_logits_are_found_in_every_output_shape(wrap: object) -> None:
    t = torch.zeros(1, 2, 3)
    assert extract_logits(wrap(t)) is t  # type: ignore[operator]


def test_output_without_logits_is_a_clear_error(names: Callable[..., bool]) -> None:
    with pytest.raises(KeyError) as missing:
        extract_logits({"hidden": torch.zeros(1)})
    assert names(str(missing.value), "'logits'", "['hidden']")
    with pytest.raises(TypeError) as raised:
        extract_logits(42)
    assert names(str(raised.value), "int", "tensor", "tuple", "'logits' field")


class _Wrapped(nn.Module):
    """Returns logits in another shape, as Hugging Face models and others do."""

    def __init__(self, kind: str, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.kind = inner, kind

    def forward(self, input_ids: torch.Tensor) -> object:
        logits = self.inner(input_ids)
        return {
            "tuple": (logits,),
            "dict": {"logits": logits},
            "object": SimpleNamespace(logits=logits),
        }[self.kind]


@pytest.mark.parametrize("kind", ["tuple", "dict", "object"])
def test_any_output_shape_trains(kind: str, model: TinyGPT, tokens: Tokens) -> None:
    result = fine_tune(_Wrapped(kind, model), tokens(), epochs=1, num_workers=0)
    assert torch.isfinite(torch.tensor(result.epochs[0].train_loss))


def test_lm_loss_shifts_labels_and_skips_padding() -> None:
    vocab = 5
    labels = torch.tensor([[1, 2, 3, IGNORE_INDEX]])
    logits = torch.full((1, 4, vocab), -10.0)
    logits[0, 0, 2] = logits[0, 1, 3] = 10.0  # right predictions for positions 0 and 1
    logits[0, 2, 0] = 10.0  # position 2 predicts padding: must not count
    correct, count = token_hits(logits, labels)
    assert int(count) == 2 and int(correct) == 2
    assert float(lm_loss(logits, labels)) < 1e-6


class _Copies(TorchDispatchMode):
    """The data-moving operators that make a tensor of at least ``size`` elements."""

    MOVES = ("clone", "copy_", "_to_copy", "slice_backward", "new_zeros", "zeros")

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size, self.seen = size, []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in self.MOVES and isinstance(out, torch.Tensor) and out.numel() >= self.size:
            self.seen.append(name)
        return out


def test_lm_loss_copies_no_logits_sized_tensor() -> None:
    # a copy of the logits (forward) and of their gradient (backward) costs as much as the
    # softmax itself with GPT-2's vocabulary: the labels shift instead
    logits = torch.randn(2, 6, 50, requires_grad=True)
    labels = torch.randint(0, 50, (2, 6))
    with _Copies(size=2 * 5 * 50) as copies:
        lm_loss(logits, labels).backward()
    assert copies.seen == []
    shifted = logits.detach()[:, :-1].reshape(-1, 50)
    expected = torch.nn.functional.cross_entropy(shifted, labels[:, 1:].reshape(-1))
    assert float(lm_loss(logits.detach(), labels)) == pytest.approx(float(expected), rel=1e-6)


def test_token_hits_counts_only_right_predictions_of_counted_tokens() -> None:
    labels = torch.tensor([[1, 2, 3, 4, IGNORE_INDEX]])
    logits = torch.zeros(1, 5, 6)
    for position, predicted in enumerate([2, 0, 4, 1, 5]):  # right, wrong, right, padding
        logits[0, position, predicted] = 1.0
    correct, count = token_hits(logits, labels)
    assert (int(correct), int(count)) == (2, 3)


# --- what a model says about itself ----------------------------------------------------------


class _HubStyle(nn.Module):
    """A Hugging Face-shaped model: positions before tokens, sizes in a config."""

    def __init__(self, **config: int) -> None:
        super().__init__()
        self.positions = nn.Embedding(16, 8)  # the first embedding is not the vocabulary
        self.tokens = nn.Embedding(50, 8)
        self.config = SimpleNamespace(**config)

    def get_input_embeddings(self) -> nn.Module:
        return self.tokens


def test_the_vocabulary_is_the_input_embedding_the_model_names() -> None:
    assert vocabulary_size(_HubStyle()) == 50
    assert vocabulary_size(nn.Sequential(nn.Embedding(7, 2), nn.Linear(2, 7))) == 7
    assert vocabulary_size(nn.Linear(2, 7)) is None


@pytest.mark.parametrize(
    ("own", "config", "positions"),
    [
        (None, {"max_position_embeddings": 64}, 64),
        (None, {"n_positions": 32}, 32),
        (0, {"n_positions": 32}, 32),  # a size of 0 is no size: the config's is read
        (1, {"n_positions": 32}, 1),
        (None, {}, None),
    ],
)
def test_the_position_count_is_read_from_the_model_or_its_config(
    own: int | None, config: dict[str, int], positions: int | None
) -> None:
    model = _HubStyle(**config)
    if own is not None:
        model.max_seq_len = own
    assert position_count(model) == positions


class _Masked(nn.Module):
    def forward(self, input_ids: torch.Tensor, attention_mask: object = None) -> torch.Tensor:
        return input_ids


class _TakesAll(nn.Module):
    def forward(self, input_ids: torch.Tensor, **inputs: object) -> torch.Tensor:
        return input_ids


def test_a_model_gets_only_the_inputs_its_forward_takes() -> None:
    inputs = {"attention_mask": 1, "token_type_ids": 2}
    assert forward_inputs(_Masked())(inputs) == {"attention_mask": 1}
    assert forward_inputs(_TakesAll())(inputs) == inputs
    unreadable = _Masked()
    unreadable.forward = max  # a builtin: its signature cannot be read
    assert forward_inputs(unreadable)(inputs) == {}


class _MaskAware(nn.Module):
    """A model whose forward takes attention_mask (as Hugging Face models do), and records it."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.masks: list[torch.Tensor | None] = []

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.masks.append(attention_mask)
        return self.inner(input_ids)


def _left_padded(tokens: Tokens) -> list[dict[str, torch.Tensor]]:
    ids = tokens(8)
    mask = torch.ones_like(ids)
    mask[:, :4] = 0  # left padding: the first four positions are not text
    ids = ids.masked_fill(mask == 0, 0)
    return [{"input_ids": ids[i : i + 4], "attention_mask": mask[i : i + 4]} for i in (0, 4)]


def test_attention_mask_reaches_the_model_and_padding_is_not_scored(
    make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    model, tracker = _MaskAware(make_model()), MetricsTracker()
    batches = _left_padded(tokens)
    scored = batches[0]["input_ids"].masked_fill(batches[0]["attention_mask"] == 0, -100)
    scored[:, 4] = -100  # the first real token: only padding precedes it
    expected = lm_loss(make_model()(batches[0]["input_ids"]), scored).item()
    loader = DataLoader(batches, batch_size=None)  # ready batches, as a tokenizer pipeline gives
    fine_tune(model, loader, epochs=1, tracker=tracker, max_grad_norm=None, learning_rate=1e-9)
    assert any(m is not None and torch.equal(m, batches[0]["attention_mask"]) for m in model.masks)
    assert tracker.history[0]["train/loss"] == pytest.approx(expected, rel=1e-5)


def test_labels_in_a_batch_are_honoured(make_model: Callable[..., TinyGPT], tokens: Tokens) -> None:
    ids = tokens(4)
    labels = torch.full_like(ids, -100)
    labels[:, 5] = ids[:, 5]  # only one target per row counts
    tracker = MetricsTracker()
    loader = DataLoader([{"input_ids": ids, "labels": labels}], batch_size=None)
    fine_tune(make_model(), loader, epochs=1, tracker=tracker, learning_rate=1e-9)
    assert tracker.history[0]["train/loss"] == pytest.approx(
        lm_loss(make_model()(ids), labels).item(), rel=1e-5
    )


def test_a_ready_dataloader_of_dicts_trains(model: TinyGPT, tokens: Tokens) -> None:
    loader = DataLoader(
        [{"input_ids": row} for row in tokens()],
        batch_size=8,
        collate_fn=lambda rows: {"input_ids": torch.stack([r["input_ids"] for r in rows])},
    )
    result = fine_tune(model, loader, epochs=1)
    assert result.steps == 4


# --- the model inside its wrappers -----------------------------------------------------------


# importing torch.compile's machinery warns from inside torch
_COMPILE_IMPORT = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")


@pytest.mark.slow
@_COMPILE_IMPORT
def test_the_users_model_is_found_inside_ddp_and_compile_wrappers(one_rank_group: None) -> None:
    from torch.nn.parallel import DistributedDataParallel

    model = nn.Linear(2, 2)
    ddp = DistributedDataParallel(model)
    for wrapped in (model, ddp, torch.compile(model), torch.compile(ddp)):
        assert unwrap(wrapped) is model
        assert ModelAdapter(wrapped).module is model and ModelAdapter(wrapped).model is wrapped


class _Holder(nn.Module):
    """A wrapper that keeps its model as ``module`` without being DDP."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


@pytest.mark.slow
@_COMPILE_IMPORT
def test_no_sync_is_ddps_found_through_any_wrapper_or_nothing(one_rank_group: None) -> None:
    from torch.nn.parallel import DistributedDataParallel

    model = nn.Linear(2, 2)
    ddp = DistributedDataParallel(model)
    for wrapped in (ddp, torch.compile(ddp), _Holder(ddp), _Holder(torch.compile(ddp))):
        assert no_sync_of(wrapped) == ddp.no_sync
    for plain in (model, torch.compile(model), _Holder(model)):
        assert no_sync_of(plain) is contextlib.nullcontext
    # what the step enters for every micro-batch but the last
    assert ModelAdapter(ddp).no_sync == ddp.no_sync
    assert ModelAdapter(model).no_sync is contextlib.nullcontext


# --- the first batch's checks ----------------------------------------------------------------


def test_ids_are_checked_against_the_sizes_the_model_gives(names: Callable[..., bool]) -> None:
    model = _HubStyle(n_positions=32)  # 50 ids, 32 positions
    check_ids(model, 49, 0, 32)
    with pytest.raises(ValueError) as raised:
        check_ids(model, 50, 0, 8)
    assert names(str(raised.value), "50", "vocabulary of 50")
    with pytest.raises(ValueError) as raised:
        check_ids(model, 10, 0, 33)
    assert names(str(raised.value), "33 tokens", "32 positions")
    check_ids(nn.Linear(2, 2), 10**6, -1, 10**6)  # a model that gives no sizes: nothing to check


def test_the_first_batch_alone_is_checked_with_one_forward_in_eval_mode(
    model: TinyGPT, tokens: Tokens
) -> None:
    adapter, calls = ModelAdapter(model), []
    model.register_forward_pre_hook(lambda module, args: calls.append((module.training, args)))
    plan = resolve_precision("32-true", "cpu")
    bad = tokens(4)
    bad[0, 0] = model.vocab_size
    with pytest.raises(ValueError, match=f"token id {model.vocab_size}"):
        adapter.check_batch(bad, plan)
    adapter = ModelAdapter(model)
    adapter.check_batch(tokens(4), plan)
    (training, (ids,)), *_ = calls
    assert calls and not training and ids.shape[0] == 1 and model.training  # one row; put back
    adapter.check_batch(bad, plan)  # the batches after the first pass unchecked
    assert len(calls) == 1


def test_the_data_checks_run_a_forward_once_a_run_not_before_every_batch(
    model: TinyGPT, tokens: Tokens
) -> None:
    calls: list[bool] = []
    model.register_forward_pre_hook(lambda module, args: calls.append(module.training))
    fine_tune(model, tokens(40), epochs=2, batch_size=8, num_workers=0)
    # one check on one row, in eval mode, then the 2 x 5 training steps
    assert calls == [False] + [True] * 10
