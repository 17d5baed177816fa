"""FSDP2 under torchrun (``strategy="fsdp"``): the model's blocks, then the model, sharded with
``fully_shard``, the precision plan mapped onto a ``MixedPrecisionPolicy`` once, and the full
weights gathered to rank 0 for an export.

Each rank keeps 1/N of every parameter, its gradient and its optimizer state; a block's full
parameters exist only while it runs (gathered before its forward and its backward, freed after).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from amptrain.distributed import World
from amptrain.precision import PrecisionPlan

STRATEGIES = ("ddp", "fsdp")


def check_strategy(strategy: str | None, world: World) -> str | None:
    """The strategy a run trains with: None in one process, ``"ddp"`` (the default) or
    ``"fsdp"`` under torchrun; FSDP without processes to shard over is an error."""
    if strategy == "fsdp" and not world.distributed:
        raise ValueError(
            "strategy='fsdp' shards the model over the processes torchrun starts, and this is "
            "one process (WORLD_SIZE is unset or 1): launch it with torchrun "
            "--nproc_per_node=N (N >= 2), or leave strategy unset to train in one process"
        )
    if not world.distributed:
        return None
    return strategy or "ddp"


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` is sharded by ``fully_shard`` (its parameters are DTensors)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def block_names(model: nn.Module, auto_wrap: Sequence[type | str] | None) -> set[str]:
    """The class names of the blocks to shard one by one: ``auto_wrap``'s, else the model's
    ``_no_split_modules`` (a ``transformers`` model's, :class:`~amptrain.model.TinyGPT`'s)."""
    given = auto_wrap or getattr(model, "_no_split_modules", None) or ()
    return {entry if isinstance(entry, str) else entry.__name__ for entry in given}


def blocks(model: nn.Module, auto_wrap: Sequence[type | str] | None) -> list[nn.Module]:
    """The model's blocks (the modules of :func:`block_names`' classes), innermost first: the
    order ``fully_shard`` needs (a module after those inside it)."""
    names = block_names(model, auto_wrap)
    found = [m for m in model.modules() if m is not model and type(m).__name__ in names]
    missing = names - {type(m).__name__ for m in found}
    if auto_wrap and missing:
        raise ValueError(
            f"auto_wrap names {', '.join(sorted(missing))}, which {type(model).__name__} does "
            "not contain: name the classes of its repeated layers"
        )
    if not found:
        raise ValueError(
            f"strategy='fsdp' shards a model block by block and found no block in "
            f"{type(model).__name__} (it has no _no_split_modules): pass auto_wrap=[YourBlock], "
            "the class of its repeated layers (e.g. a transformer layer)"
        )
    return found[::-1]


def mixed_precision(plan: PrecisionPlan) -> Any:
    """The plan as FSDP's policy: with mixed precision, the gathered parameters a block computes
    with are in the autocast dtype, while the sharded (master) weights, their gradients'
    reduction and the optimizer stay fp32; otherwise the parameters' own dtype throughout."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if plan.autocast_dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=plan.autocast_dtype, reduce_dtype=torch.float32)


def shard(
    model: nn.Module,
    plan: PrecisionPlan,
    device: torch.device,
    world: World,
    *,
    auto_wrap: Sequence[type | str] | None = None,
    cpu_offload: bool = False,
    reshard_after_forward: bool = True,
) -> nn.Module:
    """``model`` sharded in place over the ``world``'s ranks: each block, then the root (the
    embeddings, the head and whatever no block holds). The shards go to ``device`` (the CPU with
    ``cpu_offload``: the optimizer then steps there); the model may still be on the CPU, so a
    model larger than one device is never whole on it."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    offload = CPUOffloadPolicy(pin_memory=device.type == "cuda") if cpu_offload else None
    options: dict[str, Any] = {
        "mesh": init_device_mesh(device.type, (world.size,)),
        "mp_policy": mixed_precision(plan),
        "offload_policy": offload or OffloadPolicy(),
        "reshard_after_forward": reshard_after_forward,
    }
    for block in blocks(model, auto_wrap):
        fully_shard(block, **options)
    fully_shard(model, **options)
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole weights on the CPU, for an export. Sharded, this gathers them to
    rank 0, which alone gets them (the other ranks get an empty dict): every rank must call
    it. A model that is not sharded gives its own state dict, on every rank."""
    if not is_sharded(model):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def local_bytes(tensors: Sequence[torch.Tensor]) -> int:
    """Bytes this rank holds of ``tensors``: a DTensor's local shard, a tensor's whole."""
    total = 0
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total
