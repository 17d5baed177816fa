"""GPT-2, Llama and a BERT-style decoder from transformers, built from small configs, train on
the shipped text; amptrain and transformers.Trainer, given the same data, optimizer and
schedule, end with the same weights and validation loss."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from amptrain import evaluate, fine_tune, make_dataloader, resolve_precision

from .conftest import MODELS, VOCAB, bert, encode, gpt2, transformers

datasets = pytest.importorskip("datasets")
CPU = torch.device("cpu")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_model_learns_the_text(name: str, tokenizer: Any) -> None:
    rows = encode(tokenizer, 16)
    result = fine_tune(MODELS[name](), rows, rows, tokenizer=tokenizer, epochs=4, batch_size=4,
                       learning_rate=3e-3, precision="bf16")  # fmt: skip
    losses = result.val_loss_history
    assert result.precision == "bf16-mixed" and losses == sorted(losses, reverse=True)
    assert losses[-1] < math.log(VOCAB) - 0.5  # well under a uniform guess over the vocabulary


def test_token_type_ids_reach_a_bert_style_model(tokenizer: Any) -> None:
    model = bert()
    plan = resolve_precision("32-true", CPU)
    rows = [dict(r, token_type_ids=[1] * len(r["input_ids"])) for r in _rows(tokenizer, 8)]
    with_types = make_dataloader(rows, batch_size=8, shuffle=False, device=CPU)
    without = make_dataloader(_rows(tokenizer, 8), batch_size=8, shuffle=False, device=CPU)
    # type 1's embedding row differs from type 0's: the loss moves only if the field arrives
    assert evaluate(model, with_types, plan, CPU)["loss"] != pytest.approx(
        evaluate(model, without, plan, CPU)["loss"], abs=1e-4
    )


def _rows(tokenizer: Any, count: int) -> list[dict[str, list[int]]]:
    encoding = encode(tokenizer, count, max_length=24)
    return [{"input_ids": ids} for ids in encoding["input_ids"]]


# the same run both ways: every row in one batch (the order inside it does not matter), AdamW
# with decay on matrices, linear schedule with warm-up, clipping at 1.0, fp32
ROWS, EPOCHS, LR, DECAY, WARMUP = 8, 5, 2e-3, 0.01, 0.2


def _with_trainer(tokenizer: Any, out: Path) -> tuple[torch.nn.Module, float]:
    model = gpt2()
    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=ROWS, per_device_eval_batch_size=ROWS,
        num_train_epochs=EPOCHS, learning_rate=LR, weight_decay=DECAY, warmup_steps=WARMUP,
        lr_scheduler_type="linear", max_grad_norm=1.0, optim="adamw_torch_fused", use_cpu=True,
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, seed=0,
    )  # fmt: skip
    data = datasets.Dataset.from_list(_rows(tokenizer, ROWS))
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data, eval_dataset=data,
        data_collator=transformers.DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )  # fmt: skip
    trainer.train()
    return model, trainer.evaluate()["eval_loss"]


@pytest.mark.slow
def test_amptrain_and_the_trainer_end_with_the_same_weights(tokenizer: Any, tmp_path: Path) -> None:
    theirs, their_loss = _with_trainer(tokenizer, tmp_path)
    ours = gpt2()
    rows = _rows(tokenizer, ROWS)
    result = fine_tune(ours, rows, rows, tokenizer=tokenizer, batch_size=ROWS, epochs=EPOCHS,
                       learning_rate=LR, weight_decay=DECAY, warmup_ratio=WARMUP,
                       lr_scheduler_type="linear", max_grad_norm=1.0)  # fmt: skip
    assert result.steps == EPOCHS
    mine = dict(ours.named_parameters())
    for name, weight in theirs.named_parameters():
        assert torch.allclose(mine[name], weight, atol=1e-5, rtol=0), name
    assert result.val_loss_history[-1] == pytest.approx(their_loss, abs=1e-5)
