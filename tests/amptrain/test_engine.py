from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from amptrain import TinyGPT, TrainStep, extract_logits, lm_loss, resolve_precision, token_hits
from amptrain.data import IGNORE_INDEX


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


def test_output_without_logits_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="logits"):
        extract_logits({"hidden": torch.zeros(1)})
    with pytest.raises(TypeError) as raised:
        extract_logits(42)
    assert str(raised.value) == (
        "cannot find logits in a model output of type int; return a tensor, "
        "a tuple whose first item is the logits, or an object with a 'logits' field"
    )


def test_a_step_of_no_micro_batches_is_a_clear_error() -> None:
    model = TinyGPT(16, d_model=8, n_layers=1, n_heads=2, max_seq_len=8)
    step = TrainStep(
        model, torch.optim.SGD(model.parameters(), lr=0.1), resolve_precision("32", "cpu")
    )
    with pytest.raises(ValueError, match=r"^a training step needs at least one micro-batch$"):
        step.run([])


def test_lm_loss_shifts_labels_and_skips_padding() -> None:
    vocab = 5
    labels = torch.tensor([[1, 2, 3, IGNORE_INDEX]])
    logits = torch.full((1, 4, vocab), -10.0)
    logits[0, 0, 2] = logits[0, 1, 3] = 10.0  # right predictions for positions 0 and 1
    logits[0, 2, 0] = 10.0  # position 2 predicts padding: must not count
    correct, count = token_hits(logits, labels)
    assert int(count) == 2 and int(correct) == 2
    assert float(lm_loss(logits, labels)) < 1e-6


def test_token_hits_counts_only_right_predictions_of_counted_tokens() -> None:
    labels = torch.tensor([[1, 2, 3, 4, IGNORE_INDEX]])
    logits = torch.zeros(1, 5, 6)
    for position, predicted in enumerate([2, 0, 4, 1, 5]):  # right, wrong, right, padding
        logits[0, position, predicted] = 1.0
    correct, count = token_hits(logits, labels)
    assert (int(correct), int(count)) == (2, 3)


def _step(precision: str = "32-true", fused: bool = False) -> tuple[TinyGPT, TrainStep]:
    torch.manual_seed(0)
    model = TinyGPT(16, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused)
    return model, TrainStep(model, opt, resolve_precision(precision, "cpu"), max_grad_norm=1.0)


def test_step_updates_weights_and_clears_gradients() -> None:
    model, step = _step()
    before = model.head.weight.detach().clone()
    ids = torch.randint(1, 16, (4, 8))
    out = step(ids, ids)
    assert math.isfinite(float(out.loss)) and float(out.grad_norm) > 0
    assert not torch.equal(before, model.head.weight)
    assert all(p.grad is None for p in model.parameters())
    assert step.overflow_steps == 0 and step.loss_scale == 1.0


class _PoisonGrad:
    """Makes the next backward pass produce an infinite gradient on one parameter."""

    def __init__(self, param: nn.Parameter) -> None:
        self.armed = False
        param.register_hook(lambda g: torch.full_like(g, math.inf) if self.armed else g)


@pytest.mark.parametrize("fused", [True, False], ids=["fused-device-skip", "host-check"])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_non_finite_gradients_skip_the_step_count_an_overflow_and_training_goes_on(
    precision: str, fused: bool
) -> None:
    model, step = _step(precision, fused)
    poison = _PoisonGrad(model.blocks[0].qkv.weight)
    ids = torch.randint(1, 16, (4, 8))
    step(ids, ids)
    poison.armed = True
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = step(ids, ids)
    assert not math.isfinite(float(out.grad_norm))
    assert step.overflow_steps == 1
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters()), "step not skipped"
    poison.armed = False
    out = step(ids, ids)
    assert math.isfinite(float(out.grad_norm)) and step.overflow_steps == 1
    assert not torch.equal(before["tok_emb.weight"], model.tok_emb.weight)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_fp16_scaler_skips_overflow_and_backs_off_the_scale() -> None:
    # A real GradScaler on CPU: the same object that runs under 16-mixed on CUDA.
    model, step = _step()
    step.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    poison = _PoisonGrad(model.head.weight)
    ids = torch.randint(1, 16, (4, 8))
    step(ids, ids)
    poison.armed = True
    before = model.head.weight.detach().clone()
    step(ids, ids)
    assert step.overflow_steps == 1
    assert torch.equal(before, model.head.weight)
    assert step.loss_scale == 2.0**9  # scaler.update() ran and halved the scale


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
    from amptrain.adapters import vocabulary_size

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
    from amptrain.adapters import position_count

    model = _HubStyle(**config)
    if own is not None:
        model.max_seq_len = own
    assert position_count(model) == positions


def test_ids_and_lengths_outside_the_model_are_named_exactly() -> None:
    from amptrain.adapters import check_ids as check_data_fits

    model = _HubStyle(n_positions=32)  # 50 ids
    check_data_fits(model, 49, 0, 32)  # the last id and the whole length fit
    cases = [
        ((50, 0, 8), "token id 50 is outside the model's vocabulary of 50 (ids 0 to 49)"),
        ((10, -1, 8), "token id -1 is outside the model's vocabulary of 50 (ids 0 to 49)"),
        ((50, -1, 8), "token id 50 is outside the model's vocabulary of 50 (ids 0 to 49)"),
        (
            (10, 0, 33),
            "sequences of 33 tokens are longer than the model's 32 positions: "
            "cut them, or use a model with more positions",
        ),
    ]
    for args, message in cases:
        with pytest.raises(ValueError) as raised:
            check_data_fits(model, *args)
        assert str(raised.value) == message


@pytest.fixture
def one_rank_group(tmp_path):  # type: ignore[no-untyped-def]
    """A real gloo process group of one rank, gone again after the test."""
    import torch.distributed as dist

    hook = sys.excepthook  # init_process_group wraps it to prefix tracebacks with the rank
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook


def test_accumulated_micro_batches_all_reduce_gradients_once_per_step(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the torchrun test's own count, here in one process, where mutation runs can see it
    monkeypatch.syspath_prepend(Path(__file__).parents[1] / "integration")
    import ddp_worker

    calls = ddp_worker.no_sync_calls((1, 2, 3, 4))
    # the same all-reduce as an unaccumulated step: only the last micro-batch syncs
    assert calls["2"] == calls["3"] == calls["4"] == calls["1"] >= 1


# importing torch.compile's machinery warns from inside torch
_COMPILE_IMPORT = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")


@_COMPILE_IMPORT
def test_the_users_model_is_found_inside_ddp_and_compile_wrappers(one_rank_group: None) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from amptrain.adapters import unwrap

    model = nn.Linear(2, 2)
    ddp = DistributedDataParallel(model)
    for wrapped in (model, ddp, torch.compile(model), torch.compile(ddp)):
        assert unwrap(wrapped) is model


class _Holder(nn.Module):
    """A wrapper that keeps its model as ``module`` without being DDP."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


@_COMPILE_IMPORT
def test_no_sync_is_ddps_found_through_any_wrapper_or_nothing(one_rank_group: None) -> None:
    import contextlib

    from torch.nn.parallel import DistributedDataParallel

    from amptrain.adapters import no_sync_of as _no_sync

    model = nn.Linear(2, 2)
    ddp = DistributedDataParallel(model)
    for wrapped in (ddp, torch.compile(ddp), _Holder(ddp), _Holder(torch.compile(ddp))):
        assert _no_sync(wrapped) == ddp.no_sync
    for plain in (model, torch.compile(model), _Holder(model)):
        assert _no_sync(plain) is contextlib.nullcontext


class _Masked(nn.Module):
    def forward(self, input_ids: torch.Tensor, attention_mask: object = None) -> torch.Tensor:
        return input_ids


class _TakesAll(nn.Module):
    def forward(self, input_ids: torch.Tensor, **inputs: object) -> torch.Tensor:
        return input_ids


def test_a_model_gets_only_the_inputs_its_forward_takes() -> None:
    from amptrain.adapters import forward_inputs

    inputs = {"attention_mask": 1, "token_type_ids": 2}
    assert forward_inputs(_Masked())(inputs) == {"attention_mask": 1}
    assert forward_inputs(_TakesAll())(inputs) == inputs
    unreadable = _Masked()
    unreadable.forward = max  # a builtin: its signature cannot be read
    assert forward_inputs(unreadable)(inputs) == {}


def test_gradients_are_clipped_to_norm_one_unless_told_otherwise() -> None:
    model = nn.Linear(2, 2)
    plan = resolve_precision("32", "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert TrainStep(model, opt, plan).max_grad_norm == 1.0
    assert TrainStep(model, opt, plan, max_grad_norm=0.25).max_grad_norm == 0.25
    assert TrainStep(model, opt, plan, max_grad_norm=None).max_grad_norm == math.inf


def test_models_of_one_weight_or_none_trainable_take_a_step() -> None:
    plan = resolve_precision("32", "cpu")
    lookup = nn.Sequential(nn.Embedding(16, 16))  # one weight: its logits are its rows
    step = TrainStep(lookup, torch.optim.SGD(lookup.parameters(), lr=0.1), plan)
    ids = torch.randint(0, 16, (2, 8))
    assert math.isfinite(float(step(ids, ids).loss)) and step.overflow_steps == 0
    frozen = nn.Sequential(nn.Embedding(16, 16)).requires_grad_(False)
    assert TrainStep(frozen, torch.optim.SGD(frozen.parameters(), lr=0.1), plan).overflow_steps == 0


class _FusedByName(torch.optim.Optimizer):
    """Says fused, like some third-party optimizers, but does not read ``found_inf``."""

    def __init__(self, params: object) -> None:
        super().__init__(params, {"lr": 0.1, "fused": True})

    @torch.no_grad()
    def step(self, closure: object = None) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def test_an_optimizer_fused_by_name_only_still_skips_non_finite_steps() -> None:
    torch.manual_seed(0)
    model = TinyGPT(16, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)
    step = TrainStep(model, _FusedByName(model.parameters()), resolve_precision("32", "cpu"))
    poison = _PoisonGrad(model.head.weight)
    poison.armed = True
    ids = torch.randint(1, 16, (4, 8))
    before = model.head.weight.detach().clone()
    step(ids, ids)
    assert step.overflow_steps == 1 and torch.equal(before, model.head.weight)
