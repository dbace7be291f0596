"""Codes of chosen pairs while the model runs SDPA (latentlens.pretrained.sdpa_codes)
against transformers' own eager ``output_attentions``, on tiny config-built models:
grouped-query attention, causal and bidirectional, left and right padding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM

from latentlens.pretrained import sdpa_pair_codes

from .tiny_models import write_tiny_bert, write_tiny_llama

# The same float32 scores summed in another order (one einsum against eager's matmul and
# softmax): a few ulps of weights at most 1.
ROUNDING = 1e-6


def models(kind: str, folder: Path) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model twice: with SDPA (as a user loads it) and with the eager reference."""
    if kind == "llama":
        written, loader = write_tiny_llama(folder, heads=4, kv_heads=2), AutoModelForCausalLM
    else:
        written, loader = write_tiny_bert(folder), AutoModel
    fast = loader.from_pretrained(written, attn_implementation="sdpa").eval()
    eager = loader.from_pretrained(written, attn_implementation="eager").eval()
    return fast, eager


def random_pairs(count: int, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.stack(
        [torch.randint(0, n, (count,), generator=generator) for n in (batch, length, length)], 1
    )


@pytest.mark.parametrize("kind", ["llama", "bert"])
@pytest.mark.parametrize("padding", ["none", "left", "right"])
def test_pair_codes_are_the_eager_attention_weights(kind: str, padding: str, tmp_path) -> None:
    fast, eager = models(kind, tmp_path / kind)
    ids = torch.randint(3, 20, (3, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if padding == "left":
        mask[1, :4] = 0
    elif padding == "right":
        mask[2, 9:] = 0
    given = None if padding == "none" else mask
    with torch.no_grad():
        attentions = eager(input_ids=ids, attention_mask=given, output_attentions=True).attentions
    full = torch.stack(attentions, 1)  # [batch, layer, head, query, key]
    pairs = random_pairs(200, 3, 12)
    pairs = pairs[mask[pairs[:, 0], pairs[:, 1]].bool()]  # queries that are tokens
    codes = sdpa_pair_codes(fast, ids, pairs, given)
    expected = full[pairs[:, 0], :, :, pairs[:, 1], pairs[:, 2]]
    assert codes.shape == (len(pairs), 2, 4)
    torch.testing.assert_close(codes, expected, atol=ROUNDING, rtol=0)
    assert fast.config._attn_implementation == "sdpa"  # the model's setting is restored
    if kind == "llama":  # a causal model: keys after the query weigh nothing
        later = pairs[:, 2] > pairs[:, 1]
        assert later.any() and codes[later].abs().max() == 0
        assert padding == "none" or codes[~mask[pairs[:, 0], pairs[:, 2]].bool()].max() == 0


def test_one_row_of_many_keys_is_read_once(tmp_path) -> None:
    """Every key of one query: the codes of each head are the query's whole softmax row."""
    fast, _ = models("llama", tmp_path / "llama")
    ids = torch.randint(3, 20, (1, 10))
    pairs = torch.tensor([[0, 9, k] for k in range(10)])
    codes = sdpa_pair_codes(fast, ids, pairs)  # [10 keys, layer, head]
    torch.testing.assert_close(codes.sum(0), torch.ones(2, 4), atol=1e-6, rtol=0)


def test_bad_pairs_are_named(tmp_path) -> None:
    fast, _ = models("bert", tmp_path / "bert")
    ids = torch.randint(3, 20, (2, 6))
    with pytest.raises(ValueError, match=r"expected \[P, 3\]"):
        sdpa_pair_codes(fast, ids, torch.zeros(4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="batch indices below 2 and positions below 6"):
        sdpa_pair_codes(fast, ids, torch.tensor([[0, 6, 0]]))
    assert fast.config._attn_implementation == "sdpa"
