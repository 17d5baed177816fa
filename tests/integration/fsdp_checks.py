"""The checks of fsdp_worker.py that look inside an FSDP run: what each rank holds, a
non-finite gradient in one rank's shard, the sharded GradScaler, and a Llama's best weights
exported with save_pretrained."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from amptrain import EarlyStopping, TinyGPT, fine_tune, synthetic_token_data
from amptrain.config import TrainConfig
from amptrain.distributed import join_world
from amptrain.engine import TrainStep
from amptrain.fsdp import full_state_dict, local_bytes, shard
from amptrain.optim import build_optimizer
from amptrain.precision import PrecisionPlan
from amptrain.pretrained import SavePretrained

VOCAB, SEQ, ROWS = 24, 12, 40
RANK, WORLD = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
RUN = {"batch_size": 2, "num_workers": 0, "strategy": "fsdp"}
SNAPSHOT_AT = 15  # the step whose checkpoint the four ranks resume (mid-epoch 2 on two ranks)


def model(layers: int = 2) -> TinyGPT:
    """A TinyGPT with one position more than the rows use: 13 rows of position embeddings,
    which neither 2 nor 4 ranks split evenly (FSDP pads the last shard)."""
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=32, n_layers=layers, n_heads=2, max_seq_len=SEQ + 1)


def rows() -> torch.Tensor:
    return synthetic_token_data(ROWS, SEQ, VOCAB, seed=0)


def ragged() -> list[torch.Tensor]:
    """:func:`rows` cut to 3 to 12 tokens: the ranks' batches hold unequal counts of tokens, so
    only the mean over every rank's tokens (not the mean of each rank's mean) equals one
    process's loss."""
    return [row[: 3 + (i * 7) % 10] for i, row in enumerate(rows())]


def val_rows(count: int = 5) -> torch.Tensor:
    """Validation rows: 5 over two ranks of 2-row batches give one rank a batch more."""
    return synthetic_token_data(count, SEQ, VOCAB, seed=1)


def save_whole(net: nn.Module, path: Path) -> None:
    """The model's whole weights, gathered to rank 0, which saves them."""
    weights = full_state_dict(net)
    if RANK == 0:
        torch.save(weights, path)


# --- what each rank holds --------------------------------------------------------------------


class Holdings:
    """Bytes this rank holds of the parameters, gradients and optimizer state (just before and
    after a step), and the blocks whose full parameters are gathered during each block's
    forward, as the optimizer and the blocks' hooks see them; and the bytes of the root's own
    parameters (gathered throughout the forward) and of one block's. The optimizers it makes
    are kept in ``optimizers``."""

    def __init__(self, net: nn.Module) -> None:
        self.net, self.optimizers = net, []
        whole = sum(p.numel() * p.element_size() for p in net.parameters())
        block = sum(p.numel() * p.element_size() for p in net.blocks[0].parameters())
        self.report: dict[str, Any] = {"gathered_blocks": 0, "gathered_bytes": 0, "world": WORLD}
        self.report |= {"root_bytes": whole - block * len(net.blocks), "block_bytes": block}
        for b in net.blocks:
            b.register_forward_hook(lambda m, i, o: self.gathered())

    def gathered(self) -> None:
        full = [b for b in self.net.blocks if not isinstance(b.qkv.weight, DTensor)]
        gathered = [p for p in self.net.parameters() if not isinstance(p, DTensor)]
        self.report["gathered_blocks"] = max(self.report["gathered_blocks"], len(full))
        size = sum(p.numel() * p.element_size() for p in gathered)
        self.report["gathered_bytes"] = max(self.report["gathered_bytes"], size)

    def factory(self, net: nn.Module) -> torch.optim.Optimizer:
        optimizer = build_optimizer(net, TrainConfig(), torch.device("cpu"))
        optimizer.register_step_pre_hook(lambda o, a, k: self.before(o))
        optimizer.register_step_post_hook(lambda o, a, k: self.after(o))
        self.optimizers.append(optimizer)
        return optimizer

    def before(self, optimizer: torch.optim.Optimizer) -> None:
        params = [p for g in optimizer.param_groups for p in g["params"]]
        self.report["params"] = local_bytes(params)
        self.report["grads"] = local_bytes([p.grad for p in params if p.grad is not None])
        self.report["bound"] = 2 * sum(shard_bound(p) for p in params)
        self.report["whole"] = 2 * sum(p.numel() * p.element_size() for p in params)

    def after(self, optimizer: torch.optim.Optimizer) -> None:
        states = [t for s in optimizer.state.values() for t in s.values()]
        self.report["optimizer"] = local_bytes(states)
        self.report["optimizer_bound"] = sum(shard_bound(t) for t in states)
        self.report["optimizer_whole"] = sum(t.numel() * t.element_size() for t in states)


def shard_bound(tensor: torch.Tensor) -> int:
    """A rank's most bytes of ``tensor`` under FSDP: its first dimension cut into WORLD equal
    parts, the last padded (a tensor that is not sharded, such as a step count, whole)."""
    if not isinstance(tensor, DTensor):
        return tensor.numel() * tensor.element_size()
    rows_per_rank = math.ceil(tensor.shape[0] / WORLD) if tensor.dim() else 1
    return rows_per_rank * math.prod(tensor.shape[1:]) * tensor.element_size()


def holdings(**options: Any) -> dict[str, Any]:
    """Two FSDP steps of a three-block model with ``options``, as :class:`Holdings` sees them."""
    net = model(layers=3)
    seen = Holdings(net)
    fine_tune(net, rows(), **RUN, **options, max_steps=2, optimizer_factory=seen.factory)
    return seen.report


# --- a non-finite gradient in one rank's shard -----------------------------------------------


class PlantNaN(torch.autograd.Function):
    """The identity, whose backward makes the gradient NaN where ``mask`` is true."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(mask)
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (mask,) = ctx.saved_tensors
        grad = grad.clone()
        grad[mask] = math.nan
        return grad, None


def plant_nan(net: nn.Module, step: int) -> None:
    """On rank 1, at training forward ``step``: a NaN in the gradient of one token's embedding,
    a token whose row rank 0's shard holds. Only rank 0 then sees it in its own gradients."""
    calls = 0

    def hook(module: nn.Module, inputs: tuple[torch.Tensor], output: torch.Tensor) -> Any:
        nonlocal calls
        if not (module.training and torch.is_grad_enabled()):
            return None
        calls += 1
        if RANK != 1 or calls != step:
            return None
        (ids,) = inputs
        mask = torch.zeros_like(ids, dtype=torch.bool)
        mask[tuple((ids < VOCAB // WORLD).nonzero()[0])] = True  # a row of rank 0's shard
        return PlantNaN.apply(output, mask)

    net.tok_emb.register_forward_hook(hook)


def nonfinite() -> dict[str, Any]:
    """Four FSDP steps, the second with the planted NaN: the steps each rank skipped."""
    net = model()
    plant_nan(net, step=2)
    result = fine_tune(net, rows(), **RUN, max_steps=4, log_every=1)
    return {"overflow_steps": result.overflow_steps, "loss": result.epochs[-1].train_loss}


def scaler() -> dict[str, Any]:
    """Three steps in fp16 with a GradScaler (fp16 autocast on the CPU, FSDP gathering fp16
    parameters), the second with the planted NaN: the loss scale and skips each rank saw."""
    plan = PrecisionPlan("16-mixed", "16-mixed", "cpu", torch.float16, None, True)
    net = shard(model(), plan, torch.device("cpu"), join_world("cpu"))
    plant_nan(net, step=2)
    step = TrainStep(net, build_optimizer(net, TrainConfig(), torch.device("cpu")), plan)
    batch = rows()[RANK * 4 : RANK * 4 + 4]
    scales = []
    for _ in range(3):
        step(batch, batch)
        scales.append(step.loss_scale)
    return {"scales": scales, "overflow_steps": step.overflow_steps}


# --- a transformers model ---------------------------------------------------------------------


def llama(out: Path) -> dict[str, Any]:
    """A Llama under FSDP (its blocks from _no_split_modules) stopped early, its best weights
    (by the highest loss: the first validation's) kept sharded and given back at the end, and
    its last weights exported by SavePretrained."""
    import transformers
    from torch.distributed.fsdp import FSDPModule

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
        pad_token_id=0, bos_token_id=1, eos_token_id=1,
    )  # fmt: skip
    net = transformers.LlamaForCausalLM(config)
    folder = out / "llama"
    result = fine_tune(
        net, rows(), val_rows(), **RUN, epochs=2, eval_every=2, learning_rate=1e-2,
        best_metric="val/loss", best_mode="max", load_best_at_end=True,
        checkpoint_dir=str(folder / "ckpt"),
        callbacks=[EarlyStopping(patience=2, min_delta=10.0), SavePretrained(net, folder / "end")],
    )  # fmt: skip
    save_whole(net, folder / "restored.pt")
    sharded = [type(m).__name__ for m in net.modules() if isinstance(m, FSDPModule)]
    return {"result": result.to_dict(), "sharded": sharded}
