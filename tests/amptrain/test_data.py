from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator

import pytest
import torch
from torch.utils.data import DataLoader, Sampler

from amptrain import TinyGPT, fine_tune, make_dataloader, synthetic_token_data
from amptrain.collate import PadCollate, SequenceDataset
from amptrain.data import (
    EpochShuffle,
    check_restorable,
    order_state,
    seed_everything,
    set_order_state,
)

CPU = torch.device("cpu")
Tokens = Callable[..., torch.Tensor]


def test_synthetic_data_is_deterministic_in_range_and_follows_its_rule() -> None:
    a = synthetic_token_data(200, 20, 50, seed=3, noise=0.1)
    assert torch.equal(a, synthetic_token_data(200, 20, 50, seed=3, noise=0.1))
    assert not torch.equal(a, synthetic_token_data(200, 20, 50, seed=4, noise=0.1))
    assert a.min() >= 1 and a.max() < 50
    # The most frequent successor of each token covers about 1 - noise of transitions.
    pairs = torch.stack([a[:, :-1].reshape(-1), a[:, 1:].reshape(-1)], dim=1)
    counts = torch.zeros(50, 50)
    counts.index_put_((pairs[:, 0], pairs[:, 1]), torch.ones(len(pairs)), accumulate=True)
    share = counts.max(dim=1).values.sum() / counts.sum()
    assert 0.85 < share < 0.95


def test_train_and_val_sets_share_the_rule() -> None:
    train = synthetic_token_data(100, 10, 30, seed=0, noise=0.0)
    val = synthetic_token_data(100, 10, 30, seed=1, noise=0.0)
    rule = {
        int(x): int(y) for x, y in zip(train[:, :-1].flatten(), train[:, 1:].flatten(), strict=True)
    }
    assert all(
        rule.get(int(x), int(y)) == int(y)
        for x, y in zip(val[:, :-1].flatten(), val[:, 1:].flatten(), strict=True)
    )


def test_dataloader_order_is_reproducible_from_the_seed() -> None:
    data = torch.arange(40).view(20, 2)

    def order(seed: int) -> list[int]:
        loader = make_dataloader(
            data, batch_size=4, shuffle=True, device=CPU, seed=seed, num_workers=0
        )
        return [int(b[0][0, 0]) for b in loader]

    assert order(1) == order(1)
    assert order(1) != order(2)


def test_dataloader_with_a_worker_yields_every_row_once() -> None:
    data = [torch.arange(n) + 1 for n in range(2, 10)]
    loader = make_dataloader(data, batch_size=3, shuffle=False, device=CPU, num_workers=1)
    assert loader.num_workers == 1 and loader.persistent_workers
    rows = [int(r[0]) for ids, _ in loader for r in ids]
    assert rows == [1] * 8


def test_a_ready_dataloader_is_used_as_it_is() -> None:
    loader = torch.utils.data.DataLoader(torch.ones(4, 3, dtype=torch.long), batch_size=2)
    assert make_dataloader(loader, batch_size=99, shuffle=True, device=CPU) is loader


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (torch.ones(3, dtype=torch.long), "2-D"),
        (torch.ones(2, 3), "integers"),
        ([], "empty"),
        ([torch.ones(2, 2, dtype=torch.long)], "1-D"),
    ],
)
def test_bad_token_data_says_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_dataloader(data, batch_size=2, shuffle=False, device=CPU)


def test_deterministic_kernels_inside_the_block_and_as_before_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amptrain.data import deterministic_kernels

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.backends.cudnn.benchmark = True
    try:
        with deterministic_kernels(True):
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.is_deterministic_algorithms_warn_only_enabled()
            assert torch.backends.cudnn.benchmark is False
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        assert not torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.backends.cudnn.benchmark = False


def test_a_loader_worker_seeds_python_and_numpy_from_its_torch_seed() -> None:
    import random

    import numpy as np

    from amptrain.data import _seed_worker

    torch.manual_seed(2**32 + 5)  # a worker's seed can exceed NumPy's 32-bit range
    _seed_worker(0)
    got = (random.random(), np.random.random())
    random.seed(5)
    np.random.seed(5)
    assert got == (random.random(), np.random.random())


def test_rows_too_short_to_train_on_stop_fine_tune_before_it_trains(model: TinyGPT) -> None:
    rows = [torch.tensor([3, 4, 5]), torch.tensor([7])]
    with pytest.raises(ValueError, match="row 1 has 1 token"):
        fine_tune(model, rows, epochs=1, num_workers=0)


def test_ragged_list_data_is_padded_and_trains(model: TinyGPT, tokens: Tokens) -> None:
    rows = [row[: 4 + i % 8] for i, row in enumerate(tokens())]
    result = fine_tune(model, rows, rows[:8], epochs=1, batch_size=4, num_workers=0)
    epoch = result.epochs[0]
    assert math.isfinite(epoch.val_loss)
    # the token rate counts the rows' own tokens, not the padding that fills each batch out
    assert epoch.tokens_per_second * epoch.wall_time_s == pytest.approx(sum(map(len, rows)))


@pytest.mark.slow
def test_the_shuffle_order_depends_on_seed_and_epoch_not_on_the_worker_count(
    make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    def losses(workers: int) -> list[float]:
        return fine_tune(make_model(), tokens(64), epochs=3, batch_size=8, seed=3,
                         num_workers=workers).train_loss_history  # fmt: skip

    assert losses(0) == losses(1)


def test_the_shuffled_order_is_the_same_in_every_release() -> None:
    # a run resumed by a later amptrain skips the batches it trained: the order must not move
    sampler = EpochShuffle(8, seed=1)  # before any set_epoch: epoch 0
    assert list(sampler) == [6, 1, 2, 3, 4, 7, 5, 0]
    sampler.set_epoch(1)
    assert list(sampler) == [7, 5, 6, 2, 1, 4, 0, 3]


@pytest.mark.parametrize("seed", [7, 2**32 + 7])
def test_seed_everything_seeds_python_numpy_and_torch(seed: int) -> None:
    import random

    import numpy as np

    deterministic = torch.are_deterministic_algorithms_enabled()
    seed_everything(seed)
    drawn = (random.random(), float(np.random.rand()), float(torch.rand(())))
    assert drawn[0] == random.Random(seed).random()
    assert drawn[1] == float(np.random.RandomState(seed % 2**32).rand())  # numpy's seeds: 32 bits
    assert drawn[2] == float(torch.rand((), generator=torch.Generator().manual_seed(seed)))
    assert torch.are_deterministic_algorithms_enabled() == deterministic  # unless asked


def test_synthetic_data_is_the_same_in_every_release_and_checks_its_sizes(
    names: Callable[..., bool],
) -> None:
    assert synthetic_token_data(2, 4, 6).tolist() == [[5, 3, 2, 2], [5, 3, 2, 1]]
    assert synthetic_token_data(1, 2, 3).shape == (1, 2)  # the smallest it makes
    for args, named in [
        ((4, 5, 2), ("vocab_size", "3", "got 2")),
        ((0, 5, 9), ("n_samples", "seq_len", "got 0, 5")),
        ((4, 1, 9), ("n_samples", "seq_len", "got 4, 1")),
    ]:
        with pytest.raises(ValueError) as raised:
            synthetic_token_data(*args)
        assert names(str(raised.value), *named), str(raised.value)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # more workers than cores
def test_the_loaders_settings_follow_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils.data import SequentialSampler

    from amptrain.data import _seed_worker

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    data = synthetic_token_data(10, 6, 20)
    make = lambda **kw: make_dataloader(data, batch_size=4, **kw)  # noqa: E731
    # in-memory rows on the CPU: no worker process takes a core from the training
    cpu = make(shuffle=True, device=CPU)
    assert (cpu.num_workers, cpu.pin_memory, cpu.persistent_workers) == (0, False, False)
    assert cpu.collate_fn.pad_token_id == 0
    assert cpu.sampler.seed == 0 and cpu.generator.initial_seed() == 0
    one = make(shuffle=True, device=CPU, num_workers=1)  # built, never iterated: none starts
    assert (one.num_workers, one.prefetch_factor, one.persistent_workers) == (1, 2, True)
    assert one.worker_init_fn is _seed_worker
    gpu = make(shuffle=True, device=torch.device("cuda"))  # pinned batches, two workers
    assert (gpu.num_workers, gpu.pin_memory) == (2, True)
    assert make(shuffle=False, device=CPU, num_workers=64).num_workers == 16  # the cores
    plain = make(shuffle=False, device=CPU, num_workers=0)
    assert (plain.prefetch_factor, plain.worker_init_fn, plain.persistent_workers) == (
        None, None, False,
    )  # fmt: skip
    assert isinstance(plain.sampler, SequentialSampler)
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: one worker
    assert make(shuffle=False, device=CPU, num_workers=4).num_workers == 1


@pytest.mark.parametrize("ready", [False, True])
def test_under_torchrun_each_rank_loads_its_own_shard(ready: bool) -> None:
    from torch.utils.data import DataLoader

    from amptrain.distributed import World

    data = synthetic_token_data(10, 6, 20)
    source = DataLoader(SequenceDataset(data), batch_size=2, collate_fn=PadCollate())

    def rows(rank: int, shuffle: bool, seed: int = 5) -> list[int]:
        loader = make_dataloader(
            source if ready else data, batch_size=2, shuffle=shuffle, device=CPU, seed=seed,
            num_workers=0, world=World(rank, 2, rank),
        )  # fmt: skip
        return list(loader.sampler)

    # validation: every other row, in order; training: a shuffled half each, of the seed
    assert (rows(0, False), rows(1, False)) == ([0, 2, 4, 6, 8], [1, 3, 5, 7, 9])
    sharded = rows(0, True), rows(1, True)
    assert sorted(sharded[0] + sharded[1]) == list(range(10))
    assert sharded[0] != [0, 2, 4, 6, 8] and rows(0, True) == sharded[0]
    assert rows(0, True, seed=6) != sharded[0]


class _SavedOrder(Sampler[int]):
    """A sampler whose order is its own state, which it saves and loads."""

    def __init__(self, size: int) -> None:
        self.size, self.turn = size, 0

    def __iter__(self) -> Iterator[int]:
        self.turn += 1
        return iter(torch.arange(self.size).roll(self.turn).tolist())

    def __len__(self) -> int:
        return self.size

    def state_dict(self) -> dict[str, int]:
        return {"turn": self.turn}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.turn = state["turn"]


class _SavesOnly(Sampler[int]):
    """Saves its state but cannot load it back."""

    def __iter__(self) -> Iterator[int]:
        return iter(range(8))

    def __len__(self) -> int:
        return 8

    def state_dict(self) -> dict[str, int]:
        return {}


class _OwnBatches:
    """A batch sampler whose order is its own hidden state."""

    def __init__(self, size: int) -> None:
        self.size, self.turn = size, 0

    def __iter__(self) -> Iterator[list[int]]:
        self.turn += 1
        return iter([[(i + self.turn) % self.size] for i in range(self.size)])

    def __len__(self) -> int:
        return self.size


def test_a_sampler_that_saves_and_loads_its_state_can_be_resumed(
    tokens: Tokens, names: Callable[..., bool]
) -> None:
    rows = tokens(8)
    check_restorable(DataLoader(rows, batch_size=2, sampler=_SavedOrder(8)))
    check_restorable(DataLoader(rows, batch_size=2, shuffle=True))
    for sampler in (_SavesOnly(), _OwnBatches(8)):
        loader = (DataLoader(rows, batch_sampler=sampler) if isinstance(sampler, _OwnBatches)
                  else DataLoader(rows, batch_size=2, sampler=sampler))  # fmt: skip
        with pytest.raises(ValueError) as raised:
            check_restorable(loader)
        # what to do: the methods to give it, or the torch sampler that resumes exactly
        assert names(str(raised.value), type(sampler).__name__, "DataLoader(shuffle=True)")


def test_a_samplers_own_state_is_put_back_with_the_order(tokens: Tokens) -> None:
    sampler = _SavedOrder(8)
    loader = DataLoader(tokens(8), batch_size=2, sampler=sampler)
    list(loader)
    saved = order_state(loader)
    assert saved["samplers"] and all(s == {"turn": 1} for s in saved["samplers"])
    first = [b.tolist() for b in loader]
    list(loader)
    set_order_state(loader, saved)
    assert sampler.turn == 1 and [b.tolist() for b in loader] == first


def test_the_loaders_and_its_samplers_own_generators_are_each_put_back(tokens: Tokens) -> None:
    from torch.utils.data import RandomSampler

    rows = tokens(8)
    drawing, seeding = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    loader = DataLoader(rows, batch_size=2, sampler=RandomSampler(rows, generator=drawing),
                        generator=seeding)  # fmt: skip
    saved = order_state(loader)
    first = [b.tolist() for b in loader]  # draws from both: the order, the workers' base seed
    states = drawing.get_state(), seeding.get_state()
    list(loader)
    set_order_state(loader, saved)
    assert [b.tolist() for b in loader] == first
    assert torch.equal(drawing.get_state(), states[0]) and torch.equal(
        seeding.get_state(), states[1]
    )


def test_an_order_the_loader_cannot_take_back_is_refused(
    tokens: Tokens, names: Callable[..., bool]
) -> None:
    plain = DataLoader(tokens(8), batch_size=2)
    stateful = order_state(DataLoader(tokens(8), batch_size=2, sampler=_SavedOrder(8)))
    with pytest.raises(ValueError):
        set_order_state(plain, stateful)  # a sampler's state and no sampler to take it
    shuffled = order_state(DataLoader(tokens(8), batch_size=2, shuffle=True,
                                      generator=torch.Generator()))  # fmt: skip
    with pytest.raises(ValueError) as raised:
        set_order_state(plain, shuffled)
    assert names(str(raised.value), "generators")
