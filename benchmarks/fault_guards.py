"""What the fault guards cost per optimizer step on the cpu-smoke preset: the id check every
batch gets on the CPU before its copy, and the flush of every record the JSON-lines sink writes
(one per step: log_every=1, the most a run writes), against the time of a step of fine_tune.

Rounds are interleaved (a fine_tune run, then the id check and the sink's writes, timed again
each round) so machine drift hits all alike; the first round is a warm-up and is dropped.
Printed: per-round medians in microseconds, and the median over rounds of each round's ratio
(check + flushed write) / step, and of the flush alone / step. Usage:
    python benchmarks/fault_guards.py [--rounds 7] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from amptrain import TinyGPT, fine_tune, synthetic_token_data
from amptrain.benchmark.presets import PRESETS
from amptrain.config import check_batch_ids
from amptrain.metrics import JsonlSink

PRESET = PRESETS["cpu-smoke"]
RECORD = {"train/loss": 2.345678, "train/grad_norm": 0.87654, "train/lr": 3e-4}


def step_seconds(rows: torch.Tensor) -> float:
    """fine_tune's training time per step (validation and setup left out)."""
    torch.manual_seed(0)
    model = TinyGPT(
        PRESET.vocab_size, d_model=PRESET.d_model, n_layers=PRESET.n_layers,
        n_heads=PRESET.n_heads, max_seq_len=PRESET.seq_len,
    )  # fmt: skip
    result = fine_tune(model, rows, epochs=1, batch_size=PRESET.batch_size, num_workers=0)
    return result.epochs[0].wall_time_s / result.steps


def check_seconds(batch: torch.Tensor, calls: int) -> float:
    """The per-batch id check the loop runs, per call."""
    start = time.perf_counter()
    for number in range(calls):
        check_batch_ids(batch, PRESET.vocab_size, batch=number, epoch=1)
    return (time.perf_counter() - start) / calls


def write_seconds(folder: Path, calls: int, *, flush: bool) -> float:
    """One record written by the JSON-lines sink, per call (with its flush, or with the flush
    taken out to measure what the flush adds)."""
    sink = JsonlSink(folder / f"log-{flush}.jsonl")
    if not flush:
        sink._file.flush = lambda: None  # type: ignore[method-assign]
    start = time.perf_counter()
    for step in range(calls):
        sink.log(RECORD, step)
    seconds = (time.perf_counter() - start) / calls
    sink.close()
    return seconds


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Measure and print; the medians of the two ratios, for a caller."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = synthetic_token_data(8 * PRESET.batch_size, PRESET.seq_len, PRESET.vocab_size)
    batch = rows[: PRESET.batch_size]
    samples: dict[str, list[float]] = {"step": [], "check": [], "flushed": [], "unflushed": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds + 1):
            figures = {
                "step": step_seconds(rows),
                "check": check_seconds(batch, args.calls),
                "flushed": write_seconds(Path(tmp), args.calls, flush=True),
                "unflushed": write_seconds(Path(tmp), args.calls, flush=False),
            }
            if round_:  # the first round warms up
                for key, value in figures.items():
                    samples[key].append(value)
    return report(samples)


def report(samples: dict[str, list[float]]) -> dict[str, float]:
    """Print each figure's median and the ratios to the step; the ratios' medians."""
    for key, values in samples.items():
        print(f"{key:>10}: median {statistics.median(values) * 1e6:9.1f} us per call")
    rounds = list(zip(*samples.values(), strict=True))
    guards = [(check + flushed) / step for step, check, flushed, _ in rounds]
    flush = [max(flushed - unflushed, 0.0) / step for step, _, flushed, unflushed in rounds]
    print(f"id check + flushed record / step: median {statistics.median(guards):.3%} "
          f"(max {max(guards):.3%}) over {len(rounds)} rounds")  # fmt: skip
    print(f"flush alone / step: median {statistics.median(flush):.3%} (max {max(flush):.3%})")
    return {"guards": statistics.median(guards), "flush": statistics.median(flush)}


if __name__ == "__main__":
    main()
