"""The parts of amptrain.distributed that need no second process (torchrun runs the rest, in
tests/integration/test_torchrun.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from amptrain import distributed
from amptrain.distributed import ShardSampler, World, in_lockstep, join_world, shard_loader


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


def test_a_validation_loader_with_a_padding_sampler_is_rebuilt_to_score_each_row_once() -> None:
    rows = torch.arange(5)
    padded = [
        DataLoader(rows, batch_size=2, sampler=DistributedSampler(rows, 2, r, shuffle=False))
        for r in range(2)
    ]
    # as the user built them, the two ranks score row 0 twice (rank 1 gets it as padding)
    assert sorted(int(i) for loader in padded for b in loader for i in b) == [0, 0, 1, 2, 3, 4]
    seen = [
        [int(i) for b in shard_loader(padded[r], World(r, 2), shuffle=False, seed=0) for i in b]
        for r in range(2)
    ]
    assert seen == [[0, 2, 4], [1, 3]]
    training = shard_loader(padded[0], World(0, 2), shuffle=True, seed=0)
    assert training is padded[0]  # a training loader keeps the user's sharding


class _Stream(IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(3))


def test_a_stream_cannot_be_sharded_and_says_so() -> None:
    with pytest.raises(ValueError, match="IterableDataset cannot be sharded"):
        shard_loader(DataLoader(_Stream()), World(0, 2), shuffle=True, seed=0)


@pytest.mark.slow
def test_the_exit_meeting_waits_for_every_rank_on_the_store() -> None:
    store, arrived = dist.HashStore(), []

    def rank() -> None:
        arrived.append(distributed._meet(store, 2, "exit", 60))

    first = threading.Thread(target=rank)
    first.start()
    first.join(timeout=0.5)
    assert first.is_alive() and not arrived  # alone, the first rank waits
    rank()
    first.join(timeout=5)
    assert arrived == [True, True]


def test_a_rank_leaves_its_group_at_exit_without_a_collective(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A collective at exit is freed by gloo's thread, which needs the GIL while the
    interpreter finalizes (an abort, once in about 20 runs under load): the exit path has none."""
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    def collective(*args: object, **kwargs: object) -> None:
        raise AssertionError("a collective at exit")

    for name in ("barrier", "all_reduce", "monitored_barrier"):
        monkeypatch.setattr(dist, name, collective)
    distributed._end_group(store, 1, 60)
    assert not dist.is_initialized()


@pytest.mark.skipif(sys.platform != "linux", reason="gloo's threads are found in /proc")
def test_a_rank_waits_at_exit_until_gloos_threads_let_go_of_their_last_collective(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model (FSDP's, DDP's) keeps its group's gloo threads alive past the teardown, and one
    frees a finished collective after the rank has its result, which takes the GIL: at
    finalization, an abort (2 in 45 runs of a short FSDP job with gloo's threads at
    SCHED_IDLE). The exit path waits until they sleep."""
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    dist.all_reduce(torch.ones(1))
    found = distributed._gloo_workers()
    assert found  # the group's workers, found by their name (how many: gloo's choice)
    # as read here, a worker may still be running (freeing this all_reduce): the states are set
    idle = {tid: ("S", *counts) for tid, (_, *counts) in found.items()}
    busy = {tid: ("R", *counts) for tid, (_, *counts) in found.items()}
    seen, polls = iter([busy, busy, idle]), []  # one is freeing its tensors, then all sleep

    def workers() -> dict[str, tuple[str, ...]]:
        polls.append(1)
        return next(seen, idle)

    monkeypatch.setattr(distributed, "_gloo_workers", workers)
    distributed._end_group(store, 1, 60)
    assert len(polls) == 4 and not dist.is_initialized()


@pytest.mark.skipif(sys.platform != "linux", reason="gloo's threads are found in /proc")
def test_gloos_idle_threads_settle_at_once_and_busy_ones_are_waited_for_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        dist.all_reduce(torch.ones(1))
        start = time.monotonic()
        assert distributed._gloo_settled(5)
        assert time.monotonic() - start < 1
        assert {state for state, *_ in distributed._gloo_workers().values()} == {"S"}
        monkeypatch.setattr(distributed, "_gloo_workers", lambda: {"1": ("R", "0", "0")})
        start = time.monotonic()
        assert distributed._gloo_settled(0.3) is False
        assert 0.3 <= time.monotonic() - start < 5
    finally:
        dist.destroy_process_group()


def test_ranks_waiting_at_exit_leave_when_a_rank_says_it_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, left = dist.HashStore(), []
    waiting = threading.Thread(target=lambda: left.append(distributed._meet(store, 2, "exit", 60)))
    waiting.start()
    monkeypatch.setattr(distributed, "_store", store)
    monkeypatch.setattr(distributed, "_failed", False)
    distributed.mark_failed()  # the other rank, raising
    waiting.join(timeout=10)
    assert left == [False] and distributed._failed


@pytest.mark.slow
def test_the_exit_meeting_gives_up_after_its_timeout() -> None:
    start = time.monotonic()
    assert distributed._meet(dist.HashStore(), 2, "exit", 0.3) is False
    assert 0.3 <= time.monotonic() - start < 10


WORKER = """
import os, signal, sys, time
import torch, torch.distributed as dist
from amptrain.distributed import join_world
timeout = float(sys.argv[2]) if len(sys.argv) > 2 else None
world = join_world("cpu", timeout=timeout)
dist.all_reduce(torch.ones(1))
if world.rank == 1 and sys.argv[1] == "raise":
    raise RuntimeError("rank 1 fails after its last collective")
if world.rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(0.5)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "timeout"), [("raise", None), ("kill", 3.0)], ids=["raises", "killed"]
)
def test_a_rank_waiting_at_exit_is_not_held_by_a_peer_that_died(
    tmp_path: Path, how: str, timeout: float | None
) -> None:
    """A plain env:// launch, no torchrun to end the job: a peer that raised says so and the
    other rank leaves at once; one killed outright is waited for up to the group's timeout."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    env["OMP_NUM_THREADS"] = "1"
    args = [sys.executable, str(script), how, *([str(timeout)] if timeout else [])]
    ranks = [
        subprocess.Popen(args, env={**env, "RANK": str(r)}, stderr=subprocess.PIPE) for r in (0, 1)
    ]
    ranks[1].wait(timeout=120)
    start = time.monotonic()
    try:
        assert ranks[0].wait(timeout=60) == 0
    finally:
        for rank in ranks:
            rank.kill()
            rank.communicate()
    assert time.monotonic() - start < (timeout or 0) + 20


def test_one_process_draws_its_batches_in_lockstep_with_itself() -> None:
    assert list(in_lockstep(iter([1, 2, 3]), World())) == [1, 2, 3]
    assert list(in_lockstep([], World())) == []
