"""amptrain.config: every setting's bounds and types, the run's Layout, and each input check,
on its own and where fine_tune applies it."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from amptrain import TinyGPT, TrainConfig, fine_tune
from amptrain.checkpoint import checkpoints
from amptrain.config import (
    Layout,
    ResumeSettingsWarning,
    check_batch_ids,
    check_ids,
    check_logits_width,
    check_resume,
    check_types,
    layout,
    resume_settings,
)

Tokens = Callable[..., torch.Tensor]
Names = Callable[..., bool]

# --- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epochs", 0),
        ("batch_size", 0),
        ("learning_rate", -1.0),
        ("learning_rate", math.nan),
        ("warmup_ratio", 1.0),
        ("max_grad_norm", 0.0),
        ("wandb_mode", "sometimes"),
        ("grad_accum_steps", 0),
        ("log_every", 0),
        ("eval_every", 0),
        ("keep_checkpoints", 0),
        ("compile", "yes"),
    ],
)
def test_bad_config_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"TrainConfig.{field}"):
        TrainConfig(**{field: value})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"strategy": "deepspeed"}, r"TrainConfig.strategy must be 'ddp' or 'fsdp'"),
        ({"cpu_offload": True}, r"TrainConfig.cpu_offload is an FSDP option: .*strategy='fsdp'"),
        ({"reshard_after_forward": False}, "TrainConfig.reshard_after_forward is an FSDP option"),
        ({"auto_wrap": ["Block"]}, "TrainConfig.auto_wrap is an FSDP option"),
        ({"strategy": "fsdp", "auto_wrap": "Block"}, "TrainConfig.auto_wrap must list"),
        ({"strategy": "fsdp", "auto_wrap": [3]}, "TrainConfig.auto_wrap must list"),
    ],
)
def test_the_strategy_and_fsdps_options_are_checked(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**options)  # type: ignore[arg-type]


def test_fsdps_blocks_are_kept_as_a_tuple() -> None:
    cfg = TrainConfig(strategy="fsdp", auto_wrap=[torch.nn.Linear, "Block"])
    assert cfg.auto_wrap == (torch.nn.Linear, "Block")


def test_compile_takes_a_backend_by_name() -> None:
    assert TrainConfig(compile="aot_eager").compile == "aot_eager"
    with pytest.raises(ValueError, match=r"'yes' is not a torch.compile backend: .* aot_eager"):
        TrainConfig(compile="yes")


def test_lightnings_integer_precisions_are_kept_as_their_names() -> None:
    assert TrainConfig(precision=16).precision == "16"
    assert TrainConfig(precision=32).precision == "32"
    assert TrainConfig(precision="bf16-mixed").precision == "bf16-mixed"


# each setting's last valid value beside its first invalid one
_EDGES = [
    ("epochs", 1, 0),
    ("batch_size", 1, 0),
    ("learning_rate", 1e-12, 0.0),
    ("learning_rate", 1.0, math.inf),
    ("weight_decay", 0.0, -1e-9),
    ("warmup_ratio", 0.0, -0.01),
    ("warmup_ratio", 0.99, 1.0),
    ("min_lr_ratio", 0.0, -0.01),
    ("min_lr_ratio", 1.0, 1.01),
    ("max_grad_norm", 1e-9, 0.0),
    ("max_steps_per_epoch", 1, 0),
    ("max_consecutive_skips", 1, 0),
    ("grad_accum_steps", 1, 0),
    ("log_every", 1, 0),
    ("eval_every", 1, 0),
    ("checkpoint_every", 1, 0),
    ("keep_checkpoints", 1, 0),
    ("num_workers", 0, -1),
    ("collective_timeout", 0.5, 0.0),
    ("collective_timeout", 1e6, math.inf),
    ("lr_cycles", 1, 0),
    ("lr_power", 1e-9, 0.0),
    ("lr_power", 1e6, math.inf),
    ("max_steps", 1, 0),
    ("pad_token_id", 0, -1),
    ("padding_side", "left", "top"),
    ("best_metric", "val/bleu", "/"),
]


@pytest.mark.parametrize(("field", "good", "bad"), _EDGES)
def test_each_settings_bounds(field: str, good: object, bad: object) -> None:
    needs_dir = field in ("checkpoint_every", "best_metric")
    extra = {"checkpoint_dir": "checkpoints"} if needs_dir else {}
    assert getattr(TrainConfig(**{field: good}, **extra), field) == good
    with pytest.raises(ValueError) as raised:
        TrainConfig(**{field: bad}, **extra)
    message = str(raised.value)
    assert f"TrainConfig.{field} " in message and repr(bad) in message
    others = [f.name for f in dataclasses.fields(TrainConfig) if f.name != field]
    assert not any(f"TrainConfig.{name} " in message for name in others)  # that field alone


@pytest.mark.parametrize("mode", ["offline", "online", "disabled"])
def test_each_wandb_mode_is_taken(mode: str) -> None:
    assert TrainConfig(wandb_mode=mode).wandb_mode == mode


def test_wandb_dryrun_mode_is_offline_and_breaks_nothing(
    monkeypatch: pytest.MonkeyPatch, model: TinyGPT, tokens: Tokens
) -> None:
    monkeypatch.setenv("WANDB_MODE", "dryrun")  # valid for wandb: its old name for offline
    assert TrainConfig().wandb_mode == "offline"
    result = fine_tune(model, tokens(), epochs=1, num_workers=0)
    assert result.steps > 0


def test_checkpoint_every_needs_a_checkpoint_dir(names: Names) -> None:
    with pytest.raises(ValueError) as raised:
        TrainConfig(checkpoint_every=5)
    assert names(str(raised.value), "TrainConfig.checkpoint_every", "checkpoint_dir")
    assert TrainConfig(checkpoint_every=5, checkpoint_dir="d").checkpoint_every == 5


@pytest.mark.parametrize(
    ("field", "value"),
    [("learning_rate", "3e-4"), ("epochs", 2.5), ("batch_size", True), ("deterministic", "yes")],
)
def test_wrong_types_are_reported_by_field_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"TrainConfig.{field} must be"):
        TrainConfig(**{field: value})


def test_a_wrong_type_is_named_with_every_type_the_setting_takes(
    names: Names,
) -> None:
    with pytest.raises(ValueError) as raised:
        TrainConfig(max_steps_per_epoch="3")
    assert names(str(raised.value), "TrainConfig.max_steps_per_epoch", "int or None", "str", "'3'")


def test_types_the_check_does_not_know_are_left_to_the_caller_and_the_rest_checked() -> None:
    @dataclasses.dataclass
    class _Settings:
        where: os.PathLike[str] | None  # not a type the check knows
        steps: int = 1

    check_types(_Settings(where=Path(".")))
    with pytest.raises(ValueError) as raised:
        check_types(_Settings(where=Path("."), steps="x"))
    assert "TrainConfig.steps" in str(raised.value) and "'x'" in str(raised.value)
    assert "None" not in str(raised.value)  # a setting that cannot be None says int alone


def test_an_unknown_setting_is_rejected(model: TinyGPT, tokens: Tokens) -> None:
    with pytest.raises(TypeError, match="n_epochs"):
        fine_tune(model, tokens(), n_epochs=2)


# --- the layout of steps ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batches", "accum", "steps", "last_step"),
    [(10, 1, 10, 1), (10, 2, 5, 2), (10, 3, 4, 1), (10, 4, 3, 2), (3, 4, 1, 3), (1, 1, 1, 1)],
)
def test_the_layout_counts_steps_with_a_short_last_one(
    batches: int, accum: int, steps: int, last_step: int
) -> None:
    shape = Layout(epochs=3, batches_per_epoch=batches, grad_accum_steps=accum)
    assert shape.steps_per_epoch == steps and shape.total_steps == 3 * steps
    sizes, done = [], 0
    for _ in range(batches + 1):  # as the loop draws: a step of no batch ends the epoch
        size = shape.next_step_size(done)
        if size <= 0:
            break
        sizes.append(size)
        done += size
    assert len(sizes) == steps and sizes[-1] == last_step and sum(sizes) == batches
    # a resumed epoch counts the steps its batches made, the last short step included
    assert [shape.steps_after(sum(sizes[:k])) for k in range(steps + 1)] == list(range(steps + 1))


def test_the_layout_takes_the_loaders_length_or_the_stated_epoch(
    names: Names,
) -> None:
    cfg = TrainConfig(epochs=2, grad_accum_steps=2)
    assert layout(cfg, 7) == Layout(2, 7, 2)
    capped = dataclasses.replace(cfg, max_steps_per_epoch=3)
    assert layout(capped, 7) == Layout(2, 6, 2) and layout(capped, 5) == Layout(2, 5, 2)
    assert layout(capped, None) == Layout(2, 6, 2)  # a stream: the stated size
    with pytest.raises(ValueError) as raised:
        layout(cfg, None)
    assert names(str(raised.value), "IterableDataset", "pass max_steps_per_epoch")
    with pytest.raises(ValueError) as raised:
        layout(cfg, 0)
    assert names(str(raised.value), "the training data", "no batch", "empty?")


def test_max_steps_sets_as_many_epochs_as_its_optimizer_steps_need() -> None:
    cfg = TrainConfig(epochs=9, grad_accum_steps=4, max_steps=6)
    assert layout(cfg, 10) == Layout(2, 10, 4, 6)  # 3 steps an epoch (the last of 2 batches)
    assert layout(cfg, 12) == Layout(2, 12, 4, 6) and layout(cfg, 13) == Layout(2, 13, 4, 6)
    # a stream with no stated epoch: one epoch of the run's micro-batches
    assert layout(dataclasses.replace(cfg, grad_accum_steps=2), None) == Layout(1, 12, 2, 6)


class _Stream(torch.utils.data.IterableDataset):
    def __init__(self, rows: torch.Tensor) -> None:
        self.rows = rows

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.rows)


def test_an_iterable_dataset_needs_a_stated_epoch_size(
    make_model: Callable[..., TinyGPT], tokens: Tokens, names: Names
) -> None:
    loader = DataLoader(_Stream(tokens(64)), batch_size=8)
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), loader, epochs=1)
    assert names(str(raised.value), "no length", "max_steps_per_epoch")
    result = fine_tune(make_model(), loader, epochs=2, max_steps_per_epoch=3)
    assert result.steps == 6 and result.train_samples == 0
    # a step of 2 micro-batches: the epoch is 3 steps of 2, from the stream or a sized loader
    for data in (loader, tokens(64)):
        result = fine_tune(make_model(), data, epochs=1, max_steps_per_epoch=3, grad_accum_steps=2)
        epoch = result.epochs[0]
        assert result.steps == 3 and epoch.samples_per_second * epoch.wall_time_s == pytest.approx(
            48
        )


def test_an_empty_training_loader_is_a_clear_error(model: TinyGPT, names: Names) -> None:
    empty = DataLoader(torch.empty(0, 12, dtype=torch.long), batch_size=4)
    with pytest.raises(ValueError) as raised:
        fine_tune(model, empty, epochs=1)
    assert names(str(raised.value), "training data", "no batch")


def test_an_empty_validation_loader_is_a_clear_error(
    model: TinyGPT, tokens: Tokens, names: Names
) -> None:
    empty = DataLoader(torch.empty(0, 12, dtype=torch.long), batch_size=4)
    with pytest.raises(ValueError) as raised:
        fine_tune(model, tokens(), empty, epochs=1, num_workers=0)
    assert names(str(raised.value), "val_data", "no batch", "validation rows")


# --- the device and the model ----------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present")
def test_asking_for_cuda_without_it_is_a_clear_error(
    model: TinyGPT, tokens: Tokens, names: Names
) -> None:
    with pytest.raises(ValueError) as raised:
        fine_tune(model, tokens(), epochs=1, device="cuda", num_workers=0)
    assert names(str(raised.value), "TrainConfig.device", "'cuda'", "device unset", "CPU")


def test_a_model_without_weights_is_a_clear_error(tokens: Tokens, names: Names) -> None:
    class _NoWeights(nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return torch.zeros(*ids.shape, 24)

    with pytest.raises(ValueError) as raised:
        fine_tune(_NoWeights(), tokens(), epochs=1)
    assert names(str(raised.value), "no floating-point parameters", "nothing to train")


# --- the data against the model --------------------------------------------------------------


def test_ids_and_lengths_are_checked_against_the_models_sizes(names: Names) -> None:
    check_ids(49, 0, 32, vocab=50, positions=32)  # the last id and the whole length fit
    check_ids(10**6, -5, 10**6, vocab=None, positions=None)  # a model that does not say
    for args, named in [
        ((50, 0, 8), ["50", "vocabulary of 50", "ids 0 to 49"]),
        ((10, -1, 8), ["-1", "vocabulary of 50"]),
        ((50, -1, 8), ["token id 50"]),  # the id above the vocabulary is named first
    ]:
        with pytest.raises(ValueError) as raised:
            check_ids(*args, vocab=50, positions=32)
        assert names(str(raised.value), *named), str(raised.value)
    with pytest.raises(ValueError) as raised:
        check_ids(10, 0, 33, vocab=50, positions=32)
    assert names(str(raised.value), "33 tokens", "32 positions", "more positions")


def test_token_ids_outside_the_vocabulary_are_a_clear_error(model: TinyGPT, tokens: Tokens) -> None:
    data = tokens()
    data[0, 3] = model.vocab_size + 5
    with pytest.raises(ValueError) as raised:
        fine_tune(model, data, epochs=1, num_workers=0)
    assert f"token id {model.vocab_size + 5}" in str(raised.value)
    assert f"vocabulary of {model.vocab_size}" in str(raised.value)


def test_ids_in_a_ready_loader_are_checked_on_the_first_batch(
    model: TinyGPT, tokens: Tokens
) -> None:
    data = tokens()
    data[:, 3] = model.vocab_size  # every row: the first batch holds one
    with pytest.raises(ValueError, match=f"token id {model.vocab_size}"):
        fine_tune(model, DataLoader(data, batch_size=8), epochs=1)


def test_sequences_longer_than_the_models_positions_are_a_clear_error(
    model: TinyGPT, tokens: Tokens
) -> None:
    long = tokens(16, seq=model.max_seq_len * 2)
    with pytest.raises(ValueError) as raised:
        fine_tune(model, long, epochs=1, num_workers=0)
    assert f"{model.max_seq_len * 2} tokens" in str(raised.value)
    assert f"{model.max_seq_len} positions" in str(raised.value)


class _HiddenStates(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(24, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(input_ids))  # [B, T, 16]: not logits over the vocabulary


def test_a_model_that_returns_hidden_states_is_a_clear_error(tokens: Tokens, names: Names) -> None:
    with pytest.raises(ValueError) as raised:
        fine_tune(_HiddenStates(), tokens(), epochs=1, num_workers=0)
    assert names(str(raised.value), "16", "vocabulary (24)", "logits", "hidden states")
    check_logits_width(24, 24)


# --- a checkpoint's settings -----------------------------------------------------------------


def test_resume_compares_the_settings_that_fix_the_data_position(
    names: Names,
) -> None:
    cfg = TrainConfig(batch_size=4)
    saved = resume_settings(cfg)
    assert {"batch_size", "grad_accum_steps", "max_steps_per_epoch", "seed"} <= set(saved)
    check_resume(cfg, saved, 1, 1)
    check_resume(dataclasses.replace(cfg, precision="32"), saved, 1, 1)  # the same, named apart
    for key, value in [("batch_size", 8), ("grad_accum_steps", 2), ("max_steps_per_epoch", 3)]:
        with pytest.raises(ValueError, match=key):
            check_resume(dataclasses.replace(cfg, **{key: value}), saved, 1, 1)
    with pytest.raises(ValueError) as raised:
        check_resume(dataclasses.replace(cfg, seed=1, batch_size=2), saved, 2, 1)
    message = str(raised.value)
    assert names(message, "(batch_size, seed, world size (2 processes))", "the data position")
    assert names(message, "resume with the settings")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("learning_rate", 1e-3),
        ("weight_decay", 0.5),
        ("warmup_ratio", 0.5),
        ("min_lr_ratio", 0.5),
        ("precision", "bf16-mixed"),
        ("lr_scheduler_type", "linear"),
        ("lr_cycles", 2),
        ("lr_power", 2.0),
        ("max_steps", 7),
    ],
)
def test_resume_refuses_a_setting_the_saved_optimizer_would_ignore(
    key: str, value: object, names: Names
) -> None:
    cfg = TrainConfig()
    with pytest.raises(ValueError) as raised:
        check_resume(dataclasses.replace(cfg, **{key: value}), resume_settings(cfg), 1, 1)
    assert names(str(raised.value), f"{key}={getattr(cfg, key)!r}", "resume_from")


def test_a_setting_the_checkpoint_does_not_record_is_used_unchecked_and_named(
    names: Names,
) -> None:
    """An older checkpoint that does not record a setting is not refused under a value it
    may well have had (it is not assumed to be the default), and the warning names it."""
    cfg = TrainConfig(lr_scheduler_type="linear", max_steps=6)
    older = {
        k: v for k, v in resume_settings(cfg).items() if k not in ("lr_scheduler_type", "max_steps")
    }
    with pytest.warns(ResumeSettingsWarning) as warned:
        check_resume(cfg, older, 1, 1)
    assert names(str(warned[0].message), "lr_scheduler_type='linear'", "max_steps=6")
    with pytest.warns(ResumeSettingsWarning), pytest.raises(ValueError, match="learning_rate"):
        check_resume(dataclasses.replace(cfg, learning_rate=1.0), older, 1, 1)


def test_resume_applies_more_epochs_and_says_so(names: Names) -> None:
    cfg = TrainConfig(epochs=2)
    with pytest.warns(ResumeSettingsWarning) as warned:
        check_resume(dataclasses.replace(cfg, epochs=5), resume_settings(cfg), 1, 1)
    assert names(str(warned[0].message), "epochs=5", "epochs=2")


def test_a_changed_learning_rate_is_refused_on_a_real_resume(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens, names: Names
) -> None:
    args = {"epochs": 1, "batch_size": 4, "num_workers": 0, "checkpoint_dir": str(tmp_path)}
    fine_tune(make_model(), tokens(40), **args)
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), **args, learning_rate=1e-2, resume_from="latest")
    assert names(str(raised.value), "learning_rate=0.0003")


def test_resume_names_every_setting_that_differs_and_another_world_size(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens, names: Names
) -> None:
    args = {"epochs": 1, "batch_size": 4, "num_workers": 0}
    fine_tune(make_model(), tokens(40), checkpoint_dir=str(tmp_path), **args)
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), **{**args, "batch_size": 8, "seed": 3},
                  resume_from="latest", checkpoint_dir=str(tmp_path))  # fmt: skip
    assert names(str(raised.value), "(batch_size, seed)")  # those two, and no other
    path = checkpoints(tmp_path)[-1]
    state = torch.load(path, weights_only=True)
    torch.save({**state, "world_size": 2}, path)  # as written by two torchrun processes
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), resume_from=str(path), **args)
    assert names(str(raised.value), "(world size (2 processes))")


# --- the best weights ---------------------------------------------------------------------


def test_the_best_metric_is_a_validation_key_kept_in_the_checkpoint_folder(names: Names) -> None:
    assert TrainConfig(best_metric="loss", checkpoint_dir="c").best_metric == "val/loss"
    assert TrainConfig(best_metric="val/bleu", checkpoint_dir="c").best_metric == "val/bleu"
    with pytest.raises(ValueError) as raised:
        TrainConfig(best_metric="val/loss")
    # the field, what it needs, and where the weights would be kept
    assert names(str(raised.value), "TrainConfig.best_metric", "checkpoint_dir/best")
    with pytest.raises(ValueError) as raised:
        TrainConfig(load_best_at_end=True, checkpoint_dir="c")
    assert names(str(raised.value), "TrainConfig.load_best_at_end", "best_metric")
    with pytest.raises(ValueError, match="best_mode"):
        TrainConfig(best_metric="val/loss", best_mode="lowest", checkpoint_dir="c")


def test_each_batchs_ids_are_checked_against_the_vocabulary(names: Names) -> None:
    check_batch_ids(torch.tensor([[0, 9]]), 10, batch=1, epoch=1)  # both ends fit
    check_batch_ids(torch.tensor([[-3, 10**6]]), None, batch=1, epoch=1)  # the model does not say
    check_batch_ids(torch.zeros(0, 4, dtype=torch.long), 10, batch=1, epoch=1)  # no ids
    for ids, bad in [([[0, 99]], "99"), ([[-1, 3]], "-1"), ([[12]], "12")]:
        with pytest.raises(ValueError) as raised:
            check_batch_ids(torch.tensor(ids), 10, batch=3, epoch=2)
        assert names(str(raised.value), f"token id {bad}", "batch 3", "epoch 2", "ids 0 to 9")
