"""SavePretrained: the run's end and its best validation saved in the model's own format, and
from_pretrained gives back the same logits."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from amptrain import TinyGPT, TrainState, evaluate, fine_tune, make_dataloader, resolve_precision
from amptrain.pretrained import SavePretrained

from .conftest import MODELS, encode, transformers


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_saved_model_reloads_with_identical_logits(
    name: str, tokenizer: Any, tmp_path: Path
) -> None:
    model, rows = MODELS[name](), encode(tokenizer, 8)
    saver = SavePretrained(model, tmp_path / "out", monitor="val/loss")
    fine_tune(model, rows, rows, tokenizer=tokenizer, epochs=2, batch_size=4, callbacks=[saver])
    assert (tmp_path / "out" / "model.safetensors").is_file()
    ids = torch.tensor(rows["input_ids"][0]).unsqueeze(0)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert torch.equal(_logits(loaded, ids), _logits(model, ids))


@pytest.mark.slow
def test_the_best_validation_is_kept_apart(tokenizer: Any, tmp_path: Path) -> None:
    model, rows = MODELS["gpt2"](), encode(tokenizer, 8)
    # "best" as the highest loss: on a run whose loss falls, that is the first evaluation
    saver = SavePretrained(model, tmp_path, monitor="val/loss", mode="max")
    result = fine_tune(model, rows, rows, tokenizer=tokenizer, epochs=3, batch_size=8,
                       learning_rate=3e-3, callbacks=[saver])  # fmt: skip
    losses = result.val_loss_history
    assert losses == sorted(losses, reverse=True)  # it fell: the best is not the last
    assert saver.best == losses[0] and saver.best_step == result.evals[0]["step"]
    best = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "best")
    last = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor(rows["input_ids"][0]).unsqueeze(0)
    assert torch.equal(_logits(last, ids), _logits(model, ids))
    # the best folder holds the weights of that evaluation: they score its loss again
    cpu = torch.device("cpu")
    loader = make_dataloader(rows, batch_size=8, shuffle=False, device=cpu, pad_token_id=0)
    plan = resolve_precision("32-true", cpu)
    assert evaluate(best, loader, plan, cpu)["loss"] == pytest.approx(losses[0], abs=1e-6)
    assert evaluate(last, loader, plan, cpu)["loss"] == pytest.approx(losses[-1], abs=1e-6)


def test_a_model_without_save_pretrained_is_refused() -> None:
    with pytest.raises(TypeError, match=r"\bsave_pretrained\b"):
        SavePretrained(TinyGPT(16), "unused")


@pytest.mark.slow
def test_the_best_weights_are_saved_pretrained_and_given_back(
    tokenizer: Any, tmp_path: Path
) -> None:
    model, untrained, rows = MODELS["gpt2"](), MODELS["gpt2"](), encode(tokenizer, 8)
    # "best" as the highest loss: on a run whose loss falls, the untrained model (step 0)
    result = fine_tune(model, rows, rows, tokenizer=tokenizer, epochs=3, batch_size=8,
                       learning_rate=3e-3, eval_on_start=True, best_metric="val/loss",
                       best_mode="max", load_best_at_end=True,
                       checkpoint_dir=str(tmp_path))  # fmt: skip
    losses = result.val_loss_history
    assert result.evals[0]["step"] == 0 and result.evals[0]["val/loss"] > losses[-1]
    ids = torch.tensor(rows["input_ids"][0]).unsqueeze(0)
    assert torch.equal(_logits(model, ids), _logits(untrained, ids))  # given back
    best = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "best")
    assert (tmp_path / "best" / "model.safetensors").is_file()
    assert torch.equal(_logits(best, ids), _logits(untrained, ids))


class _Saving(TinyGPT):
    """A model whose ``save_pretrained`` writes a pickle unless asked for safetensors (as
    transformers did before 4.35), and counts its saves."""

    saves = 0

    def save_pretrained(self, folder: Path, safe_serialization: bool = False) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        name = "model.safetensors" if safe_serialization is True else "pytorch_model.bin"
        (Path(folder) / name).write_text(str(self.saves))
        self.saves += 1


def _saver(tmp_path: Path, mode: str = "min") -> SavePretrained:
    torch.manual_seed(0)
    model = _Saving(16, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)
    return SavePretrained(model, tmp_path, monitor="val/loss", mode=mode)


def test_safetensors_are_asked_for(tmp_path: Path) -> None:
    _saver(tmp_path).on_train_end(TrainState(step=3))
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]


@pytest.mark.parametrize("mode", ["min", "max"])
def test_of_equal_values_the_first_stays_the_best(tmp_path: Path, mode: str) -> None:
    saver = _saver(tmp_path, mode)
    for step in (1, 2):
        saver.on_eval_end(TrainState(step=step), {"val/loss": 2.0})
    assert saver.best_step == 1 and saver.model.saves == 1


def test_a_resume_keeps_the_best_so_far(tmp_path: Path) -> None:
    saver = _saver(tmp_path)
    assert saver.state_dict() == {"best": math.inf, "best_step": None}
    saver.on_eval_end(TrainState(step=2), {"val/loss": 1.5})
    resumed = _saver(tmp_path)
    resumed.load_state_dict(saver.state_dict())
    resumed.on_eval_end(TrainState(step=4), {"val/loss": 1.7})  # worse: not saved
    assert (resumed.best, resumed.best_step, resumed.model.saves) == (1.5, 2, 0)


def test_a_monitor_the_evaluation_does_not_give_is_named_with_what_it_gives(
    tmp_path: Path,
) -> None:
    with pytest.raises(KeyError) as raised:
        _saver(tmp_path).on_eval_end(TrainState(step=1), {"val/accuracy": 0.5})
    assert "'val/loss'" in str(raised.value) and "'val/accuracy'" in str(raised.value)


def test_a_bad_mode_and_a_model_that_cannot_save_are_named() -> None:
    with pytest.raises(ValueError, match="'maximum'"):
        SavePretrained(_Saving(16), "unused", mode="maximum")
    with pytest.raises(TypeError, match=r"\bTinyGPT\b"):
        SavePretrained(TinyGPT(16), "unused")
