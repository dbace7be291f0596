"""The split of a head's score over the key's residual components
(latentlens.pretrained.score_sources) against transformers' own eager scores, captured
inside its attention function, on a tiny config-built Llama with grouped-query heads."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.models.llama import modeling_llama

from latentlens.pretrained.score_sources import residual_components, score_sources

from .tiny_models import write_tiny_llama

# Two float32 sums of the same score: one matmul against a sum over components.
ROUNDING = 1e-5


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory):
    folder = write_tiny_llama(tmp_path_factory.mktemp("llama"), heads=4, kv_heads=2)
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


def eager_scores(model, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """``[batch, head, query, key]`` scaled scores, read inside the eager attention."""
    target, caught = model.model.layers[layer].self_attn, {}
    original = modeling_llama.eager_attention_forward

    def spy(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        if module is target:
            keys = modeling_llama.repeat_kv(key, module.num_key_value_groups)
            caught["scores"] = query @ keys.transpose(2, 3) * scaling
        return original(module, query, key, value, attention_mask, scaling, dropout, **kwargs)

    modeling_llama.eager_attention_forward = spy
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        modeling_llama.eager_attention_forward = original
    return caught["scores"]


@pytest.mark.parametrize("side", ["key", "query"])
@pytest.mark.parametrize("layer", [0, 1])
def test_the_components_sum_to_the_models_score(llama, layer: int, side: str) -> None:
    ids = torch.randint(3, 20, (2, 10), generator=torch.Generator().manual_seed(0))
    pairs = torch.tensor([[0, 9, 3], [1, 5, 5], [1, 7, 0], [0, 4, 1]])
    reference = eager_scores(llama, ids, layer)
    for head in range(4):
        sources = score_sources(llama, ids, layer, head, pairs, side)
        expected = reference[pairs[:, 0], head, pairs[:, 1], pairs[:, 2]]
        torch.testing.assert_close(sources.scores, expected, atol=ROUNDING, rtol=0)
        assert sources.contributions.shape == (4, 1 + layer * (4 + 1))
    assert sources.names[:3] == (("embed",) if layer == 0 else ("embed", "L0H0", "L0H1"))


def test_the_components_are_the_residual_stream(llama) -> None:
    """embed + every head's output + every MLP's = the hidden state entering the layer."""
    ids = torch.randint(3, 20, (1, 8))
    parts, names = residual_components(llama, ids, 1)  # (the last hidden state is normed)
    with torch.no_grad():
        hidden = llama(input_ids=ids, output_hidden_states=True).hidden_states
    torch.testing.assert_close(torch.stack(parts).sum(0), hidden[1], atol=ROUNDING, rtol=0)
    assert names[-1] == "L0MLP" and len(names) == 1 + 4 + 1


def test_the_sides_differ_where_the_query_and_key_tokens_differ(llama) -> None:
    ids = torch.randint(3, 20, (1, 8), generator=torch.Generator().manual_seed(1))
    pairs = torch.tensor([[0, 7, 2]])
    key, query = (score_sources(llama, ids, 1, 2, pairs, side) for side in ("key", "query"))
    torch.testing.assert_close(key.scores, query.scores, atol=ROUNDING, rtol=0)
    assert not torch.allclose(key.contributions, query.contributions)


def test_a_head_outside_the_model_is_named(llama) -> None:
    ids = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="layer 2, head 0 is not a head of this model"):
        score_sources(llama, ids, 2, 0, [[0, 3, 1]])
    with pytest.raises(ValueError, match="side='value' is unknown"):
        score_sources(llama, ids, 1, 0, [[0, 3, 1]], side="value")
