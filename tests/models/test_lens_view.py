"""TransformerLens's own tools on latentlens models through LensView: activation-patching
sweeps, the head detector and CircuitsVis, each checked against the same quantity computed
by hand from latentlens's hooks."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import head_detector, patching

from latentlens.models import (
    DecoderTransformer,
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
    LensView,
    TransformerConfig,
)

VOCAB = 20


def _metric(logits: torch.Tensor) -> torch.Tensor:
    return logits[:, -1].log_softmax(-1)[:, 3].mean()


def _token_model() -> DecoderTransformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(n_ctx=16, d_output=VOCAB, vocab_size=VOCAB, d_model=32,
                            n_layers=2, n_heads=4, causal=True, attention_dropout=0.0)  # fmt: skip
    return DecoderTransformer(cfg)


def _encoder_decoder() -> EncoderDecoderTransformer:
    torch.manual_seed(0)
    cfg = EncoderDecoderConfig(vocab_size=VOCAB, n_ctx_source=12, n_ctx_target=12, d_model=32,
                               n_heads=4, qk_dim=8, v_dim=8, n_layers_encoder=2,
                               n_layers_decoder=2)  # fmt: skip
    return EncoderDecoderTransformer(cfg)


def _pattern_patch_by_hand(view: LensView, corrupt, clean_cache, layer: int, head: int):
    name = f"blocks.{layer}.attn.hook_pattern"

    def hook(pattern: torch.Tensor, hook: object) -> torch.Tensor:
        pattern = pattern.clone()
        pattern[:, head] = clean_cache[name][:, head]
        return pattern

    with torch.no_grad():
        return _metric(view.run_with_hooks(corrupt, fwd_hooks=[(name, hook)]))


def _views() -> list[tuple[str, LensView, torch.Tensor, torch.Tensor]]:
    """(what, view, clean tokens, corrupted tokens) for each kind of latentlens model."""
    gen = torch.Generator().manual_seed(1)
    tokens = lambda *shape: torch.randint(1, VOCAB, shape, generator=gen)  # noqa: E731
    views = [("token model", LensView(_token_model()), tokens(3, 10), tokens(3, 10))]
    torch.manual_seed(0)
    continuous = DecoderTransformer(TransformerConfig(n_ctx=16, d_output=5, d_input=6, d_model=32,
                                                      n_layers=2, n_heads=4))  # fmt: skip
    inputs = torch.randn(6, 10, 6, generator=gen)
    view, ids = LensView.of_inputs(continuous, inputs)
    views.append(("continuous model", view, ids[:3], ids[3:]))
    model = _encoder_decoder()
    views.append(("decoder stack", LensView(model, "decoder", source=tokens(3, 8)),
                  tokens(3, 6), tokens(3, 6)))  # fmt: skip
    views.append(("encoder stack", LensView(model, "encoder", decoder_inputs=tokens(3, 6)),
                  tokens(3, 8), tokens(3, 8)))  # fmt: skip
    return views


@pytest.mark.parametrize("what", ["token model", "continuous model", "decoder stack",
                                  "encoder stack"])  # fmt: skip
def test_patching_sweeps_match_the_patch_done_by_hand(what: str) -> None:
    view, clean, corrupt = next((v, c, k) for w, v, c, k in _views() if w == what)
    view.eval()
    _, clean_cache = view.run_with_cache(clean)
    sweep = patching.get_act_patch_attn_head_pattern_all_pos(view, corrupt, clean_cache, _metric)
    assert sweep.shape == (2, 4)
    for layer, head in ((0, 1), (1, 3)):
        by_hand = _pattern_patch_by_hand(view, corrupt, clean_cache, layer, head)
        torch.testing.assert_close(sweep[layer, head], by_hand, rtol=0, atol=1e-6)
    for sweep_fn in (patching.get_act_patch_resid_pre, patching.get_act_patch_attn_out):
        assert sweep_fn(view, corrupt, clean_cache, _metric).shape == (2, clean.shape[1])
    heads = patching.get_act_patch_attn_head_out_all_pos(view, corrupt, clean_cache, _metric)
    assert heads.shape == (2, 4) and torch.isfinite(heads).all()


def test_patching_the_whole_clean_residual_restores_the_clean_run() -> None:
    view = LensView(_token_model()).eval()
    gen = torch.Generator().manual_seed(3)
    clean, corrupt = torch.randint(1, VOCAB, (2, 3, 10), generator=gen)
    _, clean_cache = view.run_with_cache(clean)
    sweep = patching.get_act_patch_resid_pre(view, corrupt, clean_cache, _metric)
    with torch.no_grad():
        clean_metric, corrupt_metric = _metric(view(clean)), _metric(view(corrupt))
    assert not torch.isclose(clean_metric, corrupt_metric)
    # The whole residual stream entering block 0 (every position) gives the clean run back;
    # the sweep patches one position at a time.
    name = "blocks.0.hook_resid_pre"
    with torch.no_grad():
        restored = view.run_with_hooks(
            corrupt, fwd_hooks=[(name, lambda x, hook: clean_cache[name])]
        )
    torch.testing.assert_close(_metric(restored), clean_metric, rtol=0, atol=1e-6)
    assert sweep.shape == (2, 10) and torch.isfinite(sweep).all()


@pytest.mark.parametrize("stack", [None, "decoder", "encoder"])
def test_the_head_detector_scores_match_the_pattern_read_by_hand(stack) -> None:
    if stack is None:
        view = LensView(_token_model())
    else:
        other = torch.randint(1, VOCAB, (1, 7), generator=torch.Generator().manual_seed(4))
        fixed = {"source": other} if stack == "decoder" else {"decoder_inputs": other}
        view = LensView(_encoder_decoder(), stack, **fixed)
    view.eval()
    text = "3 5 7 9 3 5 7 9"
    scores = head_detector.detect_head(view, text, "induction_head")
    tokens = view.to_tokens(text)
    detection = head_detector.get_induction_head_detection_pattern(tokens.cpu())
    _, cache = view.run_with_cache(tokens)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0]  # [head, query, key]
        by_hand = (pattern * detection).sum((-1, -2)) / pattern.sum((-1, -2))
        torch.testing.assert_close(scores[layer], by_hand, rtol=0, atol=1e-6)


def test_circuitsvis_draws_a_latentlens_models_attention() -> None:
    circuitsvis = pytest.importorskip("circuitsvis")
    view = LensView(_token_model()).eval()
    text = "3 5 7 3 5 7"
    _, cache = view.run_with_cache(view.to_tokens(text), names_filter="blocks.1.attn.hook_pattern")
    html = circuitsvis.attention.attention_patterns(
        tokens=view.to_str_tokens(text), attention=cache["pattern", 1][0]
    )
    page = str(html)
    assert "AttentionPatterns" in page and '"3"' in page


def test_bad_views_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="viewed one stack at a time"):
        LensView(_encoder_decoder())
    with pytest.raises(ValueError, match="needs the fixed source"):
        LensView(_encoder_decoder(), "decoder")
    with pytest.raises(ValueError, match="is for an encoder-decoder"):
        LensView(_token_model(), "decoder")
    continuous = DecoderTransformer(TransformerConfig(n_ctx=8, d_output=2, d_input=3))
    with pytest.raises(ValueError, match="input_table"):
        LensView(continuous)
    view = LensView(_token_model())
    with pytest.raises(ValueError, match="whitespace-separated integers"):
        view.to_tokens("the cat")
    with pytest.raises(ValueError, match="is not a hook point of this view"):
        view.run_with_hooks(view.to_tokens("1 2"), fwd_hooks=[("blocks.9.attn.hook_z", print)])
    decoder = LensView(_encoder_decoder(), "decoder", source=torch.ones(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="source has 3 rows for 1 token rows"):
        decoder(decoder.to_tokens("1 2 3"))
