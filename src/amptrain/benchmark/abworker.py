"""One side of an A/B benchmark: a process that trains one commit's step on request.

Run as a script (``python -P abworker.py``) with ``PYTHONPATH`` naming the side's ``src``, so
the library it imports is that commit's, not the installed one. It reads one JSON line of
settings, builds the preset's model, data and optimizer from the seed, warms up, and answers
``ready`` with where its library came from and the preset it built. Each later ``window`` line
runs one timed window (the preset's steps per window, synchronized at both ends) and answers
its seconds, its peak CUDA memory and its last loss; ``stop`` ends it. Answers go to the
original stdout, one JSON line each; anything the library prints goes to stderr.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from typing import IO, Any

# The clocks, taken before the side's library is imported: a commit that replaced
# time.perf_counter or time.thread_time would otherwise time its own windows.
WALL, CPU = time.perf_counter, time.thread_time


def _answer(out: IO[str], doc: dict[str, Any]) -> None:
    out.write(json.dumps(doc) + "\n")
    out.flush()


class Side:
    """The library of one commit, built once: its model, optimizer and data stream."""

    def __init__(self, settings: dict[str, Any]) -> None:
        import torch

        # torch's own synchronize, taken before the side's library could replace it
        self.synchronize = torch.cuda.synchronize
        import amptrain
        from amptrain.benchmark import run
        from amptrain.benchmark.presets import PRESETS
        from amptrain.data import seed_everything, synthetic_token_data

        self.torch, self.run = torch, run
        if settings.get("threads"):
            torch.set_num_threads(int(settings["threads"]))
        # No loader processes: their start-up and scheduling would be timed as the step's.
        self.preset = dataclasses.replace(PRESETS[settings["preset"]], num_workers=0)
        self.steps = int(settings["steps_per_window"])
        self.device = torch.device(settings["device"])
        seed = int(settings["seed"])
        seed_everything(seed)
        steps = self.preset.warmup_steps + int(settings["windows"]) * self.steps
        data = synthetic_token_data(
            steps * self.preset.batch_size, self.preset.seq_len, self.preset.vocab_size, seed=seed
        )
        model = run.preset_model(self.preset)
        self.arm = run.build_arm(settings["precision"], model, self.preset, data, self.device)
        run.run_steps(self.arm, self.preset.warmup_steps, self.device)
        self.sync()
        # On a CPU the step runs on this one thread: its CPU time is the step's cost, whatever
        # else the machine runs; waiting (a sleep, a lock) is left out. A GPU's step is timed
        # on the wall clock between synchronizations.
        self.clock = WALL if self.device.type == "cuda" else CPU
        self.library = os.path.dirname(os.path.abspath(amptrain.__file__))

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.synchronize(self.device)

    def window(self) -> dict[str, Any]:
        """One timed window: seconds, peak CUDA memory in MB (None elsewhere), last loss."""
        torch, device = self.torch, self.device
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        self.arm.losses.clear()
        self.sync()
        start = self.clock()
        self.run.run_steps(self.arm, self.steps, device)
        self.sync()
        seconds = self.clock() - start
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None
        return {"window_s": seconds, "peak_mb": peak, "loss": float(self.arm.losses[-1])}


def serve(commands: IO[str], out: IO[str]) -> int:
    """Answer the coordinator's lines until ``stop`` or end of input."""
    try:
        side = Side(json.loads(commands.readline()))
    except Exception as exc:  # whatever the commit's library raises, the coordinator reads it
        _answer(out, {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
        return 1
    preset = {**side.preset.to_dict(), "steps_per_window": side.steps}
    _answer(out, {"ready": True, "library": side.library, "preset": preset})
    for line in commands:
        if line.strip() != "window":
            break
        try:
            _answer(out, side.window())
        except Exception as exc:
            _answer(out, {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
            return 1
    return 0


def main() -> int:
    """Keep the protocol's stdout for answers; send everything else printed to stderr."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return serve(sys.stdin, out)


if __name__ == "__main__":
    sys.exit(main())
