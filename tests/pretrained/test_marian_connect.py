"""`latentlens connect` on a Hugging Face MarianMT model, offline: a tiny MarianMTModel and
a word-level tokenizer saved to a folder as a downloaded model would be, and a toy parallel
corpus (a word-for-word translation, reversed) in train/validation/test JSON-lines files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing
from transformers import MarianConfig, MarianMTModel, PreTrainedTokenizerFast

import latentlens.pretrained.finetune as finetune
from latentlens.cli import main
from latentlens.figures.run_figures import run_figures
from latentlens.pretrained.finetune import MarianFineTune, fine_tune_marian
from latentlens.training import RunDirectory, load_tracked

SOURCE = ["der", "die", "das", "hund", "katze", "sieht", "hat", "rot", "klein", "haus"]
TARGET = ["the", "she", "that", "dog", "cat", "sees", "has", "red", "small", "house"]
SPECIAL = ["<pad>", "</s>", "<unk>"]


def toy_pairs(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = rng.choices(range(len(SOURCE)), k=rng.randint(2, 6))
        target = " ".join(TARGET[i] for i in reversed(words))
        pairs.append({"translation": {"de": " ".join(SOURCE[i] for i in words), "en": target}})
    return pairs


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path]:
    """A saved tiny MarianMT model with its tokenizer, and a corpus folder."""
    root = tmp_path_factory.mktemp("marian")
    vocab = {w: i for i, w in enumerate([*SPECIAL, *SOURCE, *TARGET])}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.post_processor = TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>",
                                   eos_token="</s>", unk_token="<unk>")  # fmt: skip
    config = MarianConfig(
        vocab_size=len(vocab), d_model=16, encoder_layers=3, decoder_layers=3,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        forced_eos_token_id=None, init_std=0.3,
    )  # fmt: skip
    # init_std 0.3, not 0.02: at 0.02 a tiny post-LN encoder's layers hardly change their
    # input, and reading another layer (GCA) would change the loss by about 1e-6; seed 123,
    # not the runs' seed 0, from which `scratch` draws its fresh weights
    torch.manual_seed(123)
    model_dir = root / "tiny-opus-mt"
    MarianMTModel(config).save_pretrained(model_dir)
    fast.save_pretrained(model_dir)
    corpus = root / "corpus"
    corpus.mkdir()
    for split, count, seed in (("train", 200, 0), ("validation", 16, 1), ("test", 8, 2)):
        lines = [json.dumps(pair) for pair in toy_pairs(count, seed)]
        (corpus / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return model_dir, corpus


SETTINGS = dict(train_pairs=200, eval_pairs=16, test_pairs=8, batch_size=8, lr=3e-3,
                max_length=16, num_beams=2, eval_every=3, steps=6)  # fmt: skip


def test_connect_runs_the_four_conditions_on_a_marian_model(setup, tmp_path, capsys) -> None:
    model_dir, corpus = setup
    out = tmp_path / "out"
    argv = ["connect", "--base", str(model_dir), "--dataset", str(corpus), "--out", str(out),
            "--steps", "6", "--eval-every", "3", "--batch-size", "8", "--lr", "3e-3",
            "--eval-pairs", "16", "--test-pairs", "8", "--num-beams", "2", "--max-length",
            "16", "--device", "cpu", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "paper BLEU" in printed and "36.43" in printed
    metrics = {c: RunDirectory(out / f"{c}-s0").read_metrics()
               for c in ("original", "unmodified", "gca", "scratch")}  # fmt: skip
    assert all([r["step"] for r in m] == [0, 3, 6] for m in metrics.values())
    # at step 0 the original bridge is the unmodified model: the same loss and beam search
    assert metrics["original"][0] == metrics["unmodified"][0]
    assert metrics["gca"][0]["loss"] != metrics["unmodified"][0]["loss"]
    assert metrics["scratch"][0]["loss"] != metrics["unmodified"][0]["loss"]
    assert metrics["unmodified"][-1]["loss"] < metrics["unmodified"][0]["loss"]
    gca = load_tracked(out / "gca-s0" / "tracking" / "routing_matrix.safetensors")
    assert gca.steps == [0, 3, 6] and gca.axes == ("decoder_layer", "encoder_layer")
    torch.testing.assert_close(torch.from_numpy(gca.values[0]),
                               torch.tensor([[0.0, 0, 1], [0, 1, 0], [1, 0, 0]]))  # fmt: skip
    assert not (gca.values[-1] == gca.values[0]).all()
    weights = load_file(str(out / "gca-s0" / "checkpoint" / "model.safetensors"))
    assert "model.layer_connection.weight" in weights
    assert "model.layer_connection.weight" not in load_file(
        str(out / "unmodified-s0" / "checkpoint" / "model.safetensors")
    )
    drawn = run_figures(out / "gca-s0", formats=("png",))  # as for latentlens's own runs
    assert {"metrics", "routing", "tracked_routing_matrix"} <= set(drawn)
    summary = json.loads((out / "connect.json").read_text())["summary"]
    assert summary["original"]["bleu_start"] == summary["unmodified"]["bleu_start"]


def test_an_interrupted_fine_tune_resumes_to_the_uninterrupted_result(
    setup, tmp_path, monkeypatch
) -> None:
    model_dir, corpus = setup
    cfg = MarianFineTune(dataset=str(corpus), **SETTINGS)
    whole = fine_tune_marian(tmp_path / "whole", str(model_dir), "gca", cfg, quiet=True)
    save = finetune._save_state

    def save_then_stop(run, model, optimizer, step):
        save(run, model, optimizer, step)
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune, "_save_state", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        fine_tune_marian(tmp_path / "cut", str(model_dir), "gca", cfg, quiet=True)
    monkeypatch.setattr(finetune, "_save_state", save)
    assert [r["step"] for r in RunDirectory(tmp_path / "cut").read_metrics()] == [0, 3]
    cut = fine_tune_marian(tmp_path / "cut", str(model_dir), "gca", cfg, quiet=True)
    assert RunDirectory(cut).read_metrics() == RunDirectory(whole).read_metrics()
    resumed = load_file(str(cut / "checkpoint" / "model.safetensors"))
    for key, value in load_file(str(whole / "checkpoint" / "model.safetensors")).items():
        torch.testing.assert_close(resumed[key], value, rtol=0, atol=0)
    with pytest.raises(ValueError, match="holds a different run"):
        fine_tune_marian(cut, str(model_dir), "original", cfg, quiet=True)


def test_bad_corpora_are_clear_errors(setup, tmp_path, capsys) -> None:
    model_dir, corpus = setup
    assert main(["connect", "--base", str(tmp_path / "nothing"), "--out", str(tmp_path)]) == 2
    assert (
        "is neither a latentlens run directory nor a Hugging Face model" in capsys.readouterr().err
    )
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "train.jsonl").write_text((corpus / "train.jsonl").read_text())
    cfg = MarianFineTune(dataset=str(partial), **SETTINGS)
    with pytest.raises(ValueError, match=r"has no validation.jsonl, validation.json or"):
        fine_tune_marian(tmp_path / "a", str(model_dir), "gca", cfg, quiet=True)
    cfg = MarianFineTune(dataset=str(corpus), source_lang="fr", **SETTINGS)
    with pytest.raises(ValueError, match=r"its pairs are in \['de', 'en'\], not 'fr'"):
        fine_tune_marian(tmp_path / "b", str(model_dir), "gca", cfg, quiet=True)
