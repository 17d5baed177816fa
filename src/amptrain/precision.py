"""Precision: one setting, resolved once into an autocast context and a gradient scaler.

The training loop never branches on precision. It asks a :class:`PrecisionPlan` for a
context (a no-op or an autocast) and a scaler (always present, enabled only for fp16).
``"fp8"`` is bf16 autocast whose blocks' linear layers also compute in float8
(:mod:`amptrain.fp8` converts them before the run).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from amptrain._stack import outside_stacklevel

# Lightning's names, plus the legacy aliases the seed code used.
_CANONICAL = {
    "32-true": "32-true",
    "32": "32-true",
    "fp32": "32-true",
    "16-mixed": "16-mixed",
    "16": "16-mixed",
    "fp16": "16-mixed",
    "bf16-mixed": "bf16-mixed",
    "bf16": "bf16-mixed",
    "16-true": "16-true",
    "bf16-true": "bf16-true",
    "fp8": "fp8",  # Accelerate's name: float8 matmuls (torchao) inside bf16 autocast
}
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "fp8")
# The first GPUs with float8 tensor cores: Ada (8.9) and Hopper (9.0)
FP8_CAPABILITY = (8, 9)


class PrecisionFallbackWarning(UserWarning):
    """The requested precision cannot run on this device; a supported one is used instead."""


def canonical_precision(precision: str | int) -> str:
    """Map a Lightning precision name or legacy alias (``16``, ``"bf16"``) to its canonical name."""
    key = str(precision).strip().lower()
    if key not in _CANONICAL:
        names = ", ".join(sorted(set(_CANONICAL)))
        raise ValueError(f"unknown precision {precision!r}; use one of: {names}")
    return _CANONICAL[key]


def bf16_supported(device: torch.device) -> bool:
    """Whether bf16 autocast is usable on ``device`` (always on CPU; Ampere or newer on CUDA)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device.type == "cpu"


def fp8_supported(device: torch.device) -> bool:
    """Whether ``device`` has float8 tensor cores (CUDA compute capability 8.9 or newer)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device) >= FP8_CAPABILITY


@dataclass(frozen=True)
class PrecisionPlan:
    """The precision actually used on a device, and the objects that implement it."""

    requested: str
    name: str
    device_type: str
    autocast_dtype: torch.dtype | None
    param_dtype: torch.dtype | None
    scaler_enabled: bool
    # fp8 only: the float8 matmuls emulated in fp32 (asked for: tests and CPUs), not run on
    # float8 tensor cores
    fp8_emulated: bool = False

    @property
    def is_mixed(self) -> bool:
        """True when an autocast context is active (``16-mixed``, ``bf16-mixed``, ``fp8``)."""
        return self.autocast_dtype is not None

    @property
    def fell_back(self) -> bool:
        """True when the precision used differs from the one requested."""
        return self.name != self.requested

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The forward-pass context: an autocast for mixed precision, otherwise nothing."""
        if self.autocast_dtype is None:
            yield
            return
        with torch.amp.autocast(self.device_type, dtype=self.autocast_dtype):
            yield

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler that always exists and is enabled only for fp16 mixed precision."""
        return torch.amp.GradScaler(self.device_type, enabled=self.scaler_enabled)


def resolve_precision(
    precision: str | int, device: torch.device | str, *, fp8_emulate: bool = False
) -> PrecisionPlan:
    """Choose the precision to use on ``device``, warning once when it must fall back.

    fp16 (mixed or true) needs CUDA; without it, fp32 is used. bf16 needs CPU autocast or an
    Ampere-or-newer GPU; without it, fp32 is used. fp8 needs float8 tensor cores (compute
    capability 8.9 or newer); without them, bf16-mixed is used, unless ``fp8_emulate`` asks
    for its matmuls emulated in fp32 (for tests: numerically fp8, at no speed).
    """
    device = torch.device(device)
    requested = canonical_precision(precision)
    name, reason = _fallback(requested, device, fp8_emulate)
    if name != requested:
        warnings.warn(
            f"precision {requested!r} requested but {reason}; training in {name!r} instead",
            PrecisionFallbackWarning,
            stacklevel=outside_stacklevel(),
        )
    dtypes = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16, "fp8": torch.bfloat16}
    params = {"16-true": torch.float16, "bf16-true": torch.bfloat16}
    return PrecisionPlan(
        requested=requested,
        name=name,
        device_type=device.type,
        autocast_dtype=dtypes.get(name),
        param_dtype=params.get(name),
        scaler_enabled=name == "16-mixed",
        fp8_emulated=name == "fp8" and fp8_emulate,
    )


def _fallback(requested: str, device: torch.device, fp8_emulate: bool) -> tuple[str, str]:
    """The precision that runs on ``device`` in place of ``requested``, and why it differs."""
    if requested in ("16-mixed", "16-true") and device.type != "cuda":
        return "32-true", f"fp16 needs a CUDA device and this run is on {device.type}"
    if requested in ("bf16-mixed", "bf16-true") and not bf16_supported(device):
        return "32-true", f"bf16 is not supported on {device}"
    if requested == "fp8" and not (fp8_emulate or fp8_supported(device)):
        name = "bf16-mixed" if bf16_supported(device) else "32-true"
        return name, (
            f"fp8 needs float8 tensor cores (a GPU of compute capability 8.9 or newer: Ada, "
            f"Hopper) and this run is on {_described(device)}"
        )
    return requested, ""


def _described(device: torch.device) -> str:
    """The device as the fp8 fallback names it: a GPU with its compute capability."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"a {device.type.upper()}" if device.type == "cpu" else str(device)
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"


def compute_effective_precision(
    requested_precision: str,
    use_amp: bool | None,
    cuda_available: bool,
    use_gpu: bool,
    *,
    bf16_available: bool | None = None,
) -> str:
    """The precision a run will use, with the seed code's semantics.

    ``use_amp=None`` keeps ``requested_precision``; ``True`` with CUDA available and
    ``use_gpu`` gives mixed precision (``"bf16-mixed"`` where ``bf16_available``, else
    ``"16-mixed"``); every other case gives ``"32"``. ``bf16_available=None`` asks the
    current CUDA device.
    """
    if use_amp is None:
        return requested_precision
    if use_amp and cuda_available and use_gpu:
        if bf16_available is None:
            bf16_available = bf16_supported(torch.device("cuda"))
        return "bf16-mixed" if bf16_available else "16-mixed"
    return "32"
