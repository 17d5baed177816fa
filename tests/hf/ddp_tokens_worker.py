"""Run by ``torchrun --nproc_per_node=2`` from test_ddp_tokens.py: fine_tune under DDP (gloo)
on rows of very unequal length; each rank writes its result and weights to the folder given."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from amptrain import TinyGPT, fine_tune

VOCAB, SEQ = 24, 16
# scored tokens per row 15, 1, 11, 2: whichever two rows a rank draws, the ranks' counts differ
TRAIN_LENGTHS = (16, 2, 12, 3)
VAL_LENGTHS = (9, 16, 2, 5, 13)  # 5 rows: one rank scores 3, the other 2
RUN = {"epochs": 3, "learning_rate": 1e-2, "warmup_ratio": 0.0, "log_every": 1}


def model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=16, n_layers=1, n_heads=2, max_seq_len=SEQ, dropout=0.0)


def rows(lengths: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=generator) for n in lengths]


def main(out: Path) -> None:
    """Each rank trains on half of every global batch (2 rows of 4)."""
    net = model()
    result = fine_tune(net, rows(TRAIN_LENGTHS, 0), rows(VAL_LENGTHS, 1), batch_size=2, **RUN)
    rank = dist.get_rank()
    torch.save(net.state_dict(), out / f"weights-{rank}.pt")
    (out / f"rank-{rank}.json").write_text(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
