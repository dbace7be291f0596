"""The hook-name contract's axes: every hook of every model kind has named axes, and each
named axis has the size the model's config gives it."""

from __future__ import annotations

import re

import pytest
import torch

from latentlens.models import (
    DecoderTransformer,
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
    HypernetworkConfig,
    HypernetworkTransformer,
    TransformerConfig,
    hook_axes,
)

BATCH = 3


def sizes_of(name: str, sizes: dict[str, int]) -> dict[str, int]:
    """The expected size of each axis of hook ``name``: per-head widths differ for q, k (the
    qk width) and v, z, value network (the v width); a fuse-attention block l reads l + 1
    source layers (the embedding and the l layers before it)."""
    module = name.split(".")[-2] if "." in name else ""
    side = name.split(".")[0] if name.startswith(("encoder.", "decoder.")) else ""
    expected = {**sizes, "batch": BATCH}
    if side:
        expected["pos"] = expected["query"] = expected["key"] = sizes[f"{side}_pos"]
    if module == "cross_attn":
        expected["key"] = sizes["encoder_pos"]
    if module == "fuse":
        expected["head"] = sizes["fuse_heads"]
        expected["d_head"] = sizes["d_model"] // sizes["fuse_heads"]
        expected["source_layer"] = int(re.findall(r"\d+", name)[-1]) + 1
    elif name.endswith(("hook_q", "hook_k")):
        expected["d_head"] = sizes["qk_head"]
    return expected


def transformer(attention: str, **options: bool):
    config = TransformerConfig(n_ctx=7, d_input=3, d_output=2, d_model=20, n_heads=4,
                               qk_dim=8, v_dim=12, d_mlp=24, attention=attention,
                               **options)  # fmt: skip
    sizes = dict(pos=7, query=7, key=7, d_model=20, head=4, qk_head=2, d_head=3, d_mlp=24)
    return DecoderTransformer(config), (torch.rand(BATCH, 7, 3),), sizes


def encoder_decoder(attention: str, **options: str):
    config = EncoderDecoderConfig(vocab_size=13, n_ctx_source=5, n_ctx_target=4, d_model=20,
                                  n_layers_encoder=3, n_layers_decoder=2, n_heads=4, qk_dim=8,
                                  v_dim=12, d_mlp=24, fuse_heads=5, attention=attention,
                                  **options)  # fmt: skip
    inputs = (torch.randint(1, 13, (BATCH, 5)), torch.randint(1, 13, (BATCH, 4)))
    sizes = dict(encoder_pos=5, decoder_pos=4, source_pos=5, decoder_layer=2, d_model=20,
                 head=4, qk_head=2, d_head=3, d_mlp=24, fuse_heads=5)  # fmt: skip
    return EncoderDecoderTransformer(config), inputs, sizes


def hypernetwork(attention: str):
    config = HypernetworkConfig(n_ctx=6, d_input=5, d_model=20, n_heads=4, qk_dim=8,
                                v_dim=12, d_mlp=24, latent_dim=3, task_hidden=7,
                                attention=attention)  # fmt: skip
    sizes = dict(pos=6, query=6, key=6, d_model=20, head=4, qk_head=2, d_head=3, d_mlp=24,
                 latent_dim=3, task_hidden=7, d_x=4)  # fmt: skip
    return HypernetworkTransformer(config), (torch.rand(BATCH, 6, 5),), sizes


MODELS = {
    "transformer, softmax": lambda: transformer("softmax"),
    "transformer, HYLA": lambda: transformer("hyla"),
    "transformer, absolute position": lambda: transformer("linear", absolute_position=True),
    "encoder-decoder, FUSION both sides, HYLA": lambda: encoder_decoder("hyla", fuse="both"),
    "encoder-decoder, GCA connection": lambda: encoder_decoder("softmax", connection="gca"),
    "hypernetwork": lambda: hypernetwork("softmax"),
}


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_every_hook_has_named_axes_of_the_configured_sizes(build) -> None:
    model, inputs, sizes = build()
    _, cache = model.eval().run_with_cache(*inputs)
    assert len(cache) == len(model.hook_dict)  # every hook ran, so every hook is checked
    for name, activation in cache.items():
        axes = hook_axes(name)
        assert axes is not None, f"{name} is outside the hook-name contract"
        expected = sizes_of(name, sizes)
        assert list(activation.shape) == [expected[axis] for axis in axes], (name, axes)


def test_names_outside_the_contract_have_no_axes() -> None:
    assert hook_axes("blocks.0.attn.hook_pattern") == ("batch", "head", "query", "key")
    assert hook_axes("decoder.blocks.1.fuse.hook_pattern")[-1] == "source_layer"
    assert hook_axes("blocks.0.mlp.hook_pre") == ("batch", "pos", "d_mlp")
    assert hook_axes("blocks.0.my_probe.hook_q") is None
    assert hook_axes("hook_anything") is None
