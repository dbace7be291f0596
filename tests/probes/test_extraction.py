"""Streaming extraction: the kept slices equal a full cache's, labels ride along."""

from __future__ import annotations

import pytest
import torch

from latentlens.models import DecoderTransformer, TransformerConfig
from latentlens.probes import extract
from latentlens.tasks import make_task


def test_streamed_slices_equal_the_full_cache() -> None:
    task = make_task("fuzzy-logic", None, seed=0)
    torch.manual_seed(0)
    model = DecoderTransformer(TransformerConfig.preset("fuzzy-logic", d_model=32)).train()
    names = ["blocks.0.hook_resid_post", "blocks.1.attn.hook_pattern"]
    select = {"blocks.1.attn.hook_pattern": lambda act, batch: act[:, :, -1, -1]}  # last self-code
    got = extract(model, task, "test", names, examples=70, batch_size=32, seed=5, select=select)
    assert model.training  # restored
    assert got.activations["blocks.0.hook_resid_post"].shape == (70, 32)
    assert got.activations["blocks.1.attn.hook_pattern"].shape == (70, 8)
    assert got.labels["term_bits"].shape[0] == 70 and len(got) == 70
    # the same examples in one pass through run_with_cache
    generator = task.make_generator(5)
    batches = [task.sample(n, "test", generator) for n in (32, 32, 6)]
    model.eval()
    with torch.no_grad():
        for start, batch in zip((0, 32, 64), batches, strict=True):
            _, cache = model.run_with_cache(batch.inputs, names_filter=names)
            rows = slice(start, start + len(batch))
            torch.testing.assert_close(
                got.activations["blocks.0.hook_resid_post"][rows],
                cache["blocks.0.hook_resid_post"][:, -1],
            )
            torch.testing.assert_close(
                got.activations["blocks.1.attn.hook_pattern"][rows],
                cache["blocks.1.attn.hook_pattern"][:, :, -1, -1],
            )
            assert torch.equal(got.labels["term_bits"][rows], batch.labels["term_bits"])


def test_bad_requests_are_clear_errors() -> None:
    task = make_task("fuzzy-logic", None, seed=0)
    model = DecoderTransformer(TransformerConfig.preset("fuzzy-logic", d_model=32))
    with pytest.raises(ValueError, match="unknown hook names"):
        extract(model, task, "test", ["blocks.9.hook_resid_post"], examples=4)
    with pytest.raises(ValueError, match="split='valid'"):
        extract(model, task, "valid", ["blocks.0.hook_resid_post"], examples=4)
    with pytest.raises(ValueError, match="examples=0"):
        extract(model, task, "test", ["blocks.0.hook_resid_post"], examples=0)
