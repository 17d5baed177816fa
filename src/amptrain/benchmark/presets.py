"""Benchmark presets: model, data and timing sizes, chosen once per device class."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Preset:
    """Sizes of one benchmark run."""

    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    seq_len: int
    batch_size: int
    warmup_steps: int  # per precision, before the first timed window
    window_steps: int  # optimizer steps per timed window
    windows: int  # timed windows per precision (at least 5)
    eval_batches: int
    latency_samples: int  # single-sample forward passes for inference latency
    learning_rate: float
    num_workers: int
    precisions: tuple[str, ...]
    needs_cuda: bool
    # the fp8 arm's float8 matmuls emulated in fp32: numerically fp8, for its accuracy alone
    # (a CPU has no float8 tensor cores; its speed means nothing)
    fp8_emulate: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {**asdict(self), "precisions": list(self.precisions)}


PRESETS = {
    # Sized so tensor cores dominate one H100: GPT-2 small shape at context 1024, batch 32,
    # and a small vocabulary so that activations, not the logits, dominate memory. Measured
    # on an H100 80GB HBM3 (reports/baseline/): a bf16 step takes 64 ms and the whole run
    # 118 s; the cpu-smoke model there runs bf16 at 0.79x of fp32, since launches, not
    # matrix work, set its pace. Six windows after five warm-up steps gave a bf16-vs-fp32
    # speedup interval of +-0.3% to +-0.6% in three runs and +-2.1% in a fourth, whose first
    # bf16 window ran 8% slow: ten of each (+-0.2% in the baseline) keep one slow window
    # from widening it.
    "gpu": Preset(
        name="gpu",
        vocab_size=2048,
        d_model=768,
        n_layers=12,
        n_heads=12,
        seq_len=1024,
        batch_size=32,
        warmup_steps=10,
        window_steps=10,
        windows=10,
        eval_batches=4,
        latency_samples=30,
        learning_rate=6e-4,
        num_workers=2,
        precisions=("32-true", "32-tf32", "16-mixed", "bf16-mixed", "fp8"),
        needs_cuda=True,
    ),
    # Every path that needs no CUDA, in seconds on two cores.
    "cpu-smoke": Preset(
        name="cpu-smoke",
        vocab_size=64,
        d_model=32,
        n_layers=2,
        n_heads=2,
        seq_len=32,
        batch_size=8,
        warmup_steps=2,
        window_steps=4,
        windows=5,
        eval_batches=2,
        latency_samples=10,
        learning_rate=3e-3,
        num_workers=1,
        precisions=("32-true", "bf16-mixed", "fp8"),
        needs_cuda=False,
        fp8_emulate=True,
    ),
}
