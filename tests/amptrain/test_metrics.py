from __future__ import annotations

import io
import json
import math
import statistics
import sys
from pathlib import Path

import pytest
import torch

from amptrain import (
    ConsoleSink,
    JsonlSink,
    MetricsTracker,
    RunningStats,
    TinyGPT,
    fine_tune,
    synthetic_token_data,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wandb_files import logged_keys


def test_running_stats_match_the_statistics_module() -> None:
    values = [3.0, 1.5, 9.25, -2.0, 4.0, 4.0]
    stats = RunningStats()
    for v in [*values, math.inf, math.nan]:
        stats.update(v)
    assert stats.count == len(values)
    assert stats.mean == pytest.approx(statistics.fmean(values))
    assert stats.std == pytest.approx(statistics.pstdev(values))
    assert (stats.min, stats.max) == (-2.0, 9.25)


def test_empty_stats_are_nan_not_zero() -> None:
    assert all(math.isnan(v) for v in RunningStats().summary().values())


def test_tracker_memory_is_bounded_over_many_steps() -> None:
    tracker = MetricsTracker(history_size=100)
    for i in range(300_000):
        tracker.log_step(1.0 + i % 7, 0.5)
    assert len(tracker.history) == 100 and tracker.step == 300_000
    assert tracker.epoch_loss.count == 300_000
    assert tracker.epoch_loss.mean == pytest.approx(
        sum(1.0 + i % 7 for i in range(300_000)) / 300_000
    )


def test_end_epoch_drops_none_resets_and_fans_out(tmp_path: Path) -> None:
    stream = io.StringIO()
    path = tmp_path / "m.jsonl"
    tracker = MetricsTracker([ConsoleSink(stream), JsonlSink(path)])
    tracker.log_step(2.0, 1.0)
    tracker.log_step(math.nan, math.inf)
    rec = tracker.end_epoch({"epoch": 1, "train/loss": 2.0, "val/loss": None, "val/accuracy": 0.5})
    tracker.close()
    assert "val/loss" not in rec and tracker.epoch_loss.count == 0
    assert "epoch 1" in stream.getvalue() and "val/accuracy 0.5" in stream.getvalue()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 2]
    assert lines[1]["train/loss"] is None  # NaN is written as null: the file stays valid JSON


def test_wandb_offline_run_logs_namespaced_keys(tmp_path: Path) -> None:
    model = TinyGPT(24, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)
    data = synthetic_token_data(16, 8, 24)
    fine_tune(
        model,
        data,
        data[:4],
        epochs=2,
        batch_size=8,
        wandb=True,
        wandb_dir=str(tmp_path),
        num_workers=0,
    )
    import wandb

    wandb.teardown()  # the run file is complete once W&B's service has written and closed it
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    keys = logged_keys(run_dir)
    assert {"train/loss", "val/loss", "amp/loss_scale", "amp/enabled", "train/grad_norm"} <= keys[
        "history"
    ]
    assert "amp/precision" in keys["summary"]


def test_cpu_has_no_gpu_memory_figure() -> None:
    from amptrain.metrics import gpu_utilization, peak_memory_mb

    assert peak_memory_mb(torch.device("cpu")) is None
    assert gpu_utilization(torch.device("cpu")) is None


def test_runs_appended_to_one_jsonl_file_are_told_apart(tmp_path: Path) -> None:
    from amptrain import TinyGPT, fine_tune, synthetic_token_data

    path = tmp_path / "metrics.jsonl"
    for _ in range(2):
        model = TinyGPT(16, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)
        fine_tune(
            model, synthetic_token_data(16, 8, 16), epochs=2, jsonl_path=str(path), num_workers=0
        )
    records = [json.loads(line) for line in path.read_text().splitlines()]
    runs = list(dict.fromkeys(r["run"] for r in records))
    assert len(runs) == 2 and all(r["run"] for r in records)
    for run in runs:
        steps = [r["step"] for r in records if r["run"] == run and "train/grad_norm" in r]
        assert steps == sorted(steps) and len(set(steps)) == len(steps)
