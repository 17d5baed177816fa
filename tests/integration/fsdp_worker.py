"""Run by ``torchrun`` from test_fsdp.py: fine_tune with ``strategy="fsdp"`` on CPU (gloo).

    torchrun --nproc_per_node=2 --max-restarts=1 fsdp_worker.py two OUT KILL_AT
    torchrun --nproc_per_node=4 fsdp_worker.py four OUT CHECKPOINT

``two`` is one job told as a long run lives it. Its first attempt trains one run with FSDP and
with DDP, a few steps with each FSDP option and feature, and a Llama whose best weights are
exported by save_pretrained; each rank writes what it saw into OUT/rank-R.json. Then rank 1 is
SIGKILLed after step KILL_AT of the fault worker's run, and torchrun restarts the job: the
second attempt resumes that run from its sharded checkpoint, runs it again untouched (the
reference), and ends with rank 1 raising (the test checks that the job ends fast).
``four`` resumes CHECKPOINT (written by two ranks) on four, measures each rank's bytes, and
runs the FSDP-vs-DDP benchmark small.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

from amptrain import Callback, TrainState, fine_tune
from amptrain.config import TrainConfig
from amptrain.engine import TrainStep
from amptrain.fsdp import shard
from amptrain.optim import build_optimizer
from amptrain.precision import PrecisionPlan
from amptrain.predictions import EvalPrediction

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))  # fsdp_vs_ddp.py
import fault_worker
from fsdp_checks import (
    RANK,
    RUN,
    SNAPSHOT_AT,
    Holdings,
    holdings,
    llama,
    model,
    nonfinite,
    ragged,
    rows,
    save_whole,
    scaler,
    val_rows,
)


class Labels:
    """compute_metrics that keeps the label rows it is given, in the order given."""

    def __init__(self) -> None:
        self.seen: list[list[list[int]]] = []

    def __call__(self, prediction: EvalPrediction) -> dict[str, float]:
        self.seen.append(prediction.label_ids.tolist())
        return {"rows": float(len(prediction.label_ids))}


class Snapshot(Callback):
    """Saves the whole model and optimizer state (rank 0) after step ``at`` (0: at the start)."""

    def __init__(self, net: nn.Module, optimizers: list[Any], path: Path, at: int) -> None:
        self.net, self.optimizers, self.path, self.at = net, optimizers, path, at

    def _save(self) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights, optimizer = get_state_dict(self.net, self.optimizers[0], options=whole)
        if RANK == 0:
            torch.save({"model": weights, "optimizer": optimizer}, self.path)

    def on_train_start(self, state: TrainState) -> None:
        if self.at == 0:
            self._save()

    def on_step_end(self, state: TrainState) -> None:
        if state.step == self.at:
            self._save()


def kept(optimizers: list[Any]) -> Callable[[nn.Module], torch.optim.Optimizer]:
    """An optimizer factory giving fine_tune's own AdamW, kept in ``optimizers``."""

    def build(net: nn.Module) -> torch.optim.Optimizer:
        optimizers.append(build_optimizer(net, TrainConfig(), torch.device("cpu")))
        return optimizers[-1]

    return build


# --- two ranks -------------------------------------------------------------------------------


def same_run(out: Path) -> dict[str, Any]:
    """One run with FSDP, then with DDP: results, whole weights, what compute_metrics got;
    FSDP's sinks, checkpoints and its state at SNAPSHOT_AT (whose checkpoint the four ranks
    resume)."""
    report: dict[str, Any] = {}
    for strategy in ("fsdp", "ddp"):
        net, labels, optimizers = model(), Labels(), []
        snapshot = Snapshot(net, optimizers, out / "at-snapshot.pt", SNAPSHOT_AT)
        sinks = {
            "jsonl_path": str(out / "fsdp.jsonl"), "csv_path": str(out / "fsdp.csv"),
            "checkpoint_dir": str(out / "ckpt-fsdp"), "checkpoint_every": 5,
            "keep_checkpoints": 2, "callbacks": [snapshot],
        }  # fmt: skip
        result = fine_tune(
            net, ragged(), val_rows(), **{**RUN, "strategy": strategy}, epochs=2, log_every=5,
            compute_metrics=labels, optimizer_factory=kept(optimizers),
            **(sinks if strategy == "fsdp" else {}),
        )  # fmt: skip
        save_whole(net, out / f"{strategy}-weights.pt")
        report[strategy] = {"result": result.to_dict(), "labels": labels.seen[-1]}
    return report


def short(out: Path, name: str, **options: Any) -> dict[str, Any]:
    """Four FSDP steps with ``options``; the whole weights saved as ``name``."""
    net = model()
    result = fine_tune(net, rows(), **{**RUN, **options}, max_steps=4)
    save_whole(net, out / f"short-{name}.pt")
    devices = sorted({str(p.device) for p in net.parameters()})
    return {"loss": result.epochs[-1].train_loss, "dtypes": sorted(dtypes(net)), "devices": devices,
            "precision": result.precision, "fp8_layers": result.fp8_layers}  # fmt: skip


def dtypes(net: nn.Module) -> set[str]:
    """The dtypes of the model's (sharded) parameters."""
    return {str(p.dtype) for p in net.parameters()}


def variants(out: Path) -> dict[str, Any]:
    """The same four steps plain, accumulated, recomputed, compiled, offloaded, in bf16."""
    compute: list[str] = []
    bf16 = model()
    bf16.blocks[0].qkv.register_forward_hook(lambda m, i, o: compute.append(str(m.weight.dtype)))
    report = {
        "plain": short(out, "plain"),
        "accumulated": short(out, "accumulated", batch_size=1, grad_accum_steps=2),
        "recomputed": short(out, "recomputed", gradient_checkpointing=True),
        "compiled": short(out, "compiled", compile="aot_eager"),
        "offloaded": short(out, "offloaded", cpu_offload=True),
        "kept_gathered": short(out, "kept_gathered", reshard_after_forward=False),
    }
    report.update(fp8(out))
    result = fine_tune(bf16, rows(), **RUN, max_steps=4, precision="bf16-mixed")
    report["bf16"] = {
        "loss": result.epochs[-1].train_loss,
        "dtypes": sorted(dtypes(bf16)),
        "compute": sorted(set(compute)),
    }
    return report


def fp8(out: Path) -> dict[str, Any]:
    """The same four steps in fp8 (emulated) with FSDP and with DDP; FSDP's float8 all-gather
    asked for on gloo, and why it is refused."""
    emulated = {"precision": "fp8", "fp8_emulate": True}
    report = {
        "fp8": short(out, "fp8", **emulated),
        "fp8_ddp": short(out, "fp8_ddp", **emulated, strategy="ddp"),
    }
    try:
        fine_tune(model(), rows(), **RUN, max_steps=1, **emulated, fp8_all_gather=True)
    except ValueError as refused:
        report["fp8_all_gather"] = str(refused)
    return report


class CountedReduceScatter(DefaultReduceScatter):
    """FSDP's own reduce-scatter of gradients, counted."""

    calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super().__call__(*args, **kwargs)


def sync_counts() -> dict[str, int]:
    """Gradient reduce-scatters for one optimizer step of 1 and of 4 micro-batches."""
    from torch.distributed.fsdp import FSDPModule

    plan = PrecisionPlan("32-true", "32-true", "cpu", None, None, False)
    net = shard(model(), plan, torch.device("cpu"), _world())
    counting = CountedReduceScatter()
    for module in net.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_reduce_scatter(counting)
    step = TrainStep(net, build_optimizer(net, TrainConfig(), torch.device("cpu")), plan)
    counts = {}
    for n in (1, 4):
        counting.calls = 0
        step.run([(part, part, {}) for part in rows()[:8].chunk(n)])
        counts[str(n)] = counting.calls
    return counts


def _world() -> Any:
    from amptrain.distributed import join_world

    return join_world("cpu")


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    if mode == "two":
        two(out, kill_at=int(sys.argv[3]))
    else:
        four(out, Path(sys.argv[3]))


def two(out: Path, kill_at: int) -> None:
    """The first attempt checks, then is killed (rank 1, after step ``kill_at`` of the fault
    worker's run); the second resumes that run, runs it again untouched, and ends on rank 1
    raising."""
    fsdp = ["--strategy", "fsdp"]
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        report = {
            "same": same_run(out),
            "variants": variants(out),
            "sync": sync_counts(),
            "holdings": holdings(),
            "holdings_kept_gathered": holdings(reshard_after_forward=False),
            "nonfinite": nonfinite(),
            "scaler": scaler(),
            "llama": llama(out),
        }
        (out / f"rank-{RANK}.json").write_text(json.dumps(report))
        fault_worker.main([str(out / "killed"), *fsdp, f"--kill-at={kill_at}", "--rank=1"])
        raise SystemExit(f"rank {RANK}: the fault worker's run was not killed")
    fault_worker.main([str(out / "killed"), *fsdp])  # resumed from its sharded checkpoint
    fault_worker.main([str(out / "whole"), *fsdp])
    fault_worker.main([str(out / "raise"), *fsdp, "--raise-at=3", "--rank=1", "--attempt=1"])


def four(out: Path, source: Path) -> None:
    """``source`` (two ranks' checkpoint) resumed on four, with each rank's bytes; the
    benchmark."""
    net, labels = model(), Labels()
    seen = Holdings(net)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fine_tune(
            net, ragged(), val_rows(3), **RUN, epochs=2, resume_from=str(source),
            compute_metrics=labels, optimizer_factory=seen.factory,
            callbacks=[Snapshot(net, seen.optimizers, out / "at-start.pt", 0)],
        )  # fmt: skip
    import fsdp_vs_ddp

    small = ["--layers", "2", "--d-model", "32", "--heads", "2", "--batch", "2", "--seq", "12"]
    fsdp_vs_ddp.main([*small, "--steps", "1", "--windows", "2", "--out", str(out / "bench")])
    report = {
        "result": result.to_dict(),
        "labels": labels.seen[-1],
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "holdings": seen.report,
    }
    (out / f"rank-{RANK}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
