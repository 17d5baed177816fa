"""The CPU detectors, each shown to fire on a planted fault and stay quiet on the clean step."""

from __future__ import annotations

import dataclasses
import gc
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from amptrain import TinyGPT, fine_tune, probes
from amptrain.adapters import MicroBatch, lm_loss
from amptrain.benchmark import PRESETS
from amptrain.benchmark.health import live_growth_pct
from amptrain.benchmark.run import _live_tensors, build_arm, run_arms
from amptrain.config import TrainConfig
from amptrain.engine import StepOutput, TrainStep
from amptrain.metrics import MetricsTracker
from amptrain.optim import build_optimizer
from amptrain.precision import resolve_precision

CPU = torch.device("cpu")
# Three windows, not the preset's five: each window's two scans of every object Python holds
# cost most of a second in a test process, and a leak shows in the first window.
SMOKE = dataclasses.replace(PRESETS["cpu-smoke"], windows=3)


Models = Callable[..., TinyGPT]
Tokens = Callable[..., torch.Tensor]


@pytest.fixture
def warm_step(make_model: Models) -> Callable[..., tuple[TrainStep, torch.Tensor]]:
    """``warm_step(precision)``: a small model's step, and a batch it has trained on once."""

    def make(precision: str = "bf16-mixed") -> tuple[TrainStep, torch.Tensor]:
        model = make_model(vocab=32, seq=8, d_model=16)
        plan = resolve_precision(precision, CPU)
        step = TrainStep(model, build_optimizer(model, TrainConfig(), CPU), plan)
        batch = torch.randint(0, 32, (4, 8))
        step(batch, batch)  # warm-up
        return step, batch

    return make


Warm = Callable[..., tuple[TrainStep, torch.Tensor]]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_training_step_reads_nothing_back_to_the_host(precision: str, warm_step: Warm) -> None:
    step, batch = warm_step(precision)
    result = probes.count_host_reads(lambda: step(batch, batch), 3)
    assert result["count"] == 0, result["locations"]


@pytest.mark.parametrize(
    ("read", "operation"),
    [
        (lambda t: t.item(), "aten._local_scalar_dense"),
        (lambda t: bool(t > 0), "aten._local_scalar_dense"),
        (lambda t: t.tolist(), "Tensor.tolist"),
        (lambda t: t.cpu(), "Tensor.cpu"),
        (lambda t: torch.nonzero(t.reshape(1)), "aten.nonzero"),
    ],
)
def test_each_kind_of_host_read_in_a_step_is_counted_where_it_is(
    read: Any, operation: str, warm_step: Warm
) -> None:
    step, batch = warm_step()

    def planted() -> None:
        read(step(batch, batch).loss)

    with probes.host_reads() as reads:
        for _ in range(2):
            planted()
    assert reads.count == 2 and reads.by_operation[operation] == 2
    (location,) = reads.by_location
    assert location.startswith("tests/amptrain/test_probes.py:")


def test_a_mixed_precision_whose_forward_runs_in_fp32_is_seen(warm_step: Warm) -> None:
    step, batch = warm_step("bf16-mixed")
    plan = step.plan
    expected = probes.expected_matmul_dtype(plan.autocast_dtype, plan.param_dtype)

    assert set(probes.matmul_dtypes(lambda: step(batch, batch))) == {"bfloat16"}
    assert expected == "bfloat16"
    planted = probes.matmul_dtypes(lambda: step.model(batch))  # the autocast forgotten
    assert set(planted) == {"float32"}


def test_fp32_that_runs_in_a_lower_dtype_is_seen(warm_step: Warm) -> None:
    step, batch = warm_step("32-true")
    assert probes.expected_matmul_dtype(None, None) == "float32"
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a stray autocast around an fp32 run
        planted = probes.matmul_dtypes(lambda: step.model(batch))
    assert set(planted) == {"bfloat16"}


@pytest.mark.slow
def test_tensors_kept_with_their_graphs_are_seen(warm_step: Warm) -> None:
    step, batch = warm_step()
    before = probes.live_tensors()
    kept = []
    for _ in range(3):
        with step.plan.autocast():
            kept.append(lm_loss(step.model(batch), batch))  # the graph stays alive
    after = probes.live_tensors()
    assert after["graph_attached"] >= before["graph_attached"] + 3
    kept.clear()
    assert probes.live_tensors()["graph_attached"] == before["graph_attached"]


@pytest.mark.slow
def test_the_benchmark_catches_a_step_that_keeps_its_graph(
    make_model: Models, tokens: Tokens
) -> None:
    base, data = make_model(vocab=32, seq=8, d_model=16), tokens(64, vocab=32, seq=8)
    clean = build_arm("32-true", base, SMOKE, data, CPU)
    leaky = build_arm("bf16-mixed", base, SMOKE, data, CPU)
    hoard: list[torch.Tensor] = []
    model, plan, inner = leaky.model, leaky.plan, leaky.step

    def leaking_step(input_ids: torch.Tensor, labels: torch.Tensor) -> StepOutput:
        with plan.autocast():  # a second forward whose loss (and graph) is kept: a tiny leak
            hoard.append(lm_loss(model(input_ids), labels))
        return inner(input_ids, labels)

    leaky.step = leaking_step
    run_arms([clean, leaky], SMOKE, CPU)
    assert _live_tensors(clean)["graph_attached_added_max"] == 0
    assert _live_tensors(leaky)["graph_attached_added_max"] >= SMOKE.window_steps
    # process RSS is too coarse to see this at this size; the live-tensor count is not
    growth = live_growth_pct(clean.live_bytes_change, _live_tensors(clean)["start_bytes"])
    assert growth is not None and growth < 0.1


class _Watcher(MetricsTracker):
    """Checks, every few steps of a real fine_tune run, that no graph outlives its step."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, float]] = []

    def record_step(self, loss: float, grad_norm: float, **extra: float) -> dict[str, Any]:
        record = super().record_step(loss, grad_norm, **extra)
        if self.step % 8 == 0:
            self.seen.append(probes.live_tensors())
        return record


def _watched_run(model: TinyGPT, data: torch.Tensor) -> list[dict[str, float]]:
    watcher = _Watcher()
    fine_tune(model, data, epochs=2, batch_size=4, num_workers=0, tracker=watcher)
    return watcher.seen


@pytest.fixture
def watched_run(make_model: Models, tokens: Tokens) -> Callable[..., list[dict[str, float]]]:
    """``watched_run(rows=128)``: fine_tune for 2 epochs of batches of 4 rows (64 steps from
    128 rows), the live tensors sampled every 8 steps."""
    model = make_model(vocab=32, seq=16, d_model=16)
    return lambda rows=128: _watched_run(model, tokens(rows, vocab=32, seq=16))


@pytest.mark.slow
def test_many_fine_tune_steps_keep_no_graph_and_no_growing_tensors(
    watched_run: Callable[..., list[dict[str, float]]],
) -> None:
    seen = watched_run()  # counts are process-wide: compared with the run's own first sample
    assert len(seen) == 8 and {s["graph_attached"] for s in seen} == {seen[0]["graph_attached"]}
    assert seen[-1]["bytes"] <= seen[0]["bytes"] * 1.01


@pytest.mark.slow
def test_the_fine_tune_check_fails_on_a_loop_that_keeps_its_losses(
    monkeypatch: pytest.MonkeyPatch, watched_run: Callable[..., list[dict[str, float]]]
) -> None:
    original = TrainStep.run
    kept: list[torch.Tensor] = []

    def keeps_graph(self: TrainStep, micro_batches: list[MicroBatch]) -> StepOutput:
        input_ids, labels, _ = micro_batches[0]
        with self.plan.autocast():
            kept.append(lm_loss(self.model(input_ids), labels))
        return original(self, micro_batches)

    monkeypatch.setattr(TrainStep, "run", keeps_graph)
    seen = watched_run(32)  # 16 steps: two samples, 8 kept graphs apart
    assert len(seen) == 2 and seen[-1]["graph_attached"] > seen[0]["graph_attached"]


@pytest.mark.slow
def test_live_tensors_leaves_fake_tensors_out() -> None:
    """A fake tensor (torch.compile's tracing leaves some in memory) has no storage to count,
    and reading its data pointer warns; the probe counts the real tensors only."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    before = probes.live_tensors()
    with FakeTensorMode():
        fake = torch.empty(1024, 1024)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        after = probes.live_tensors()
    assert after["count"] == before["count"]
    assert after["bytes"] == before["bytes"]
    del fake


@pytest.fixture
def thawed() -> Iterator[None]:
    """The process's objects out of the permanent generation (tests/conftest.py freezes what
    collection made), as in a process that froze none; frozen again after the test."""
    gc.unfreeze()
    yield
    gc.freeze()


@pytest.mark.slow
def test_a_scan_inside_a_run_sees_what_it_made_and_the_tensors_from_before(thawed: None) -> None:
    before = torch.ones(1000)  # 4,000 bytes made before the run
    with probes.scanning_new_objects():
        start = probes.live_tensors()
        assert start["bytes"] >= before.nbytes  # seen, by weak reference
        made = torch.ones(2000)
        assert probes.live_tensors()["bytes"] == start["bytes"] + made.nbytes
        before.resize_(3000)  # one from before that grows in place is still seen growing
        assert probes.live_tensors()["bytes"] == start["bytes"] + made.nbytes + 8000
    assert gc.get_freeze_count() == 0  # the process's objects are as they were
    assert probes.live_tensors()["bytes"] >= before.nbytes + made.nbytes
    assert not probes._FROZEN_TENSORS  # no reference to the run's tensors is kept


def test_objects_the_caller_froze_stay_frozen(thawed: None) -> None:
    kept = [1]  # a container the caller freezes: out of every generation the collector walks

    def frozen() -> bool:
        return all(o is not kept for o in gc.get_objects())

    gc.freeze()
    assert frozen()
    with probes.scanning_new_objects():
        assert frozen()
    assert frozen()
