"""The layer connection inserted into a Hugging Face MarianMT model, offline: a tiny
randomly initialised MarianMTModel built from a MarianConfig over the translation task's
own vocabulary (PAD 0, BOS 1, EOS 2)."""

import copy

import pytest
import torch
from safetensors import safe_open
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    GPT2Config,
    GPT2LMHeadModel,
    MarianConfig,
    MarianMTModel,
)

from latentlens.pretrained import (
    bridge_of,
    insert_bridge,
    load_bridged,
    remove_bridge,
    routing_matrix,
    save_bridged,
)
from latentlens.tasks import make_task

TASK = make_task("translation", {"train_sentences": 2000, "compounds_per_subset": 20}, seed=0)
VOCAB = TASK.model_io()["vocab_size"]


def tiny_marian(encoder_layers: int = 3, decoder_layers: int = 3, seed: int = 0) -> MarianMTModel:
    config = MarianConfig(
        vocab_size=VOCAB, d_model=16, encoder_layers=encoder_layers,
        decoder_layers=decoder_layers, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0, eos_token_id=2,
        decoder_start_token_id=1, forced_eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(seed)
    return MarianMTModel(config).eval()


def marian_batch(size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Source ids, their mask and the labels (target ids, padding as -100)."""
    batch = TASK.sample(size, "train", TASK.make_generator(seed))
    labels = batch.targets.masked_fill(batch.targets == 0, -100)
    return {"input_ids": batch.inputs, "attention_mask": batch.inputs != 0, "labels": labels}


def logits(model: MarianMTModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


def test_original_bridge_computes_exactly_what_the_unmodified_model_computes() -> None:
    plain = tiny_marian()
    bridged = insert_bridge(copy.deepcopy(plain), "original")
    batch = marian_batch(6)
    connection = bridge_of(bridged)
    assert connection is not None and connection.weight.shape == (3, 16, 3 * 16)
    # identity and zero blocks: every memory entry is x * 1 + 0 * y, exact in float32
    torch.testing.assert_close(logits(bridged, batch), logits(plain, batch), rtol=0, atol=0)
    torch.testing.assert_close(routing_matrix(bridged), torch.tensor([[0.0, 0, 1]] * 3))
    torch.testing.assert_close(routing_matrix(plain), routing_matrix(bridged))


def test_gca_routes_each_decoder_layer_to_its_mirror_encoder_layer() -> None:
    model = insert_bridge(tiny_marian(), "gca")
    layer_outputs: list[torch.Tensor] = []
    handles = [
        layer.register_forward_hook(lambda m, a, out: layer_outputs.append(out))
        for layer in model.model.encoder.layers
    ]
    memories: list[torch.Tensor] = []
    model.model.layer_connection.hook_memory.add_hook(lambda t, hook: memories.append(t))
    logits(model, marian_batch(4))
    for handle in handles:
        handle.remove()
    model.model.layer_connection.hook_memory.remove_hooks()
    (memory,) = memories  # [batch, decoder_layer, source_pos, d_model]
    assert memory.shape[:2] == (4, 3)
    for j in range(3):  # decoder layer j reads encoder layer L - 1 - j, exactly
        torch.testing.assert_close(memory[:, j], layer_outputs[2 - j], rtol=0, atol=0)
    mirror = torch.tensor([[0.0, 0, 1], [0, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(routing_matrix(model), mirror)


def mirrored_reference_logits(plain: MarianMTModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The GCA computation written out on the unmodified model: run its encoder keeping
    every layer's output, then feed decoder layer j's cross-attention encoder layer L-1-j."""
    outputs: list[torch.Tensor] = []
    layers = plain.model.encoder.layers
    handles = [
        layer.register_forward_hook(lambda m, a, out: outputs.append(out)) for layer in layers
    ]

    def mirror(j: int):
        def swap(module, args, kwargs):
            return args, {**kwargs, "key_value_states": outputs[len(layers) - 1 - j]}

        return swap

    handles += [
        layer.encoder_attn.register_forward_pre_hook(mirror(j), with_kwargs=True)
        for j, layer in enumerate(plain.model.decoder.layers)
    ]
    try:
        return logits(plain, batch)
    finally:
        for handle in handles:
            handle.remove()


def test_gca_logits_equal_the_mirror_written_out_on_the_unmodified_model() -> None:
    plain, batch = tiny_marian(), marian_batch(5)
    gca = insert_bridge(copy.deepcopy(plain), "gca")
    expected = mirrored_reference_logits(plain, batch)
    torch.testing.assert_close(logits(gca, batch), expected, rtol=0, atol=0)
    assert not torch.allclose(expected, logits(plain, batch))


def test_gca_changes_the_computation_and_uniform_averages_the_layers() -> None:
    plain, batch = tiny_marian(), marian_batch(4)
    gca = insert_bridge(copy.deepcopy(plain), "gca")
    assert not torch.allclose(logits(gca, batch), logits(plain, batch))
    uniform = insert_bridge(copy.deepcopy(plain), "uniform")
    torch.testing.assert_close(routing_matrix(uniform), torch.full((3, 3), 1 / 3))


def test_a_short_fine_tune_lowers_the_loss_and_moves_the_routing() -> None:
    model = insert_bridge(tiny_marian(), "gca").train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    held_out = marian_batch(64, seed=99)
    before = model(**held_out).loss.item()
    start = routing_matrix(model)
    for step in range(40):
        loss = model(**marian_batch(32, seed=step)).loss
        optimizer.zero_grad()
        loss.backward()
        assert model.model.layer_connection.weight.grad.abs().sum() > 0
        optimizer.step()
    after = model(**held_out).loss.item()
    assert after < 0.8 * before, (before, after)
    assert (routing_matrix(model) - start).abs().max() > 1e-3


@pytest.mark.parametrize("init", ["original", "gca"])
def test_beam_search_expands_every_encoder_layer_by_the_beam_size(init: str) -> None:
    plain = tiny_marian(seed=1)
    bridged = insert_bridge(copy.deepcopy(plain), init)
    source = marian_batch(3)
    inputs = {"input_ids": source["input_ids"], "attention_mask": source["attention_mask"]}
    options = dict(num_beams=4, max_new_tokens=10, do_sample=False)
    cached = bridged.generate(**inputs, **options, use_cache=True)
    # without the cache every step recomputes all memories from the expanded encoder output
    uncached = bridged.generate(**inputs, **options, use_cache=False)
    assert torch.equal(cached, uncached)
    assert cached.shape[0] == 3 and cached.shape[1] > 2
    if init == "original":
        assert torch.equal(cached, plain.generate(**inputs, **options))


def test_saving_and_reloading_through_safetensors_keeps_the_trained_bridge(tmp_path) -> None:
    model = insert_bridge(tiny_marian(), "gca")
    weight = model.model.layer_connection.weight
    with torch.no_grad():
        weight.add_(0.01 * torch.randn_like(weight))
    save_bridged(model, tmp_path / "bridged")
    with safe_open(str(tmp_path / "bridged" / "model.safetensors"), framework="pt") as handle:
        saved = handle.keys()  # a safe_open handle is not iterable
    assert "model.layer_connection.weight" in saved
    reloaded = load_bridged(tmp_path / "bridged").eval()
    batch = marian_batch(4)
    torch.testing.assert_close(logits(reloaded, batch), logits(model, batch), rtol=0, atol=0)
    torch.testing.assert_close(routing_matrix(reloaded), routing_matrix(model))
    plain = tiny_marian()
    save_bridged(plain, tmp_path / "plain")
    assert bridge_of(load_bridged(tmp_path / "plain")) is None


def test_removing_the_bridge_restores_the_pretrained_model() -> None:
    plain, batch = tiny_marian(), marian_batch(4)
    model = remove_bridge(insert_bridge(copy.deepcopy(plain), "gca"))
    assert bridge_of(model) is None and not hasattr(model.config, "latentlens_bridge")
    torch.testing.assert_close(logits(model, batch), logits(plain, batch), rtol=0, atol=0)


def test_bad_requests_are_clear_errors() -> None:
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=20))
    with pytest.raises(ValueError, match="GPT2LMHeadModel is not an encoder-decoder"):
        insert_bridge(gpt2)
    bart = BartForConditionalGeneration(
        BartConfig(
            vocab_size=20,
            d_model=8,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=8,
            decoder_ffn_dim=8,
        )  # fmt: skip
    )
    with pytest.raises(ValueError, match="does not support; it needs a post-LN MarianMTModel"):
        insert_bridge(bart)
    with pytest.raises(ValueError, match="init='mirror' is unknown"):
        insert_bridge(tiny_marian(), "mirror")
    with pytest.raises(ValueError, match="the encoder has 2; use 'original' or 'uniform'"):
        insert_bridge(tiny_marian(encoder_layers=2, decoder_layers=3), "gca")
    deeper_encoder = insert_bridge(tiny_marian(encoder_layers=3, decoder_layers=2), "gca")
    top_two = torch.tensor([[0.0, 0, 1], [0, 1, 0]])
    torch.testing.assert_close(routing_matrix(deeper_encoder), top_two)
    with pytest.raises(ValueError, match="already has a layer connection"):
        insert_bridge(deeper_encoder, "original")
    with pytest.raises(ValueError, match="no layer connection to remove"):
        remove_bridge(tiny_marian())
