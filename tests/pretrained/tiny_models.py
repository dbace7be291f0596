"""Tiny config-built Hugging Face models written to folders, for offline tests: a Llama
with grouped-query attention and a BERT encoder, each with a word-level tokenizer over
the words of the text-relation grammar (so generated stories tokenise without <unk>)."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from latentlens.probes import TokenPairs
from latentlens.probes import text_relations as grammar

SPECIAL = ("<pad>", "<unk>", "<s>", "[CLS]", "[SEP]")


def grammar_words() -> list[str]:
    words = {"The", "a", "."}
    for group in (grammar.ADJECTIVES, grammar.PEOPLE, grammar.VERBS, grammar.THINGS,
                  grammar.QUALITIES, grammar.PLACES):  # fmt: skip
        for phrase in group:
            words.update(phrase.split())
    return [*SPECIAL, *sorted(words)]


def word_tokenizer(encoder: bool) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(grammar_words())}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    special = {"cls_token": "[CLS]", "sep_token": "[SEP]"} if encoder else {"bos_token": "<s>"}
    return PreTrainedTokenizerFast(
        tokenizer_object=word_level, unk_token="<unk>", pad_token="<pad>", **special
    )


def write_tiny_llama(folder: Path, heads: int = 4, kv_heads: int = 2, seed: int = 0) -> Path:
    tokenizer = word_tokenizer(encoder=False)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=8 * heads, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_tiny_bert(folder: Path, seed: int = 0) -> Path:
    tokenizer = word_tokenizer(encoder=True)
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def extraction_order(pairs: TokenPairs, split: str, seed: int = 0) -> torch.Tensor:
    """The rows of ``split`` in the order pair_codes reads them with ``seed``."""
    return torch.cat([batch.labels["index"] for batch in pairs.labelled_batches(split, seed=seed)])
