from __future__ import annotations

import itertools
import warnings

import pytest
import torch

from amptrain import (
    PRECISIONS,
    PrecisionFallbackWarning,
    canonical_precision,
    compute_effective_precision,
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
    ],
)
def test_canonical_names(given: object, expected: str) -> None:
    assert canonical_precision(given) == expected


@pytest.mark.parametrize("bad", ["8", "fp8", "", "64-true"])
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
