"""Encoder-decoder with fuse-attention and a layer connection, against explicit references."""

from __future__ import annotations

import math

import pytest
import torch

import latentlens
from latentlens.models import (
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
    FuseAttention,
    LayerConnection,
)
from latentlens.tasks import make_task

# sized to the translation task's default corpus (vocabulary and sentence lengths)
TINY = dict(**make_task("translation").model_io(), d_model=16, n_layers_encoder=3,
            n_layers_decoder=2, n_heads=2, qk_dim=8, v_dim=8, d_mlp=32, fuse_heads=2)  # fmt: skip


def tiny(**overrides) -> EncoderDecoderTransformer:
    torch.manual_seed(0)
    return EncoderDecoderTransformer(EncoderDecoderConfig(**{**TINY, **overrides})).eval()


def batch(size: int = 4):
    task = make_task("translation", None, seed=0)
    return task, task.sample(size, "train")


def test_original_connection_reproduces_the_plain_model_exactly() -> None:
    plain = tiny()
    connected = tiny(connection="original")
    missing, unexpected = connected.load_state_dict(plain.state_dict(), strict=False)
    assert missing == ["layer_connection.weight"] and not unexpected
    task, b = batch(8)
    torch.testing.assert_close(
        connected(*task.model_inputs(b)), plain(*task.model_inputs(b)), rtol=0, atol=0
    )
    gca = tiny(connection="gca")
    gca.load_state_dict(plain.state_dict(), strict=False)
    assert not torch.allclose(gca(*task.model_inputs(b)), plain(*task.model_inputs(b)))


def test_fuse_attention_equals_an_explicit_loop_over_layers() -> None:
    torch.manual_seed(1)
    fuse = FuseAttention(d_model=6, n_heads=2).double()
    query, sources = torch.randn(2, 3, 6).double(), torch.randn(2, 3, 4, 6).double()
    got = fuse(query, sources)
    cache: dict = {}
    handle = fuse.hook_pattern.register_forward_hook(lambda m, i, o: cache.update(p=o))
    fuse(query, sources)
    handle.remove()
    for b in range(2):
        for t in range(3):  # every position on its own
            out = torch.zeros(6, dtype=torch.double)
            for h in range(2):
                q = query[b, t] @ fuse.W_Q[h]
                scores = torch.stack([q @ (sources[b, t, s] @ fuse.W_K[h]) for s in range(4)])
                weights = torch.softmax(scores / math.sqrt(3), dim=0)
                torch.testing.assert_close(cache["p"][b, h, t], weights)
                mixed = sum(weights[s] * (sources[b, t, s] @ fuse.W_V[h]) for s in range(4))
                out += mixed @ fuse.W_O[h]
            torch.testing.assert_close(got[b, t], out, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("original", [[0, 0, 1], [0, 0, 1]]),
        ("gca", [[0, 0, 1], [0, 1, 0]]),
        ("layerwise", [[1, 0, 0], [0, 1, 0]]),
        ("uniform", [[1 / 3] * 3, [1 / 3] * 3]),
    ],
)
def test_connection_initialisations_and_routing(kind: str, expected: list) -> None:
    model = tiny(connection=kind)
    torch.testing.assert_close(model.routing_matrix(), torch.tensor(expected, dtype=torch.float))
    layer = LayerConnection(kind, 2, 3, 4)
    outputs = torch.randn(1, 3, 5, 4)
    memory = layer(outputs)
    assert memory.shape == (1, 2, 5, 4)
    manual = torch.stack(
        [torch.cat(list(outputs[0]), dim=-1) @ layer.weight[j].T for j in range(2)]
    )
    torch.testing.assert_close(memory[0], manual)


def test_hooks_shapes_masks_and_greedy_decoding() -> None:
    model = tiny(fuse="both", connection="gca")
    task, b = batch(3)
    S, T, V = b.inputs.shape[1], b.targets.shape[1], model.cfg.vocab_size
    logits, cache = model.run_with_cache(*task.model_inputs(b))
    assert logits.shape == (3, T, V)
    assert cache["encoder.blocks.2.fuse.hook_pattern"].shape == (3, 2, S, 3)
    assert cache["decoder.blocks.1.fuse.hook_pattern"].shape == (3, 2, T, 2)
    assert cache["decoder.blocks.0.cross_attn.hook_pattern"].shape == (3, 2, T, S)
    assert cache["encoder.blocks.0.attn.hook_pattern"].shape == (3, 2, S, S)
    assert cache["layer_connection.hook_memory"].shape == (3, 2, S, 16)
    assert cache["encoder.hook_embed"].shape == (3, S, 16)
    torch.testing.assert_close(
        cache["decoder.blocks.1.fuse.hook_pattern"].sum(-1), torch.ones(3, 2, T)
    )
    # padding in the source is never attended to
    pad = b.inputs == 0
    cross = cache["decoder.blocks.0.cross_attn.hook_pattern"]
    assert cross.masked_select(pad[:, None, None, :].expand_as(cross)).abs().max() == 0
    # the decoder is causal: changing a later decoder input leaves earlier logits alone
    source, decoder_inputs = task.model_inputs(b)
    changed = decoder_inputs.clone()
    changed[:, 6:] = 5
    torch.testing.assert_close(model(source, changed)[:, :6], logits[:, :6])
    # greedy decoding agrees with teacher forcing on its own output
    decoded = model.greedy_decode(source, bos=1, eos=2)
    forced = model(source, torch.nn.functional.pad(decoded[:, :-1], (1, 0), value=1))
    agree = forced.argmax(-1) == decoded
    first_eos = (decoded == 2).int().cumsum(1).cumsum(1) <= 1  # up to and with the first EOS
    assert agree[first_eos].all()


def test_latent_codes_of_cross_and_fuse_attention() -> None:
    """``latent_codes`` reads every attention of an encoder-decoder: a decoder query's code
    towards each source position (cross-attention) and towards each earlier layer (fuse)."""
    model = tiny(fuse="both")
    task, b = batch(3)
    S, T = b.inputs.shape[1], b.targets.shape[1]
    _, cache = model.run_with_cache(
        *task.model_inputs(b), names_filter=lambda name: name.endswith("hook_pattern")
    )
    cross = latentlens.latent_codes(cache, 1, prefix="decoder.", module="cross_attn")
    assert cross.shape == (3, T, S, 2)  # [batch, target pos, source pos, head]
    pattern = cache["decoder.blocks.1.cross_attn.hook_pattern"]
    assert torch.equal(cross[2, 5, 7], pattern[2, :, 5, 7])
    fuse = latentlens.latent_codes(cache, 2, prefix="encoder.", module="fuse")
    assert fuse.shape == (3, S, 3, 2)  # [batch, pos, source layer, head]
    assert torch.equal(fuse[0, 4, 1], cache["encoder.blocks.2.fuse.hook_pattern"][0, :, 4, 1])
    with pytest.raises(ValueError, match=r"module='cross' is unknown; choose one of"):
        latentlens.latent_codes(cache, 1, prefix="decoder.", module="cross")
    with pytest.raises(KeyError, match=r"blocks.1.cross_attn.hook_pattern"):
        latentlens.latent_codes(cache, 1, module="cross_attn")  # no prefix: not in the cache


def test_bad_configs_and_inputs() -> None:
    with pytest.raises(ValueError, match="fuse='all'"):
        EncoderDecoderConfig(**{**TINY, "fuse": "all"})
    with pytest.raises(ValueError, match="connection='dense'"):
        EncoderDecoderConfig(**{**TINY, "connection": "dense"})
    with pytest.raises(ValueError, match="fuse_heads=3 must divide d_model=16"):
        EncoderDecoderConfig(**{**TINY, "fuse_heads": 3})
    model = tiny()
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.rand(2, 5), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=f"at most {model.cfg.n_ctx_source}"):
        model(
            torch.ones(2, model.cfg.n_ctx_source + 1, dtype=torch.long),
            torch.ones(2, 3, dtype=torch.long),
        )


def slow_greedy_decode(model: EncoderDecoderTransformer, source, bos: int, eos: int, max_len: int):
    """Greedy decoding from the definition: the whole prefix through :meth:`decode` at every
    step; ids ``[batch, max_len]``."""
    encoder_outputs, mask = model.encode(source)
    memories = model.memories(encoder_outputs)
    tokens = torch.full((len(source), 1), bos, dtype=torch.long)
    done = torch.zeros(len(source), dtype=torch.bool)
    for _ in range(max_len):
        step = model.decode(tokens, memories, mask)[:, -1].argmax(-1)
        step = torch.where(done, model.cfg.pad_id, step)
        done = done | (step == eos)
        tokens = torch.cat([tokens, step[:, None]], dim=1)
    return tokens[:, 1:]


@pytest.mark.parametrize(
    "options", [dict(), dict(fuse="both", connection="gca"), dict(fuse="decoder", attention="hyla")]
)
def test_incremental_greedy_decoding_is_decoding_the_whole_prefix(options: dict) -> None:
    """Each step runs the newest position alone against the kept block inputs: the same
    tokens as re-decoding the whole prefix at every step, and the same residual stream as
    teacher forcing on the decoded prefix, to float rounding (the same sums in another
    order). EOS is never drawn (an id past the vocabulary), so every step of every row
    counts; the hooks see each position once, at its step."""
    model = tiny(**options)
    task, sample = batch(6)
    source, _ = task.model_inputs(sample)
    never = model.cfg.vocab_size
    slow_ids = slow_greedy_decode(model, source, 1, never, max_len=12)
    name = "decoder.blocks.1.hook_resid_post"
    seen: list[torch.Tensor] = []
    with model.hooks(fwd_hooks=[(name, lambda x, hook: seen.append(x.clone()))]):
        fast_ids = model.greedy_decode(source, bos=1, eos=never, max_len=12)
    assert torch.equal(fast_ids, slow_ids)
    assert [tuple(x.shape) for x in seen] == [(6, 1, model.cfg.d_model)] * 12
    prefix = torch.cat([torch.ones(6, 1, dtype=torch.long), fast_ids[:, :-1]], dim=1)
    _, cache = model.run_with_cache(source, prefix, names_filter=name)
    # summed over the keys so far rather than over every key with the later ones masked:
    # measured within 2.2e-7 of the stream's largest value (softmax), 1.7e-6 (HYLA's
    # unnormalised value network, whose stream reaches 54 here)
    scale = cache[name].abs().max()
    assert (torch.cat(seen, dim=1) - cache[name]).abs().max() <= 4e-6 * scale
