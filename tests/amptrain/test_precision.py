from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

from amptrain import (
    PRECISIONS,
    PrecisionFallbackWarning,
    canonical_precision,
    compute_effective_precision,
    fine_tune,
    resolve_precision,
)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("32", "32-true"),
        (32, "32-true"),
        ("32-true", "32-true"),
        ("16", "16-mixed"),
        (16, "16-mixed"),
        ("16-mixed", "16-mixed"),
        ("bf16", "bf16-mixed"),
        ("bf16-mixed", "bf16-mixed"),
        ("16-true", "16-true"),
        ("bf16-true", "bf16-true"),
        (" BF16 ", "bf16-mixed"),
        ("fp8", "fp8"),
        ("FP8", "fp8"),
    ],
)
def test_canonical_names(given: object, expected: str) -> None:
    assert canonical_precision(given) == expected


@pytest.mark.parametrize("bad", ["8", "fp4", "", "64-true"])
def test_unknown_precision_is_an_error_that_lists_the_names(bad: str) -> None:
    with pytest.raises(ValueError, match="bf16-mixed"):
        canonical_precision(bad)


def test_fp32_on_cpu_has_no_autocast_and_a_disabled_scaler() -> None:
    plan = resolve_precision("32-true", "cpu")
    assert plan.autocast_dtype is None and not plan.is_mixed
    assert not plan.grad_scaler().is_enabled()
    with plan.autocast():
        assert not torch.is_autocast_enabled("cpu")


def test_bf16_mixed_on_cpu_runs_matmuls_in_bf16() -> None:
    plan = resolve_precision("bf16", "cpu")
    assert plan.name == "bf16-mixed" and not plan.fell_back
    a = torch.randn(4, 4)
    with plan.autocast():
        assert (a @ a).dtype == torch.bfloat16
    assert (a @ a).dtype == torch.float32
    assert not plan.grad_scaler().is_enabled()


@pytest.mark.parametrize("requested", ["16-mixed", "16-true", "16"])
def test_fp16_without_cuda_falls_back_to_fp32_with_one_warning(requested: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = resolve_precision(requested, "cpu")
    assert [type(w.message) for w in caught] == [PrecisionFallbackWarning]
    assert "fp16 needs a CUDA device" in str(caught[0].message)
    assert plan.name == "32-true" and plan.fell_back
    assert plan.requested == canonical_precision(requested)


def test_bf16_true_on_cpu_keeps_parameters_in_bf16() -> None:
    plan = resolve_precision("bf16-true", "cpu")
    assert plan.param_dtype == torch.bfloat16 and plan.autocast_dtype is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fp16_mixed_on_cuda_enables_the_scaler() -> None:
    plan = resolve_precision("16-mixed", "cuda")
    assert plan.scaler_enabled and plan.grad_scaler().is_enabled()


def _expected(requested: str, use_amp: bool | None, cuda: bool, gpu: bool, bf16: bool) -> str:
    if use_amp is None:
        return requested
    if use_amp and cuda and gpu:
        return "bf16-mixed" if bf16 else "16-mixed"
    return "32"


@pytest.mark.parametrize(
    ("requested", "use_amp", "cuda", "gpu", "bf16"),
    list(
        itertools.product(
            ["32", "16-mixed", "bf16-mixed"],
            [None, True, False],
            [True, False],
            [True, False],
            [True, False],
        )
    ),
)
def test_effective_precision_every_combination(
    requested: str, use_amp: bool | None, cuda: bool, gpu: bool, bf16: bool
) -> None:
    got = compute_effective_precision(requested, use_amp, cuda, gpu, bf16_available=bf16)
    assert got == _expected(requested, use_amp, cuda, gpu, bf16)


def test_every_precision_name_resolves_on_cpu() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecisionFallbackWarning)
        names = {resolve_precision(p, "cpu").name for p in PRECISIONS}
    assert names == {"32-true", "bf16-mixed", "bf16-true"}


# --- CUDA paths, resolved on a machine without CUDA ------------------------------------------
# Resolving a precision only asks torch.cuda two questions; answering them here covers what a
# GPU would take (the cuda-marked tests run the real thing where there is one).


def _cuda(monkeypatch: pytest.MonkeyPatch, *, available: bool, bf16: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)


@pytest.mark.parametrize(
    ("precision", "autocast", "params", "scaler"),
    [
        ("32-true", None, None, False),
        ("16-mixed", torch.float16, None, True),
        ("bf16-mixed", torch.bfloat16, None, False),
        ("16-true", None, torch.float16, False),
        ("bf16-true", None, torch.bfloat16, False),
    ],
)
def test_every_precision_runs_as_asked_on_a_gpu_with_bf16(
    monkeypatch: pytest.MonkeyPatch,
    precision: str,
    autocast: torch.dtype | None,
    params: torch.dtype | None,
    scaler: bool,
) -> None:
    _cuda(monkeypatch, available=True, bf16=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = resolve_precision(precision, "cuda")
    assert (plan.name, plan.autocast_dtype, plan.param_dtype, plan.scaler_enabled) == (
        precision,
        autocast,
        params,
        scaler,
    )


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_bf16_falls_back_on_a_gpu_without_it(
    monkeypatch: pytest.MonkeyPatch, precision: str
) -> None:
    _cuda(monkeypatch, available=True, bf16=False)  # a GPU older than Ampere
    with pytest.warns(PrecisionFallbackWarning, match="bf16 is not supported on cuda"):
        plan = resolve_precision(precision, "cuda")
    assert plan.name == "32-true" and plan.autocast_dtype is None and plan.param_dtype is None


def test_bf16_needs_cuda_itself_not_only_a_bf16_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    _cuda(monkeypatch, available=False, bf16=True)
    with pytest.warns(PrecisionFallbackWarning):
        assert resolve_precision("bf16-mixed", "cuda").name == "32-true"


@pytest.mark.parametrize(("bf16", "expected"), [(True, "bf16-mixed"), (False, "16-mixed")])
def test_use_amp_asks_the_gpu_whether_it_has_bf16(
    monkeypatch: pytest.MonkeyPatch, bf16: bool, expected: str
) -> None:
    _cuda(monkeypatch, available=True, bf16=bf16)
    assert compute_effective_precision("32", True, cuda_available=True, use_gpu=True) == expected


def test_the_unknown_precision_message_lists_the_names() -> None:
    with pytest.raises(ValueError, match="use one of: 16, 16-mixed, 16-true, 32, 32-true, bf16"):
        canonical_precision("fp4")


def test_the_fallback_warning_points_at_the_callers_line(
    model: nn.Module, tokens: Callable[..., torch.Tensor]
) -> None:
    with pytest.warns(PrecisionFallbackWarning) as caught:
        fine_tune(model, tokens(8), epochs=1, precision="16-mixed")
    fallback = [w for w in caught if issubclass(w.category, PrecisionFallbackWarning)]
    assert [w.filename for w in fallback] == [__file__]


def test_the_cpu_scaler_is_a_cpu_scaler() -> None:
    from amptrain.precision import PrecisionPlan

    plan = PrecisionPlan("16-mixed", "16-mixed", "cpu", None, None, scaler_enabled=True)
    scaler = plan.grad_scaler()
    assert scaler.is_enabled() and scaler._device == "cpu"
