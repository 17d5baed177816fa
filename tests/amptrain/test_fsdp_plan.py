"""amptrain.fsdp in one process: the strategy a run takes, the blocks sharded one by one, the
precision plan as FSDP's policy, and the refusals; sharding itself runs under torchrun
(tests/integration/test_fsdp.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from amptrain import TinyGPT, fine_tune
from amptrain.distributed import World
from amptrain.fsdp import (
    blocks,
    check_strategy,
    full_state_dict,
    local_bytes,
    mixed_precision,
)
from amptrain.model import _Block
from amptrain.precision import resolve_precision


def test_under_torchrun_ddp_is_the_default_and_one_process_has_no_strategy() -> None:
    two = World(rank=0, size=2)
    assert check_strategy(None, two) == "ddp" and check_strategy("fsdp", two) == "fsdp"
    assert check_strategy(None, World()) is None and check_strategy("ddp", World()) is None


def test_fsdp_in_one_process_says_to_launch_it_with_torchrun(model: TinyGPT) -> None:
    with pytest.raises(ValueError, match=r"strategy='fsdp'.*torchrun --nproc_per_node=N"):
        fine_tune(model, torch.zeros(8, 12, dtype=torch.long), strategy="fsdp", num_workers=0)


def test_tinygpts_blocks_are_found_innermost_first(make_model: type) -> None:
    net = make_model(n_layers=3)
    found = blocks(net, None)
    assert found == list(net.blocks)[::-1] and all(isinstance(b, _Block) for b in found)


class _Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.outer = nn.Linear(4, 4)


def test_auto_wrap_takes_classes_or_their_names_inside_out() -> None:
    net = _Pair()
    assert blocks(net, [nn.Linear]) == [net.outer, net.inner[0]]
    assert blocks(net, ["Sequential", "Linear"]) == [net.outer, net.inner[0], net.inner]


def test_a_model_without_blocks_is_told_to_name_them() -> None:
    with pytest.raises(ValueError, match=r"no block in _Pair.*auto_wrap=\[YourBlock\]"):
        blocks(_Pair(), None)
    with pytest.raises(ValueError, match="auto_wrap names Conv2d, which _Pair does not contain"):
        blocks(_Pair(), [nn.Linear, nn.Conv2d])


@pytest.mark.parametrize(
    ("precision", "param", "reduce"),
    [
        ("32-true", None, None),
        ("bf16-mixed", torch.bfloat16, torch.float32),
        ("bf16-true", None, None),  # the model itself is bf16: nothing to cast
    ],
)
def test_the_precision_plan_maps_onto_fsdps_policy(
    precision: str, param: torch.dtype | None, reduce: torch.dtype | None
) -> None:
    policy = mixed_precision(resolve_precision(precision, "cpu"))
    assert (policy.param_dtype, policy.reduce_dtype) == (param, reduce)


def test_fp16_mixed_gathers_fp16_and_reduces_fp32() -> None:
    from amptrain.precision import PrecisionPlan

    plan = PrecisionPlan("16-mixed", "16-mixed", "cuda", torch.float16, None, True)
    policy = mixed_precision(plan)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.float16, torch.float32)


def test_a_model_that_is_not_sharded_gives_its_own_weights_on_the_cpu(model: TinyGPT) -> None:
    weights = full_state_dict(model)
    assert weights.keys() == model.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def test_local_bytes_of_plain_tensors_are_their_whole_size() -> None:
    assert local_bytes([torch.zeros(3, 4), torch.zeros(2, dtype=torch.bfloat16)]) == 48 + 4
