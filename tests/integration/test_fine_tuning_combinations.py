"""The seed reports' failure mode as a test class: test_fine_tuning with every documented
argument combination, each run checked for really training and for every documented key."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch

from amptrain import PrecisionFallbackWarning, TinyGPT, synthetic_token_data, test_fine_tuning
from amptrain.legacy import RESULT_KEYS

pytestmark = pytest.mark.integration

VOCAB, SEQ, EPOCHS = 32, 16, 2
CHANCE = 1 / VOCAB
DATA = {
    "no data": (None, None),
    "train only": ("train", None),
    "train and val": ("train", "val"),
    "val only": (None, "val"),
}


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, d_model=32, n_layers=1, n_heads=2, max_seq_len=SEQ)


def _data(which: str | None, seed: int) -> torch.Tensor | None:
    return synthetic_token_data(48, SEQ, VOCAB, seed=seed) if which else None


def _run(use_amp: bool | None, data: str, **kw: object) -> dict:
    train, val = DATA[data]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = test_fine_tuning(
            _model(),
            {"vocab_size": VOCAB, "max_seq_len": SEQ},
            train_data=_data(train, 0),
            val_data=_data(val, 1),
            n_epochs=EPOCHS,
            learning_rate=3e-3,
            use_amp=use_amp,  # type: ignore[arg-type]
            **kw,
        )
    fallbacks = [w for w in caught if issubclass(w.category, PrecisionFallbackWarning)]
    expected = 1 if use_amp and not torch.cuda.is_available() else 0
    assert len(fallbacks) == expected, [str(w.message) for w in caught]
    return result


def _check(result: dict, data: str) -> None:
    assert set(result) == set(RESULT_KEYS)
    train_losses = result["train_loss_history"]
    assert len(train_losses) == EPOCHS and all(math.isfinite(v) for v in train_losses)
    assert train_losses[-1] < train_losses[0]  # it learns
    assert result["final_train_loss"] == train_losses[-1]
    assert result["tokens_per_second"] > 0 and result["samples_per_second"] > 0
    assert result["wall_time_s"] > 0 and result["train_samples"] > 0
    has_val = DATA[data][1] is not None or DATA[data] == (None, None)
    if has_val:
        assert result["val_samples"] > 0
        assert result["final_val_loss"] == result["val_loss_history"][-1]
        assert result["val_loss_history"][-1] < result["val_loss_history"][0]
        assert result["final_val_accuracy"] > 5 * CHANCE
    else:
        assert result["val_samples"] == 0 and result["final_val_loss"] is None
        assert result["val_loss_history"] == [None] * EPOCHS


class TestEveryArgumentCombination:
    @pytest.mark.parametrize("data", list(DATA))
    @pytest.mark.parametrize("use_amp", [True, False, None])
    def test_trains_and_returns_every_documented_key(self, use_amp: bool | None, data: str) -> None:
        result = _run(use_amp, data)
        _check(result, data)
        mixed = bool(use_amp) and torch.cuda.is_available()
        assert result["amp_enabled"] is mixed
        assert result["precision"] != "32-true" if mixed else result["precision"] == "32-true"
        assert result["vocab_size"] == VOCAB and result["overflow_steps"] == 0

    @pytest.mark.parametrize("use_amp", [True, False, None])
    def test_with_wandb_offline(
        self, use_amp: bool | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import wandb

        wandb.teardown()  # W&B reads WANDB_DIR once per service: start a fresh one
        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.setenv("WANDB_DIR", str(tmp_path))
        result = _run(use_amp, "train and val", use_wandb=True)
        _check(result, "train and val")
        wandb.teardown()
        assert list((tmp_path / "wandb").glob("offline-run-*"))

    def test_the_numbers_are_computed_not_constants(self) -> None:
        slow = _run(None, "train and val")
        fast = test_fine_tuning(
            _model(), {"vocab_size": VOCAB, "max_seq_len": SEQ}, n_epochs=EPOCHS, learning_rate=1e-2
        )
        assert slow["final_train_loss"] != fast["final_train_loss"]
        assert slow["val_loss_history"] != fast["val_loss_history"]
        assert len(set(slow["train_loss_history"])) == EPOCHS
