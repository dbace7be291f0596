"""The model zoo: every shipped model loads, verifies and scores what its card says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from latentlens import zoo
from latentlens.cache import CACHE_ENVIRONMENT
from latentlens.cli.main import main
from latentlens.training import Trainer

NAMES = zoo.names()


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch) -> Path:
    """Run directories built under the test's own folder, never in the user's cache."""
    monkeypatch.setenv(CACHE_ENVIRONMENT, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_zoo_holds_table_a1s_fuzzy_logic_models() -> None:
    expected = [f"fuzzy-logic-a1/{v}/s{s}" for v in ("hyla", "linear", "softmax") for s in range(3)]
    assert expected == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_model_scores_its_cards_metrics_on_the_fixed_evaluation_set(name: str) -> None:
    card = zoo.card(name)
    model, task = zoo.load(name, device="cpu")
    assert model.cfg.attention == card["config"]["model"]["attention"]
    assert task.config.frac_test == card["config"]["task"]["config"]["frac_test"]
    trainer = Trainer.load(zoo.run_directory(name), device="cpu")
    assert trainer.step == card["training"]["steps"] == 50_000
    examples = card["evaluation"]["examples_per_split"]
    for split, expected in card["evaluation"]["metrics"].items():
        measured = trainer.evaluate(split, examples, errors=True)
        # the same examples and weights in float32; only the order of the CPU's sums may
        # differ with its thread count, which moves a 4,096-example mean by ~1e-7
        assert measured == pytest.approx(expected, rel=1e-5, abs=1e-6), split


def test_a_weights_file_that_does_not_match_its_card_is_refused(tmp_path, monkeypatch) -> None:
    name = NAMES[0]
    models = tmp_path / "models"
    shutil.copytree(zoo.MODELS / name, models / name)
    shutil.copyfile(zoo.MODELS / zoo.MANIFEST, models / zoo.MANIFEST)
    weights = models / name / zoo.WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(zoo, "MODELS", models)
    with pytest.raises(ValueError, match="does not match the SHA-256 on its model card") as err:
        zoo.load(name, device="cpu")
    assert str(weights) in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_name_lists_the_zoo() -> None:
    with pytest.raises(ValueError, match="no zoo model named 'fuzzy-logic-a1/hyla/s9'") as err:
        zoo.load("zoo:fuzzy-logic-a1/hyla/s9")
    assert NAMES[0] in str(err.value)


def test_commands_take_zoo_names(cache: Path, capsys) -> None:
    assert main(["zoo"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in NAMES) and "paper: test_r2 0.811" in listing
    assert "metrics: each run's fixed evaluation set, 4,096 examples a split" in listing
    assert main(["zoo", NAMES[0]]) == 0
    assert json.loads(capsys.readouterr().out)["sha256"] == zoo.card(NAMES[0])["sha256"]
    name = "fuzzy-logic-a1/hyla/s0"
    assert main(["eval", f"zoo:{name}", "--examples", "128", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint step 50000; the run's fixed evaluation set, 128 examples a split" in out
    # every command resolves zoo:NAME alike (cli.choices.resolve_runs); `probe` reads the
    # same run directory (a minute: its head ablations score the 4,096-example set)
    assert main(["figures", f"zoo:{name}", "--formats", "png"]) == 0
    drawn = cache / "zoo" / name / "figures" / "metrics.png"
    assert drawn.stat().st_size > 1_000  # written into the cache, never into the package
    assert not (zoo.MODELS / name / "figures").exists()
    assert main(["eval", "zoo:nope"]) == 2
    assert "no zoo model named 'nope'" in capsys.readouterr().err


def test_zoo_add_takes_a_sweeps_own_wall_times_and_chosen_variants(tmp_path, monkeypatch) -> None:
    """benchmarks/reproduction/zoo_add.py on runs laid out as `latentlens sweep` leaves them (no
    seed groups): each card's wall time is the run's own, from the sweep's record."""
    from latentlens.reports.demo_runs import SIZES, train_variant
    from latentlens.zoo import build

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from reproduction import zoo_add

    section = tmp_path / "runs" / "fuzzy-logic-a1"
    for variant in ("hyla", "softmax"):
        train_variant(section / f"{variant}-s0", variant, SIZES["tiny"], 2, "cpu", True, 0)
    cells = {"hyla-s0": {"seconds": 12.5, "state": "done"}, "softmax-s0": {"seconds": 9.0}}
    (section / "sweep.json").write_text(json.dumps({"cells": cells}))
    monkeypatch.setattr(build, "MODELS", tmp_path / "models")
    argv = [str(tmp_path / "runs"), "fuzzy-logic-a1", "--variants", "hyla", "--machine", "M",
            "--commit", "abc", "--command", "C", "--date", "2026-11-26",
            "--examples", "64"]  # fmt: skip
    assert zoo_add.main(argv) == 0
    added = sorted(
        p.relative_to(tmp_path / "models") for p in (tmp_path / "models").rglob(zoo.CARD)
    )
    assert added == [Path("fuzzy-logic-a1/hyla/s0") / zoo.CARD]  # softmax was not chosen
    training = json.loads((tmp_path / "models" / added[0]).read_text())["training"]
    assert training["wall_seconds"] == 12.5 and "own training time" in training["wall_note"]
    assert (training["machine"], training["commit"], training["steps"]) == ("M", "abc", 2)
    # without a record of either kind, one line names both files
    (section / "sweep.json").unlink()
    with pytest.raises(SystemExit, match="neither .*timings.json nor .*sweep.json exists"):
        zoo_add.main(argv)


def copied_zoo(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the zoo's folder (entries and manifest) the test may damage."""
    models = tmp_path / "models"
    shutil.copytree(zoo.MODELS, models)
    monkeypatch.setattr(zoo, "MODELS", models)
    return models


def test_an_edited_card_or_a_linked_or_malformed_entry_is_refused(tmp_path, monkeypatch) -> None:
    """Round three (#71): an edited split_seed, steps or metrics on a card was accepted, a
    group folder linked from outside the package loaded as zoo:evil/v/s0, a card without
    sha256 gave `unexpected error: KeyError`."""
    from latentlens.zoo.build import write_manifest

    models = copied_zoo(tmp_path, monkeypatch)
    name = NAMES[0]
    card_path = models / name / zoo.CARD
    edited = json.loads(card_path.read_text())
    edited["config"]["task"]["config"]["split_seed"] += 1
    card_path.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match="card.json does not match the SHA-256 on the zoo's"):
        zoo.load(name, device="cpu")
    outside = tmp_path / "outside" / "v" / "s0"
    shutil.copytree(zoo.MODELS / NAMES[1], outside)
    (models / "evil").symlink_to(tmp_path / "outside")
    del edited["sha256"]
    card_path.write_text(json.dumps(edited))
    monkeypatch.setattr("latentlens.zoo.build.MODELS", models)
    write_manifest()  # a manifest that lists both, as a tamperer would write it
    assert "evil/v/s0" in zoo.manifest() and "evil/v/s0" not in zoo.names()
    with pytest.raises(ValueError, match="no zoo model named 'evil/v/s0'"):
        zoo.load("zoo:evil/v/s0", device="cpu")
    with pytest.raises(ValueError, match=f"{card_path} is malformed"):
        zoo.load(name, device="cpu")


def test_the_cached_run_directory_is_rebuilt_when_it_differs_from_the_card(cache: Path) -> None:
    """Zeroing the cached checkpoint's weights, or editing its config.json, gave other
    numbers with exit 0: both are found on the next load, which builds it again."""
    import torch
    from safetensors.torch import load_file, save_file

    name = NAMES[0]
    run = zoo.run_directory(name)
    expected = zoo.card(name)["evaluation"]["metrics"]["test"]["r2"]
    [checkpoint] = run.glob("checkpoints/*.safetensors")
    state = load_file(str(checkpoint))
    save_file({k: torch.zeros_like(v) for k, v in state.items()}, str(checkpoint))
    assert zoo.run_directory(name) == run
    trainer = Trainer.load(run, device="cpu")
    assert trainer.evaluate("test", 4096)["r2"] == pytest.approx(expected, rel=1e-5)
    config = json.loads((run / "config.json").read_text())
    config["task"]["config"]["split_seed"] += 1
    (run / "config.json").write_text(json.dumps(config))
    zoo.run_directory(name)
    assert json.loads((run / "config.json").read_text()) == zoo.card(name)["config"]


def test_the_manifest_lists_every_entry_and_its_files() -> None:
    listed = zoo.manifest()
    assert sorted(listed) == NAMES
    for name in NAMES:
        assert zoo.verified_entry(name) == zoo.MODELS / name
