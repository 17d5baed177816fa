"""amptrain.legacy: the vocabulary test_fine_tuning reads from a config or the model (the
end-to-end runs of test_fine_tuning are the integration stage's, in tests/integration)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from amptrain import (
    PrecisionFallbackWarning,
    TinyGPT,
    detect_vocab_size,
    synthetic_token_data,
    test_fine_tuning,
)
from amptrain.legacy import RESULT_KEYS


def test_the_vocabulary_comes_from_the_config_first_then_the_model(model: TinyGPT) -> None:
    assert detect_vocab_size(model, SimpleNamespace(vocab_size=99)) == 99
    assert detect_vocab_size(model, {"vocab_size": 77}) == 77
    assert detect_vocab_size(model, {"vocab_size": 0}) == model.vocab_size  # no size: the model's
    assert detect_vocab_size(model) == model.vocab_size


def test_a_model_without_an_embedding_and_no_config_size_is_a_clear_error() -> None:
    with pytest.raises(ValueError) as raised:
        detect_vocab_size(nn.Linear(2, 2), {})
    # what would give the size: the config's field, or an embedding in the model
    assert "config.vocab_size" in str(raised.value) and " nn.Embedding" in str(raised.value)


def test_every_result_key_says_what_it_holds() -> None:
    assert "final_val_loss" in RESULT_KEYS and "vocab_size" in RESULT_KEYS
    assert all(isinstance(text, str) and text for text in RESULT_KEYS.values())


def test_a_config_vocabulary_of_one_id_is_taken(model: TinyGPT) -> None:
    assert detect_vocab_size(model, {"vocab_size": 1}) == 1


class _Seen(TinyGPT):
    """A TinyGPT that records the rows it trains on and the rows it is validated on."""

    def __init__(self, vocab: int) -> None:
        torch.manual_seed(0)
        super().__init__(vocab, d_model=8, n_layers=1, n_heads=1, max_seq_len=8)
        self.trained: list[torch.Tensor] = []
        self.validated: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        (self.trained if self.training else self.validated).append(input_ids.detach().clone())
        return super().forward(input_ids)


def _rows(batches: list[torch.Tensor]) -> set[tuple[int, ...]]:
    return {tuple(row.tolist()) for batch in batches for row in batch}


def test_by_default_three_epochs_of_batches_of_4_at_a_small_learning_rate() -> None:
    model = _Seen(vocab=64)
    before = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a plain fp32 run warns about nothing
        result = test_fine_tuning(model, {"max_seq_len": 8})  # no data: 64 rows, 16 to validate
    assert len(result["train_loss_history"]) == len(result["val_loss_history"]) == 3
    assert result["final_train_loss"] == result["train_loss_history"][-1]
    assert result["final_val_loss"] == result["val_loss_history"][-1]
    assert result["vocab_size"] == 64 and result["precision"] == "32-true"
    assert {len(batch) for batch in model.trained} == {4} and len(model.trained) == 3 * 16
    # AdamW moves a weight by at most about 3 learning rates a step: 5e-5 over 48 steps
    pairs = zip(model.parameters(), before, strict=True)
    moved = max(float((p.detach() - b).abs().max()) for p, b in pairs)
    assert 0 < moved < 48 * 3 * 5e-5
    # the data generated is the one the reports were written against: seeds 0 and 1
    assert _rows(model.trained) == _rows([synthetic_token_data(64, 8, 64, seed=0)])
    assert _rows(model.validated) >= _rows([synthetic_token_data(16, 8, 64, seed=1)])


def test_the_epochs_batch_size_and_config_vocabulary_given_are_used() -> None:
    model = _Seen(vocab=16)
    result = test_fine_tuning(model, {"vocab_size": 8, "max_seq_len": 8}, n_epochs=1, batch_size=16)
    assert len(result["train_loss_history"]) == 1 and result["vocab_size"] == 8
    assert [len(batch) for batch in model.trained] == [16] * 4
    assert max(int(batch.max()) for batch in model.trained) < 8


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_use_amp_on_a_gpu_trains_in_mixed_precision_and_says_so(model: TinyGPT) -> None:
    sizes = {"vocab_size": model.vocab_size, "max_seq_len": model.max_seq_len}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: CUDA is there
        result = test_fine_tuning(model, sizes, n_epochs=2, use_amp=True)
    mixed = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    assert result["precision"] == mixed and result["amp_enabled"] is True
    assert next(model.parameters()).device.type == "cuda"
    off = test_fine_tuning(model, sizes, n_epochs=1, use_amp=False)
    assert off["precision"] == "32-true" and off["amp_enabled"] is False


def test_the_use_amp_fallback_warning_points_at_the_callers_line(model: TinyGPT) -> None:
    rows = synthetic_token_data(8, 8, model.vocab_size, seed=0)
    with pytest.warns(PrecisionFallbackWarning) as caught:
        test_fine_tuning(model, {}, rows, n_epochs=1, use_amp=True)
    fallback = [w for w in caught if issubclass(w.category, PrecisionFallbackWarning)]
    assert [w.filename for w in fallback] == [__file__]
