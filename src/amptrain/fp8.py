"""fp8 training (``precision="fp8"``) with torchao's float8 recipes: which layers train in
float8, their conversion before a run, and their return to the model's own layers after it.

The layers converted are the linear layers of the model's blocks (its ``_no_split_modules``, as
FSDP shards them) whose dimensions are multiples of 16, as float8 matmuls need, and that the
user's filter keeps; the embeddings and the language-model head stay in bf16, as torchao's and
torchtitan's recipes leave them. A converted layer computes its matmuls in float8 with dynamic
scaling (``"tensorwise"``: one scale a tensor, the default; ``"rowwise"``: one a row); everything
else runs in bf16 autocast, and the weights stay fp32 (the master copy the optimizer steps).
Their state-dict keys and shapes are the model's own: checkpoints and ``save_pretrained`` need
no torchao to load. GPT-2's ``Conv1D`` (a linear layer whose weight is stored ``[in, out]``)
trains in float8 too, its weight kept in its own layout.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from amptrain._stack import outside_stacklevel
from amptrain.fsdp import block_names, is_sharded
from amptrain.precision import PrecisionPlan

RECIPES = ("tensorwise", "rowwise")
ORIGINAL = "_amptrain_fp8_original"  # where a converted layer keeps the layer it replaced


class Fp8Warning(UserWarning):
    """fp8 trains, but slower than it could (its casts are not compiled on a GPU)."""


@dataclass(frozen=True)
class LayerPlan:
    """The layers of a model that train in float8, and why each other linear layer does not."""

    converted: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)  # layer name -> why it stays bf16


@dataclass(frozen=True)
class Fp8Options:
    """How the fp8 layers are made: the scaling recipe, the user's filter, FSDP's all-gather."""

    recipe: str = "tensorwise"
    keep: Any = None  # fp8_filter(module, name) -> bool
    all_gather: bool = False


def torchao_float8() -> Any:
    """``torchao.float8``, or an ImportError that says how to install it."""
    try:
        import torchao.float8
    except ImportError as exc:
        raise ImportError(
            "precision='fp8' needs torchao (its float8 training): pip install 'amptrain[fp8]'"
        ) from exc
    return torchao.float8


def _is_conv1d(module: nn.Module) -> bool:
    """GPT-2's ``transformers.pytorch_utils.Conv1D``, known without importing transformers."""
    kind = type(module)
    return kind.__name__ == "Conv1D" and kind.__module__ == "transformers.pytorch_utils"


def _linear(module: nn.Module) -> bool:
    """A layer float8 can replace: ``nn.Linear`` itself (a subclass may compute otherwise, as
    ``MultiheadAttention``'s projection does) or GPT-2's ``Conv1D``."""
    return type(module) is nn.Linear or _is_conv1d(module)


def _inside(name: str, blocks: list[str]) -> bool:
    return any(name.startswith(f"{block}.") for block in blocks)


def _tied(model: nn.Module) -> set[int]:
    """The ids of the weights an embedding holds (a head tied to one shares its weight) and of
    the model's output head (a transformers model's ``get_output_embeddings``)."""
    ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    return ids | ({id(head.weight)} if isinstance(head, nn.Module) else set())


def _why_not(name: str, module: nn.Module, plan: dict[str, Any]) -> str:
    """Why the linear layer ``name`` stays in bf16, or "" when it trains in float8."""
    shape = tuple(module.weight.shape)
    if plan["blocks"] and not _inside(name, plan["blocks"]):
        return "outside the model's blocks (the first and last layers stay in bf16)"
    if id(module.weight) in plan["tied"]:
        return "the output head (or tied to an embedding)"
    if any(size % 16 for size in shape):
        return f"its dimensions {shape[0]}x{shape[1]} are not multiples of 16"
    if plan["keep"] is not None and not plan["keep"](module, name):
        return "left out by fp8_filter"
    return ""


def plan_layers(model: nn.Module, keep: Any = None) -> LayerPlan:
    """The linear layers of ``model``'s blocks that train in float8; ``keep(module, name)``
    (``fp8_filter``) may leave more of them in bf16. A model that names no blocks has its
    layers chosen by ``keep`` alone (never its head); one that names none and gives no
    ``keep`` is a ValueError, as is a plan with no layer (:func:`check_plan`)."""
    names = block_names(model, None)
    blocks = [n for n, m in model.named_modules() if n and type(m).__name__ in names]
    if not blocks and keep is None:
        raise ValueError(
            f"precision='fp8' trains the linear layers of a model's blocks in float8, and "
            f"{type(model).__name__} names no blocks (no _no_split_modules): pass "
            "fp8_filter=lambda module, name: ... to choose its layers, or train it in "
            "'bf16-mixed'"
        )
    plan = {"blocks": blocks, "tied": _tied(model), "keep": keep}
    converted, skipped = [], {}
    for name, module in model.named_modules():
        if not _linear(module):
            continue
        why = _why_not(name, module, plan)
        if why:
            skipped[name] = why
        else:
            converted.append(name)
    return check_plan(model, LayerPlan(tuple(converted), skipped))


def check_plan(model: nn.Module, plan: LayerPlan) -> LayerPlan:
    """``plan``, if it converts a layer; else a ValueError that says why none is eligible."""
    if plan.converted:
        return plan
    reasons: dict[str, list[str]] = {}
    for name, why in plan.skipped.items():
        reasons.setdefault(why, []).append(name)
    found = "; ".join(f"{len(n)} {why} (e.g. {n[0]})" for why, n in reasons.items())
    raise ValueError(
        f"precision='fp8' found no layer of {type(model).__name__} to train in float8 "
        f"({found or 'it has no nn.Linear layer'}): train it in 'bf16-mixed', or give its "
        "blocks linear layers whose dimensions are multiples of 16"
    )


def float8_config(recipe: str, *, emulate: bool, all_gather: bool) -> Any:
    """torchao's ``Float8LinearConfig`` for ``recipe`` ("tensorwise" or "rowwise": dynamic
    scaling either way), its matmuls emulated where asked, its FSDP all-gather in float8."""
    if recipe not in RECIPES:
        raise ValueError(f"fp8_recipe must be one of {', '.join(RECIPES)}, got {recipe!r}")
    config = torchao_float8().Float8LinearConfig.from_recipe_name(recipe)
    return dataclasses.replace(config, emulate=emulate, enable_fsdp_float8_all_gather=all_gather)


@functools.cache
def _conv1d_class() -> type[nn.Module]:
    from torchao.float8.float8_linear import Float8Linear, matmul_with_hp_or_float8_args

    class Float8Conv1D(Float8Linear):  # type: ignore[misc]
        """GPT-2's Conv1D with float8 matmuls: its weight stays ``[in, out]``, which is the
        transposed weight a Float8Linear multiplies by, so its state dict is Conv1D's."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if torch.is_autocast_enabled(x.device.type):
                x = x.to(torch.get_autocast_dtype(x.device.type))
            out = matmul_with_hp_or_float8_args.apply(
                x, self.weight, self.linear_mm_config, self.config
            )
            return out + self.bias.to(out.dtype)

    return Float8Conv1D


def _float8_conv1d(conv: nn.Module, config: Any) -> nn.Module:
    """``conv`` as a :class:`Float8Conv1D` holding the same parameters."""
    fields = SimpleNamespace(
        in_features=conv.nx, out_features=conv.nf, weight=conv.weight, bias=conv.bias
    )
    return _conv1d_class().from_float(fields, config=config)  # type: ignore[attr-defined]


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, child = name.rpartition(".")
    return (model.get_submodule(path) if path else model), child


def convert(model: nn.Module, plan: PrecisionPlan, options: Fp8Options | None = None) -> int:
    """The planned layers of ``model`` replaced in place by float8 ones when ``plan`` is fp8
    (each keeps the layer it replaced, for :func:`restore`); how many. Nothing otherwise."""
    if plan.name != "fp8":
        return 0
    options = options or Fp8Options()
    layers = plan_layers(model, options.keep)
    config = float8_config(options.recipe, emulate=plan.fp8_emulated, all_gather=options.all_gather)
    originals = {name: model.get_submodule(name) for name in layers.converted}
    chosen = set(layers.converted)
    torchao_float8().convert_to_float8_training(
        model, module_filter_fn=lambda m, name: name in chosen and _linear(m), config=config
    )
    for name, original in originals.items():
        parent, child = _parent(model, name)
        if _is_conv1d(original):
            setattr(parent, child, _float8_conv1d(original, config))
        getattr(parent, child).__dict__[ORIGINAL] = original  # not a submodule: no state
    return len(originals)


def restore(model: nn.Module) -> None:
    """Every layer :func:`convert` replaced put back, holding the trained parameters. A sharded
    model keeps its float8 layers: FSDP holds them (its export is unaffected)."""
    if is_sharded(model):
        return
    for name, module in list(model.named_modules()):
        original = module.__dict__.get(ORIGINAL)
        if original is None:
            continue
        original.weight, original.bias = module.weight, module.bias
        parent, child = _parent(model, name)
        setattr(parent, child, original)


def count(model: nn.Module) -> int:
    """The float8 layers of ``model`` (torchao's ``Float8Linear``, GPT-2's included)."""
    if "torchao.float8" not in sys.modules:
        return 0  # none can exist
    from torchao.float8.float8_linear import Float8Linear

    return sum(isinstance(m, Float8Linear) for m in model.modules())


def advise(plan: PrecisionPlan, compile: bool | str) -> None:
    """An :class:`Fp8Warning` when fp8 runs on float8 tensor cores without ``compile``."""
    if plan.name == "fp8" and not plan.fp8_emulated and plan.device_type == "cuda" and not compile:
        warnings.warn(
            "precision='fp8' without compile=True: torchao's float8 casts and scales then run "
            "as separate kernels, which usually makes fp8 slower than bf16-mixed; pass "
            "compile=True",
            Fp8Warning,
            stacklevel=outside_stacklevel(),
        )


def check_all_gather(all_gather: bool, device: torch.device) -> None:
    """FSDP's float8 all-gather needs NCCL on CUDA GPUs, or a ValueError that says so."""
    if all_gather and device.type != "cuda":
        raise ValueError(
            f"fp8_all_gather all-gathers float8 weights through NCCL between GPUs, and this run "
            f"is on {device.type}: gloo cannot all-gather float8 tensors; leave fp8_all_gather "
            "off here (the weights are then all-gathered in bf16)"
        )
