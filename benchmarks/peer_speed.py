"""amptrain's CPU step time against the Hugging Face Trainer and Lightning on the same GPT-2.

The three train the same small ``transformers`` GPT-2 (built from a config, nothing downloaded;
GPT-2's own vocabulary by default, since the logits over it are much of a step's work)
from the same weights, on the same rows (the shipped text, one byte a token), with the same
batch size, fused AdamW, weight decay on matrices, linear schedule with warm-up, clipping at 1.0,
fp32, and number of steps. Each keeps its own defaults otherwise; changed are only those that
would print or write files (amptrain: ``progress=False``; the Trainer: ``report_to="none"``,
``save_strategy="no"``, ``disable_tqdm=True``; Lightning: ``logger=False``,
``enable_checkpointing=False``, ``enable_progress_bar=False``, ``enable_model_summary=False``),
and Lightning's optimizer is the same fused AdamW the other two use by default. Each is fed the
data as its users hand it over: amptrain the ``[N, T]`` tensor, the Trainer a list of
``{"input_ids", "labels"}`` rows (its default collator stacks them), Lightning a shuffled
DataLoader over a TensorDataset, with the loss from the model's ``labels``.

Timing: each framework's own step hook stamps the clock after every optimizer step (amptrain
``on_step_end``, the Trainer ``on_step_end``, Lightning ``on_train_batch_end``); a step's time
is the gap between two stamps (data, forward, backward, optimizer and the framework's own work
between them). The first ``--warmup`` steps of every run are dropped. Each run has a new
Python process (``--one-process``: all share this one), so none inherits the memory allocator's
state from the one before: at GPT-2's vocabulary much of a CPU step is page faults for
logits-sized buffers, how many depends on that state, and in one process the Trainer ran up to 26%
faster in the rounds where it followed Lightning and amptrain. Rounds rotate the order (ABC,
BCA, CAB, ...) so each framework follows each other equally often and drift hits all alike.

Printed: the versions; per framework the median over rounds of each run's median ms/step, with a
bootstrap 95% interval over rounds; the median over rounds of the per-round ratios amptrain/HF and
amptrain/Lightning, each with a bootstrap 95% interval, and the larger of the two again as the
ratio to the faster peer.
Exit status 1 when amptrain/faster exceeds ``--bound`` (1.02), unless ``--print-only``. Usage:
    python benchmarks/peer_speed.py [--rounds 9] [--steps 20] [--warmup 3] [--vocab 50257]
        [--threads N] [--clock wall|cpu] [--one-process] [--bound 1.02] [--print-only]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import amptrain
from amptrain import Callback, fine_tune

TEXT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "text" / "alice.txt"
GPT2_VOCAB = 50257  # GPT-2's tokenizer: the logits a GPT-2 fine-tune computes and scores
LR, DECAY, WARMUP_RATIO, CLIP = 3e-4, 0.01, 0.1, 1.0
FRAMEWORKS = ("amptrain", "hf", "lightning")
# wall: elapsed time; cpu: this process's CPU time, which other processes' load barely moves
# (with one thread; with more, threads waiting on each other count too)
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
Run = Callable[[torch.Tensor, argparse.Namespace], list[float]]  # rows in, step-end stamps out


def token_rows(rows: int, seq: int) -> torch.Tensor:
    """``rows`` rows of ``seq`` tokens: the shipped text's bytes, repeated as often as needed."""
    data = TEXT.read_bytes()
    need = rows * seq
    stream = (data * (need // len(data) + 1))[:need]
    return torch.tensor(list(stream), dtype=torch.int64).view(rows, seq)


def gpt2(args: argparse.Namespace) -> torch.nn.Module:
    """The same small GPT-2 each time (seed 0), with transformers' default dropout."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=args.vocab, n_positions=args.seq, n_embd=args.embd, n_layer=args.layers,
        n_head=args.heads, bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # not inferred from this class name (see tests/hf/conftest)
    return model


def total_steps(args: argparse.Namespace) -> int:
    return args.warmup + args.steps


def warmup_steps(args: argparse.Namespace) -> int:
    """The schedule's warm-up, as amptrain and transformers round ``WARMUP_RATIO`` up."""
    return math.ceil(total_steps(args) * WARMUP_RATIO)


def run_amptrain(rows: torch.Tensor, args: argparse.Namespace) -> list[float]:
    """fine_tune with its defaults; only the progress bar is turned off."""
    stamps: list[float] = []
    now = CLOCKS[args.clock]

    class Clock(Callback):
        def on_step_end(self, state: Any) -> None:
            stamps.append(now())

    fine_tune(
        gpt2(args), rows, batch_size=args.batch, max_steps=total_steps(args), learning_rate=LR,
        weight_decay=DECAY, warmup_ratio=WARMUP_RATIO, lr_scheduler_type="linear",
        max_grad_norm=CLIP, device="cpu", progress=False, callbacks=[Clock()],
    )  # fmt: skip
    return stamps


def run_hf(rows: torch.Tensor, args: argparse.Namespace) -> list[float]:
    """transformers.Trainer with its defaults; reporting, saving and tqdm turned off."""
    import transformers

    stamps: list[float] = []
    now = CLOCKS[args.clock]

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            stamps.append(now())

    with tempfile.TemporaryDirectory() as out:
        training_args = transformers.TrainingArguments(
            output_dir=out, per_device_train_batch_size=args.batch, max_steps=total_steps(args),
            learning_rate=LR, weight_decay=DECAY, warmup_steps=warmup_steps(args),
            lr_scheduler_type="linear", max_grad_norm=CLIP, use_cpu=True, report_to="none",
            save_strategy="no", disable_tqdm=True, seed=0,
        )  # fmt: skip
        data = [{"input_ids": row, "labels": row} for row in rows]
        trainer = transformers.Trainer(
            model=gpt2(args), args=training_args, train_dataset=data, callbacks=[Clock()]
        )
        trainer.train()
    return stamps


def run_lightning(rows: torch.Tensor, args: argparse.Namespace) -> list[float]:
    """lightning.Trainer on a plain LightningModule; logger, checkpoints, bar, summary off."""
    import lightning.pytorch as pl
    import transformers

    stamps: list[float] = []
    now = CLOCKS[args.clock]
    model = gpt2(args)

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch: Sequence[torch.Tensor]) -> torch.Tensor:
            return self.model(input_ids=batch[0], labels=batch[0]).loss

        def configure_optimizers(self) -> dict[str, Any]:
            params = [p for p in self.parameters() if p.requires_grad]
            groups = [
                {"params": [p for p in params if p.dim() >= 2], "weight_decay": DECAY},
                {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
            ]
            optimizer = torch.optim.AdamW(groups, lr=LR, fused=True)
            schedule = transformers.get_linear_schedule_with_warmup(
                optimizer, warmup_steps(args), total_steps(args)
            )
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": schedule, "interval": "step"},
            }

    class Clock(pl.Callback):
        def on_train_batch_end(self, *_: Any) -> None:
            stamps.append(now())

    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(rows), batch_size=args.batch, shuffle=True
    )
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=total_steps(args), gradient_clip_val=CLIP,
        callbacks=[Clock()], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Module(), loader)
    return stamps


RUNS: dict[str, Run] = {"amptrain": run_amptrain, "hf": run_hf, "lightning": run_lightning}


def step_times(stamps: Sequence[float], warmup: int, steps: int, name: str) -> list[float]:
    """Seconds of each step after the first ``warmup``; a run that did not take exactly
    ``warmup + steps`` steps cannot be compared and is an error."""
    if len(stamps) != warmup + steps:
        raise RuntimeError(
            f"{name} took {len(stamps)} optimizer steps, not the {warmup + steps} asked for: "
            "its step times cannot be compared"
        )
    return [b - a for a, b in zip(stamps[warmup - 1 :], stamps[warmup:], strict=False)]


def order(round_number: int) -> list[str]:
    """The frameworks rotated by the round's number: ABC, BCA, CAB, ABC, ..."""
    shift = round_number % len(FRAMEWORKS)
    return [*FRAMEWORKS[shift:], *FRAMEWORKS[:shift]]


def quiet_peers() -> contextlib.ExitStack:
    """The peers' banners, printed metrics and advice about their own settings kept out of the
    output (they are not what is measured); amptrain's warnings still show."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    return stack


def one_run(name: str, args: argparse.Namespace) -> list[float]:
    """One run of ``name``: its step-end stamps."""
    rows = token_rows(total_steps(args) * args.batch, args.seq)
    with quiet_peers() if name != "amptrain" else contextlib.nullcontext():
        return RUNS[name](rows, args)


def fresh_run(name: str, args: argparse.Namespace) -> list[float]:
    """One run of ``name`` in a new Python process (its allocator and caches new too)."""
    carried = {k: v for k, v in vars(args).items() if k in CARRIED and v is not None}
    options = [f"--{k}={v}" for k, v in carried.items()]
    command = [sys.executable, __file__, *options, f"--one-run={name}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(STAMPS)]
    if done.returncode or not lines:
        raise RuntimeError(f"the {name} run in its own process failed:\n{done.stderr[-2000:]}")
    return [float(t) for t in json.loads(lines[-1][len(STAMPS) :])]


STAMPS = "stamps: "  # the line a --one-run process hands its stamps back on
CARRIED = (
    "steps",
    "warmup",
    "batch",
    "seq",
    "embd",
    "layers",
    "heads",
    "vocab",
    "clock",
    "threads",
)


def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    """Each framework's median seconds per step in every round (rounds in rotating order)."""
    medians: dict[str, list[float]] = {name: [] for name in FRAMEWORKS}
    for number in range(args.rounds):
        for name in order(number):
            stamps = (one_run if args.one_process else fresh_run)(name, args)
            times = step_times(stamps, args.warmup, args.steps, name)
            medians[name].append(statistics.median(times))
    return medians


def bootstrap(values: Sequence[float], *, resamples: int = 10_000) -> tuple[float, float]:
    """A percentile bootstrap 95% interval of the median of ``values`` (seeded: reproducible)."""
    rng = np.random.default_rng(0)
    data = np.asarray(values, dtype=float)
    picks = rng.integers(0, len(data), size=(resamples, len(data)))
    low, high = np.percentile(np.median(data[picks], axis=1), [2.5, 97.5])
    return float(low), float(high)


def ratios(medians: dict[str, list[float]]) -> dict[str, list[float]]:
    """Per round: amptrain's median step over each peer's; and, as ``amptrain/faster (NAME)``,
    the series of the peer whose median ratio is the larger (the faster peer overall: the
    faster of each round would pick the lower of two noisy figures, biased low)."""
    ours = medians["amptrain"]
    per_peer = {
        f"amptrain/{peer}": [a / b for a, b in zip(ours, medians[peer], strict=True)]
        for peer in FRAMEWORKS[1:]
    }
    name, series = max(per_peer.items(), key=lambda item: statistics.median(item[1]))
    return {**per_peer, f"amptrain/faster ({name.split('/')[1]})": series}


def versions() -> str:
    import lightning
    import transformers

    return (
        f"amptrain {amptrain.__version__}, transformers {transformers.__version__}, "
        f"lightning {lightning.__version__}, torch {torch.__version__}"
    )


def report(medians: dict[str, list[float]], args: argparse.Namespace) -> float:
    """Print the figures; return the median ratio of amptrain to the faster peer."""
    print(versions())
    print(
        f"GPT-2 vocabulary {args.vocab}, n_embd {args.embd}, {args.layers} layers, "
        f"{args.heads} heads, {args.seq} tokens x {args.batch} rows; {args.rounds} rounds of "
        f"{args.warmup} warm-up + {args.steps} timed steps; {torch.get_num_threads()} threads; "
        f"{args.clock} clock"
    )
    for name, values in medians.items():
        low, high = bootstrap(values)
        print(
            f"  {name:18s} median {statistics.median(values) * 1e3:8.2f} ms/step  "
            f"95% CI [{low * 1e3:.2f}, {high * 1e3:.2f}]  rounds: "
            + " ".join(f"{v * 1e3:.1f}" for v in values)
        )
    per_round = ratios(medians)
    for name, values in per_round.items():
        low, high = bootstrap(values)
        print(f"  ratio {name:29s} {statistics.median(values):.3f}  95% CI [{low:.3f}, {high:.3f}]")
    return statistics.median(list(per_round.values())[-1])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    counts = {
        "--rounds": 9, "--steps": 20, "--warmup": 3, "--batch": 8, "--seq": 64, "--embd": 128,
        "--layers": 2, "--heads": 4, "--vocab": GPT2_VOCAB,
    }  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's own choice)"
    )
    for flag, default in counts.items():
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="every run in this process (quicker; each inherits the allocator state of the last)",
    )
    parser.add_argument("--one-run", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--bound", type=float, default=1.02, help="amptrain/faster peer at most")
    parser.add_argument("--print-only", action="store_true", help="exit 0 whatever the ratio")
    args = parser.parse_args(argv)
    for flag in counts:
        if getattr(args, flag[2:]) < 1:
            parser.error(f"{flag} must be at least 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    if args.vocab < 256:
        parser.error("--vocab must be at least 256 (the tokens are the text's bytes)")
    if args.seq < 2:
        parser.error("--seq must be at least 2 (a next-token loss needs two tokens)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print, and return the exit status (:func:`decide`)."""
    args = parse_args(argv)
    import lightning.pytorch  # noqa: F401  (it sets its loggers' levels when first imported)

    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    threads = torch.get_num_threads()
    for logger in loggers:
        logger.setLevel(logging.ERROR)  # its device banners
    torch.set_num_threads(args.threads or threads)
    if args.one_run:  # the process of one run (see fresh_run)
        print(STAMPS + json.dumps(one_run(args.one_run, args)))
        return 0
    try:
        ratio = report(measure(args), args)
    finally:  # the caller's own again (main runs inside tests too)
        torch.set_num_threads(threads)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    return decide(ratio, args.bound, print_only=args.print_only)


def decide(ratio: float, bound: float, *, print_only: bool) -> int:
    """The exit status: 1, with the reason on stderr, when amptrain's step over the faster
    peer's is not a number at most ``bound`` (unless only printing is asked for)."""
    met = ratio <= bound  # False for NaN: a ratio that is not a number does not meet the bound
    print(f"  bound amptrain/faster <= {bound}: {'met' if met else 'MISSED'}")
    if met:
        return 0
    print(
        f"amptrain's step takes {ratio:.3f}x the faster peer's, over the bound {bound}: "
        "profile the step (benchmarks/step_profile.py) or rerun on a quieter machine",
        file=sys.stderr,
    )
    return 0 if print_only else 1


if __name__ == "__main__":
    sys.exit(main())
