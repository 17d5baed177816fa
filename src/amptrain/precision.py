"""Precision: one setting, resolved once into an autocast context and a gradient scaler.

The training loop never branches on precision. It asks a :class:`PrecisionPlan` for a
context (a no-op or an autocast) and a scaler (always present, enabled only for fp16).
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
}
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")


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


@dataclass(frozen=True)
class PrecisionPlan:
    """The precision actually used on a device, and the objects that implement it."""

    requested: str
    name: str
    device_type: str
    autocast_dtype: torch.dtype | None
    param_dtype: torch.dtype | None
    scaler_enabled: bool

    @property
    def is_mixed(self) -> bool:
        """True when an autocast context is active (``16-mixed`` or ``bf16-mixed``)."""
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


def resolve_precision(precision: str | int, device: torch.device | str) -> PrecisionPlan:
    """Choose the precision to use on ``device``, warning once when it must fall back.

    fp16 (mixed or true) needs CUDA; without it, fp32 is used. bf16 needs CPU autocast or an
    Ampere-or-newer GPU; without it, fp32 is used.
    """
    device = torch.device(device)
    requested = canonical_precision(precision)
    name = requested
    reason = ""
    if requested in ("16-mixed", "16-true") and device.type != "cuda":
        name, reason = "32-true", f"fp16 needs a CUDA device and this run is on {device.type}"
    elif requested in ("bf16-mixed", "bf16-true") and not bf16_supported(device):
        name, reason = "32-true", f"bf16 is not supported on {device}"
    if name != requested:
        warnings.warn(
            f"precision {requested!r} requested but {reason}; training in {name!r} instead",
            PrecisionFallbackWarning,
            stacklevel=outside_stacklevel(),
        )
    dtypes = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}
    params = {"16-true": torch.float16, "bf16-true": torch.bfloat16}
    return PrecisionPlan(
        requested=requested,
        name=name,
        device_type=device.type,
        autocast_dtype=dtypes.get(name),
        param_dtype=params.get(name),
        scaler_enabled=name == "16-mixed",
    )


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
