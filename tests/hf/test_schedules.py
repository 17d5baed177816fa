"""amptrain's named schedules give transformers' learning rate at every step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from amptrain import TrainConfig
from amptrain.config import SCHEDULE_NAMES
from amptrain.optim import build_schedule

transformers = pytest.importorskip("transformers")

LR = 3e-4


def _rates(schedule: object, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()  # type: ignore[attr-defined]
    return rates


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=LR)


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
@pytest.mark.parametrize(("total", "ratio"), [(7, 0.1), (30, 0.1), (50, 0.25), (12, 0.0)])
def test_every_named_schedule_gives_transformers_rate_at_every_step(
    name: str, total: int, ratio: float
) -> None:
    cfg = TrainConfig(lr_scheduler_type=name, warmup_ratio=ratio, learning_rate=LR)
    ours = _optimizer()
    mine = _rates(build_schedule(ours, cfg, total), ours, total + 3)  # past the end too
    theirs = _optimizer()
    args = transformers.TrainingArguments(output_dir="unused", warmup_steps=ratio, report_to=[])
    reference = transformers.get_scheduler(
        name, theirs, num_warmup_steps=args.get_warmup_steps(total), num_training_steps=total
    )
    assert mine == pytest.approx(_rates(reference, theirs, total + 3), rel=1e-12, abs=1e-18)
    if ratio:  # the warm-up starts from 0, even in a run of under 10 steps
        assert mine[0] == (LR if name == "constant" else 0.0)


def test_cosine_with_a_floor_is_transformers_cosine_with_min_lr() -> None:
    cfg = TrainConfig(lr_scheduler_type="cosine", warmup_ratio=0.2, min_lr_ratio=0.1)
    ours, theirs = _optimizer(), _optimizer()
    reference = transformers.get_scheduler(
        "cosine_with_min_lr", theirs, num_warmup_steps=4, num_training_steps=20,
        scheduler_specific_kwargs={"min_lr_rate": 0.1},
    )  # fmt: skip
    assert _rates(build_schedule(ours, cfg, 20), ours, 22) == pytest.approx(
        _rates(reference, theirs, 22), rel=1e-12
    )


def test_an_unknown_schedule_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"\blr_scheduler_type\b"):
        TrainConfig(lr_scheduler_type="cosine_annealing")


@pytest.mark.parametrize(("given", "used"), [(16, "16-mixed"), ("16", "16-mixed"),
                                             ("bf16", "bf16-mixed"), (32, "32-true")])  # fmt: skip
def test_precision_takes_lightnings_names(given: object, used: str) -> None:
    from amptrain import canonical_precision

    cfg = TrainConfig(precision=given)  # type: ignore[arg-type]
    assert canonical_precision(cfg.precision) == used


def test_a_bool_is_no_precision() -> None:
    with pytest.raises(ValueError, match=r"\bprecision\b"):
        TrainConfig(precision=True)  # type: ignore[arg-type]


def _tokens(rows: int) -> torch.Tensor:
    return torch.randint(1, 20, (rows, 8), generator=torch.Generator().manual_seed(0))


def _lrs(**options: object) -> tuple[object, list[float]]:
    from amptrain import MetricsTracker, TinyGPT, fine_tune

    tracker = MetricsTracker(history_size=100)
    model = TinyGPT(20, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)
    result = fine_tune(model, tracker=tracker, log_every=1, **options)  # type: ignore[arg-type]
    return result, [r["train/lr"] for r in tracker.history if "train/lr" in r]


@pytest.mark.parametrize("epochs", [1, 9])
def test_max_steps_overrides_epochs_and_sets_the_schedules_length(epochs: int) -> None:
    # 4 steps an epoch: 6 steps end inside the second epoch, whatever epochs says
    run = {"lr_scheduler_type": "linear", "warmup_ratio": 0.0, "learning_rate": 1e-3}
    result, lrs = _lrs(train_data=_tokens(16), batch_size=4, epochs=epochs, max_steps=6, **run)
    assert result.steps == 6 and len(result.epochs) == 2  # type: ignore[attr-defined]
    assert lrs == pytest.approx([1e-3 * (6 - s) / 6 for s in range(6)])  # linear to 0 at 6


def test_max_steps_sizes_a_stream_without_length() -> None:
    from torch.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(_tokens(40))

    result, lrs = _lrs(train_data=Stream(), batch_size=4, max_steps=5)
    assert result.steps == 5 and len(lrs) == 5  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "options", "theirs_options"),
    [
        ("cosine_with_restarts", {"lr_cycles": 2}, {"num_cycles": 2}),
        ("cosine_with_restarts", {"lr_cycles": 3}, {"num_cycles": 3}),
        ("polynomial", {"lr_power": 2.0}, {"power": 2.0}),
        ("polynomial", {"lr_power": 0.5}, {"power": 0.5}),
    ],
)
@pytest.mark.parametrize(("total", "warmup", "optimizer_lr"), [(20, 4, LR), (2, 1, LR),
                                                               (20, 4, 10 * LR)])  # fmt: skip
def test_a_schedules_options_and_the_optimizers_own_rate_give_transformers_rate(
    name: str,
    options: dict[str, float],
    theirs_options: dict[str, float],
    total: int,
    warmup: int,
    optimizer_lr: float,
) -> None:
    cfg = TrainConfig(lr_scheduler_type=name, warmup_ratio=warmup / total, learning_rate=LR,
                      **options)  # fmt: skip
    ours = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=optimizer_lr)
    theirs = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=optimizer_lr)
    reference = transformers.get_scheduler(name, theirs, num_warmup_steps=warmup,
                                           num_training_steps=total,
                                           scheduler_specific_kwargs=theirs_options)  # fmt: skip
    mine = _rates(build_schedule(ours, cfg, total), ours, total + 2)
    assert mine == pytest.approx(_rates(reference, theirs, total + 2), rel=1e-12, abs=1e-18)


def test_linear_decay_over_one_step_after_the_warm_up_gives_transformers_rate() -> None:
    cfg = TrainConfig(lr_scheduler_type="linear", warmup_ratio=0.5, learning_rate=LR)
    ours, theirs = _optimizer(), _optimizer()
    reference = transformers.get_scheduler("linear", theirs, num_warmup_steps=1,
                                           num_training_steps=2)  # fmt: skip
    assert _rates(build_schedule(ours, cfg, 2), ours, 3) == pytest.approx(
        _rates(reference, theirs, 3), rel=1e-12, abs=1e-18
    )
