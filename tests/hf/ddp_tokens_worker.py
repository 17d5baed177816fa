"""Run by ``torchrun --nproc_per_node=2`` from test_ddp_tokens.py: fine_tune under DDP (gloo)
on rows of very unequal length, with compute_metrics and the best weights given back at the end;
each rank writes its result, its last weights and its final (best) weights to the folder given."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from amptrain import Callback, TinyGPT, TrainState, fine_tune
from amptrain.predictions import EvalPrediction

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


def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """Accuracy by hand, the row count, and a figure that depends on the rows' order."""
    logits, labels = prediction
    scored = labels[:, 1:] != -100
    hits = (logits[:, :-1].argmax(-1) == labels[:, 1:]) & scored
    order = sum((i + 1) * int(row.sum()) for i, row in enumerate(scored))
    return {"hand_accuracy": float(hits.sum() / scored.sum()), "rows": len(labels), "order": order}


def options(folder: Path) -> dict[str, object]:
    """compute_metrics, and the best weights by the highest loss (the first validation's, on
    a run whose loss falls) given back at the end."""
    return {"compute_metrics": compute_metrics, "best_metric": "val/loss", "best_mode": "max",
            "load_best_at_end": True, "checkpoint_dir": str(folder)}  # fmt: skip


class LastWeights(Callback):
    """The weights the run ended with, before the best are given back."""

    def __init__(self, net: torch.nn.Module) -> None:
        self.net = net
        self.weights: dict[str, torch.Tensor] = {}

    def on_train_end(self, state: TrainState) -> None:
        self.weights = {k: v.clone() for k, v in self.net.state_dict().items()}


def main(out: Path) -> None:
    """Each rank trains on half of every global batch (2 rows of 4)."""
    net = model()
    last = LastWeights(net)
    result = fine_tune(net, rows(TRAIN_LENGTHS, 0), rows(VAL_LENGTHS, 1), batch_size=2, **RUN,
                       **options(out / "ckpt"), callbacks=[last])  # fmt: skip
    rank = dist.get_rank()
    torch.save(last.weights, out / f"weights-{rank}.pt")
    torch.save(net.state_dict(), out / f"best-{rank}.pt")
    (out / f"rank-{rank}.json").write_text(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
