"""fine_tune under faults in one process, for real: a run SIGKILLed at a random step (and one
killed halfway through writing a checkpoint) is run again with the same command and ends bit for
bit where the uninterrupted run does, with every line it logged before the kill kept; a full
disk (a real EFBIG) is a clear error that keeps the checkpoints already written."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import fault_worker

from amptrain.checkpoint import checkpoints, load

pytestmark = pytest.mark.integration


def _run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(Path(fault_worker.__file__)), str(out), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _records(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def _same(a: Path, b: Path) -> bool:
    x, y = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fault worker's run to its end, untouched."""
    out = tmp_path_factory.mktemp("whole")
    done = _run(out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_run_killed_at_a_random_step_keeps_every_line_and_resumes_bit_for_bit(
    tmp_path: Path, uninterrupted: Path
) -> None:
    kill_at = random.randint(1, fault_worker.STEPS - 1)
    killed = _run(tmp_path, f"--kill-at={kill_at}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    steps = [r["step"] for r in _records(tmp_path) if "train/loss" in r and "epoch" not in r]
    assert steps == list(range(1, kill_at + 1)), f"killed at step {kill_at}"  # every line kept
    again = _run(tmp_path)  # the same command, run again
    assert again.returncode == 0, again.stderr[-3000:]
    assert _same(tmp_path / "weights-0.pt", uninterrupted / "weights-0.pt"), f"killed at {kill_at}"
    whole = json.loads((uninterrupted / "result-0.json").read_text())
    resumed = json.loads((tmp_path / "result-0.json").read_text())
    assert resumed["steps"] == whole["steps"] == fault_worker.STEPS
    losses = [[e["train_loss"] for e in run["epochs"]] for run in (resumed, whole)]
    assert losses[0] == losses[1]


@pytest.mark.slow
def test_a_run_killed_while_writing_a_checkpoint_keeps_the_previous_one_and_resumes_bit_for_bit(
    tmp_path: Path, uninterrupted: Path
) -> None:
    killed = _run(tmp_path, "--kill-in-save=3")  # halfway through step 6's checkpoint
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    kept = checkpoints(tmp_path / "ckpt")
    assert [p.name for p in kept] == ["step-00000002.pt", "step-00000004.pt"]
    for path in kept:  # no file under a checkpoint's name is half written
        load(path, torch.device("cpu"))
    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _same(tmp_path / "weights-0.pt", uninterrupted / "weights-0.pt")
    assert json.loads((tmp_path / "result-0.json").read_text())["resumed_from"].endswith(
        "step-00000004.pt"
    )
    assert not list((tmp_path / "ckpt").glob(".*.tmp"))  # the killed writer's file is cleared


def test_a_full_disk_is_a_clear_error_and_keeps_the_checkpoints_written(tmp_path: Path) -> None:
    done = _run(tmp_path, "--fill-disk-at=5")  # the checkpoint of step 6 meets a real EFBIG
    assert done.returncode == 3, done.stderr[-3000:]
    message = (tmp_path / "error.txt").read_text()
    folder = tmp_path / "ckpt"
    assert str(folder) in message and "step-00000006.pt" in message
    assert "step-00000002.pt" in message and "step-00000004.pt" in message  # what is kept
    assert "resume_from" in message  # what to do next
    kept = checkpoints(folder)
    assert [p.name for p in kept] == ["step-00000002.pt", "step-00000004.pt"]
    assert sorted(p.name for p in folder.iterdir()) == [p.name for p in kept]  # no temporary left
    for path in kept:
        load(path, torch.device("cpu"))
