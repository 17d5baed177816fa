"""The parts of amptrain.distributed that need no second process (torchrun runs the rest, in
tests/integration/test_torchrun.py)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from amptrain.distributed import ShardSampler, World, join_world, shard_loader


def test_one_process_is_a_world_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    world = join_world("cpu")
    assert (world.rank, world.size, world.is_main, world.distributed) == (0, 1, True, False)
    t = torch.tensor([1.0, 2.0])
    assert world.sum(t) is t and world.mean(t) is t and world.gather("x") == ["x"]


def test_a_bad_torchrun_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two' is not an integer"):
        join_world("cpu")


def test_validation_shards_cover_every_row_once() -> None:
    shards = [list(ShardSampler(7, World(rank, 3))) for rank in range(3)]
    assert sorted(i for s in shards for i in s) == list(range(7))
    assert [len(s) for s in shards] == [3, 2, 2]


def test_a_ready_loader_is_rebuilt_over_the_rank_shard() -> None:
    loader = DataLoader(torch.arange(10), batch_size=3)
    sharded = shard_loader(loader, World(1, 2), shuffle=True, seed=4)
    assert isinstance(sharded.sampler, DistributedSampler) and sharded.batch_size == 3
    assert shard_loader(loader, World(), shuffle=True, seed=4) is loader


class _Stream(IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(3))


def test_a_stream_cannot_be_sharded_and_says_so() -> None:
    with pytest.raises(ValueError, match="IterableDataset cannot be sharded"):
        shard_loader(DataLoader(_Stream()), World(0, 2), shuffle=True, seed=0)
