"""amptrain.predictions: compute_metrics sees the whole validation set's logits and labels once
per pass, as the Trainer hands them over; its floats join the validation record and the sinks,
and a value that is not a finite float is an error naming its key."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from amptrain import TinyGPT, fine_tune, make_dataloader, resolve_precision
from amptrain.best import load_best
from amptrain.distributed import World
from amptrain.predictions import Collected, EvalPrediction, checked_metrics, given_keys, scores

Tokens = Callable[..., torch.Tensor]
Names = Callable[..., bool]
CPU = torch.device("cpu")
RUN = {"epochs": 1, "batch_size": 4, "num_workers": 0, "eval_every": 2}


def accuracy(prediction: EvalPrediction) -> dict[str, float]:
    """Next-token accuracy by hand, the Trainer's way: logits t predict label t + 1."""
    logits, labels = prediction  # it unpacks as transformers' EvalPrediction does
    hits = logits[:, :-1].argmax(-1) == labels[:, 1:]
    scored = labels[:, 1:] != -100
    return {"hand_accuracy": float(hits[scored].mean()), "rows": len(labels)}


def test_compute_metrics_joins_every_validation_record_and_the_sinks(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    val = [row[:n] for row, n in zip(tokens(9, seed=1), [12, 3, 7] * 3, strict=True)]
    result = fine_tune(make_model(), tokens(40), val, **RUN, compute_metrics=accuracy,
                       jsonl_path=str(tmp_path / "log.jsonl"))  # fmt: skip
    assert len(result.evals) == 5  # steps 2, 4, 6, 8 and the epoch's end
    for record in result.evals:  # the same tokens as amptrain's own accuracy: none lost
        assert record["val/hand_accuracy"] == pytest.approx(record["val/accuracy"], abs=1e-12)
        assert record["val/rows"] == 9.0
    lines = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    logged = [x["val/hand_accuracy"] for x in lines if "val/hand_accuracy" in x]
    assert logged == [e["val/hand_accuracy"] for e in result.evals]


def test_rows_of_unequal_length_are_padded_with_minus_100_in_the_datas_order() -> None:
    collected = Collected()
    logits = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2)
    collected(logits, torch.tensor([[1, 2, 3], [4, 5, -100]]))
    collected(logits[:1, :2], torch.tensor([[6, 7]]))
    # two ranks' rows (rank 0 scored rows 0 and 2, rank 1 row 1): interleaved back
    other = [(np.zeros((1, 2), np.float32), np.array([8]))]
    prediction = collected.prediction(lambda rows: [rows, other])
    assert prediction.label_ids.tolist() == [[1, 2, 3], [8, -100, -100], [4, 5, -100],
                                             [6, 7, -100]]  # fmt: skip
    assert prediction.predictions.shape == (4, 3, 2)
    assert prediction.predictions[3, 2].tolist() == [-100.0, -100.0]
    assert prediction.predictions[3, 1].tolist() == [2.0, 3.0]


@pytest.mark.parametrize(
    "bad",
    [
        {"bleu": "0.5"},
        {"bleu": True},
        {"bleu": torch.tensor(0.5)},
        {"bleu": [0.5]},
        {"loss": 0.5},
    ],
)
def test_a_value_that_is_not_a_float_names_its_key(bad: Mapping[str, Any], names: Names) -> None:
    with pytest.raises(ValueError) as raised:
        checked_metrics(bad, taken=("loss", "perplexity", "accuracy"))
    assert names(str(raised.value), next(iter(bad)))


def test_reals_become_floats_and_a_result_that_is_no_dict_is_refused() -> None:
    result = checked_metrics({"a": np.float32(0.5), "b": 3, "c": np.int64(2)}, taken=())
    assert result == {"a": 0.5, "b": 3.0, "c": 2.0}
    assert all(type(v) is float for v in result.values())
    with pytest.raises(ValueError, match="dict"):
        checked_metrics([("a", 0.5)], taken=())


def test_a_bad_result_stops_the_run_at_its_first_validation(
    make_model: Callable[..., TinyGPT], tokens: Tokens, names: Names
) -> None:
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), tokens(8, seed=1), **RUN,
                  compute_metrics=lambda p: {"bleu": "n/a"})  # fmt: skip
    assert names(str(raised.value), "bleu")


def test_a_nan_metric_is_recorded_and_never_the_best(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    """An undefined metric at one validation (NaN) is recorded, as a NaN loss is; the run
    goes on, and the best is chosen among the defined values."""
    values = iter([0.5, math.nan, 0.9, math.inf, 0.7, 0.6, 0.8])
    result = fine_tune(make_model(), tokens(40), tokens(8, seed=1), **RUN,
                       compute_metrics=lambda p: {"f1": next(values)}, best_metric="val/f1",
                       best_mode="max", checkpoint_dir=str(tmp_path))  # fmt: skip
    seen = [e["val/f1"] for e in result.evals]
    assert result.steps == 10 and any(math.isnan(v) for v in seen)
    assert load_best(tmp_path / "best", torch.device("cpu"))["value"] == 0.9


def test_compute_metrics_without_validation_data_is_refused(
    make_model: Callable[..., TinyGPT], tokens: Tokens, names: Names
) -> None:
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), **RUN, compute_metrics=accuracy)
    assert names(str(raised.value), "compute_metrics", "val_data")


def test_keys_must_be_names_and_the_bad_one_is_named(names: Names) -> None:
    for bad in ({3: 0.5}, {"": 0.5}):
        with pytest.raises(ValueError) as raised:
            checked_metrics(bad, taken=())
        assert names(str(raised.value), repr(next(iter(bad))))


def test_what_is_no_float_or_no_dict_is_named_by_its_type(names: Names) -> None:
    with pytest.raises(ValueError) as raised:
        checked_metrics({"bleu": "0.5"}, taken=())
    assert names(str(raised.value), "bleu", "str")
    with pytest.raises(ValueError) as raised:
        checked_metrics([("a", 0.5)], taken=())
    assert names(str(raised.value), "list")


def test_logits_and_labels_of_different_row_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        Collected()(torch.zeros(2, 3, 4), torch.zeros(3, 3, dtype=torch.long))


def test_one_row_gives_float32_logits_and_int64_labels() -> None:
    collected = Collected()
    collected(torch.ones(1, 2, 5, dtype=torch.float16), torch.tensor([[1, 2]], dtype=torch.int32))
    prediction = collected.prediction(lambda rows: [rows])
    assert prediction.predictions.shape == (1, 2, 5)
    assert prediction.predictions.dtype == np.float32 and prediction.label_ids.dtype == np.int64


def test_a_pass_with_no_row_is_named_as_compute_metrics_own(names: Names) -> None:
    with pytest.raises(ValueError) as raised:
        Collected().prediction(lambda rows: [rows, []])
    assert names(str(raised.value), "compute_metrics")


def _loader(rows: torch.Tensor, batch_size: int) -> Any:
    return make_dataloader(rows, batch_size=batch_size, shuffle=False, device=CPU)


def test_the_keys_are_found_from_the_first_batch_alone(
    model: TinyGPT, tokens: Tokens, names: Names
) -> None:
    seen: list[int] = []

    def metrics(prediction: EvalPrediction) -> dict[str, float]:
        seen.append(len(prediction.label_ids))
        return {"rows": len(prediction.label_ids)}

    plan = resolve_precision("32-true", CPU)
    assert given_keys(model, _loader(tokens(12), 4), plan, CPU, metrics) == ["val/rows"]
    assert seen == [4]
    with pytest.raises(ValueError) as raised:
        given_keys(model, _loader(tokens(12), 4), plan, CPU, lambda p: [("rows", 1.0)])
    assert names(str(raised.value), "list")


@dataclass(frozen=True)
class _TwoRanks(World):
    """Rank 0 of 2, whose peer scored ``peer`` (loss sum, hits, tokens) and no row of logits."""

    rank: int = 0
    size: int = 2
    peer: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor + torch.tensor(self.peer, dtype=tensor.dtype)

    def gather(self, obj: Any) -> list[Any]:
        return [obj, []]


def test_the_validation_record_sums_every_ranks_totals(model: TinyGPT, tokens: Tokens) -> None:
    plan, loader = resolve_precision("32-true", CPU), _loader(tokens(8), 4)
    alone = scores(model, loader, plan, CPU, World(), compute_metrics=None)
    tokens_here = 8 * 11  # 8 rows of 12 ids: 11 scored positions each
    both = scores(model, loader, plan, CPU, _TwoRanks(peer=(0.0, 0.0, tokens_here)),
                  compute_metrics=lambda p: {"rows": len(p.label_ids)})  # fmt: skip
    assert both["loss"] == pytest.approx(alone["loss"] / 2)
    assert both["accuracy"] == pytest.approx(alone["accuracy"] / 2)
    assert both["rows"] == 8.0
