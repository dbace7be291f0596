"""`latentlens train --config FILE`: a hand-written file's sections, or a run's own
config.json, which starts a run of the same config (another seed, say)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from latentlens.cli import build_parser, main
from latentlens.cli.run_config import apply_config_defaults, read_config_file, resolve_run_config
from latentlens.training import RunDirectory, TrainConfig, Trainer, model_for_task

SMALL = dict(d_model=16, n_heads=2, qk_dim=8, v_dim=8, d_mlp=32)


def resolve(*argv: str) -> dict[str, Any]:
    """The config `latentlens train ARGV` would start a run with."""
    args = build_parser().parse_args(["train", *argv])
    file = read_config_file(args.config)
    apply_config_defaults(args, file)
    return resolve_run_config(args, file)


def test_a_files_sections_configure_the_run_and_flags_override_them(tmp_path: Path) -> None:
    file = tmp_path / "hyla.json"
    file.write_text(json.dumps({
        "model": {"attention": "hyla", **SMALL},
        "task": {"frac_test": 0.25},
        "train": {"steps": 2, "eval_every": 2, "eval_examples": 32, "batch_size": 8,
                  "lr": 0.002},
    }))  # fmt: skip
    run = tmp_path / "run"
    argv = ["train", "--config", str(file), "--lr", "0.005", "--run-dir", str(run)]
    assert main([*argv, "--quiet", "--device", "cpu"]) == 0
    config = RunDirectory(run).read_config()
    # the file's attention, not the --attention default (softmax)
    assert config["model"]["attention"] == "hyla" and config["model"]["d_model"] == 16
    assert config["task"] == {"name": "fuzzy-logic", "config": {**config["task"]["config"],
                                                                "frac_test": 0.25}}  # fmt: skip
    assert (config["train"]["steps"], config["train"]["lr"]) == (2, 0.005)
    assert resolve("--config", str(file), "--attention", "linear")["model"]["attention"] == "linear"


@pytest.mark.parametrize(
    ("task", "kind", "model", "train"),
    [
        ("sraven", "transformer", dict(attention="hyla", **SMALL), {}),
        ("translation", "fusion", dict(connection="gca", **SMALL), {}),
        ("modular-icl", "hypernetwork", dict(d_model=16, qk_dim=16, v_dim=16, d_mlp=32),
         {"support": "disconnected"}),
    ],
    ids=["sraven", "translation-fusion-gca", "modular-icl-hypernetwork"],
)  # fmt: skip
def test_a_runs_config_json_starts_the_same_run_with_another_seed(
    tmp_path: Path, task: str, kind: str, model: dict, train: dict
) -> None:
    """Task, model kind and every section come from the file: the resolved config is the
    stored one but for the seed given."""
    config = Trainer.resolve_config(
        task,
        model_for_task(task, train or None, kind, **model),
        TrainConfig.for_task(task, kind, lr=0.002),
        train or None,
    )
    run = tmp_path / "run"
    Trainer.create(run, config, device="cpu", quiet=True)
    stored = RunDirectory(run).read_config()

    again = resolve("--config", str(run / "config.json"), "--seed", "7")

    as_written = json.loads(json.dumps(again))  # tuples become lists, as in config.json
    assert as_written == {**stored, "train": {**stored["train"], "seed": 7}}


def test_a_config_that_cannot_be_used_is_refused_with_the_reason(tmp_path: Path) -> None:
    config = Trainer.resolve_config(
        "fuzzy-logic", model_for_task("fuzzy-logic", **SMALL), TrainConfig.for_task("fuzzy-logic")
    )
    run = tmp_path / "run"
    Trainer.create(run, config, device="cpu", quiet=True)
    with pytest.raises(ValueError, match="is a fuzzy-logic run's config, not sraven's"):
        resolve("--config", str(run / "config.json"), "--task", "sraven")

    cases = {
        '{"model_kind": "transformer", "task": {"frac_test": 0.5}}': "looks like a run's",
        '{"model": {}, "optimizer": {}}': r"unknown sections \['optimizer'\]",
        '{"model": [1, 2]}': r"the sections \['model'\] must be JSON objects",
        '[{"model": {}}]': "must hold a JSON object",
        '{"model": ': "could not be read as JSON",
    }
    for text, message in cases.items():
        file = tmp_path / "bad.json"
        file.write_text(text)
        with pytest.raises(ValueError, match=message):
            resolve("--config", str(file))


def test_a_bad_value_in_the_file_names_the_file(tmp_path: Path, capsys) -> None:
    """#42: ``--config`` with a misspelt train key ended naming the key but not the file."""
    file = tmp_path / "bad.json"
    file.write_text('{"train": {"stpes": 5}}')
    assert main(["train", "--config", str(file), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"--config {file} (and the flags): " in err and "'stpes'" in err, err
    assert "known fields" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
