"""Run by ``torchrun --nproc_per_node=2`` from test_torchrun.py: trains with fine_tune under
DDP (gloo) and writes what each rank saw and ended with into the directory given."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from amptrain import MetricsTracker, TinyGPT, fine_tune, synthetic_token_data
from amptrain.collate import PadCollate
from amptrain.config import TrainConfig
from amptrain.engine import TrainStep
from amptrain.optim import build_optimizer
from amptrain.precision import resolve_precision

VOCAB, SEQ, ROWS = 24, 12, 40


def model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=32, n_layers=1, n_heads=2, max_seq_len=SEQ)


def rows() -> torch.Tensor:
    return synthetic_token_data(ROWS, SEQ, VOCAB, seed=0)


class Recording(Dataset):
    """Rows of token ids that note which indices this process read."""

    def __init__(self, data: torch.Tensor) -> None:
        self.data, self.seen = data, []

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> torch.Tensor:
        self.seen.append(index)
        return self.data[index]


class Counting:
    """A sink of the caller's own: counts the records it is sent, and whether it is closed."""

    def __init__(self) -> None:
        self.records, self.closed = 0, False

    def log(self, record: object, step: int) -> None:
        self.records += 1

    def close(self) -> None:
        self.closed = True


def train(out: Path, rank: int) -> None:
    dataset = Recording(rows())
    loader = DataLoader(dataset, batch_size=4, collate_fn=PadCollate())
    net = model()
    own = Counting()
    tracker = MetricsTracker([own])
    result = fine_tune(
        net, loader, rows()[:10], epochs=2, num_workers=0, log_every=3, tracker=tracker,
        jsonl_path=str(out / "log.jsonl"), checkpoint_dir=str(out / "ckpt"),
        wandb=True, wandb_mode="offline", wandb_dir=str(out),
    )  # fmt: skip
    torch.save(net.state_dict(), out / f"weights-{rank}.pt")
    accumulated = model()
    fine_tune(accumulated, rows(), epochs=2, batch_size=2, grad_accum_steps=2, num_workers=0)
    torch.save(accumulated.state_dict(), out / f"weights-accum-{rank}.pt")
    report = {
        "seen": dataset.seen,
        "result": result.to_dict(),
        "no_sync": no_sync_calls(),
        "own_sink": {
            "kept": tracker.sinks == [own],
            "records": own.records,
            "closed": own.closed,
            "steps_counted": tracker.step,
        },
    }
    (out / f"rank-{rank}.json").write_text(json.dumps(report))


def no_sync_calls(splits: tuple[int, ...] = (1, 4)) -> dict[str, int]:
    """Gradient all-reduce calls for one step of each number of micro-batches in ``splits``."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    calls = []

    def counting(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks real annotations
        calls.append(bucket.index())
        return allreduce_hook(None, bucket)  # type: ignore[arg-type]

    assert dist.is_initialized()  # the group fine_tune started lives on for the process
    net = DistributedDataParallel(model())
    net.register_comm_hook(None, counting)
    plan = resolve_precision("32-true", "cpu")
    step = TrainStep(net, build_optimizer(net.module, TrainConfig(), torch.device("cpu")), plan)
    batch = rows()[:8]
    counts = {}
    for n in splits:
        calls.clear()
        step.run([(part, part, {}) for part in batch.chunk(n)])
        counts[str(n)] = len(calls)
    return counts


if __name__ == "__main__":
    train(Path(sys.argv[1]), int(os.environ["RANK"]))
