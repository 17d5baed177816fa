"""SavePretrained: the run's end and its best validation saved in the model's own format, and
from_pretrained gives back the same logits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from amptrain import TinyGPT, evaluate, fine_tune, make_dataloader, resolve_precision
from amptrain.pretrained import SavePretrained

from .conftest import MODELS, encode, transformers


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(ids).logits


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
