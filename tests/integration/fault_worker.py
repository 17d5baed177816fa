"""A run that the fault tests break for real, alone or under ``torchrun``: it trains a TinyGPT
with dropout on a user's ``DataLoader(shuffle=True)``, logs every step to JSON lines, writes a
checkpoint every 2 steps and resumes from the latest, then saves its final weights.

    python fault_worker.py OUT [--kill-at STEP] [--kill-in-save N] [--raise-at STEP]
                               [--fill-disk-at STEP] [--stop-at STEP] [--rank R] [--timeout S]
                               [--attempt N] [--strategy fsdp]

``--kill-at`` SIGKILLs the process after that step; ``--kill-in-save`` SIGKILLs it halfway
through writing its N-th checkpoint; ``--raise-at`` raises there; ``--fill-disk-at`` lowers the
file-size limit (RLIMIT_FSIZE) there so the next checkpoint meets a real EFBIG; ``--stop-at``
stops the run there (as a callback may, on one rank); ``--timeout`` is the collective timeout
in seconds; ``--rank`` limits the fault to one rank, and under torchrun a fault strikes only
the first attempt (``TORCHELASTIC_RESTART_COUNT`` 0; ``--attempt`` names another), so a
restarted job runs on. ``--strategy fsdp`` shards the model (its checkpoints too) and rank 0
alone saves the final weights, gathered whole.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from amptrain import Callback, TinyGPT, TrainState, fine_tune, synthetic_token_data
from amptrain.checkpoint import CheckpointWriteError
from amptrain.fsdp import full_state_dict

VOCAB, SEQ, ROWS, BATCH, EPOCHS = 24, 12, 48, 4, 2
STEPS = EPOCHS * ROWS // BATCH  # in one process
SAVE = torch.save
OUT = Path()


class Fault(Callback):
    """Does ``action`` after optimizer step ``at``."""

    def __init__(self, at: int, action: Any) -> None:
        self.at, self.action = at, action

    def on_step_end(self, state: TrainState) -> None:
        if state.step == self.at:
            self.action(state)


def kill(state: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def fail(state: TrainState) -> None:
    """Raise, noting when (``failed-at``: the epoch second) beside the run's output."""
    (OUT / "failed-at").write_text(repr(time.time()))
    raise RuntimeError(f"planted failure at step {state.step}")


def stop(state: TrainState) -> None:
    state.stop("planted stop")


def fill_disk(state: TrainState) -> None:
    """From here on no file may grow past 4 KiB: writing past it is EFBIG (the signal that
    would end the process instead is ignored, as a server's would be)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))


class HalfWrite:
    """A file that SIGKILLs its process once half of ``size`` bytes are written."""

    def __init__(self, file: Any, size: int) -> None:
        self.file, self.left = file, size // 2

    def write(self, data: bytes) -> int:
        if len(data) >= self.left:
            self.file.write(bytes(data)[: self.left])
            self.file.flush()
            kill(None)
        self.left -= len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def kill_in_save(n: int) -> None:
    """torch.save, as amptrain's checkpoints call it, killed halfway through the n-th file."""
    calls = 0

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == n and hasattr(f, "write"):
            import io

            whole = io.BytesIO()
            SAVE(obj, whole, *args, **kwargs)
            f = HalfWrite(f, whole.tell())
        SAVE(obj, f, *args, **kwargs)

    torch.save = save


def faults(args: argparse.Namespace) -> list[Callback]:
    """The faults asked for, on this rank's attempt ``--attempt`` only (the first: 0)."""
    rank = int(os.environ.get("RANK", "0"))
    now = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == str(args.attempt)
    if not now or (args.rank is not None and rank != args.rank):
        return []
    if args.kill_in_save:
        kill_in_save(args.kill_in_save)
    asked = [
        (args.kill_at, kill),
        (args.raise_at, fail),
        (args.fill_disk_at, fill_disk),
        (args.stop_at, stop),
    ]
    return [Fault(at, action) for at, action in asked if at]


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    for name in ("--kill-at", "--kill-in-save", "--raise-at", "--fill-disk-at", "--stop-at"):
        parser.add_argument(name, type=int)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--strategy")
    parser.add_argument("--attempt", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The run (``argv``: the command line's arguments); its exit code."""
    args = arguments(argv)
    global OUT
    OUT = args.out
    torch.manual_seed(0)
    net = TinyGPT(VOCAB, d_model=32, n_layers=1, n_heads=2, max_seq_len=SEQ, dropout=0.1)
    rows = synthetic_token_data(ROWS, SEQ, VOCAB, seed=0)
    loader = DataLoader(rows, batch_size=BATCH, shuffle=True)
    log = None if args.fill_disk_at else str(args.out / "log.jsonl")
    try:
        result = fine_tune(
            net, loader, synthetic_token_data(8, SEQ, VOCAB, seed=1), epochs=EPOCHS,
            num_workers=0, log_every=1, checkpoint_every=2, keep_checkpoints=2,
            checkpoint_dir=str(args.out / "ckpt"), resume_from="latest", jsonl_path=log,
            callbacks=faults(args), collective_timeout=args.timeout, strategy=args.strategy,
        )  # fmt: skip
    except CheckpointWriteError as exc:
        (args.out / "error.txt").write_text(str(exc))
        return 3
    rank = os.environ.get("RANK", "0")
    weights = full_state_dict(net)  # sharded: gathered to rank 0, which alone saves them
    if weights:
        SAVE(weights, args.out / f"weights-{rank}.pt")
    (args.out / f"result-{rank}.json").write_text(json.dumps(result.to_dict()))
    # how often torchrun had restarted the group when this rank finished (its own count)
    (args.out / f"restarts-{rank}").write_text(os.environ.get("TORCHELASTIC_RESTART_COUNT", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
