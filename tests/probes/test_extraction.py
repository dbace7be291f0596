"""Streaming extraction: the kept slices equal a full cache's, labels ride along."""

from __future__ import annotations

import pytest
import torch

from latentlens.models import DecoderTransformer, TransformerConfig
from latentlens.probes import extract, extraction
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


def test_joined_forward_passes_read_the_same_examples() -> None:
    """``forward_examples`` joins the draws into larger passes: the same examples and labels,
    the activations equal to float32 rounding of the same sums blocked otherwise (values of
    order 1, so 1e-6 is a few units in the last place); ``forward_options`` reach the
    forward (the last block's last query alone: the last position's residual stream)."""
    task = make_task("fuzzy-logic", None, seed=0)
    torch.manual_seed(0)
    model = DecoderTransformer(TransformerConfig.preset("fuzzy-logic", d_model=32)).train()
    names = ["blocks.0.attn.hook_pattern", "blocks.1.hook_resid_post"]
    apart = extract(model, task, "test", names, examples=70, batch_size=16, seed=5)
    joined = extract(model, task, "test", names, examples=70, batch_size=16, seed=5,
                     forward_examples=40, forward_options={"last_positions": 1})  # fmt: skip
    assert model.training
    assert apart.labels.keys() == joined.labels.keys()
    for name, label in apart.labels.items():
        assert torch.equal(label, joined.labels[name]), name
    for name in names:
        torch.testing.assert_close(joined.activations[name], apart.activations[name],
                                   rtol=0, atol=1e-6)  # fmt: skip
    whole = {"blocks.1.attn.hook_pattern": lambda act, batch: act}
    one_query = extract(model, task, "test", ["blocks.1.attn.hook_pattern"], examples=4,
                        select=whole, forward_options={"last_positions": 1})  # fmt: skip
    assert one_query.activations["blocks.1.attn.hook_pattern"].shape == (4, 8, 1, 16)


def test_joined_passes_keep_the_draws_in_order() -> None:
    task = make_task("fuzzy-logic", None, seed=0)
    batches = list(task.labelled_batches("test", 70, 16, 5))
    joined = list(extraction._joined(iter(batches), 40))
    assert [len(b) for b in joined] == [48, 22]  # 3 draws of 16, then 16 + 6
    inputs = torch.cat([b.inputs for b in batches])
    assert torch.equal(torch.cat([b.inputs for b in joined]), inputs)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_forward_examples_are_clear_errors(bad) -> None:
    task = make_task("fuzzy-logic", None, seed=0)
    model = DecoderTransformer(TransformerConfig.preset("fuzzy-logic", d_model=32))
    with pytest.raises(ValueError, match=f"forward_examples={bad!r} is invalid"):
        extract(model, task, "test", ["blocks.0.hook_resid_post"], examples=4,
                forward_examples=bad)  # fmt: skip
