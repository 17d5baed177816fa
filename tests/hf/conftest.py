"""Real Hugging Face parts, nothing downloaded: a byte-level BPE tokenizer trained here on the
shipped text (tests/fixtures/text/alice.txt), and GPT-2, Llama and BERT-style models built
from small configs (dropout off, so runs compare exactly)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = Path(__file__).parents[1] / "fixtures" / "text" / "alice.txt"
VOCAB = 320


def text_lines() -> list[str]:
    """The shipped paragraphs, one a line."""
    return [line for line in TEXT.read_text(encoding="utf-8").splitlines() if line.strip()]


def sentences() -> list[str]:
    """The text cut into short pieces of unequal length (rows that need padding)."""
    pieces = [p.strip() for line in text_lines() for p in line.replace(";", ".").split(". ")]
    return [p for p in pieces if len(p) > 20]


def build_tokenizer(padding_side: str = "right") -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer of ``VOCAB`` ids trained on the text, with a pad token."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(text_lines(), trainer=trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token="<pad>", eos_token="<eos>", padding_side=padding_side
    )


def encode(tokenizer: Any, count: int, max_length: int = 40) -> Any:
    """The first ``count`` pieces of the text, tokenized (a ``BatchEncoding``), cut to
    ``max_length`` tokens: rows of unequal length."""
    return tokenizer(sentences()[:count], truncation=True, max_length=max_length)


@pytest.fixture(scope="session")
def tokenizer() -> transformers.PreTrainedTokenizerFast:
    return build_tokenizer()


def gpt2(seed: int = 0) -> torch.nn.Module:
    """A 2-layer GPT-2 over the tokenizer's vocabulary."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=0, bos_token_id=1,
        eos_token_id=1,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    # transformers infers the loss from the class name, which GPT2LMHeadModel's does not hold:
    # unnamed, the Trainer counts a causal loss's tokens unshifted (one per row too many)
    model.loss_type = "ForCausalLM"
    return model


def llama(seed: int = 0) -> torch.nn.Module:
    """A 2-layer Llama (grouped-query attention, rotary positions)."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        pad_token_id=0, bos_token_id=1, eos_token_id=1,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def bert(seed: int = 0) -> torch.nn.Module:
    """A 2-layer BERT-style causal decoder, which takes ``token_type_ids``."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=128, type_vocab_size=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, is_decoder=True,
        pad_token_id=0,
    )  # fmt: skip
    return transformers.BertLMHeadModel(config)


MODELS: dict[str, Callable[..., torch.nn.Module]] = {"gpt2": gpt2, "llama": llama, "bert": bert}
