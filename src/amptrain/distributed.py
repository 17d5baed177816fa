"""Multi-process data parallelism on torch.distributed: torchrun's environment, DDP, sharding,
and the reductions the metrics need. One process (no ``WORLD_SIZE``) is the same code with
every collective a no-op."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, Sampler


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over ranks (the tensor itself in one process)."""
        if self.distributed:
            tensor = tensor.clone()
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """The mean over ranks."""
        return self.sum(tensor) / self.size if self.distributed else tensor

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank. A CPU all-reduce (on a gloo group beside NCCL):
        asking costs no device sync."""
        if not self.distributed:
            return flag
        value = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=_control_group)
        return bool(value.item())


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def join_world(device_type: str, timeout: float | None = None) -> World:
    """The world torchrun describes (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), with its
    process group: NCCL on CUDA, gloo on CPU, whose collectives wait ``timeout`` seconds for the
    other ranks (None: torch's default). One process when ``WORLD_SIZE`` is unset or 1.

    A group started here lives until the process exits (a later run reuses it: ending and
    starting one again on the same rendezvous store can reach the old group's ports)."""
    if dist.is_available() and dist.is_initialized():
        rank, size = dist.get_rank(), dist.get_world_size()
        _control(dist.get_backend(), {})
        return World(rank, size, _env_int("LOCAL_RANK", rank))
    size = _env_int("WORLD_SIZE", 1)
    if size <= 1:
        return World()
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    wait = {"timeout": timedelta(seconds=timeout)} if timeout is not None else {}
    backend = "nccl" if device_type == "cuda" else "gloo"
    global _store
    _store = _rendezvous(rank, size, wait)
    dist.init_process_group(backend, store=_store, rank=rank, world_size=size, **wait)
    _control(backend, wait)
    _fail_fast(rank)
    limit = timeout if timeout is not None else dist.default_pg_timeout.total_seconds()
    atexit.register(_end_group, _store, size, limit)
    return World(rank, size, local_rank)


def _rendezvous(rank: int, size: int, wait: dict[str, timedelta]) -> dist.Store:
    """Where the group meets: the launcher's store (``env://``), under a prefix of this
    attempt's own. After torchrun restarts the job (``--max-restarts``) its store outlives the
    killed workers and still holds their addresses, which the new group would try to reach."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store, _, _ = next(dist.rendezvous("env://", rank, size, **wait))
    return dist.PrefixStore(f"amptrain/attempt-{attempt}/", store)


def _control(backend: str, wait: dict[str, timedelta]) -> None:
    """Beside a group that is not gloo (NCCL), a gloo group of the same ranks, once: the ranks'
    agreements (:meth:`World.any`) travel on the CPU, not through the GPUs."""
    global _control_group
    if backend != "gloo" and _control_group is None:
        _control_group = dist.new_group(backend="gloo", **wait)


_control_group: Any = None  # the gloo group World.any uses beside NCCL (None: the default group)
_failed = False  # whether this process is ending on an exception (its peers will not follow)
_store: Any = None  # the group's store: where the ranks meet at exit


def mark_failed() -> None:
    """This rank is ending on an exception: at exit it leaves at once, without waiting for the
    other ranks (they are in a collective, or gone), so torchrun sees it end and stops them;
    and it says so on the store, so ranks already waiting at their exit leave too."""
    global _failed
    _failed = True
    if _store is not None:
        # RuntimeError: the store's host is gone, and nobody is left waiting on it
        with contextlib.suppress(RuntimeError):
            _store.set(f"{EXIT}/failed", "1")


def _fail_fast(rank: int) -> None:
    """An uncaught exception marks the rank failed; one that only says a peer went away (a
    collective broken by the rank that failed first) is a line, not a second traceback."""
    shown = sys.excepthook  # torch's: each line prefixed with the rank

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        mark_failed()
        if _broken_collective(exc):
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print(
                f"[rank{rank}]: stopped: a collective broke, most likely because another rank "
                f"ended first (its traceback says why): {first}",
                file=sys.stderr,
            )
            return
        shown(kind, exc, tb)

    sys.excepthook = hook


def _broken_collective(exc: BaseException) -> bool:
    """Whether ``exc`` only says that a collective broke (a peer closed its connection, or
    the collective timed out): NCCL raises a DistError, gloo a RuntimeError from its
    transport."""
    return isinstance(exc, dist.DistError) or (
        isinstance(exc, RuntimeError) and "gloo/transport" in str(exc)
    )


def _end_group(store: dist.Store, size: int, timeout_s: float) -> None:
    """At exit: every rank reaches the teardown before any rank tears its group down (a rank
    whose peer closed its sockets first can abort in gloo's threads). They meet on the store,
    not in a collective: gloo frees a finished collective on its own thread, which takes the
    GIL to let go of the Python state the collective captured; once the interpreter had begun
    to finalize, that thread ended the process (``terminate called without an active
    exception``, SIGABRT, after a run that was done). A rank that failed leaves at once, and
    the others stop waiting when it says so (:func:`mark_failed`); a peer killed outright is
    waited for up to the group's timeout, unless torchrun ends the job first. Then the rank
    waits for gloo's worker threads to let go of their last collective (:func:`_gloo_settled`):
    a model keeps its group, and so those threads, alive past the teardown."""
    if _failed or not dist.is_initialized():
        return
    # RuntimeError: the store's host (rank 0) has left, so the ranks are past the meeting
    with contextlib.suppress(RuntimeError):
        _meet(store, size, EXIT, timeout_s)
    _gloo_settled(SETTLE_S)
    dist.destroy_process_group()


GLOO_WORKER = "pt_gloo_runloop"  # the name of gloo's worker threads (two per group)
SETTLE_S = 10.0  # how long a rank waits at exit for gloo's worker threads, at most


def _gloo_workers() -> dict[str, tuple[str, ...]]:
    """Each of gloo's worker threads in this process (Linux: found by name in /proc; none
    elsewhere) with its state and its context-switch counts."""
    workers: dict[str, tuple[str, ...]] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # the thread has ended since
                status = Path(f"/proc/self/task/{tid}/status").read_text()
                fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
                if fields.get("Name") == GLOO_WORKER:
                    workers[tid] = (
                        fields["State"][:1],
                        fields["voluntary_ctxt_switches"],
                        fields["nonvoluntary_ctxt_switches"],
                    )
    return workers


def _gloo_settled(timeout_s: float, poll_s: float = 0.02) -> bool:
    """True once gloo's worker threads are all asleep and were not woken for ``poll_s``
    seconds, the GIL released meanwhile; False after ``timeout_s``. A worker frees a finished
    collective after the rank has its result, and freeing its tensors takes the GIL: once the
    interpreter has begun to finalize, that ends the process (``terminate called without an
    active exception``, SIGABRT). A worker waiting for the GIL wakes every few milliseconds
    (its switch counts move) or waits to run (state R); an idle one sleeps untouched."""
    deadline = time.monotonic() + timeout_s
    before = _gloo_workers()
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        now = _gloo_workers()
        if now == before and all(state == "S" for state, *_ in now.values()):
            return True
        before = now
    return False


EXIT = "exit"  # the store key the ranks meet under at exit


def _meet(store: dist.Store, size: int, key: str, timeout_s: float) -> bool:
    """True once ``size`` processes have called it with ``key``; False as soon as one says it
    failed (``KEY/failed`` on the store), or after ``timeout_s`` seconds."""
    if store.add(key, 1) == size:
        store.set(f"{key}/all", "1")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if store.check([f"{key}/all"]):
            return True
        if store.check([f"{key}/failed"]):
            return False
        time.sleep(0.02)
    return False


def wrap_model(model: nn.Module, world: World, device: torch.device) -> nn.Module:
    """The model DDP-wrapped when there are several processes (gradients averaged over ranks)."""
    if not world.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def in_lockstep(batches: Iterable[Any], world: World) -> Iterator[Any | None]:
    """A rank's batches, drawn in step with every other rank's: once its own have run out it
    gets None until no rank has one left. A sharded (FSDP) model's forward gathers weights from
    every rank, so each rank runs as many forwards as the rank with the most batches."""
    remaining = iter(batches)
    while True:
        batch = next(remaining, None)
        if not world.any(batch is not None):
            return
        yield batch


class ShardSampler(Sampler[int]):
    """Rows ``rank, rank + size, ...`` in order, with no padding: each validation row is scored
    once, by one rank (the counts are summed afterwards)."""

    def __init__(self, length: int, world: World) -> None:
        self.indices = list(range(world.rank, length, world.size))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def shard_sampler(length: int, world: World, *, shuffle: bool, seed: int) -> Sampler[int]:
    """Training: a ``DistributedSampler`` (``set_epoch`` gives each epoch its order; every
    rank gets as many rows). Validation: :class:`ShardSampler`."""
    if shuffle:
        return DistributedSampler(
            range(length), num_replicas=world.size, rank=world.rank, shuffle=True, seed=seed
        )
    return ShardSampler(length, world)


def shard_loader(loader: DataLoader, world: World, *, shuffle: bool, seed: int) -> DataLoader:
    """A ready DataLoader rebuilt over this rank's shard (same batch size, collate, workers).
    A training loader already sharded by a ``DistributedSampler`` is kept; a validation one is
    rebuilt too: that sampler repeats rows to give every rank as many, and each repeat would be
    scored and passed to ``compute_metrics`` twice."""
    kept = (DistributedSampler, ShardSampler) if shuffle else (ShardSampler,)
    if not world.distributed or isinstance(loader.sampler, kept):
        return loader
    if isinstance(loader.dataset, IterableDataset):
        raise ValueError(
            "under torchrun a DataLoader over an IterableDataset cannot be sharded here: "
            "give each rank its own part of the stream, or pass token tensors"
        )
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=shard_sampler(len(loader.dataset), world, shuffle=shuffle, seed=seed),  # type: ignore[arg-type]
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        persistent_workers=loader.persistent_workers,
        worker_init_fn=loader.worker_init_fn,
    )
