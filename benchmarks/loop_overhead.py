"""fine_tune's time per step against a bare hand-written loop and Lightning's Trainer doing the
same work, and a 2-process gloo run against one process on half its global batch.

All three consume the same DataLoader (no workers), start from the same weights, and run the
same precision, optimizer, schedule and clipping; each is timed over its training loop only
(setup and validation left out). Rounds are interleaved (fine_tune, bare, Lightning, then
again) so machine drift hits all alike; the first round is a warm-up and is dropped. Printed:
per-step medians, and the median over rounds of each round's ratio to the bare loop, with 1
and with 2 threads. Usage:
    python benchmarks/loop_overhead.py [--precision bf16-mixed] [--repeats 7] [--no-ddp]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from amptrain import TinyGPT, fine_tune, make_dataloader, resolve_precision, synthetic_token_data
from amptrain.adapters import extract_logits, lm_loss
from amptrain.config import TrainConfig
from amptrain.optim import build_optimizer, build_schedule

VOCAB, SEQ, BATCH = 512, 64, 16
Loader = torch.utils.data.DataLoader


def base_model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=128, n_layers=2, n_heads=4, max_seq_len=SEQ)


def bare_loop(model: torch.nn.Module, loader: Loader, cfg: TrainConfig) -> float:
    """The loop a user would write by hand; returns seconds per step."""
    plan = resolve_precision(cfg.precision, "cpu")
    optimizer = build_optimizer(model, cfg, torch.device("cpu"))
    scheduler = build_schedule(optimizer, cfg, len(loader))
    scaler = plan.grad_scaler()
    model.train()
    start = time.perf_counter()
    for i, (input_ids, labels) in enumerate(loader):
        with plan.autocast():
            loss = lm_loss(extract_logits(model(input_ids)), labels)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if (i + 1) % cfg.log_every == 0:
            loss.item()  # a hand loop reads its loss as often as fine_tune does
    return (time.perf_counter() - start) / len(loader)


def ours(model: torch.nn.Module, loader: Loader, cfg: TrainConfig) -> float:
    result = fine_tune(model, loader, config=cfg)
    return result.epochs[0].wall_time_s / result.steps


def lightning_loop(model: torch.nn.Module, loader: Loader, cfg: TrainConfig) -> float:
    """Lightning's Trainer on the same module, optimizer, schedule and clipping."""
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            return lm_loss(extract_logits(self.net(batch[0])), batch[1])

        def configure_optimizers(self) -> dict[str, object]:
            optimizer = build_optimizer(self.net, cfg, torch.device("cpu"))
            scheduler = build_schedule(optimizer, cfg, len(loader))
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
            }

    class Clock(pl.Callback):
        def on_train_epoch_start(self, *_: object) -> None:
            self.start = time.perf_counter()

        def on_train_epoch_end(self, *_: object) -> None:
            self.seconds = time.perf_counter() - self.start

    clock = Clock()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, precision=cfg.precision,
        gradient_clip_val=cfg.max_grad_norm, callbacks=[clock], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(Module(), loader)
    return clock.seconds / len(loader)


ARMS: dict[str, Callable[[torch.nn.Module, Loader, TrainConfig], float]] = {
    "fine_tune": ours,
    "bare": bare_loop,
    "lightning": lightning_loop,
}


def compare(threads: int, cfg: TrainConfig, loader: Loader, repeats: int) -> dict[str, float]:
    """Interleaved rounds with ``threads`` threads; prints and returns the median ratios."""
    torch.set_num_threads(threads)
    base = base_model()
    times: dict[str, list[float]] = {name: [] for name in ARMS}
    for i in range(repeats + 1):
        round_times = {name: arm(copy.deepcopy(base), loader, cfg) for name, arm in ARMS.items()}
        if i:  # the first round warms caches and the allocator
            for name, t in round_times.items():
                times[name].append(t)
    ratios = {
        name: statistics.median(a / b for a, b in zip(times[name], times["bare"], strict=True))
        for name in ("fine_tune", "lightning")
    }
    print(
        f"\n{threads} thread(s), {len(loader)} steps x {repeats} rounds, precision {cfg.precision}"
    )
    for name, values in times.items():
        runs = ", ".join(f"{t * 1e3:.1f}" for t in values)
        print(f"  {name:10s} median {statistics.median(values) * 1e3:8.2f} ms/step  ({runs})")
    for name, ratio in ratios.items():
        print(f"  {name:10s} / bare: median of per-round ratios {ratio:.3f}")
    met = ratios["fine_tune"] <= 1.02 and ratios["fine_tune"] <= ratios["lightning"]
    print(f"  target fine_tune/bare <= 1.02 and <= lightning/bare: {'met' if met else 'MISSED'}")
    return ratios


def ddp_worker(out: str, steps: int, precision: str) -> None:
    """Run under torchrun: fine_tune on BATCH rows per rank; rank 0 writes its time per step."""
    data = synthetic_token_data(steps * BATCH * int(os.environ.get("WORLD_SIZE", "1")), SEQ, VOCAB)
    result = fine_tune(
        base_model(), data, epochs=1, batch_size=BATCH, num_workers=0, precision=precision,
        progress=False, device="cpu",
    )  # fmt: skip
    if int(os.environ.get("RANK", "0")) == 0:
        Path(out).write_text(json.dumps(result.epochs[0].wall_time_s / result.steps))


def per_step(processes: int, steps: int, precision: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.json"
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={processes}", __file__, "--ddp-worker", str(out),
            "--steps", str(steps), "--precision", precision,
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(command, env=env, check=True, capture_output=True)
        return float(json.loads(out.read_text()))


def compare_ddp(steps: int, precision: str, repeats: int) -> None:
    """2 processes (gloo, 1 thread each, BATCH rows each) against 1 process on BATCH rows."""
    one, two = [], []
    for _ in range(repeats):
        one.append(per_step(1, steps, precision))
        two.append(per_step(2, steps, precision))
    ratio = statistics.median(b / a for a, b in zip(one, two, strict=True))
    print(f"\ntorchrun, gloo, 1 thread per process, {BATCH} rows per process and step:")
    print(f"  1 process   median {statistics.median(one) * 1e3:7.2f} ms/step (global {BATCH})")
    print(f"  2 processes median {statistics.median(two) * 1e3:7.2f} ms/step (global {2 * BATCH})")
    print(f"  2-process / 1-process step time: median of per-round ratios {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--no-ddp", action="store_true", help="skip the 2-process comparison")
    parser.add_argument("--ddp-worker", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ddp_worker:
        ddp_worker(args.ddp_worker, args.steps, args.precision)
        return
    import lightning.pytorch  # noqa: F401  (it sets its logger's level when imported)

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)  # its banners, not ours
    warnings.filterwarnings("ignore", module="lightning")
    cfg = TrainConfig(
        precision=args.precision, epochs=1, batch_size=BATCH, device="cpu", progress=False,
        num_workers=0,
    )  # fmt: skip
    data = synthetic_token_data(args.steps * BATCH, SEQ, VOCAB)
    loader = make_dataloader(
        data, batch_size=BATCH, shuffle=False, device=torch.device("cpu"), num_workers=0
    )
    print(f"torch {torch.__version__}, defaults of TrainConfig (log_every {cfg.log_every})")
    for threads in (1, 2):
        compare(threads, cfg, loader, args.repeats)
    if not args.no_ddp:
        compare_ddp(args.steps, args.precision, max(3, args.repeats // 2))


if __name__ == "__main__":
    main()
