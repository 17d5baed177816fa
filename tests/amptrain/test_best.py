"""amptrain.best: the best weights by a named validation metric are kept in checkpoint_dir/best
(never rotated away), given back to the model at the end when asked, and carried by a resume;
a metric validation never gives, or no validation data, is refused before the first step."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from amptrain import Callback, TinyGPT, TrainState, fine_tune
from amptrain.best import BUILT_IN, KeepBest, check_metric, load_best
from amptrain.checkpoint import checkpoints

Tokens = Callable[..., torch.Tensor]
Names = Callable[..., bool]
# 2 epochs of 5 steps, a validation before the first step and every 2 steps
RUN = {"epochs": 2, "batch_size": 8, "num_workers": 0, "eval_every": 2, "eval_on_start": True,
       "learning_rate": 3e-3}  # fmt: skip


class _Steps(Callback):
    """Counts the steps a run took."""

    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, state: TrainState) -> None:
        self.steps += 1


def test_the_model_ends_with_the_best_weights_when_asked(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens, same_weights: Any
) -> None:
    # "best" as the highest loss: on a run whose loss falls, that is the untrained model's
    model, untrained = make_model(), make_model()
    result = fine_tune(model, tokens(40), tokens(8, seed=1), **RUN, best_metric="val/loss",
                       best_mode="max", load_best_at_end=True,
                       checkpoint_dir=str(tmp_path))  # fmt: skip
    losses = [e["val/loss"] for e in result.evals]
    assert result.evals[0]["step"] == 0 and losses[0] == max(losses) > losses[-1]
    assert same_weights(model, untrained)  # the weights of step 0, given back
    saved = load_best(tmp_path / "best", torch.device("cpu"))
    assert saved["step"] == 0 and saved["value"] == losses[0]
    # the last checkpoint keeps the last weights (a resume goes on from there)
    last = torch.load(checkpoints(tmp_path)[-1], weights_only=True)["model"]
    assert not torch.equal(last["head.weight"], model.state_dict()["head.weight"])


def test_without_load_best_at_end_the_model_keeps_its_last_weights(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens, same_weights: Any
) -> None:
    model = make_model()
    fine_tune(model, tokens(40), tokens(8, seed=1), **RUN, best_metric="val/loss",
              checkpoint_dir=str(tmp_path))  # fmt: skip
    last = torch.load(checkpoints(tmp_path)[-1], weights_only=True)["model"]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in last.items())
    best = load_best(tmp_path / "best", torch.device("cpu"))
    assert best["metric"] == "val/loss" and best["step"] == 10  # the loss fell to the end


def test_the_best_is_never_rotated_away(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    fine_tune(make_model(), tokens(40), tokens(8, seed=1), **RUN, best_metric="loss",
              best_mode="max", checkpoint_dir=str(tmp_path), checkpoint_every=1,
              keep_checkpoints=1)  # fmt: skip
    assert [p.name for p in checkpoints(tmp_path)] == ["step-00000010.pt"]
    assert load_best(tmp_path / "best", torch.device("cpu"))["step"] == 0


def test_a_metric_validation_never_gives_is_refused_before_the_first_step(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens, names: Names
) -> None:
    steps = _Steps()
    args = {**RUN, "checkpoint_dir": str(tmp_path), "callbacks": [steps]}
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), tokens(8, seed=1), best_metric="val/bleu", **args)
    assert names(str(raised.value), "val/bleu", "compute_metrics")
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), best_metric="val/loss", **args)
    assert names(str(raised.value), "val_data")
    assert steps.steps == 0


@pytest.mark.parametrize("on_start", [True, False])
def test_a_compute_metrics_key_that_is_missing_is_found_before_the_first_step(
    on_start: bool,
    tmp_path: Path,
    make_model: Callable[..., TinyGPT],
    tokens: Tokens,
    names: Names,
) -> None:
    steps = _Steps()
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), tokens(8, seed=1), **{**RUN, "eval_on_start": on_start},
                  callbacks=[steps], compute_metrics=lambda p: {"rows": len(p.label_ids)},
                  best_metric="val/bleu", checkpoint_dir=str(tmp_path))  # fmt: skip
    assert names(str(raised.value), "val/bleu", "val/rows")
    assert steps.steps == 0


def test_a_compute_metrics_key_chooses_the_best(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens, same_weights: Any
) -> None:
    calls = iter(range(100))  # a figure that only grows: the lowest is the first validation's
    model, untrained = make_model(), make_model()
    result = fine_tune(model, tokens(40), tokens(8, seed=1), **RUN,
                       compute_metrics=lambda p: {"calls": next(calls)}, best_metric="calls",
                       load_best_at_end=True, checkpoint_dir=str(tmp_path))  # fmt: skip
    assert [e["val/calls"] for e in result.evals] == list(range(len(result.evals)))
    assert same_weights(model, untrained)


@pytest.mark.slow
def test_a_resumed_run_keeps_the_best_of_the_whole_run(
    resume_pair: Callable[..., Any], tmp_path: Path, same_weights: Any
) -> None:
    # "best" as the highest loss: the first validation (step 3), before the crash at 14
    full, resumed, whole, again = resume_pair(
        best_metric="val/loss", best_mode="max", load_best_at_end=True
    )
    assert full.evals == resumed.evals
    assert same_weights(whole, again)
    for run in ("a", "b"):
        assert load_best(tmp_path / run / "best", torch.device("cpu"))["step"] == 3


def test_a_resume_under_another_best_metric_is_refused(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens, names: Names
) -> None:
    args = {**RUN, "checkpoint_dir": str(tmp_path), "best_metric": "val/loss"}
    fine_tune(make_model(), tokens(40), tokens(8, seed=1), **args)
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), tokens(8, seed=1), **args, best_mode="max",
                  resume_from="latest")  # fmt: skip
    assert names(str(raised.value), "best_metric", "best_mode")


class _Saving(TinyGPT):
    """A model with its own format: ``save_pretrained`` writes the weights' sum, and fails
    half-way through its file when ``fail`` is set (a full disk, a kill)."""

    fail = False

    def save_pretrained(self, folder: Path, safe_serialization: bool = True) -> None:
        total = float(sum(p.detach().sum() for p in self.parameters()))
        with open(Path(folder) / "model.txt", "w") as f:
            f.write(str(total)[:3])
            if self.fail:
                raise OSError(28, "No space left on device")
            f.write(str(total)[3:])


@pytest.fixture
def saving(tmp_path: Path) -> tuple[_Saving, Path, KeepBest]:
    """A model with its own format, its best folder, and the callback keeping its best there,
    which has kept the first validation's weights (step 1, loss 2.0)."""
    model = _Saving(vocab_size=64, d_model=32, n_layers=1, n_heads=2, max_seq_len=8)
    keep = KeepBest(model, tmp_path / "best", "val/loss")
    keep.on_eval_end(TrainState(step=1), {"val/loss": 2.0})
    return model, tmp_path / "best", keep


def _agree(folder: Path, model: TinyGPT) -> None:
    """The best folder's weights and the model's own file are of one and the same moment."""
    saved = load_best(folder, torch.device("cpu"))["model"]
    model.load_state_dict(saved)
    total = float(sum(p.detach().sum() for p in model.parameters()))
    assert float((folder / "model.txt").read_text()) == total


def test_a_write_that_fails_half_way_leaves_the_previous_best_whole(
    tmp_path: Path, saving: tuple[_Saving, Path, KeepBest]
) -> None:
    model, folder, keep = saving
    first = load_best(folder, torch.device("cpu"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model.fail = True
    with pytest.raises(OSError):
        keep.on_eval_end(TrainState(step=2), {"val/loss": 1.0})
    assert load_best(folder, torch.device("cpu"))["step"] == first["step"] == 1
    _agree(folder, model)
    model.fail = False  # the next improvement clears what the failed one left
    keep.on_eval_end(TrainState(step=3), {"val/loss": 0.5})
    assert load_best(folder, torch.device("cpu"))["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    _agree(folder, model)


def test_a_kill_between_the_renames_leaves_the_best_readable(
    tmp_path: Path, saving: tuple[_Saving, Path, KeepBest]
) -> None:
    model, folder, keep = saving
    os.replace(folder, tmp_path / "best.previous")  # what a kill after the first rename leaves
    assert load_best(folder, torch.device("cpu"))["step"] == 1
    keep.on_eval_end(TrainState(step=2), {"val/loss": 1.0})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    _agree(folder, model)


def test_a_resume_from_an_older_checkpoint_keeps_the_better_best_on_disk(
    saving: tuple[_Saving, Path, KeepBest],
) -> None:
    model, folder, keep = saving
    checkpointed = keep.state_dict()  # a checkpoint written when the best was 2.0
    keep.on_eval_end(TrainState(step=4), {"val/loss": 0.5})  # a better one, on disk; a kill
    resumed = KeepBest(model, folder, "val/loss")
    resumed.load_state_dict(checkpointed)
    resumed.on_eval_end(TrainState(step=6), {"val/loss": 0.7})  # worse than the kept 0.5
    assert load_best(folder, torch.device("cpu"))["value"] == 0.5


@pytest.mark.slow
def test_a_resume_into_another_checkpoint_dir_keeps_its_own_best(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    run = {**RUN, "best_metric": "loss", "best_mode": "max", "load_best_at_end": True}
    fine_tune(make_model(), tokens(40), tokens(8, seed=1), **run,
              checkpoint_dir=str(tmp_path / "a"), checkpoint_every=2)  # fmt: skip
    step6 = next(p for p in checkpoints(tmp_path / "a") if p.name == "step-00000006.pt")
    model = make_model()
    result = fine_tune(model, tokens(40), tokens(8, seed=1), **run,
                       checkpoint_dir=str(tmp_path / "b"), resume_from=str(step6))  # fmt: skip
    best = load_best(tmp_path / "b" / "best", torch.device("cpu"))
    assert result.steps == 10 and best["step"] > 6  # the resumed part's best, given back
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in best["model"].items())


def _keep(tmp_path: Path, model: TinyGPT, **options: Any) -> KeepBest:
    return KeepBest(model, tmp_path / "best", "val/loss", **options)


def _shift(model: TinyGPT, by: float) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(by)


def test_the_folder_a_finished_swap_left_beside_its_old_copy_is_the_one_read(
    tmp_path: Path, saving: tuple[_Saving, Path, KeepBest]
) -> None:
    # a kill after the second rename, before the old copy is deleted: both folders are there
    _, folder, keep = saving
    (tmp_path / "best.previous").mkdir()
    torch.save({"metric": "val/loss", "value": 9.0, "step": 0, "model": {}},
               tmp_path / "best.previous" / "weights.pt")  # fmt: skip
    assert load_best(folder, torch.device("cpu"))["step"] == 1
    keep.on_eval_end(TrainState(step=2), {"val/loss": 1.0})  # the next write clears it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    assert load_best(folder, torch.device("cpu"))["step"] == 2


def test_what_a_killed_write_left_in_the_staging_folder_never_reaches_the_best(
    tmp_path: Path, saving: tuple[_Saving, Path, KeepBest]
) -> None:
    _, folder, keep = saving
    (tmp_path / "best.partial").mkdir()
    (tmp_path / "best.partial" / "stale.bin").write_text("half a file")
    keep.on_eval_end(TrainState(step=2), {"val/loss": 1.0})
    assert sorted(p.name for p in folder.iterdir()) == ["model.txt", "weights.pt"]


def test_the_best_weights_load_onto_the_device_asked_for(
    saving: tuple[_Saving, Path, KeepBest],
) -> None:
    _, folder, _ = saving
    saved = load_best(folder, torch.device("meta"))
    assert {t.device.type for t in saved["model"].values()} == {"meta"}


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ({"metric": "val/loss", "value": 1.0, "step": 1}, "no weights"),
        ([1, 2, 3], "not a record"),
        ({"model": {}, "code": Path("a pickled object")}, "not weights only"),
    ],
)
def test_a_file_that_is_not_amptrains_best_weights_is_refused_by_name(
    tmp_path: Path, content: Any, why: str
) -> None:
    (tmp_path / "best").mkdir()
    torch.save(content, tmp_path / "best" / "weights.pt")
    with pytest.raises(ValueError) as raised:
        load_best(tmp_path / "best", torch.device("cpu"))
    assert str(tmp_path / "best" / "weights.pt") in str(raised.value), why


def test_a_folder_with_no_weights_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as raised:
        load_best(tmp_path / "best", torch.device("cpu"))
    assert str(tmp_path / "best" / "weights.pt") in str(raised.value)


@pytest.mark.parametrize("mode", ["min", "max"])
def test_of_equal_values_the_first_stays_the_best_in_either_mode(
    tmp_path: Path, model: TinyGPT, mode: str
) -> None:
    keep = _keep(tmp_path, model, mode=mode)
    keep.on_eval_end(TrainState(step=1), {"val/loss": 2.0})
    keep.on_eval_end(TrainState(step=2), {"val/loss": 2.0})
    assert load_best(tmp_path / "best", torch.device("cpu"))["step"] == keep.best_step == 1


@pytest.mark.parametrize(("mode", "values", "kept"), [("min", [3.0, 1.0, 2.0], 2),
                                                      ("max", [1.0, 3.0, 2.0], 2)])  # fmt: skip
def test_each_mode_keeps_its_own_best(
    tmp_path: Path, model: TinyGPT, mode: str, values: list[float], kept: int
) -> None:
    keep = _keep(tmp_path, model, mode=mode)
    for step, value in enumerate(values, start=1):
        keep.on_eval_end(TrainState(step=step), {"val/loss": value})
    assert load_best(tmp_path / "best", torch.device("cpu"))["step"] == kept


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("on_disk", ["nothing", "another metric's"])
def test_a_resume_with_no_best_of_its_metric_on_disk_keeps_the_first_value(
    tmp_path: Path, model: TinyGPT, mode: str, on_disk: str
) -> None:
    if on_disk != "nothing":
        other = KeepBest(model, tmp_path / "best", "val/accuracy", mode=mode)
        other.on_eval_end(TrainState(step=1), {"val/accuracy": 0.5})
    keep = _keep(tmp_path, model, mode=mode)
    keep.load_state_dict({"metric": "val/loss", "mode": mode, "best": 0.0, "best_step": 1})
    assert keep.best_step is None
    keep.on_eval_end(TrainState(step=4), {"val/loss": -1e30 if mode == "max" else 1e30})
    saved = load_best(tmp_path / "best", torch.device("cpu"))
    assert (saved["metric"], saved["step"]) == ("val/loss", 4)


def test_the_checkpoint_records_the_metric_its_mode_and_the_best_so_far(
    tmp_path: Path, model: TinyGPT
) -> None:
    keep = _keep(tmp_path, model, mode="max")
    assert keep.state_dict() == {"metric": "val/loss", "mode": "max", "best": -math.inf,
                                 "best_step": None}  # fmt: skip
    keep.on_eval_end(TrainState(step=3), {"val/loss": 1.5})
    assert keep.state_dict() == {"metric": "val/loss", "mode": "max", "best": 1.5,
                                 "best_step": 3}  # fmt: skip


@pytest.mark.parametrize("restore", [None, False])
def test_by_default_and_when_not_asked_the_model_keeps_its_last_weights(
    tmp_path: Path, model: TinyGPT, weights: Any, restore: bool | None
) -> None:
    keep = _keep(tmp_path, model) if restore is None else _keep(tmp_path, model, restore=restore)
    keep.on_eval_end(TrainState(step=1), {"val/loss": 1.0})
    _shift(model, 1.0)
    last = weights(model)
    keep.on_train_end(TrainState(step=2))
    assert all(torch.equal(a, b) for a, b in zip(weights(model), last, strict=True))


def test_a_run_that_never_improved_keeps_its_last_weights_when_restoring(
    tmp_path: Path, model: TinyGPT, weights: Any
) -> None:
    keep = _keep(tmp_path, model, restore=True)
    keep.on_eval_end(TrainState(step=1), {"val/loss": math.nan})
    last = weights(model)
    keep.on_train_end(TrainState(step=2))  # no weights were kept: nothing to give back
    assert all(torch.equal(a, b) for a, b in zip(weights(model), last, strict=True))
    assert not (tmp_path / "best").exists()


class _OldSaving(TinyGPT):
    """A model whose ``save_pretrained`` writes a pickle unless asked for safetensors (as
    transformers did before 4.35)."""

    def save_pretrained(self, folder: Path, safe_serialization: bool = False) -> None:
        name = "model.safetensors" if safe_serialization is True else "pytorch_model.bin"
        (Path(folder) / name).write_text("weights")


def test_the_models_own_format_is_asked_for_as_safetensors(tmp_path: Path) -> None:
    model = _OldSaving(vocab_size=16, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)
    _keep(tmp_path, model).on_eval_end(TrainState(step=1), {"val/loss": 1.0})
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == [
        "model.safetensors", "weights.pt"]  # fmt: skip


def test_a_best_metric_is_checked_before_the_first_step(names: Names) -> None:
    check_metric(None, extra=False, has_validation=False)  # none asked: nothing to check
    for key in BUILT_IN:
        check_metric(key, extra=False, has_validation=True)
    check_metric("val/bleu", extra=True, has_validation=True)  # compute_metrics may give it
    with pytest.raises(ValueError) as raised:
        check_metric("val/loss", extra=True, has_validation=False)
    assert names(str(raised.value), "best_metric='val/loss'", "val_data")
    with pytest.raises(ValueError) as raised:
        check_metric("val/bleu", extra=False, has_validation=True)
    # the keys there are, and how compute_metrics's keys are named
    assert names(str(raised.value), "best_metric='val/bleu'", *BUILT_IN, "val/<its key>")
