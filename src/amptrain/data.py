"""Data: token-id inputs in three shapes, one DataLoader, seeding, and learnable synthetic text."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from amptrain.checkpoint import rng_state, set_rng_state
from amptrain.collate import token_rows
from amptrain.distributed import ShardSampler, World, shard_loader, shard_sampler

# token tensors, a DataLoader, or what amptrain.collate reads (BatchEncoding, rows, datasets)
TokenData = torch.Tensor | Sequence[torch.Tensor] | DataLoader | Any


def seed_everything(seed: int, *, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (every device); optionally make kernels deterministic
    (global settings that stay set: :func:`deterministic_kernels` gives them back)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        _set_deterministic()


def _set_deterministic() -> None:
    # cuBLAS needs a fixed workspace to be deterministic; set before the first matmul.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False


@contextmanager
def deterministic_kernels(enabled: bool) -> Iterator[None]:
    """Deterministic algorithms (and cuBLAS's fixed workspace) inside the block; every global
    setting is as it was afterwards."""
    if not enabled:
        yield
        return
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )
    _set_deterministic()
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.benchmark = saved[2]
        if saved[3] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[3]


def _seed_worker(worker_id: int) -> None:
    # Each worker's torch seed is derived from the loader's generator; carry it to the others.
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


class EpochShuffle(Sampler[int]):
    """A shuffled order that is a function of (seed, epoch) alone: the same with any number of
    workers (they draw from their own generator, never from this one). Call
    :meth:`set_epoch` before each epoch, as with ``DistributedSampler``."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order to give next."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())

    def __len__(self) -> int:
        return self.size


def make_dataloader(
    data: TokenData,
    *,
    batch_size: int,
    shuffle: bool,
    device: torch.device,
    seed: int = 0,
    num_workers: int | None = None,
    pad_token_id: int | None = None,
    padding_side: str = "right",
    world: World | None = None,
) -> DataLoader:
    """Wrap token data in a DataLoader; a ready DataLoader is returned unchanged (under
    torchrun, rebuilt over this rank's shard). ``shuffle`` also says what the data is for under
    torchrun: training (True: a ``DistributedSampler``, as many rows on every rank) or
    evaluation (False: each row once, on one rank, so ranks may get different counts). Rows
    of other shapes (``BatchEncoding``, row mappings, NumPy, ``datasets``) are read and padded
    by :func:`amptrain.collate.token_rows`.

    Workers prefetch batches and stay alive across epochs; on CUDA, batches are pinned so
    the host-to-device copy can be ``non_blocking``. ``num_workers=None`` picks 2 on CUDA and
    none on CPU: the rows are in memory, and a worker process would only take a core from
    the training.
    """
    world = world or World()
    if isinstance(data, DataLoader):
        return shard_loader(data, world, shuffle=shuffle, seed=seed)
    if num_workers is None:
        num_workers = 2 if device.type == "cuda" else 0
    num_workers = min(num_workers, os.cpu_count() or 1)
    generator = torch.Generator()
    generator.manual_seed(seed)  # the workers' seeds; the order has a generator of its own
    workers = num_workers > 0
    dataset, collate = token_rows(
        data, pad_token_id=pad_token_id, padding_side=padding_side, world=world
    )
    sampler: Sampler[int] | None = None  # a stream (IterableDataset) has its own order and shard
    if world.distributed and not isinstance(dataset, IterableDataset):
        sampler = shard_sampler(len(dataset), world, shuffle=shuffle, seed=seed)
    elif shuffle and not isinstance(dataset, IterableDataset):
        sampler = EpochShuffle(len(dataset), seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate,
        num_workers=num_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers,
        worker_init_fn=_seed_worker if workers else None,
        generator=generator,
    )


def synthetic_token_data(
    n_samples: int,
    seq_len: int,
    vocab_size: int,
    *,
    seed: int = 0,
    rule_seed: int = 0,
    noise: float = 0.1,
) -> torch.Tensor:
    """Learnable synthetic sequences ``[n_samples, seq_len]`` of ids in ``[1, vocab_size)``.

    Each next token follows a fixed random permutation of the previous one, except with
    probability ``noise`` where it is uniform. A model that learns the permutation reaches
    token accuracy near ``1 - noise``, far above the chance level ``1 / vocab_size``. Id 0 is
    left free for padding. ``rule_seed`` fixes the permutation, so train and validation sets
    drawn with different ``seed`` values follow the same rule.
    """
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be at least 3, got {vocab_size}")
    if n_samples < 1 or seq_len < 2:
        raise ValueError(f"need n_samples >= 1 and seq_len >= 2, got {n_samples}, {seq_len}")
    ids = torch.arange(1, vocab_size)
    successor = torch.zeros(vocab_size, dtype=torch.long)
    rule = torch.Generator().manual_seed(rule_seed)
    successor[ids] = ids[torch.randperm(vocab_size - 1, generator=rule)]
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n_samples, seq_len, dtype=torch.long)
    out[:, 0] = torch.randint(1, vocab_size, (n_samples,), generator=g)
    for t in range(1, seq_len):
        random_ids = torch.randint(1, vocab_size, (n_samples,), generator=g)
        keep = torch.rand(n_samples, generator=g) >= noise
        out[:, t] = torch.where(keep, successor[out[:, t - 1]], random_ids)
    return out


# Samplers whose order is a function of what amptrain saves (the global generators, their own
# generator, set_epoch), so a resumed epoch draws the same batches as the uninterrupted one.
_RESTORABLE: tuple[type, ...] = (
    SequentialSampler,
    RandomSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
    DistributedSampler,
    EpochShuffle,
    ShardSampler,
)


def _samplers(loader: Any) -> list[Any]:
    """The loader's samplers, a batch sampler's own sampler included."""
    found = [getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)]
    batch = found[1]
    if isinstance(batch, BatchSampler):
        found.append(batch.sampler)
    return [s for s in found if s is not None]


def _generators(loader: Any) -> list[torch.Generator]:
    """The generators the loader and its samplers hold (each once)."""
    gens = [getattr(x, "generator", None) for x in [loader, *_samplers(loader)]]
    unique = {id(g): g for g in gens if isinstance(g, torch.Generator)}
    return list(unique.values())


def check_restorable(loader: Any) -> None:
    """A ValueError naming the sampler whose order a resumed run could not draw again: its
    state is its own, and neither amptrain nor torch can save it."""
    if isinstance(getattr(loader, "dataset", None), IterableDataset):
        return  # a stream is replayed from its start (see docs/faults.md)
    for sampler in _samplers(loader):
        if isinstance(sampler, (*_RESTORABLE, BatchSampler)):
            continue
        if hasattr(sampler, "state_dict") and hasattr(sampler, "load_state_dict"):
            continue
        raise ValueError(
            f"the training DataLoader's sampler {type(sampler).__name__} keeps a state amptrain "
            "cannot save, so a resumed run could draw other batches: give it state_dict() and "
            "load_state_dict(), or use a torch sampler (DataLoader(shuffle=True) resumes exactly)"
        )


def order_state(loader: Any) -> dict[str, Any]:
    """What decides the order of the epoch about to start: every global generator, the
    loader's and samplers' own, and the state of samplers that save one."""
    stateful = [s.state_dict() for s in _samplers(loader) if _saves_state(s)]
    return {
        "rng": rng_state(),
        "generators": [g.get_state() for g in _generators(loader)],
        "samplers": stateful,
    }


def set_order_state(loader: Any, state: dict[str, Any]) -> None:
    """Put back what :func:`order_state` took, before the epoch's iterator is made."""
    set_rng_state(state["rng"])
    gens = _generators(loader)
    if len(gens) != len(state["generators"]):
        raise ValueError(
            f"the training DataLoader has {len(gens)} generators, the checkpoint saved "
            f"{len(state['generators'])}: resume with the loader the run was started with"
        )
    for generator, saved in zip(gens, state["generators"], strict=True):
        generator.set_state(saved)
    stateful = [s for s in _samplers(loader) if _saves_state(s)]
    for sampler, saved in zip(stateful, state["samplers"], strict=True):
        sampler.load_state_dict(saved)


def _saves_state(sampler: Any) -> bool:
    return not isinstance(sampler, _RESTORABLE) and hasattr(sampler, "load_state_dict")
