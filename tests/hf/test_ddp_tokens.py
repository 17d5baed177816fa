"""Under torchrun (2 ranks, gloo) the loss is every rank's token losses summed and divided by
the global token count, and validation scores each row once: the run equals one process on
the same global batch, with rows of very unequal length and a row count that 2 does not
divide; compute_metrics sees the whole validation set once, in its order, and every rank ends
with the best weights rank 0 kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from amptrain import fine_tune
from torchrun_launch import run_two_ranks

from . import ddp_tokens_worker as worker


@pytest.mark.slow
def test_two_ranks_train_and_validate_as_one_process(tmp_path: Path) -> None:
    run_two_ranks(Path(worker.__file__), str(tmp_path))
    ranked = json.loads((tmp_path / "rank-0.json").read_text())
    weights = torch.load(tmp_path / "weights-0.pt", weights_only=True)

    single = worker.model()
    last = worker.LastWeights(single)
    train, val = worker.rows(worker.TRAIN_LENGTHS, 0), worker.rows(worker.VAL_LENGTHS, 1)
    alone = fine_tune(single, train, val, batch_size=4, **worker.RUN, callbacks=[last],
                      **worker.options(tmp_path / "alone")).to_dict()  # fmt: skip

    losses = [e["train_loss"] for e in ranked["epochs"]]
    assert losses == pytest.approx([e["train_loss"] for e in alone["epochs"]], abs=1e-5)
    for key, value in last.weights.items():
        assert torch.allclose(weights[key], value, atol=1e-5), key
    keys = ("val/loss", "val/perplexity", "val/accuracy", "val/hand_accuracy", "val/rows",
            "val/order")  # fmt: skip
    for ddp_eval, one_eval in zip(ranked["evals"], alone["evals"], strict=True):
        for key in keys:
            assert ddp_eval[key] == pytest.approx(one_eval[key], abs=1e-5), key
    assert ranked["evals"][0]["val/rows"] == len(worker.VAL_LENGTHS)
    # every rank ends with the best weights (the first validation's), as one process does
    best = [torch.load(tmp_path / f"best-{rank}.pt", weights_only=True) for rank in (0, 1)]
    for key, value in single.state_dict().items():
        assert torch.equal(best[0][key], best[1][key]), key
        assert torch.allclose(best[0][key], value, atol=1e-5), key
    assert not torch.allclose(best[0]["head.weight"], weights["head.weight"])
