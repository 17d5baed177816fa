"""precision="fp8" on the CPU, its float8 matmuls emulated: which layers train in float8, the
fallback where there are no float8 tensor cores, the numbers against bf16, and an fp8 run with
accumulation, clipping, compile, checkpoints and resume."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from amptrain import (
    Callback,
    PrecisionFallbackWarning,
    TinyGPT,
    TrainConfig,
    TrainState,
    fine_tune,
    fp8,
    resolve_precision,
)
from amptrain.precision import PrecisionPlan

float8 = pytest.importorskip("torchao.float8")  # amptrain[fp8]; the test extra installs it
from torchao.float8.float8_linear import Float8Linear  # noqa: E402

Models = Callable[..., TinyGPT]
Tokens = Callable[..., torch.Tensor]
EMULATED = {"precision": "fp8", "fp8_emulate": True}
RUN = {"batch_size": 4, "num_workers": 0}
BLOCK_LAYERS = ("qkv", "proj", "mlp.0", "mlp.2")  # every linear layer of a TinyGPT block


def _emulated() -> PrecisionPlan:
    return resolve_precision("fp8", "cpu", fp8_emulate=True)


def _float8_names(model: nn.Module) -> set[str]:
    return {name for name, m in model.named_modules() if isinstance(m, Float8Linear)}


def test_the_blocks_linear_layers_train_in_float8_and_the_first_and_last_do_not(
    make_model: Models,
) -> None:
    model = make_model(n_layers=2, vocab=32)  # a head of 32x32: only its place keeps it out
    plan = fp8.plan_layers(model)
    assert plan.converted == tuple(f"blocks.{i}.{n}" for i in range(2) for n in BLOCK_LAYERS)
    assert list(plan.skipped) == ["head"] and "outside the model's blocks" in plan.skipped["head"]
    assert fp8.convert(model, _emulated()) == 8 == fp8.count(model)
    assert _float8_names(model) == set(plan.converted)
    assert type(model.head) is nn.Linear and type(model.tok_emb) is nn.Embedding
    assert model.head.weight is model.tok_emb.weight


def test_a_layer_whose_dimensions_are_not_multiples_of_16_stays_in_bf16(make_model: Models) -> None:
    model = make_model(n_layers=2)
    model.blocks[1].mlp[0], model.blocks[1].mlp[2] = nn.Linear(32, 120), nn.Linear(120, 32)
    plan = fp8.plan_layers(model)
    assert len(plan.converted) == 6 and "blocks.1.mlp.0" not in plan.converted
    assert "32x120" in plan.skipped["blocks.1.mlp.2"] + plan.skipped["blocks.1.mlp.0"]
    assert "multiples of 16" in plan.skipped["blocks.1.mlp.2"]


def test_fp8_filter_chooses_among_the_eligible_layers(model: TinyGPT, tokens: Tokens) -> None:
    plan = fp8.plan_layers(model, keep=lambda module, name: name.endswith("qkv"))
    assert plan.converted == ("blocks.0.qkv",)
    assert plan.skipped["blocks.0.proj"] == "left out by fp8_filter"
    result = fine_tune(
        model, tokens(8), **EMULATED, **RUN, max_steps=1,
        fp8_filter=lambda module, name: name.endswith("qkv"),
    )  # fmt: skip
    assert result.precision == "fp8" and result.fp8_layers == 1


def test_a_model_with_no_eligible_layer_is_refused_saying_why_and_what_to_do(
    make_model: Models, tokens: Tokens, names: Callable[..., bool]
) -> None:
    narrow = make_model(d_model=24)  # every layer has a side of 24 or 72: not a multiple of 16
    with pytest.raises(ValueError) as refused:
        fine_tune(narrow, tokens(8), **EMULATED, **RUN, max_steps=1)
    assert names(str(refused.value), "TinyGPT", "multiples of 16", "'bf16-mixed'")
    assert not _float8_names(narrow)
    with pytest.raises(ValueError, match="names no blocks") as blockless:
        fp8.plan_layers(_Blockless())
    assert names(str(blockless.value), "fp8_filter", "'bf16-mixed'")


class _Blockless(nn.Module):
    """A model that names no blocks, its head tied to its embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.mid, self.out = nn.Embedding(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)
        self.out.weight = self.emb.weight


def test_a_model_without_blocks_trains_the_layers_its_filter_keeps_never_its_head() -> None:
    plan = fp8.plan_layers(_Blockless(), keep=lambda module, name: True)
    assert plan.converted == ("mid",) and plan.skipped == {
        "out": "the output head (or tied to an embedding)"
    }


def test_without_float8_tensor_cores_fp8_falls_back_to_bf16_with_one_warning(
    model: TinyGPT, tokens: Tokens
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fine_tune(model, tokens(8), precision="fp8", **RUN, max_steps=2)
    assert [type(w.message) for w in caught] == [PrecisionFallbackWarning]
    assert "compute capability 8.9" in str(caught[0].message)
    assert result.precision == "bf16-mixed" and result.precision_requested == "fp8"
    assert result.fp8_layers == 0


def test_emulation_is_a_setting_never_chosen_for_the_caller() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for: no fallback, no warning
        plan = resolve_precision("fp8", "cpu", fp8_emulate=True)
    assert plan.name == "fp8" and plan.fp8_emulated and not plan.fell_back
    assert plan.autocast_dtype == torch.bfloat16 and plan.param_dtype is None
    assert not plan.grad_scaler().is_enabled()
    with pytest.warns(PrecisionFallbackWarning):
        assert not resolve_precision("fp8", "cpu").fp8_emulated


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"fp8_emulate": True}, "precision='fp8'"),
        ({"fp8_recipe": "rowwise"}, "precision='fp8'"),
        ({"precision": "fp8", "fp8_recipe": "delayed"}, "'tensorwise' or 'rowwise'"),
        ({"precision": "fp8", "fp8_filter": "mlp"}, "(module, name) -> bool"),
        ({"precision": "fp8", "fp8_all_gather": True}, "strategy='fsdp'"),
    ],
)
def test_fp8_settings_are_checked(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        TrainConfig(**options)


def _fifty_steps(make_model: Models, tokens: Tokens, **options: Any) -> Any:
    return fine_tune(
        make_model(), tokens(40), tokens(8, seed=1), **RUN, max_steps=50, eval_every=25,
        learning_rate=3e-3, **options,
    )  # fmt: skip


@pytest.mark.slow
def test_fifty_steps_of_fp8_end_within_2_percent_of_bf16_and_not_identical(
    make_model: Models, tokens: Tokens
) -> None:
    ours = _fifty_steps(make_model, tokens, **EMULATED)
    theirs = _fifty_steps(make_model, tokens, precision="bf16-mixed")
    assert ours.precision == "fp8" and ours.fp8_layers == 4 and ours.steps == 50
    losses = [e["val/loss"] for e in ours.evals] + ours.train_loss_history
    assert all(math.isfinite(v) for v in losses) and ours.overflow_steps == 0
    assert ours.evals[-1]["val/loss"] < ours.evals[0]["val/loss"]  # it learned
    mine, bf16 = ours.evals[-1]["val/loss"], theirs.evals[-1]["val/loss"]
    assert abs(mine - bf16) <= 0.02 * bf16 and mine != bf16


class _Seen(Callback):
    """Keeps the scaling of the model's float8 layers as the run starts."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.scaling = model, set()

    def on_train_start(self, state: TrainState) -> None:
        layers = [m for m in self.model.modules() if isinstance(m, Float8Linear)]
        self.scaling = {m.config.cast_config_weight.scaling_granularity.name for m in layers}


def test_rowwise_scaling_is_the_option_tensorwise_the_default(
    make_model: Models, tokens: Tokens
) -> None:
    seen = {}
    for recipe in ("tensorwise", "rowwise"):
        model = make_model()
        watch = _Seen(model)
        result = fine_tune(
            model, tokens(8), **EMULATED, **RUN, max_steps=2, callbacks=[watch],
            **({} if recipe == "tensorwise" else {"fp8_recipe": recipe}),
        )  # fmt: skip
        assert result.fp8_layers == 4 and math.isfinite(result.train_loss_history[-1])
        seen[recipe] = watch.scaling
    assert seen == {"tensorwise": {"TENSORWISE"}, "rowwise": {"AXISWISE"}}


# importing torch.compile's machinery warns from inside torch
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")
# Dynamo reads .grad of torchao's float8 weights while it builds guards; torch warns about that
# access (its own, not amptrain's) once per process, when an earlier compile cached the graph.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_fp8_composes_with_accumulation_clipping_and_compile(
    make_model: Models, tokens: Tokens
) -> None:
    runs = {}
    for compile in (False, "aot_eager"):
        runs[compile] = fine_tune(
            make_model(), tokens(16), **EMULATED, batch_size=2, grad_accum_steps=2,
            max_grad_norm=0.05, max_steps=3, compile=compile, num_workers=0, log_every=1,
        )  # fmt: skip
    eager, compiled = runs[False], runs["aot_eager"]
    assert compiled.steps == eager.steps == 3 and compiled.fp8_layers == 4
    assert compiled.epochs[-1].grad_norm_max > 0.05  # the norm before clipping: it clipped
    assert compiled.train_loss_history == pytest.approx(eager.train_loss_history, rel=1e-3)


@pytest.mark.slow
def test_a_resumed_fp8_run_is_bit_for_bit_the_uninterrupted_one(
    resume_pair: Callable[..., Any], same_weights: Callable[..., bool]
) -> None:
    full, resumed, whole, again = resume_pair(**EMULATED)
    assert full.precision == resumed.precision == "fp8" and resumed.fp8_layers == 4
    assert resumed.resumed_from and same_weights(whole, again)
    assert resumed.train_loss_history == full.train_loss_history
    assert resumed.evals == full.evals


def test_the_model_comes_back_with_its_own_layers_holding_the_trained_weights(
    model: TinyGPT, tokens: Tokens, weights: Callable[[nn.Module], list[torch.Tensor]]
) -> None:
    before, keys = weights(model), list(model.state_dict())
    fine_tune(model, tokens(8), **EMULATED, **RUN, max_steps=2)
    assert not _float8_names(model) and fp8.count(model) == 0
    assert [type(model.blocks[0].get_submodule(n)) for n in BLOCK_LAYERS] == [nn.Linear] * 4
    assert list(model.state_dict()) == keys
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    changed = [not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)]
    assert all(changed)


def test_fp8_on_a_gpu_without_compile_says_it_will_be_slow() -> None:
    plan = PrecisionPlan("fp8", "fp8", "cuda", torch.bfloat16, None, False)
    with pytest.warns(fp8.Fp8Warning, match="compile=True"):
        fp8.advise(plan, compile=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fp8.advise(plan, compile=True)
        fp8.advise(_emulated(), compile=False)  # emulated: its speed means nothing


def test_the_float8_all_gather_is_refused_where_gloo_would_run_it() -> None:
    with pytest.raises(ValueError, match="gloo cannot all-gather float8"):
        fp8.check_all_gather(True, torch.device("cpu"))
    fp8.check_all_gather(False, torch.device("cpu"))
