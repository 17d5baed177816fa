from __future__ import annotations

import csv
import io
import json
import locale
import math
import re
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from amptrain import (
    ConsoleSink,
    JsonlSink,
    MetricsTracker,
    RunningStats,
    TinyGPT,
    WandbSink,
    fine_tune,
)
from amptrain.metrics import CsvSink, ProgressBar, RunLog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wandb_files import logged_keys, run_info

Tokens = Callable[..., torch.Tensor]


def test_running_stats_match_the_statistics_module() -> None:
    values = [3.0, 1.5, 9.25, -2.0, 4.0, 4.0]
    stats = RunningStats()
    for v in [*values, math.inf, math.nan]:
        stats.update(v)
    assert stats.count == len(values)
    assert stats.mean == pytest.approx(statistics.fmean(values))
    assert stats.std == pytest.approx(statistics.pstdev(values))
    assert (stats.min, stats.max) == (-2.0, 9.25)


def test_one_value_is_its_own_mean_exactly_however_small() -> None:
    for value in (1e-20, -3e-300, 12345.678):
        stats = RunningStats()
        stats.update(value)
        assert (stats.mean, stats.std, stats.min, stats.max) == (value, 0.0, value, value)


def test_empty_stats_are_nan_not_zero() -> None:
    assert all(math.isnan(v) for v in RunningStats().summary().values())


def test_non_finite_values_are_counted_apart() -> None:
    stats = RunningStats()
    for v in (math.inf, 1.0, math.nan, -math.inf):
        stats.update(v)
    assert (stats.nonfinite, stats.count) == (3, 1)


def test_cuda_memory_and_utilization_are_read_for_the_device_asked_about(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No GPU here: torch.cuda's readers answer as they would for device cuda:1.
    from amptrain.metrics import gpu_utilization, peak_memory_mb, reset_peak_memory

    device = torch.device("cuda", 1)
    asked: list[object] = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: asked.append(d) or 3 << 20)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: asked.append(d))
    monkeypatch.setattr(torch.cuda, "utilization", lambda d: asked.append(d) or 87)
    assert peak_memory_mb(device) == 3.0
    reset_peak_memory(device)
    assert gpu_utilization(device) == 87.0
    assert asked == [device, device, device]
    reset_peak_memory(torch.device("cpu"))
    assert len(asked) == 3


def test_utilization_is_none_when_nvml_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    from amptrain.metrics import gpu_utilization

    def refuse(device: object) -> int:
        raise RuntimeError("NVML not found")

    monkeypatch.setattr(torch.cuda, "utilization", refuse)
    assert gpu_utilization(torch.device("cuda")) is None


@pytest.mark.slow
def test_tracker_memory_is_bounded_over_many_steps() -> None:
    tracker = MetricsTracker(history_size=100)
    for i in range(300_000):
        tracker.log_step(1.0 + i % 7, 0.5)
    assert len(tracker.history) == 100 and tracker.step == 300_000
    assert MetricsTracker().history.maxlen == 1024  # the default bound
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
    assert tracker.epochs == [rec]
    assert "epoch 1" in stream.getvalue() and "val/accuracy 0.5" in stream.getvalue()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 2]
    assert lines[1]["train/loss"] is None  # NaN is written as null: the file stays valid JSON


@pytest.mark.slow
def test_wandb_offline_run_logs_namespaced_keys(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    model, data = make_model(d_model=16, seq=8), tokens(16, seq=8)
    args = {"epochs": 2, "batch_size": 8, "wandb": True, "num_workers": 0}
    # a directory and project of the run's own, not W&B's defaults (WANDB_DIR is tmp_path)
    fine_tune(model, data, data[:4], wandb_dir=str(tmp_path / "runs"), wandb_project="p-7", **args)
    fine_tune(model, data, wandb_dir=str(tmp_path / "off"), wandb_mode="disabled", **args)
    import wandb

    wandb.teardown()  # the run file is complete once W&B's service has written and closed it
    (run_dir,) = (tmp_path / "runs" / "wandb").glob("offline-run-*")
    assert not list(tmp_path.glob("**/offline-run-*"))[1:]  # the disabled run wrote none
    keys = logged_keys(run_dir)
    assert {"train/loss", "val/loss", "amp/loss_scale", "amp/enabled", "train/grad_norm"} <= keys[
        "history"
    ]
    assert "amp/precision" in keys["summary"]
    info = run_info(run_dir)  # the run's settings, and the precision it ran in
    config = info["config"]
    assert (config["epochs"], config["batch_size"], config["precision_used"]) == (2, 8, "32-true")
    assert info["project"] == "p-7"


def test_fine_tune_prints_a_line_an_epoch_to_the_console_when_asked(
    capsys: pytest.CaptureFixture[str], model: TinyGPT, tokens: Tokens
) -> None:
    fine_tune(model, tokens(16), epochs=2, batch_size=8, console=True, num_workers=0)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in lines] == ["epoch 1", "epoch 2"]
    assert all("train/loss" in line and "train/tokens_per_second" in line for line in lines)


def test_cpu_has_no_gpu_memory_figure() -> None:
    from amptrain.metrics import gpu_utilization, peak_memory_mb

    assert peak_memory_mb(torch.device("cpu")) is None
    assert gpu_utilization(torch.device("cpu")) is None


def test_runs_appended_to_one_jsonl_file_are_told_apart(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    path = tmp_path / "metrics.jsonl"
    for _ in range(2):
        fine_tune(make_model(), tokens(16), epochs=2, jsonl_path=str(path), num_workers=0)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    runs = list(dict.fromkeys(r["run"] for r in records))
    assert len(runs) == 2 and all(r["run"] for r in records)
    for run in runs:
        steps = [r["step"] for r in records if r["run"] == run and "train/grad_norm" in r]
        assert steps == sorted(steps) and len(set(steps)) == len(steps)


def test_summary_names_its_four_figures_counted_or_not() -> None:
    stats = RunningStats()
    assert list(stats.summary()) == ["mean", "std", "min", "max"]
    for value in (1.0, 3.0):
        stats.update(value)
    assert stats.summary() == {"mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}


def test_console_line_shows_the_four_finite_figures_in_order() -> None:
    stream = io.StringIO()
    record = {
        "val/accuracy": 0.123456,
        "train/tokens_per_second": 12345.678,
        "epoch": 3,
        "val/loss": math.nan,
        "train/loss": 2.5,
        "train/grad_norm": 1.0,
    }
    ConsoleSink(stream).log(record, step=7)
    ConsoleSink(stream).log({"train/loss": 9.0}, step=8)  # a step record: left to the bar
    line = "epoch 3  train/loss 2.5  val/accuracy 0.1235  train/tokens_per_second 1.235e+04\n"
    assert stream.getvalue() == line


def test_console_line_is_flushed_at_once(tmp_path: Path) -> None:
    with (tmp_path / "out.txt").open("w", buffering=1 << 16) as stream:
        ConsoleSink(stream).log({"epoch": 1, "val/loss": 0.5}, step=1)
        assert (tmp_path / "out.txt").read_text() == "epoch 1  val/loss 0.5\n"


def test_jsonl_sink_makes_its_folders_and_keeps_values(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "m.jsonl"
    sink = JsonlSink(path)
    JsonlSink(path).close()  # a second sink on the same folder is fine
    sink.log({"train/loss": 1.5, "amp/precision": "bf16-mixed", "amp/enabled": True}, step=4)
    sink.close()
    (line,) = path.read_text().splitlines()
    record = json.loads(line)
    assert len(sink.run_id) == 12 and int(sink.run_id, 16) >= 0
    assert record == {
        "run": sink.run_id,
        "step": 4,
        "train/loss": 1.5,
        "amp/precision": "bf16-mixed",
        "amp/enabled": True,
    }


def _offline_run(root: Path) -> Path:
    import wandb

    wandb.teardown()  # the run file is complete once W&B's service has closed it
    (run_dir,) = (root / "wandb").glob("offline-run-*")
    return run_dir


@pytest.mark.slow
def test_wandb_sink_starts_the_run_it_was_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The environment says otherwise: the sink's own arguments must win.
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("WANDB_PROJECT", "not-this-one")
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    here = tmp_path / "here"
    sink = WandbSink("proj-x", name="run-7", config={"lr": 0.5, "steps": 3}, dir=here)
    print("printed while the run is open")  # console="off": not copied into the run
    sink.log({"train/loss": 1.0}, step=3)
    sink.log({"train/loss": 0.5, "amp/precision": "bf16-mixed"}, step=7)
    sink.close()
    info = run_info(_offline_run(here))
    assert [(row["_step"], row["train/loss"]) for row in info["history"]] == [(3, 1.0), (7, 0.5)]
    assert info["summary"]["amp/precision"] == "bf16-mixed"  # strings go to the summary
    assert (info["project"], info["name"]) == ("proj-x", "run-7")
    assert (info["config"]["lr"], info["config"]["steps"]) == (0.5, 3)
    assert "stats" not in info["kinds"]  # system metrics off
    assert not (tmp_path / "elsewhere").exists()
    assert "wandb" not in capfd.readouterr().err.lower()  # silent
    assert not info["kinds"] & {"output", "output_raw"}  # console off: the print is not kept


@pytest.mark.slow
def test_wandb_sink_defaults_to_an_offline_run_of_project_amptrain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)
    sink = WandbSink(dir=tmp_path)
    sink.close()
    info = run_info(_offline_run(tmp_path))
    assert info["project"] == "amptrain"
    assert not {k for k in info["config"] if not k.startswith("_")}  # no config given: none


def test_wandb_sink_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: Callable[..., bool]
) -> None:
    with pytest.raises(
        ValueError, match=r"one of \('offline', 'online', 'disabled'\); got 'bogus'"
    ):
        WandbSink(mode="bogus", dir=tmp_path)
    WandbSink(mode="disabled", dir=tmp_path).close()
    assert not (tmp_path / "wandb").exists() or not list((tmp_path / "wandb").glob("*run-*"))
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError) as raised:
        WandbSink(dir=tmp_path)
    assert names(str(raised.value), "W&B", "wandb", "pip install 'amptrain[wandb]'")


class _Kept:
    """A sink that keeps every record with its step, and whether it was closed."""

    def __init__(self) -> None:
        self.records: list[tuple[int, dict[str, object]]] = []
        self.closed = False

    def log(self, record: object, step: int) -> None:
        self.records.append((step, dict(record)))  # type: ignore[call-overload]

    def close(self) -> None:
        self.closed = True


def test_recording_counts_a_step_or_an_epoch_without_writing_it() -> None:
    sink = _Kept()
    tracker = MetricsTracker([sink])
    record = tracker.record_step(2.0, 0.5, **{"train/lr": 0.1})
    assert record == {"train/loss": 2.0, "train/grad_norm": 0.5, "train/lr": 0.1}
    assert tracker.step == 1 and tracker.history[-1] == record and tracker.epoch_loss.count == 1
    kept = tracker.record_epoch({"epoch": 1, "val/loss": None})
    assert kept == {"epoch": 1} and tracker.epochs == [kept] and tracker.epoch_loss.count == 0
    assert sink.records == []  # recorded, not written
    tracker.log_step(1.0, 0.25)
    tracker.log({"val/loss": 0.5, "val/accuracy": None})
    assert sink.records == [
        (2, {"train/loss": 1.0, "train/grad_norm": 0.25}),
        (2, {"val/loss": 0.5}),
    ]


def test_a_run_log_counts_every_record_and_writes_only_to_its_writers() -> None:
    own, run_sink = _Kept(), _Kept()
    tracker = MetricsTracker([own])
    log = RunLog(tracker, [run_sink])
    log.step(2.0, 0.5)
    log.eval({"val/loss": 1.5, "val/accuracy": None})
    log.epoch({"epoch": 1, "train/loss": 2.0, "val/perplexity": None})
    log.close()
    assert run_sink.records == [
        (1, {"train/loss": 2.0, "train/grad_norm": 0.5}),
        (1, {"val/loss": 1.5}),
        (1, {"epoch": 1, "train/loss": 2.0}),
    ]
    assert run_sink.closed and own.records == [] and not own.closed
    assert (
        tracker.sinks == [own] and tracker.step == 1 and tracker.epochs == [run_sink.records[2][1]]
    )
    silent = RunLog(MetricsTracker([own]), [])  # a rank that writes nothing still counts
    silent.step(1.0, 1.0)
    silent.close()
    assert silent.tracker.step == 1 and own.records == [] and not own.closed


def test_the_progress_bar_draws_only_where_shown(capsys: pytest.CaptureFixture[str]) -> None:
    for shown in (False, True):
        bar = ProgressBar(shown)
        bar.open("epoch 1/2", total=4, done=1)
        bar.advance()
        bar.show(1.23456, 789.4)
        bar.close()
    err = capsys.readouterr().err
    assert err.count("epoch 1/2") >= 1 and "2/4" in err and "loss=1.2346" in err
    assert "tok_s=789" in err
    hidden = ProgressBar(False)
    hidden.open("epoch 9/9", total=1, done=0)
    hidden.show(1.0, 1.0)
    hidden.close()
    assert "epoch 9/9" not in capsys.readouterr().err


# --- CSV and TensorBoard ---------------------------------------------------------------------

_KILLED_WRITER = """
import os, signal, sys
from amptrain.metrics import CsvSink, TensorBoardSink
out = sys.argv[1]
sinks = [CsvSink(out + "/log.csv"), TensorBoardSink(out + "/tb")]
for step in range(1, 6):
    for sink in sinks:
        sink.log({"train/loss": step / 10}, step)
for sink in sinks:  # a key that appears later: a validation record
    sink.log({"val/loss": 0.25, "amp/precision": "32-true"}, 5)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no exit handler: what was logged is on disk
"""


def _tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of ``folder``, read by tensorboard's own reader."""
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    ).EventAccumulator(str(folder))
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    return {t: [(e.step, e.value) for e in accumulator.Scalars(t)] for t in tags}


@pytest.mark.slow
def test_csv_and_tensorboard_keep_every_record_of_a_process_killed_by_sigkill(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorboard")
    done = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "log.csv").read_text().splitlines()))
    assert [r["key"] for r in rows] == ["train/loss"] * 5 + ["val/loss", "amp/precision"]
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 5, 5]
    assert [float(r["value"]) for r in rows[:6]] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.25]
    assert rows[6]["value"] == "32-true" and len({r["run"] for r in rows}) == 1
    scalars = _tensorboard_scalars(tmp_path / "tb")
    assert [s for s, _ in scalars["train/loss"]] == [1, 2, 3, 4, 5]
    assert [v for _, v in scalars["train/loss"]] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert scalars["val/loss"] == [(5, 0.25)]


def test_runs_appended_to_one_csv_file_keep_one_header(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "log.csv"
    for run in ("a", "b"):
        sink = CsvSink(path, run_id=run)
        sink.log({"train/loss": 1.5, "val/accuracy": math.nan}, 1)
        sink.close()
    lines = path.read_text().splitlines()
    assert lines[0] == "run,step,key,value" and lines.count(lines[0]) == 1
    rows = list(csv.DictReader(path.read_text().splitlines()))
    assert [(r["run"], r["key"]) for r in rows] == [
        ("a", "train/loss"), ("a", "val/accuracy"), ("b", "train/loss"), ("b", "val/accuracy")
    ]  # fmt: skip
    assert math.isnan(float(rows[1]["value"]))


def test_fine_tune_writes_every_record_to_csv_and_tensorboard(
    tmp_path: Path, make_model: Callable[..., Any], tokens: Callable[..., torch.Tensor]
) -> None:
    pytest.importorskip("tensorboard")
    result = fine_tune(make_model(), tokens(16), tokens(8, seed=1), epochs=2, batch_size=4,
                       num_workers=0, eval_every=2, log_every=3, csv_path=str(tmp_path / "l.csv"),
                       tensorboard_dir=str(tmp_path / "tb"))  # fmt: skip
    rows = list(csv.DictReader((tmp_path / "l.csv").read_text().splitlines()))
    losses = [(int(r["step"]), r["key"]) for r in rows if r["key"] == "train/loss"]
    assert [s for s, _ in losses] == [1, 2, 3, 4, 4, 5, 6, 7, 8, 8]  # every step, each epoch
    scalars = _tensorboard_scalars(tmp_path / "tb")
    # each validation, and the epoch's record again at its last step
    as_float32 = [float(torch.tensor(e["val/loss"], dtype=torch.float32)) for e in result.evals]
    evals = {(e["step"], v) for e, v in zip(result.evals, as_float32, strict=True)}
    assert len(scalars["val/loss"]) == len(result.evals) + 2
    assert set(scalars["val/loss"]) == evals


def test_a_csv_run_without_an_id_gets_one_of_12_hex_digits(tmp_path: Path) -> None:
    sink = CsvSink(tmp_path / "log.csv")
    sink.close()
    assert len(sink.run_id) == 12 and int(sink.run_id, 16) >= 0


def test_a_csv_log_is_utf8_whatever_the_locale(tmp_path: Path) -> None:
    old = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # an ASCII locale: open()'s default codec is ASCII
    try:
        sink = CsvSink(tmp_path / "log.csv", run_id="r")
        sink.log({"val/bleu·fr": "déjà vu"}, 1)
        sink.close()
    finally:
        locale.setlocale(locale.LC_CTYPE, old)
    rows = list(csv.DictReader((tmp_path / "log.csv").read_text("utf-8").splitlines()))
    assert [(r["key"], r["value"]) for r in rows] == [("val/bleu·fr", "déjà vu")]


def test_a_steps_extra_figures_reach_the_sinks(tmp_path: Path) -> None:
    tracker = MetricsTracker([JsonlSink(tmp_path / "m.jsonl")])
    tracker.log_step(2.0, 1.0, lr=0.25)
    tracker.close()
    line = json.loads((tmp_path / "m.jsonl").read_text())
    assert (line["step"], line["train/loss"], line["lr"]) == (1, 2.0, 0.25)


def test_tensorboard_text_is_written_at_its_step(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from amptrain.metrics import TensorBoardSink

    sink = TensorBoardSink(tmp_path / "tb")
    sink.log({"amp/precision": "32-true", "val/loss": 0.5}, 7)
    sink.close()
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    ).EventAccumulator(str(tmp_path / "tb"))
    accumulator.Reload()
    assert [e.step for e in accumulator.Tensors("amp/precision/text_summary")] == [7]


def test_tensorboard_missing_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amptrain.metrics import TensorBoardSink

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # not installed
    with pytest.raises(ImportError, match=re.escape("amptrain[tensorboard]")):
        TensorBoardSink(tmp_path / "tb")
