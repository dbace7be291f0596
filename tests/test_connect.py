"""Seed 001's layer-connection experiment on latentlens's own encoder-decoder: starting a
run from another run's weights (--init-from), and `latentlens connect` with its four
conditions through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from latentlens.cli import main
from latentlens.connect import fine_tune_settings, routing_record
from latentlens.training import RunDirectory, TrainConfig, Trainer, model_for_task

TASK = {"train_sentences": 400, "valid_sentences": 20, "test_sentences": 40,
        "compounds_per_subset": 12}  # fmt: skip
MODEL = dict(d_model=16, n_heads=2, qk_dim=16, v_dim=16, d_mlp=32, n_layers_encoder=2,
             n_layers_decoder=2)  # fmt: skip


def config(connection: str = "none", seed: int = 0, steps: int = 12, **model) -> dict:
    return Trainer.resolve_config(
        "translation",
        model_for_task(
            "translation", TASK, "transformer", connection=connection, **{**MODEL, **model}
        ),  # fmt: skip
        TrainConfig.for_task(
            "translation",
            steps=steps,
            eval_every=steps,
            batch_size=16,
            warmup_steps=2,
            eval_examples=16,
            seed=seed,
        ),  # fmt: skip
        TASK,
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A briefly pretrained encoder-decoder without a layer connection."""
    run = tmp_path_factory.mktemp("connect") / "base"
    Trainer.create(run, config(), quiet=True).train()
    return run


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``latentlens ARGV`` in this process: exit code, stdout, stderr."""
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def logits(trainer: Trainer) -> torch.Tensor:
    batch = trainer.task.sample(8, "cg", trainer.task.make_generator(3))
    trainer.model.eval()
    with torch.no_grad():
        return trainer.model(*trainer.task.model_inputs(batch))


def test_init_from_with_the_original_connection_starts_as_the_base_model(
    base: Path, tmp_path: Path
) -> None:
    tuned = Trainer.create(tmp_path / "tuned", config("original", seed=5), init_from=base,
                           quiet=True)  # fmt: skip
    pretrained = Trainer.load(base)
    # identity and zero blocks: the memory is the last layer's output exactly
    torch.testing.assert_close(logits(tuned), logits(pretrained), rtol=0, atol=0)
    stored = RunDirectory(tmp_path / "tuned").read_config()
    assert stored["init_from"] == {"run": str(base), "step": 12}
    gca = Trainer.create(tmp_path / "gca", config("gca"), init_from=base, quiet=True)
    assert not torch.allclose(logits(gca), logits(pretrained))
    fresh = Trainer.create(tmp_path / "fresh", config("original"), quiet=True)
    assert "init_from" not in RunDirectory(tmp_path / "fresh").read_config()
    assert not torch.allclose(logits(fresh), logits(pretrained))


def test_init_from_refuses_a_base_that_does_not_fit(base: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"the model differs in d_model=16 vs 32"):
        Trainer.create(tmp_path / "a", config(d_model=32, qk_dim=32, v_dim=32), init_from=base)
    connected = tmp_path / "connected"
    Trainer.create(connected, config("gca", steps=2), quiet=True).train()
    with pytest.raises(ValueError, match=r"unexpected \['layer_connection.weight'\]"):
        Trainer.create(tmp_path / "b", config(), init_from=connected)
    with pytest.raises(ValueError, match="is not a run directory"):
        Trainer.create(tmp_path / "c", config(), init_from=tmp_path / "nowhere")


def test_train_command_fine_tunes_from_a_run(base: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "tuned"
    code, out, err = run_cli(["train", "--config", str(base / "config.json"), "--init-from",
                              str(base), "--connection", "gca", "--steps", "4", "--eval-every",
                              "4", "--run-dir", str(run), "--quiet"], capsys)  # fmt: skip
    assert code == 0, err
    stored = json.loads((run / "config.json").read_text())
    assert stored["init_from"]["run"] == str(base) and stored["model"]["connection"] == "gca"
    code, _, err = run_cli(["train", "--init-from", str(base), "--resume", str(run)], capsys)
    assert code == 2 and "--init-from starts one new run" in err


def test_fine_tune_settings_share_one_config_and_take_overrides(base: Path) -> None:
    stored = RunDirectory(base).read_config()
    settings = fine_tune_settings(stored)
    assert settings["steps"] == 4 and settings["lr"] == pytest.approx(stored["train"]["lr"] / 10)
    assert settings["warmup_steps"] == 0 and settings["batch_size"] == 16
    assert fine_tune_settings(stored, steps=10, lr=None)["eval_every"] == 5


def test_connect_runs_the_four_conditions_through_the_entry_point(
    base: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    argv = ["connect", "--base", str(base), "--seeds", "0", "1", "--steps", "4",
            "--out", str(out), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for condition in ("original", "unmodified", "gca", "scratch"):
        assert condition in printed
    results = json.loads((out / "connect.json").read_text())
    assert len(results["runs"]) == 8
    assert {c: s["seeds"] for c, s in results["summary"].items()} == dict.fromkeys(
        ("original", "unmodified", "gca", "scratch"), 2
    )
    for seed in (0, 1):
        stored = {c: RunDirectory(out / f"{c}-s{seed}").read_config()
                  for c in ("original", "unmodified", "gca", "scratch")}  # fmt: skip
        assert {s["train"]["batch_size"] for s in stored.values()} == {16}
        assert {s["train"]["steps"] for s in stored.values()} == {4}
        assert stored["scratch"].get("init_from") is None
        assert stored["gca"]["init_from"]["run"] == str(base)
        assert stored["unmodified"]["model"]["connection"] == "none"
    gca = routing_record(out / "gca-s0")
    assert gca["first"] == [[0.0, 1.0], [1.0, 0.0]] and gca["first_step"] == 0
    assert 0 < gca["moved"] < 1
    assert routing_record(out / "unmodified-s0") is None
    # a second call finds every run finished and trains nothing
    before = (out / "gca-s0" / "metrics.jsonl").read_text()
    assert main(argv) == 0
    assert (out / "gca-s0" / "metrics.jsonl").read_text() == before


def test_connect_bad_input_is_a_clear_error(base: Path, tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(["connect", "--base", str(base), "--conditions", "bridge"], capsys)
    assert code == 2 and "choose 'all' or some of" in err
    other = tmp_path / "logic"
    argv = ["train", "--task", "fuzzy-logic", "--steps", "2", "--eval-every", "2",
            "--run-dir", str(other), "--quiet", "--d-model", "16"]  # fmt: skip
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    code, _, err = run_cli(["connect", "--base", str(other), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "goes into an encoder-decoder trained on translation" in err
    code, _, err = run_cli(["connect", "--base", str(base), str(base), "--seeds", "1"], capsys)
    assert code == 2 and "--seeds goes with one --base" in err
