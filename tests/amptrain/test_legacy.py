"""amptrain.legacy: the vocabulary test_fine_tuning reads from a config or the model (the
end-to-end runs of test_fine_tuning are the integration stage's, in tests/integration)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch import nn

from amptrain import TinyGPT, detect_vocab_size
from amptrain.legacy import RESULT_KEYS


def test_the_vocabulary_comes_from_the_config_first_then_the_model(model: TinyGPT) -> None:
    assert detect_vocab_size(model, SimpleNamespace(vocab_size=99)) == 99
    assert detect_vocab_size(model, {"vocab_size": 77}) == 77
    assert detect_vocab_size(model, {"vocab_size": 0}) == model.vocab_size  # no size: the model's
    assert detect_vocab_size(model) == model.vocab_size


def test_a_model_without_an_embedding_and_no_config_size_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        detect_vocab_size(nn.Linear(2, 2), {})


def test_every_result_key_says_what_it_holds() -> None:
    assert "final_val_loss" in RESULT_KEYS and "vocab_size" in RESULT_KEYS
    assert all(isinstance(text, str) and text for text in RESULT_KEYS.values())
