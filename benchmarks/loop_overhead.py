"""fine_tune's time per step against a bare hand-written loop doing the same work.

Both consume the same DataLoader (no workers), start from the same weights, and run the same
precision, optimizer, schedule and clipping. Runs are interleaved (A B A B ...) so machine
drift hits both alike; the first pair is a warm-up and is dropped. Prints per-step medians
and their ratio. Usage: python benchmarks/loop_overhead.py [--precision bf16-mixed] [--repeats 7]
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time

import torch

from amptrain import TinyGPT, fine_tune, make_dataloader, resolve_precision, synthetic_token_data
from amptrain.engine import extract_logits, lm_loss
from amptrain.trainer import TrainConfig, build_optimizer, build_schedule


def bare_loop(
    model: torch.nn.Module, loader: torch.utils.data.DataLoader, cfg: TrainConfig
) -> float:
    """The loop a user would write by hand; returns seconds per step."""
    plan = resolve_precision(cfg.precision, "cpu")
    optimizer = build_optimizer(model, cfg, torch.device("cpu"))
    scheduler = build_schedule(optimizer, cfg, len(loader))
    scaler = plan.grad_scaler()
    model.train()
    start = time.perf_counter()
    for input_ids, labels in loader:
        with plan.autocast():
            loss = lm_loss(extract_logits(model(input_ids)), labels)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # a hand loop reads its loss too
    return (time.perf_counter() - start) / len(loader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    torch.manual_seed(0)
    base = TinyGPT(512, d_model=128, n_layers=2, n_heads=4, max_seq_len=64)
    batch = 16
    data = synthetic_token_data(args.steps * batch, 64, 512)
    cfg = TrainConfig(
        precision=args.precision,
        epochs=1,
        batch_size=batch,
        device="cpu",
        progress=False,
        num_workers=0,
    )
    loader = make_dataloader(
        data, batch_size=batch, shuffle=False, device=torch.device("cpu"), num_workers=0
    )
    ours, bare = [], []
    for i in range(args.repeats + 1):
        result = fine_tune(copy.deepcopy(base), loader, config=cfg)
        t_ours = result.epochs[0].wall_time_s / result.steps
        t_bare = bare_loop(copy.deepcopy(base), loader, cfg)
        if i:  # the first pair warms caches and the allocator
            ours.append(t_ours)
            bare.append(t_bare)
    m_ours, m_bare = statistics.median(ours), statistics.median(bare)
    ratios = sorted(a / b for a, b in zip(ours, bare, strict=True))
    print(
        f"precision {args.precision}, {args.steps} steps x {args.repeats} interleaved repeats, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(
        f"fine_tune   median {m_ours * 1e3:8.2f} ms/step  (runs: "
        f"{', '.join(f'{t * 1e3:.1f}' for t in ours)})"
    )
    print(
        f"bare loop   median {m_bare * 1e3:8.2f} ms/step  (runs: "
        f"{', '.join(f'{t * 1e3:.1f}' for t in bare)})"
    )
    ratio = m_ours / m_bare
    print(
        f"ratio fine_tune / bare = {ratio:.3f}  "
        f"(paired ratios {ratios[0]:.3f} .. {ratios[-1]:.3f}); "
        f"target <= 1.05: {'met' if ratio <= 1.05 else 'MISSED'}"
    )
    if not math.isfinite(ratio):
        raise SystemExit("non-finite timing")


if __name__ == "__main__":
    main()
