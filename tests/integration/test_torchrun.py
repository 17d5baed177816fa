"""fine_tune under ``torchrun --nproc_per_node=2`` on CPU (gloo), for real: sharding, set_epoch,
gradients averaged by DDP, metrics reduced over ranks, one writer, and no_sync while
accumulating; compared with one process on the same global batch. Then under faults: a rank
that raises ends the job, a stop on one rank is every rank's, and a SIGKILLed rank restarted by
``torchrun --max-restarts`` ends bit for bit where the uninterrupted job does."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from amptrain import fine_tune
from amptrain.collate import PadCollate

sys.path.insert(0, str(Path(__file__).parent))
import ddp_worker
import fault_worker

from torchrun_launch import run_two_ranks
from wandb_files import logged_keys

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("torchrun")
    run_two_ranks(Path(ddp_worker.__file__), str(out))
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    return {"out": out, "ranks": ranks}


def _state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def test_each_rank_trains_on_its_half_in_a_new_order_each_epoch(two_ranks: dict[str, Any]) -> None:
    rows = ddp_worker.ROWS
    per_rank = [r["seen"] for r in two_ranks["ranks"]]
    for seen in per_rank:
        assert len(seen) == rows  # two epochs of half the data
    for epoch in (0, 1):
        halves = [set(seen[epoch * rows // 2 : (epoch + 1) * rows // 2]) for seen in per_rank]
        assert len(halves[0]) == len(halves[1]) == rows // 2
        assert halves[0].isdisjoint(halves[1]) and halves[0] | halves[1] == set(range(rows))
    for seen in per_rank:  # set_epoch: the second epoch is not the first again
        assert seen[: rows // 2] != seen[rows // 2 :]


def test_the_ranks_end_with_the_same_weights_and_metrics(two_ranks: dict[str, Any]) -> None:
    out, ranks = two_ranks["out"], two_ranks["ranks"]
    first, second = _state(out / "weights-0.pt"), _state(out / "weights-1.pt")
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert (
        ranks[0]["result"]["epochs"][-1]["train_loss"]
        == ranks[1]["result"]["epochs"][-1]["train_loss"]
    )
    assert ranks[0]["result"]["evals"] == ranks[1]["result"]["evals"]
    assert ranks[0]["result"]["world_size"] == 2


def test_only_rank_0_writes_logs_and_checkpoints(two_ranks: dict[str, Any]) -> None:
    out, ranks = two_ranks["out"], two_ranks["ranks"]
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert len({r["run"] for r in records}) == 1
    assert [r["step"] for r in records if "train/loss" in r and "epoch" not in r] == list(
        range(1, 11)
    )
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == ["step-00000010.pt"]
    (run,) = (out / "wandb").glob("offline-run-*")  # one W&B run, not one per rank
    assert "val/loss" in logged_keys(run)["history"]
    assert ranks[0]["result"]["checkpoint"] and ranks[1]["result"]["checkpoint"] is None
    # the caller's own sink: written and closed by rank 0 alone, and left in its tracker
    own = [r["own_sink"] for r in ranks]
    assert own[0]["records"] == len(records) and own[0]["closed"]
    assert own[1]["records"] == 0 and not own[1]["closed"]
    assert (
        own[0]["kept"]
        and own[1]["kept"]
        and own[0]["steps_counted"] == own[1]["steps_counted"] == 10
    )


def test_two_ranks_match_one_process_on_the_same_global_batch(two_ranks: dict[str, Any]) -> None:
    dataset = ddp_worker.rows()
    # one replica of the same sampler: the order the two ranks split between them
    sampler = DistributedSampler(range(len(dataset)), num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, collate_fn=PadCollate())
    model = ddp_worker.model()
    single = fine_tune(model, loader, dataset[:10], epochs=2, num_workers=0)
    ddp = two_ranks["ranks"][0]["result"]
    assert ddp["steps"] == single.steps == 10
    for ours, theirs in zip(ddp["epochs"], single.epochs, strict=True):
        assert ours["train_loss"] == pytest.approx(theirs.train_loss, rel=1e-5)
        assert ours["val_loss"] == pytest.approx(theirs.val_loss, rel=1e-5)
        assert ours["samples_per_second"] > 0
    weights = _state(two_ranks["out"] / "weights-0.pt")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-5)


def test_accumulating_ranks_sync_gradients_once_per_step(two_ranks: dict[str, Any]) -> None:
    out, ranks = two_ranks["out"], two_ranks["ranks"]
    for rank in ranks:  # one all-reduce per bucket per optimizer step, however many micro-steps
        assert rank["no_sync"]["4"] == rank["no_sync"]["1"] >= 1
    plain, accumulated = _state(out / "weights-0.pt"), _state(out / "weights-accum-0.pt")
    for name, value in plain.items():  # 2 micro-batches of 2 rows = the batch of 4
        torch.testing.assert_close(accumulated[name], value, rtol=1e-4, atol=1e-5)


# --- under faults ----------------------------------------------------------------------------

FAIL_FAST_S = 30  # a failed job ends this long after the failure, at most (the hang was 30 min)


def _torchrun(
    out: Path, *args: str, restarts: int = 0, limit: float = 300
) -> tuple[subprocess.CompletedProcess[str], float]:
    """fault_worker under torchrun with 2 ranks (killed after ``limit`` seconds); what it gave
    and when it ended (epoch seconds)."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        f"--max-restarts={restarts}", str(Path(fault_worker.__file__)), str(out), *args,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=limit)
    return done, time.time()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fault worker's job run to its end, untouched."""
    out = tmp_path_factory.mktemp("whole")
    done, _ = _torchrun(out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_rank_that_raises_ends_the_job_at_once_with_its_traceback_printed_once(
    tmp_path: Path,
) -> None:
    # a collective timeout far beyond the bound: only failing fast can end the job in time
    done, ended = _torchrun(tmp_path, "--raise-at=3", "--rank=1", "--timeout=600", limit=120)
    failed = float((tmp_path / "failed-at").read_text())
    assert done.returncode != 0
    assert ended - failed < FAIL_FAST_S, done.stderr[-3000:]
    tracebacks = [line for line in done.stderr.splitlines() if "Traceback (most recent" in line]
    ranked = [line for line in tracebacks if line.startswith("[rank")]
    assert ranked == ["[rank1]: Traceback (most recent call last):"], done.stderr[-3000:]
    assert done.stderr.count("planted failure at step 3") == 1


@pytest.mark.slow
def test_a_stop_decided_on_one_rank_is_taken_by_every_rank(tmp_path: Path) -> None:
    done, _ = _torchrun(tmp_path, "--stop-at=3", "--rank=1")
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads((tmp_path / f"result-{r}.json").read_text()) for r in (0, 1)]
    assert [r["steps"] for r in results] == [3, 3]
    assert all("planted stop" in r["stop_reason"] for r in results)
    assert "rank 1" in results[0]["stop_reason"]


@pytest.mark.slow
def test_a_killed_rank_is_restarted_and_the_job_ends_bit_for_bit(
    tmp_path: Path, uninterrupted: Path
) -> None:
    steps = fault_worker.STEPS // 2  # each rank trains on half the rows
    # after the first checkpoint (step 2; a kill before it restarts afresh), before the last
    kill_at = random.randint(3, steps - 1)
    done, _ = _torchrun(tmp_path, f"--kill-at={kill_at}", "--rank=1", restarts=1)
    assert done.returncode == 0, f"killed at step {kill_at}: " + done.stderr[-3000:]
    # the SIGKILLed rank failed the group and torchrun restarted it, once (which failure it logs
    # first, the killed rank's -9 or its peer's on the broken collective, is a race)
    assert [(tmp_path / f"restarts-{r}").read_text() for r in (0, 1)] == ["1", "1"]
    expected = _state(uninterrupted / "weights-0.pt")
    for rank in (0, 1):
        got = _state(tmp_path / f"weights-{rank}.pt")
        assert all(torch.equal(got[k], expected[k]) for k in expected), f"killed at {kill_at}"
    result = json.loads((tmp_path / "result-0.json").read_text())
    assert result["resumed_from"] and result["steps"] == steps
