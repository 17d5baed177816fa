"""Sharded checkpoints of an FSDP run, with ``torch.distributed.checkpoint`` (DCP).

A sharded checkpoint is a folder: each rank writes its own shard of the weights and optimizer
state into it (``__<rank>_0.distcp``: no rank ever holds the whole model to save), rank 0 the
index of the shards (``.metadata``) and the run's small state beside them (a ``torch.save``
file). It is written under a temporary name and renamed whole once every rank's part is on the
disk, as :func:`amptrain.checkpoint.write` writes a file. Any number of ranks can read it back:
DCP cuts the saved shards to the model's current ones.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from amptrain import checkpoint
from amptrain.distributed import World


def model_state(model: nn.Module) -> dict[str, Any]:
    """The model's sharded state dict (this rank's shards, as DTensors), by parameter name."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model)


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The model's and the optimizer's sharded states, keyed by parameter name (so that any
    number of ranks can load them)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, optimizer_state = get_state_dict(model, optimizer)
    return {"model": weights, "optimizer": optimizer_state}


def save(
    directory: str | Path,
    step: int,
    shards: dict[str, Any],
    state: dict[str, Any],
    keep: int,
    world: World,
) -> Path:
    """Write the sharded checkpoint of ``step`` in ``directory`` (every rank its ``shards``,
    rank 0 the run's ``state``) and delete all but the newest ``keep``, once it is whole."""
    target = Path(directory) / checkpoint.sharded_name(step)
    if world.is_main:  # left by a run killed while it wrote or swapped (write waits for this)
        stale = [".step-*.partial", f"step-*{checkpoint.PREVIOUS}"]
        for left in [p for pattern in stale for p in target.parent.glob(pattern)]:
            shutil.rmtree(left, ignore_errors=True)
    write(target, shards, {checkpoint.STATE: {"format": checkpoint.FORMAT, **state}}, world)
    if world.is_main:
        checkpoint.prune(target.parent, keep)
    return target


def write(target: Path, shards: dict[str, Any], files: dict[str, Any], world: World) -> None:
    """Write the folder ``target``, whole or not at all: every rank its ``shards``, then rank 0
    each of ``files`` (a name and the state ``torch.save`` writes there). Collective: every rank
    calls it. The folder is renamed into place only once every part is flushed to the disk; a
    write that fails removes its temporary folder and raises on every rank."""
    import torch.distributed.checkpoint as dcp

    staging = target.with_name(f".{target.name}.partial")
    if world.is_main:
        shutil.rmtree(staging, ignore_errors=True)  # left by a run killed while it wrote
    world.barrier()
    try:
        dcp.save(shards, storage_writer=dcp.FileSystemWriter(staging, sync_files=True))
        if world.is_main:
            for name, state in files.items():
                checkpoint.write(staging / name, state)
            checkpoint.sync_folder(staging)
            checkpoint.swap_in(staging, target)
    except Exception as exc:
        if world.is_main:
            shutil.rmtree(staging, ignore_errors=True)
        cause = _disk_error(exc)
        if cause is None:
            raise
        raise checkpoint.write_error(target, target.parent, cause) from exc
    world.barrier()


def _disk_error(exc: BaseException) -> OSError | None:
    """The OSError behind a failed write: in ``exc``'s chain, or among the ranks' failures a
    DCP ``CheckpointException`` gathers."""
    failures = getattr(exc, "failures", None)
    causes = list(failures.values()) if isinstance(failures, dict) else []
    for cause in [exc, *causes]:
        found = checkpoint.os_error(cause) if isinstance(cause, BaseException) else None
        if found is not None:
            return found
    return None


def load(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Each rank reads its shards of the model (and the optimizer) from the sharded checkpoint
    ``path``, whatever number of ranks wrote it. Collective: every rank calls it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    state = training_state(model, optimizer) if optimizer else {"model": model_state(model)}
    try:
        dcp.load(state, checkpoint_id=path)
    except Exception as exc:  # DCP names each key it could not find or fit
        raise ValueError(
            f"the sharded checkpoint {path} does not hold this model's weights: {exc}. Resume "
            "with the model (the same class and sizes) it was written from"
        ) from exc
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )


def read_whole(path: Path) -> dict[str, torch.Tensor]:
    """The model's whole weights, on the CPU, read from every shard file in ``path`` by this
    process alone (rank 0, for an export): no collective, and no other rank holds them."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(path)
    saved = reader.read_metadata().state_dict_metadata
    weights = {
        key.removeprefix("model."): torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in saved.items()
        if key.startswith("model.") and isinstance(meta, TensorStorageMetadata)
    }
    with warnings.catch_warnings():  # DCP says it reads in one process, as asked
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load({"model": weights}, storage_reader=reader, no_dist=True)
    return weights
