"""What the amptrain tests share: a small TinyGPT and token data that fit it, copies of its
weights, and a run that is interrupted and resumed from its checkpoint."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from amptrain import Callback, TinyGPT, TrainState, fine_tune, synthetic_token_data

VOCAB, SEQ = 24, 12  # the model's ids and positions, and the data's


@pytest.fixture
def make_model() -> Callable[..., TinyGPT]:
    """``make_model(...)``: the same seeded TinyGPT each call; 24 ids, 12 positions, one layer
    of width 32 unless told otherwise."""

    def make(
        *,
        vocab: int = VOCAB,
        seq: int = SEQ,
        d_model: int = 32,
        n_layers: int = 1,
        n_heads: int = 2,
        dropout: float = 0.0,
    ) -> TinyGPT:
        torch.manual_seed(0)
        return TinyGPT(
            vocab, d_model=d_model, n_layers=n_layers, n_heads=n_heads, max_seq_len=seq,
            dropout=dropout,
        )  # fmt: skip

    return make


@pytest.fixture
def model(make_model: Callable[..., TinyGPT]) -> TinyGPT:
    """A fresh :func:`make_model` model."""
    return make_model()


@pytest.fixture
def tokens() -> Callable[..., torch.Tensor]:
    """``tokens(n, seed)``: ``n`` rows of learnable ids that fit :func:`make_model`'s model."""

    def make(n: int = 32, seed: int = 0, *, vocab: int = VOCAB, seq: int = SEQ) -> torch.Tensor:
        return synthetic_token_data(n, seq, vocab, seed=seed)

    return make


@pytest.fixture
def names() -> Callable[..., bool]:
    """``names(message, *parts)``: whether each part appears in ``message`` as written and as
    a whole (not run into a longer word): what an error names (the field, the value, the
    remedy), not the sentence around them."""

    def check(message: str, *parts: str) -> bool:
        return all(re.search(rf"(?<!\w){re.escape(part)}(?!\w)", message) for part in parts)

    return check


@pytest.fixture
def weights() -> Callable[[nn.Module], list[torch.Tensor]]:
    """``weights(model)``: a detached copy of every parameter, in order."""
    return lambda model: [p.detach().clone() for p in model.parameters()]


@pytest.fixture
def same_weights() -> Callable[[nn.Module, nn.Module], bool]:
    """``same_weights(a, b)``: whether every parameter is bit for bit the same."""

    def same(a: nn.Module, b: nn.Module) -> bool:
        pairs = zip(a.parameters(), b.parameters(), strict=True)
        return all(torch.equal(x, y) for x, y in pairs)

    return same


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    """A real gloo process group of one rank, gone again after the test."""
    import torch.distributed as dist

    hook = sys.excepthook  # init_process_group wraps it to prefix tracebacks with the rank
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook


class Crash(Callback):
    """Stands in for a killed process: raises at a given step."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, state: TrainState) -> None:
        if state.step == self.at:
            raise KeyboardInterrupt(f"stopped at step {state.step}")


@pytest.fixture
def crash_at() -> Callable[[int], Callback]:
    """``crash_at(step)``: a callback that stops the run there as a killed process would."""
    return Crash


# 2 epochs of 10 steps: a validation every 3 steps, a read-back every 4
RESUMED_RUN = {"epochs": 2, "batch_size": 4, "num_workers": 0, "eval_every": 3, "log_every": 4}


@pytest.fixture
def resume_pair(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Callable[..., torch.Tensor]
) -> Callable[..., tuple[Any, Any, TinyGPT, TinyGPT]]:
    """``resume_pair(callbacks, train=..., **options)``: an uninterrupted run, and one killed at
    step 14 and resumed from its checkpoint (of step 12), as ``(full, resumed, full's model,
    resumed's model)``; ``callbacks`` holds each of the three runs' own, ``train(rows)`` makes
    each run's training data afresh (as a new process would) from 40 rows of tokens."""

    def run(
        callbacks: tuple[list[Callback], ...] = ([], [], []),
        *,
        train: Callable[[torch.Tensor], Any] = lambda rows: rows,
        **extra: Any,
    ) -> tuple[Any, Any, TinyGPT, TinyGPT]:
        args = {**RESUMED_RUN, **extra, "checkpoint_every": 4, "keep_checkpoints": 2}
        rows, val = tokens(40), tokens(8, seed=1)
        whole = make_model(dropout=0.2)  # dropout: a resumed run must go on with the random stream
        full = fine_tune(
            whole, train(rows), val, checkpoint_dir=str(tmp_path / "a"), callbacks=callbacks[0],
            **args,
        )  # fmt: skip
        with pytest.raises(KeyboardInterrupt):
            fine_tune(
                make_model(dropout=0.2), train(rows), val, checkpoint_dir=str(tmp_path / "b"),
                callbacks=[*callbacks[1], Crash(14)], **args,
            )  # fmt: skip
        again = make_model(dropout=0.2)
        resumed = fine_tune(
            again, train(rows), val, checkpoint_dir=str(tmp_path / "b"), resume_from="latest",
            callbacks=callbacks[2], **args,
        )  # fmt: skip
        return full, resumed, whole, again

    return run
