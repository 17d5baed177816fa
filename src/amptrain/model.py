"""TinyGPT: a small decoder-only transformer for the integration stage and the benchmark; and
the gradient checkpointing switch of a run (TinyGPT's or a Hugging Face model's)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.ln_1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        # [B, T, C] -> [B, heads, T, C / heads]
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """Decoder-only transformer: ``forward(input_ids [B, T]) -> logits [B, T, vocab_size]``.

    Attention is ``F.scaled_dot_product_attention`` (flash or memory-efficient kernels where
    the device has them). The output head shares its weights with the token embedding.
    :meth:`gradient_checkpointing_enable` recomputes each block's activations in the backward
    pass (``torch.utils.checkpoint``) instead of keeping them, as Hugging Face models do.
    ``_no_split_modules`` names its blocks, as a ``transformers`` model does (FSDP shards each).
    """

    _no_split_modules = ("_Block",)

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        max_seq_len: int = 128,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.vocab_size = vocab_size
        self.max_seq_len = max_seq_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_seq_len, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight
        self.is_gradient_checkpointing = False
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections keeps the residual stream's variance flat.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits for every position of ``input_ids``."""
        t = input_ids.shape[1]
        if t > self.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds max_seq_len {self.max_seq_len}")
        pos = torch.arange(t, device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)
        for block in self.blocks:
            if self.is_gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.ln_f(x))

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: Any = None) -> None:
        """Keep only each block's input in training; recompute the rest in backward."""
        self.is_gradient_checkpointing = True

    def gradient_checkpointing_disable(self) -> None:
        """Keep every activation again (the default)."""
        self.is_gradient_checkpointing = False

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token (forward and backward), as in the PaLM appendix: 6N + 12LTd."""
        seq_len = seq_len or self.max_seq_len
        n_params = sum(p.numel() for p in self.parameters()) - self.pos_emb.weight.numel()
        n_layers = len(self.blocks)
        d_model = self.tok_emb.embedding_dim
        return 6 * n_params + 12 * n_layers * seq_len * d_model


# (enable, disable, whether on, the kwargs' name): transformers 5.23's names, then the older
# ones (deprecated there; TinyGPT's), so a model's own current switch is the one used
_SWITCHES = (
    ("activation_checkpointing_enable", "activation_checkpointing_disable",
     "is_activation_checkpointing", "activation_checkpointing_kwargs"),
    ("gradient_checkpointing_enable", "gradient_checkpointing_disable",
     "is_gradient_checkpointing", "gradient_checkpointing_kwargs"),
)  # fmt: skip


@contextlib.contextmanager
def gradient_checkpointing(model: nn.Module, enabled: bool) -> Iterator[None]:
    """With ``enabled``, the model's gradient checkpointing on (a Hugging Face model's
    ``activation_checkpointing_enable``/``gradient_checkpointing_enable``, or a
    :class:`TinyGPT`'s; non-reentrant) for the block, then back as it was; a model without
    the switch is a ValueError before training."""
    if not enabled:
        yield
        return
    names = next((n for n in _SWITCHES if callable(getattr(model, n[0], None))), None)
    if names is None:
        raise ValueError(
            f"gradient_checkpointing: {type(model).__name__} has no gradient_checkpointing_enable"
            " (a transformers PreTrainedModel or amptrain's TinyGPT has one): wrap its blocks in "
            "torch.utils.checkpoint yourself, or leave gradient_checkpointing off"
        )
    enable, disable, state, kwargs = names
    if getattr(model, state, False):  # on already: the caller's choice, left as it is
        yield
        return
    getattr(model, enable)(**{kwargs: {"use_reentrant": False}})
    try:
        yield
    finally:
        getattr(model, disable)()
